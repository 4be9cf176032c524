"""The dashboard's metrics: root causes by retryable/closed_by, bounded exception and node labels, publish errors."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from support.kube_objects import decision as shared_decision

from podmortem.aggregator import metrics as metrics_mod
from podmortem.aggregator.metrics import Metrics, exception_label
from podmortem.aggregator.publishing import JsonFilePublisher
from podmortem.core.model import JobRef

# The shared decision, in job ml/j of two pods, decided 4 s after its incident opened.
ml_decision = functools.partial(
    shared_decision,
    job=JobRef("ml", "j"),
    members=("j-worker-0", "j-worker-1"),
    pod="j-worker-0",
    opened_at=100.0,
    decided_at=104.0,
)


def test_first_verdicts_count_by_retryable_and_closed_by() -> None:
    m = Metrics(CollectorRegistry())
    m.observe_decision(ml_decision(closed_by="timeout", retryable=None))
    m.observe_decision(ml_decision(closed_by="revision", revision=2))  # revisions are not new root causes
    sample = m.registry.get_sample_value
    labels = {"namespace": "ml", "category": "user_code", "retryable": "unknown", "closed_by": "timeout"}
    assert sample("podmortem_root_causes_total", labels) == 1
    assert sample("podmortem_root_causes_total", {**labels, "retryable": "false", "closed_by": "revision"}) is None
    assert sample("podmortem_root_cause_exceptions_total", {"namespace": "ml", "exception_type": "ValueError"}) == 1
    assert sample("podmortem_root_cause_nodes_total", {"namespace": "ml", "node": "node-1"}) == 1


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        ("torch.cuda.OutOfMemoryError", "OutOfMemoryError"),
        ("ValueError", "ValueError"),
        ("  my.mod.Bad-Thing ", "Bad_Thing"),
        ("X" * 300, "X" * 64),
        ("", ""),
    ],
)
def test_exception_label_is_the_class_name_only(raw: str, label: str) -> None:
    assert exception_label(raw) == label


def test_exception_types_and_nodes_are_bounded() -> None:
    m = Metrics(CollectorRegistry())
    for i in range(metrics_mod.MAX_EXCEPTION_TYPES + 5):
        m.observe_decision(ml_decision(incident_id=f"ml.j.{i}", exception_type=f"Error{i}", node=f"node-{i % 3}"))
    m.observe_decision(ml_decision(incident_id="ml.j.x", exception_type="Error0", node=""))
    m.observe_decision(ml_decision(incident_id="ml.j.y", exception_type="", pod=None, category=None, node="node-9"))
    sample = m.registry.get_sample_value
    seen = {
        s.labels["exception_type"]
        for metric in m.registry.collect()
        if metric.name == "podmortem_root_cause_exceptions"
        for s in metric.samples
        if s.name.endswith("_total")
    }
    assert len(seen) == metrics_mod.MAX_EXCEPTION_TYPES + 2  # + "other" + "none"
    assert sample("podmortem_root_cause_exceptions_total", {"namespace": "ml", "exception_type": "other"}) == 5
    assert sample("podmortem_root_cause_exceptions_total", {"namespace": "ml", "exception_type": "Error0"}) == 2
    assert sample("podmortem_root_cause_exceptions_total", {"namespace": "ml", "exception_type": "none"}) == 1
    assert sample("podmortem_root_cause_nodes_total", {"namespace": "ml", "node": "unknown"}) == 2  # "" and no pod


def test_recent_incident_series_follow_revisions_and_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_mod, "RECENT_INCIDENTS", 3)
    m = Metrics(CollectorRegistry())
    m.observe_decision(ml_decision(incident_id="ml.j.0", pod="j-worker-0", category="user_code"))
    m.observe_decision(ml_decision(incident_id="ml.j.0", pod="j-worker-1", category="hang", revision=2, retryable=True))
    series = [s for metric in m.registry.collect() for s in metric.samples
              if s.name == "podmortem_incident_verdict_timestamp_seconds"]  # fmt: skip
    assert [(s.labels["pod"], s.labels["category"], s.labels["retryable"], s.value) for s in series] == [
        ("j-worker-1", "hang", "true", 104.0)
    ]
    for i in range(1, 6):
        m.observe_decision(ml_decision(incident_id=f"ml.j.{i}"))
    kept = {s.labels["incident"] for metric in m.registry.collect() for s in metric.samples
            if s.name == "podmortem_incident_verdict_timestamp_seconds"}  # fmt: skip
    assert kept == {"ml.j.3", "ml.j.4", "ml.j.5"}


async def test_publish_errors_are_counted_per_publisher_and_still_raised(tmp_path: Path) -> None:
    m = Metrics(CollectorRegistry())
    blocker = tmp_path / "file"
    blocker.write_text("")
    failing = m.counting(JsonFilePublisher(blocker / "verdicts"))  # a directory below a file: mkdir fails
    working = m.counting(JsonFilePublisher(tmp_path / "ok"))
    assert m.registry.get_sample_value("podmortem_publish_errors_total", {"publisher": "json-file"}) == 0
    with pytest.raises(NotADirectoryError):
        await failing.publish(ml_decision())
    await working.publish(ml_decision())
    assert m.registry.get_sample_value("podmortem_publish_errors_total", {"publisher": "json-file"}) == 1
    assert (tmp_path / "ok" / "ml.j.0.json").exists()
