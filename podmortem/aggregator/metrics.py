"""Prometheus metrics of the aggregator, on an injectable registry.

Names follow `namespace_subsystem_name_unit`; counters end in `_total`. Label sets are small and
fixed (category from the fixed vocabulary, event kind from the contract, namespace of the job — as
bounded as the cluster's namespaces), and the series of known label values (categories, event kinds,
limits, publishers) are created up front so dashboards and alerts see zeros from the first scrape
rather than no series. Values that come from user code or the cluster
(exception class, node) are bounded: the first N distinct values are labels, later ones count as
`other`. The one per-incident gauge keeps only the most recent incidents, for alerting on each.
Publisher failures are counted by wrapping each publisher (`Metrics.counting`).
Tests use a fresh `CollectorRegistry()`.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.publishing import Publisher
from podmortem.core.categories import CATEGORIES
from podmortem.core.names import CONDITION_TYPES, VICTIM

EVENT_KINDS = ("error_file", "termination", "condition", "deletion", "log_tail", "activity", "capture")
CAPTURE_TRIGGERS = ("stall", "first_timeout")
# Every limit the aggregator enforces (podmortem/aggregator/config.py says what each one bounds).
LIMITS = (
    "event_rate",
    "members_per_job",
    "member_events",
    "namespaces",
    "open_incidents",
    "open_incidents_per_job",
    "open_incidents_per_namespace",
)
# Values from the wire refused (`podmortem_values_refused_total{field}`, `podmortem.protocol.wire`): a hold
# timeout that is not a finite number >= 0, a time protobuf's Timestamp may not hold, an implausible clock
# estimate.
REFUSED_VALUES = ("hold_timeout", "timestamp", "clock_estimate")
# Why a hardware root cause was not recorded on its node (podmortem/aggregator/kube/nodes.py, REFUSALS).
NODE_FAULT_REFUSALS = ("job_counted", "namespace_rate")
# Why a stream is refused (`podmortem_streams_rejected_total{reason}`): authentication and authorization
# (aggregator/auth.py), the server's own refusals, and a limit reached.
REJECT_REASONS = (
    "no_token",
    "not_jwt",
    "audience",
    "expired",
    "rejected",
    "review_failed",
    "review_busy",
    "not_pod_bound",
    "other_pod",
    "namespace",
    "not_member",
    "claim_mismatch",
    "pod_uid",
    "standby",
    "state_write",
    "register_deadline",
    *LIMITS,
)
NO_CATEGORY = "none"  # an incident with no failed pod (e.g. a clean exit)
LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600)
# Bounds on the label values that come from the cluster or from user code (see `_Bounded`).
MAX_EXCEPTION_TYPES = 50
MAX_NODES = 200
RECENT_INCIDENTS = 256  # incidents kept as podmortem_incident_verdict_timestamp_seconds series
OTHER = "other"
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


class _Bounded:
    """Label values for a bounded label: the first `limit` distinct values are kept, later ones are OTHER."""

    def __init__(self, limit: int, empty: str) -> None:
        self.limit, self.empty = limit, empty
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if not value:
            return self.empty
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit:
            return OTHER
        self._seen.add(value)
        return value


def exception_label(exception_type: str) -> str:
    """'torch.cuda.OutOfMemoryError' -> 'OutOfMemoryError': the class name only, at most 64 name characters."""
    name = exception_type.strip().rsplit(".", 1)[-1]
    return _NOT_NAME.sub("_", name)[:64]


def condition_label(condition_type: str) -> str:
    """'podmortem.io/Victim' -> 'Victim' (the `type` label of podmortem_pod_conditions_total)."""
    return condition_type.rsplit("/", 1)[-1]


def _retryable(value: bool | None) -> str:
    return "unknown" if value is None else str(value).lower()


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
        self.rejected = Counter(
            "podmortem_streams_rejected_total",
            "Sidecar streams refused by authentication or authorization, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.limit_hits = Counter(
            "podmortem_limit_hits_total",
            f"Things refused at a limit ({', '.join(LIMITS)}): nothing already held is dropped.",
            ["limit"],
            registry=self.registry,
        )
        self.values_refused = Counter(
            "podmortem_values_refused_total",
            f"Values from the wire refused ({', '.join(REFUSED_VALUES)}): a time field is dropped, an "
            "estimate ignored, a hold answered NOT_WRITTEN.",
            ["field"],
            registry=self.registry,
        )
        self.foreign_conditions = Counter(
            "podmortem_foreign_conditions_total",
            "podmortem.io/* conditions found on a pod that podmortem did not write and that disagree with its "
            "verdict: never reported as written, by type.",
            ["type"],
            registry=self.registry,
        )
        self.suspect_nodes = Gauge(
            "podmortem_suspect_nodes",
            "Nodes this aggregator has marked podmortem.io/SuspectHardware (repeated hardware root causes).",
            registry=self.registry,
        )
        self.node_faults_refused = Counter(
            "podmortem_node_faults_refused_total",
            "Hardware root causes not recorded on their node, by reason (job_counted: the job has counted on that "
            "node already; namespace_rate: its namespace's hourly budget is spent).",
            ["reason"],
            registry=self.registry,
        )
        self.open_incidents = Gauge(
            "podmortem_open_incidents",
            "Incidents opened and waiting for quorum or timeout.",
            registry=self.registry,
        )
        self.root_causes = Counter(
            "podmortem_root_causes_total",
            "Incidents decided (first verdict only), by namespace, category, retryable and how the incident closed.",
            ["namespace", "category", "retryable", "closed_by"],
            registry=self.registry,
        )
        self.exception_types = Counter(
            "podmortem_root_cause_exceptions_total",
            f"First verdicts by the root failure's exception class (none: no exception; past "
            f"{MAX_EXCEPTION_TYPES} distinct classes: other).",
            ["namespace", "exception_type"],
            registry=self.registry,
        )
        self.nodes = Counter(
            "podmortem_root_cause_nodes_total",
            f"First verdicts by the root-cause pod's node (unknown: not known; past {MAX_NODES} nodes: other).",
            ["namespace", "node"],
            registry=self.registry,
        )
        self.publish_errors = Counter(
            "podmortem_publish_errors_total",
            "Verdicts a publisher failed to publish (after its own retries), by publisher.",
            ["publisher"],
            registry=self.registry,
        )
        self.fenced = Counter(
            "podmortem_verdicts_fenced_total",
            "Decisions this replica did not publish because it could not confirm it holds the leader "
            "Lease (it was paused or cut off past its renew deadline): left to the leader.",
            registry=self.registry,
        )
        self.recent = Gauge(
            "podmortem_incident_verdict_timestamp_seconds",
            f"When the latest verdict of each of the {RECENT_INCIDENTS} most recent incidents was decided, "
            "labelled with its root pod and category (for alerting: one series per incident).",
            ["namespace", "job", "incident", "pod", "node", "category", "retryable"],
            registry=self.registry,
        )
        self.pod_conditions = Counter(
            "podmortem_pod_conditions_total",
            "podmortem.io/* conditions written on member pods, by type (Victim, PermanentFailure, RetryableFailure).",
            ["type"],
            registry=self.registry,
        )
        self.retry_budget_saved = Counter(
            "podmortem_retry_budget_saved_total",
            "Victim conditions written: failed pods a podFailurePolicy need not count against the retry budget.",
            registry=self.registry,
        )
        self.provisional = Counter(
            "podmortem_provisional_verdicts_total",
            "Provisional verdicts published on a stalled job while its pods still run, by category.",
            ["category"],
            registry=self.registry,
        )
        self.false_alarms = Counter(
            "podmortem_stall_false_alarms_total",
            "Stalls after which the job made progress again or completed (its provisional verdict withdrawn).",
            registry=self.registry,
        )
        self.capture_requests = Counter(
            "podmortem_capture_requests_total",
            "Capture requests sent to sidecars, by trigger (stall: every member quiet; first_timeout: "
            "a member's first failure was a timeout).",
            ["trigger"],
            registry=self.registry,
        )
        for trigger in CAPTURE_TRIGGERS:
            self.capture_requests.labels(trigger=trigger)
        self.repeated_failures = Counter(
            "podmortem_repeated_failures_total",
            "Root causes that repeated the job's previous attempts (the same signature, `--repeat-limit` "
            "attempts in a row) and were marked podmortem.io/PermanentFailure with reason RepeatedFailure "
            "instead of being retried, by category.",
            ["category"],
            registry=self.registry,
        )
        for condition_type in CONDITION_TYPES:
            self.pod_conditions.labels(type=condition_label(condition_type))
            self.foreign_conditions.labels(type=condition_label(condition_type))
        for field in REFUSED_VALUES:
            self.values_refused.labels(field=field)
        for repeated in CATEGORIES:
            self.repeated_failures.labels(category=repeated)
        self._exception_label = _Bounded(MAX_EXCEPTION_TYPES, "none")
        self._node_label = _Bounded(MAX_NODES, "unknown")
        self._recent: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        # Series with a known label set exist from the first scrape (zero), so an alert has one to match.
        for category in (*CATEGORIES, NO_CATEGORY):
            self.verdicts_by_category.labels(category=category)
            self.provisional.labels(category=category)
        for limit in LIMITS:
            self.limit_hits.labels(limit=limit)
        for reason in REJECT_REASONS:
            self.rejected.labels(reason=reason)
        for reason in NODE_FAULT_REFUSALS:
            self.node_faults_refused.labels(reason=reason)
        # Each event counts once: its child looked up here, not through labels() (a lock and a tuple) each time.
        self.events_by_kind = {kind: self.events.labels(kind=kind) for kind in EVENT_KINDS}

    def node_fault_refused(self, reason: str) -> None:
        self.node_faults_refused.labels(reason=reason).inc()

    def pod_condition_written(self, condition_type: str) -> None:
        self.pod_conditions.labels(type=condition_label(condition_type)).inc()
        if condition_type == VICTIM:
            self.retry_budget_saved.inc()

    def observe_decision(self, decision: Decision) -> None:
        category = decision.verdict.category or NO_CATEGORY
        if decision.closed_by == "stall":
            self.provisional.labels(category=category).inc()
            return
        if decision.closed_by == "resumed":
            return  # the stall desk counts false alarms, published or not
        self.verdicts_by_category.labels(category=category).inc()
        if decision.first:
            self.incidents.labels(namespace=decision.incident.job.namespace, category=category).inc()
            if decision.latency is not None:
                self.latency.observe(decision.latency)
            self._observe_root_cause(decision, category)
        else:
            self.revisions.inc()
        self._observe_recent(decision, category)

    def _observe_root_cause(self, decision: Decision, category: str) -> None:
        v, namespace = decision.verdict, decision.incident.job.namespace
        self.root_causes.labels(namespace, category, _retryable(v.retryable), decision.closed_by).inc()
        self.exception_types.labels(namespace, self._exception_label(exception_label(v.exception_type))).inc()
        self.nodes.labels(namespace, self._node_label(v.node if v.pod else "")).inc()

    def _observe_recent(self, decision: Decision, category: str) -> None:
        inc, v = decision.incident, decision.verdict
        old = self._recent.pop(inc.incident_id, None)
        if old is not None:
            self.recent.remove(*old)  # a revision replaces its incident's series
        labels = (
            inc.job.namespace,
            inc.job.name,
            inc.incident_id,
            v.pod or "",
            v.node,
            category,
            _retryable(v.retryable),
        )
        self.recent.labels(*labels).set(decision.decided_at)
        self._recent[inc.incident_id] = labels
        while len(self._recent) > RECENT_INCIDENTS:
            self.recent.remove(*self._recent.popitem(last=False)[1])

    def counting(self, publisher: Publisher) -> Publisher:
        """`publisher`, with its failures counted in podmortem_publish_errors_total (and still raised)."""
        self.publish_errors.labels(publisher=publisher.name)
        return _CountingPublisher(publisher, self.publish_errors)


class _CountingPublisher:
    def __init__(self, inner: Publisher, errors: Counter) -> None:
        self.inner, self.name, self._errors = inner, inner.name, errors

    async def publish(self, decision: Decision) -> None:
        try:
            await self.inner.publish(decision)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._errors.labels(publisher=self.name).inc()
            raise


class MetricsPublisher:
    """The metrics side of publishing: counts each decision once, in the publish queue's order."""

    name = "metrics"

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def publish(self, decision: Decision) -> None:
        self.metrics.observe_decision(decision)
