"""Prometheus metrics of the aggregator, on an injectable registry.

Names follow `namespace_subsystem_name_unit`; counters end in `_total`. Label sets are small and
fixed (category from the fixed vocabulary, event kind from the contract, namespace of the job — as
bounded as the cluster's namespaces), and the category series are created up front so dashboards
see zeros from the first scrape rather than gaps. Tests use a fresh `CollectorRegistry()`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from podmortem.aggregator.publishing import Decision
from podmortem.core.model import CATEGORIES

EVENT_KINDS = ("error_file", "termination", "condition", "deletion", "log_tail")
NO_CATEGORY = "none"  # an incident with no failed pod (e.g. a clean exit)
LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.incidents = Counter(
            "podmortem_incidents_total",
            "Incidents decided (first verdict only), by job namespace and root-cause category.",
            ["namespace", "category"],
            registry=self.registry,
        )
        self.verdicts_by_category = Counter(
            "podmortem_verdicts_total",
            "Verdicts published (first verdicts and revisions), by root-cause category.",
            ["category"],
            registry=self.registry,
        )
        self.revisions = Counter(
            "podmortem_verdict_revisions_total",
            "Verdicts revised after a member reported late.",
            registry=self.registry,
        )
        self.latency = Histogram(
            "podmortem_verdict_latency_seconds",
            "Seconds from the first failure observed in an incident to its first verdict.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.connected = Gauge(
            "podmortem_connected_sidecars",
            "Sidecar streams currently open.",
            registry=self.registry,
        )
        self.events = Counter(
            "podmortem_events_received_total",
            "Events received from sidecars and pod watches, by kind (duplicates excluded).",
            ["kind"],
            registry=self.registry,
        )
        self.duplicates = Counter(
            "podmortem_events_duplicate_total",
            "Events received again (resent after a reconnect) and ignored.",
            registry=self.registry,
        )
        self.open_incidents = Gauge(
            "podmortem_open_incidents",
            "Incidents opened and waiting for quorum or timeout.",
            registry=self.registry,
        )
        for category in (*CATEGORIES, NO_CATEGORY):
            self.verdicts_by_category.labels(category=category)
        for kind in EVENT_KINDS:
            self.events.labels(kind=kind)

    def observe_decision(self, decision: Decision) -> None:
        category = decision.verdict.category or NO_CATEGORY
        self.verdicts_by_category.labels(category=category).inc()
        if decision.revision == 1:
            self.incidents.labels(namespace=decision.incident.job.namespace, category=category).inc()
            if decision.latency is not None:
                self.latency.observe(decision.latency)
        else:
            self.revisions.inc()


class MetricsPublisher:
    """The metrics side of publishing: counts each decision once, in the publish queue's order."""

    name = "metrics"

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def publish(self, decision: Decision) -> None:
        self.metrics.observe_decision(decision)
