"""Generate the Grafana dashboard the chart ships (charts/podmortem/dashboards/podmortem.json).

Written with grafana-foundation-sdk's typed builders so the JSON is a valid dashboard by
construction; a test regenerates it and fails when the checked-in file is stale, and another
evaluates every query below against a real Prometheus scraping a real aggregator and webhook.

Variables: `$datasource` (any Prometheus), `$job` (the scrape job(s) of podmortem's components) and
`$namespace` (the training namespaces incidents were filed in). Every query names only podmortem's
own metrics, with bounded label sets (see podmortem/aggregator/metrics.py).

    python scripts/gen_dashboard.py            # rewrite the file
    python scripts/gen_dashboard.py --check    # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge, dashboard, piechart, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh, VariableSort

OUTPUT = Path(__file__).resolve().parent.parent / "charts" / "podmortem" / "dashboards" / "podmortem.json"
UID = "podmortem"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")

JOB = 'job=~"$job"'
SCOPE = 'job=~"$job", namespace=~"$namespace"'

# (title, description, [(legend, expr)], kind, unit, (width, height)); Grafana's grid is 24 wide.
PANELS: list[tuple[str, str, list[tuple[str, str]], str, str, tuple[int, int]]] = [
    (
        "Failures by category",
        "Incidents decided (first verdicts), per root-cause category.",
        [
            (
                "{{category}}",
                f'sum by (category) (increase(podmortem_root_causes_total{{{SCOPE}, category!="none"}}'
                "[$__rate_interval]))",
            )
        ],
        "timeseries",
        "short",
        (16, 8),
    ),
    (
        "Sidecars connected",
        "Sidecar streams open on the aggregator.",
        [("sidecars", f"sum(podmortem_connected_sidecars{{{JOB}}})")],
        "stat",
        "short",
        (4, 4),
    ),
    (
        "Open incidents",
        "Incidents waiting for quorum or timeout.",
        [("open", f"sum(podmortem_open_incidents{{{JOB}}})")],
        "stat",
        "short",
        (4, 4),
    ),
    (
        "Retryable vs not",
        "Root causes in the time range by whether a retry can help (unknown: no rule said).",
        [("{{retryable}}", f"sum by (retryable) (increase(podmortem_root_causes_total{{{SCOPE}}}[$__range]))")],
        "piechart",
        "short",
        (8, 8),
    ),
    (
        "Top exception types",
        "The root failure's exception class (none: no Python exception, e.g. OOM-killed or lost node).",
        [
            (
                "{{exception_type}}",
                "topk(10, sum by (exception_type) "
                f"(increase(podmortem_root_cause_exceptions_total{{{SCOPE}}}[$__range])))",
            )
        ],
        "bargauge",
        "short",
        (8, 8),
    ),
    (
        "Top nodes by root-cause failures",
        "Nodes the root-cause pods ran on (a node that keeps showing up is worth draining).",
        [
            (
                "{{node}}",
                f"topk(10, sum by (node) (increase(podmortem_root_cause_nodes_total{{{SCOPE}}}[$__range])))",
            )
        ],
        "bargauge",
        "short",
        (8, 8),
    ),
    (
        "Suspect nodes",
        "Nodes marked podmortem.io/SuspectHardware (repeated hardware root causes) by the aggregator; "
        "their record: kubectl podmortem explain, or the node annotation podmortem.io/hardware-faults.",
        [("suspect nodes", f"max(podmortem_suspect_nodes{{{JOB}}})")],
        "stat",
        "short",
        (4, 4),
    ),
    (
        "Time from first failure to verdict",
        "p50 and p95 of the seconds from the first failure seen in an incident to its first verdict.",
        [
            (
                "p50",
                "histogram_quantile(0.5, sum by (le) "
                f"(rate(podmortem_verdict_latency_seconds_bucket{{{JOB}}}[$__rate_interval])))",
            ),
            (
                "p95",
                "histogram_quantile(0.95, sum by (le) "
                f"(rate(podmortem_verdict_latency_seconds_bucket{{{JOB}}}[$__rate_interval])))",
            ),
        ],
        "timeseries",
        "s",
        (12, 8),
    ),
    (
        "Incidents closed by quorum vs timeout",
        "quorum: every pod reported; timeout: decided without the silent ones (lost nodes, dead sidecars).",
        [
            (
                "{{closed_by}}",
                f"sum by (closed_by) (increase(podmortem_root_causes_total{{{SCOPE}}}[$__rate_interval]))",
            )
        ],
        "timeseries",
        "short",
        (12, 8),
    ),
    (
        "Publish errors",
        "Verdicts a publisher failed to write (annotations, condition, Events, files), after its retries.",
        [
            (
                "{{publisher}}",
                f"sum by (publisher) (increase(podmortem_publish_errors_total{{{JOB}}}[$__rate_interval]))",
            )
        ],
        "timeseries",
        "short",
        (12, 8),
    ),
    (
        "Pod conditions written",
        "podmortem.io/* conditions written on failed member pods for a podFailurePolicy: Victim (ignored by "
        "the policy), PermanentFailure (fails the job), RetryableFailure (counted).",
        [
            (
                "{{type}}",
                f"sum by (type) (increase(podmortem_pod_conditions_total{{{JOB}}}[$__rate_interval]))",
            )
        ],
        "timeseries",
        "short",
        (16, 8),
    ),
    (
        "Retry budget saved",
        "Victims marked in the time range: failed pods a podFailurePolicy need not count against backoffLimit.",
        [("victims", f"sum(increase(podmortem_retry_budget_saved_total{{{JOB}}}[$__range]))")],
        "stat",
        "short",
        (8, 8),
    ),
    (
        "Repeated failures stopped",
        "Retryable root causes that came back with the same signature on --repeat-limit attempts of a job in a "
        "row, marked PermanentFailure (reason RepeatedFailure) so the job stopped instead of restarting, by "
        "category, in the time range (docs/retries.md).",
        [
            (
                "{{category}}",
                f"sum by (category) (increase(podmortem_repeated_failures_total{{{JOB}}}[$__range]))",
            )
        ],
        "bargauge",
        "short",
        (12, 8),
    ),
    (
        "Hangs caught while the pods ran",
        "Provisional verdicts on stalled jobs (every member quiet), stalls that were false alarms (the job moved "
        "again), and the capture requests sent to sidecars, by trigger.",
        [
            ("provisional", f"sum(increase(podmortem_provisional_verdicts_total{{{JOB}}}[$__range]))"),
            ("false alarms", f"sum(increase(podmortem_stall_false_alarms_total{{{JOB}}}[$__range]))"),
            (
                "capture requests ({{trigger}})",
                f"sum by (trigger) (increase(podmortem_capture_requests_total{{{JOB}}}[$__range]))",
            ),
        ],
        "bargauge",
        "short",
        (12, 8),
    ),
    (
        "Pods the webhook let through unchanged",
        "Admission reviews by outcome; 'unsupported' are training pods the webhook did not understand.",
        [
            (
                "{{outcome}}",
                'sum by (outcome) (increase(podmortem_webhook_reviews_total{job=~"$job", outcome!="injected"}'
                "[$__rate_interval]))",
            )
        ],
        "timeseries",
        "short",
        (12, 8),
    ),
    (
        "Retry policy at admission",
        "Opted-in Jobs and JobSets: 'added' got podmortem's retry policy; 'own_policy' kept theirs; "
        "'restart_on_failure' cannot have one (pods restart in place).",
        [
            (
                "{{kind}} {{outcome}}",
                'sum by (kind, outcome) (increase(podmortem_webhook_retry_policy_total{job=~"$job"}'
                "[$__rate_interval]))",
            )
        ],
        "timeseries",
        "short",
        (12, 8),
    ),
]


def _target(legend: str, expr: str, ref: str, instant: bool) -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)
    return query.instant() if instant else query


def build() -> dashboard.Dashboard:
    board = (
        dashboard.Dashboard("podmortem")
        .uid(UID)
        .description("Why distributed PyTorch jobs fail: root causes decided by podmortem.")
        .tags(["podmortem", "pytorch", "training"])
        .time("now-24h", "now")
        .refresh("1m")
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(
            dashboard.QueryVariable("job")
            .label("Job")
            .datasource(DS)
            .query("label_values(podmortem_connected_sidecars, job)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
        .with_variable(
            dashboard.QueryVariable("namespace")
            .label("Namespace")
            .datasource(DS)
            .query('label_values(podmortem_root_causes_total{job=~"$job"}, namespace)')
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )
    )
    for title, description, queries, kind, unit, (w, h) in PANELS:
        instant = kind in ("bargauge", "piechart", "stat")
        panel: timeseries.Panel | stat.Panel | bargauge.Panel | piechart.Panel
        if kind == "timeseries":
            panel = timeseries.Panel()
        elif kind == "stat":
            panel = stat.Panel()
        elif kind == "bargauge":
            panel = bargauge.Panel()
        else:
            panel = piechart.Panel()
        panel = panel.title(title).description(description).datasource(DS).unit(unit).span(w).height(h)
        for i, (legend, expr) in enumerate(queries):
            panel = panel.with_target(_target(legend, expr, chr(ord("A") + i), instant))
        board = board.with_panel(panel)
    return board


def render() -> str:
    return JSONEncoder(sort_keys=True, indent=2).encode(build().build()) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the checked-in dashboard is stale")
    ns = parser.parse_args(argv)
    text = render()
    if ns.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale: run python scripts/gen_dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
