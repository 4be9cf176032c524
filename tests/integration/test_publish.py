"""Verdicts written to Kubernetes: annotations, the job condition, Events — against the API emulator."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.kube_emulator import JOBS, PODS, PYTORCHJOBS, EmulatorHandle
from support.kube_objects import NS, decision, indexed_job, indexed_pod, make_kube, seed_pytorchjob

from podmortem.aggregator.config import KubeSettings, NodeActions
from podmortem.aggregator.kube import publish as kp
from podmortem.aggregator.kube.client import Kube
from podmortem.aggregator.kube.publish import (
    AnnotationPublisher,
    ConditionPublisher,
    EventPublisher,
    kube_publishers,
)
from podmortem.aggregator.publishing import Publisher
from podmortem.core.categories import condition_reason
from podmortem.core.model import JobRef
from podmortem.core.names import PUBLISHED_ANNOTATION, ROOT_CAUSE_CONDITION, SUMMARY_ANNOTATION, VERDICT_ANNOTATION


@pytest.fixture
def kube(kube_api: EmulatorHandle, tmp_path: Path) -> Any:
    client = make_kube(kube_api, tmp_path)
    yield client
    client.close()


def publishers(kube: Kube) -> list[Publisher]:
    return kube_publishers(KubeSettings(reporting_instance="aggregator-0"), kube)


async def publish_all(kube: Kube, d: Any) -> None:
    for p in publishers(kube):
        await p.publish(d)


def writes(api: EmulatorHandle) -> list[tuple[str, str]]:
    return [(m, p) for m, p in api.requests() if m in ("POST", "PUT", "PATCH", "DELETE")]


async def test_annotations_condition_and_events_are_published(kube_api: EmulatorHandle, kube: Kube) -> None:
    job, _ = seed_pytorchjob(kube_api)
    d = decision()
    await publish_all(kube, d)

    stored = kube_api.get(PYTORCHJOBS, NS, job["metadata"]["name"])
    assert stored is not None
    annotations = stored["metadata"]["annotations"]
    summary = annotations[SUMMARY_ANNOTATION]
    assert summary.startswith("rank 1 (pod mixtral-cpt-worker-1 on node-1) failed first: user_code")
    doc = json.loads(annotations[VERDICT_ANNOTATION])
    assert doc["pod"] == "mixtral-cpt-worker-1" and doc["rank"] == 1 and doc["node"] == "node-1"
    assert doc["category"] == "user_code" and doc["retryable"] is False
    assert doc["exceptionType"] == "ValueError" and doc["message"].startswith("ValueError: bad label")
    assert doc["incidentId"] == "kubeflow-user.mixtral-cpt.0" and doc["revision"] == 1
    assert doc["decidedAt"].endswith("Z") and doc["confidence"] == 0.92 and len(doc["evidence"]) == 2
    assert annotations[PUBLISHED_ANNOTATION] == "kubeflow-user.mixtral-cpt.0#1"

    pod = kube_api.get("v1/pods", NS, "mixtral-cpt-worker-1")
    assert pod is not None and pod["metadata"]["annotations"][VERDICT_ANNOTATION] == annotations[VERDICT_ANNOTATION]
    other = kube_api.get("v1/pods", NS, "mixtral-cpt-worker-0")
    assert other is not None and "annotations" not in other["metadata"]

    conditions = stored["status"]["conditions"]
    assert conditions[:3] == job["status"]["conditions"]  # the controller's own, untouched and in order
    ours = conditions[3]
    assert ours["type"] == ROOT_CAUSE_CONDITION and ours["status"] == "True" and ours["reason"] == "UserCode"
    assert "mixtral-cpt-worker-1" in ours["message"] and "revision 1" in ours["message"]
    assert stored["spec"] == job["spec"]

    events = kube_api.list("v1/events", NS)
    assert sorted(e["involvedObject"]["kind"] for e in events) == ["Pod", "PyTorchJob"]
    for e in events:
        assert e["type"] == "Warning" and e["reason"] == "PodmortemRootCause"
        assert len(e["message"].encode()) <= 1024 and "failed first" in e["message"]
        assert e["involvedObject"]["uid"]  # matched by `kubectl describe`
        assert e["reportingInstance"] == "aggregator-0"


async def test_publishing_twice_writes_nothing_new(kube_api: EmulatorHandle, kube: Kube) -> None:
    seed_pytorchjob(kube_api)
    d = decision()
    await publish_all(kube, d)
    first = writes(kube_api)
    assert len(first) == 5  # 2 annotation patches, 1 status patch, 2 Events
    await publish_all(kube, d)
    again = writes(kube_api)[len(first) :]
    # Annotations and the condition are checked by reading first; Events by their derived names.
    assert [m for m, _ in again] == ["POST", "POST"]
    assert len(kube_api.list("v1/events", NS)) == 2


async def test_a_revision_replaces_ours_and_an_old_revision_never_wins(kube_api: EmulatorHandle, kube: Kube) -> None:
    job, _ = seed_pytorchjob(kube_api)
    await publish_all(kube, decision())
    await publish_all(kube, decision(pod="mixtral-cpt-worker-2", revision=2, category="host_oom"))
    await publish_all(kube, decision(revision=1))  # a replay of the first one, late

    stored = kube_api.get(PYTORCHJOBS, NS, job["metadata"]["name"])
    assert stored is not None
    assert stored["metadata"]["annotations"][PUBLISHED_ANNOTATION].endswith("#2")
    ours = [c for c in stored["status"]["conditions"] if c["type"] == ROOT_CAUSE_CONDITION]
    assert len(ours) == 1 and ours[0]["reason"] == "HostOom" and "revision 2" in ours[0]["message"]
    assert stored["status"]["conditions"][:3] == job["status"]["conditions"]
    assert len(kube_api.list("v1/events", NS)) == 4  # two per revision


async def test_writes_survive_500_409_and_429(kube_api: EmulatorHandle, kube: Kube) -> None:
    job, _ = seed_pytorchjob(kube_api)
    kube_api.fail(500, 2, methods=("PATCH",), subresource=None)  # the annotation patches
    kube_api.fail(409, 1, methods=("PATCH",), plural="pytorchjobs", subresource="status")
    kube_api.fail(429, 1, methods=("POST",), plural="events")
    await publish_all(kube, decision())

    stored = kube_api.get(PYTORCHJOBS, NS, job["metadata"]["name"])
    assert stored is not None and PUBLISHED_ANNOTATION in stored["metadata"]["annotations"]
    assert [c["type"] for c in stored["status"]["conditions"]][-1] == ROOT_CAUSE_CONDITION
    assert len(kube_api.list("v1/events", NS)) == 2
    status_gets = [p for m, p in kube_api.requests() if m == "GET" and p.endswith("/pytorchjobs/mixtral-cpt")]
    assert len(status_gets) >= 3  # annotations, condition, condition again after the 409 (and events)


async def test_the_condition_is_written_against_the_version_read(kube_api: EmulatorHandle, kube: Kube) -> None:
    """The controller updating its status between our read and our write must not lose its change."""
    job, _ = seed_pytorchjob(kube_api)
    publisher = ConditionPublisher(kube)
    real_get = kube.get

    async def get_then_controller_writes(path: str, query: Any = None) -> dict[str, Any]:
        obj = await real_get(path, query)
        if not getattr(get_then_controller_writes, "done", False):
            get_then_controller_writes.done = True  # type: ignore[attr-defined]
            extra = {"type": "Restarting", "status": "False", "reason": "Quiet", "message": "m"}
            conditions = [*job["status"]["conditions"], extra]
            kube_api.change(PYTORCHJOBS, NS, job["metadata"]["name"], {"status": {"conditions": conditions}})
        return obj

    kube.get = get_then_controller_writes  # type: ignore[method-assign]
    await publisher.publish(decision())
    stored = kube_api.get(PYTORCHJOBS, NS, job["metadata"]["name"])
    assert stored is not None
    assert [c["type"] for c in stored["status"]["conditions"]] == [
        "Created",
        "Running",
        "Failed",
        "Restarting",
        ROOT_CAUSE_CONDITION,
    ]


async def test_a_vanished_root_pod_still_gets_the_job_written(kube_api: EmulatorHandle, kube: Kube) -> None:
    job, _ = seed_pytorchjob(kube_api)
    kube_api.remove("v1/pods", NS, "mixtral-cpt-worker-1")
    await publish_all(kube, decision())
    stored = kube_api.get(PYTORCHJOBS, NS, job["metadata"]["name"])
    assert stored is not None and SUMMARY_ANNOTATION in stored["metadata"]["annotations"]
    events = kube_api.list("v1/events", NS)
    assert {e["involvedObject"]["name"] for e in events} == {"mixtral-cpt", "mixtral-cpt-worker-1"}


async def test_no_failure_sets_condition_false_and_no_warning(kube_api: EmulatorHandle, kube: Kube) -> None:
    job, _ = seed_pytorchjob(kube_api)
    await publish_all(kube, decision(pod=None, category=None))
    stored = kube_api.get(PYTORCHJOBS, NS, job["metadata"]["name"])
    assert stored is not None
    ours = stored["status"]["conditions"][-1]
    assert (ours["type"], ours["status"], ours["reason"]) == (ROOT_CAUSE_CONDITION, "False", "NoFailure")
    assert kube_api.list("v1/events", NS) == []


async def test_an_indexed_batch_job_gets_the_same(kube_api: EmulatorHandle, kube: Kube) -> None:
    job = kube_api.put(JOBS, indexed_job("ddp", 2))
    complete = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": "T"}]
    kube_api.change(JOBS, NS, "ddp", {"status": {"conditions": complete}})
    pods = [kube_api.put(PODS, indexed_pod(job, i))["metadata"]["name"] for i in range(2)]
    d = decision(pod=pods[1], job=JobRef(NS, "ddp", "Job"), members=tuple(pods))
    await publish_all(kube, d)
    stored = kube_api.get(JOBS, NS, "ddp")
    assert stored is not None and stored["metadata"]["annotations"][PUBLISHED_ANNOTATION] == "kubeflow-user.ddp.0#1"
    assert stored["status"]["conditions"][0] == complete[0]
    ours = stored["status"]["conditions"][1]
    assert ours["type"] == ROOT_CAUSE_CONDITION and "lastUpdateTime" not in ours  # batch's JobCondition has none
    assert {e["involvedObject"]["kind"] for e in kube_api.list("v1/events", NS)} == {"Job", "Pod"}


def test_builders_stay_bounded() -> None:
    huge = decision(message="E" * 100_000)
    huge = huge.__class__(**{**huge.__dict__, "verdict": huge.verdict.__class__(
        **{**huge.verdict.__dict__, "evidence": tuple("x" * 5000 for _ in range(500))})})  # fmt: skip
    assert len(kp.encode(kp.verdict_document(huge))) <= kp.MAX_VERDICT_BYTES
    assert len(kp.annotations_patch(huge)["metadata"]["annotations"][SUMMARY_ANNOTATION]) <= kp.MAX_SUMMARY
    body = kp.event_body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}}, huge, 0.0)
    assert len(body["message"].encode()) <= 1024
    assert len(kp.condition(huge, 0.0)["message"]) <= 1024
    assert [condition_reason(c) for c in ("user_code", "gpu_oom", "node_lost", None)] == [
        "UserCode",
        "GpuOom",
        "NodeLost",
        "NoFailure",
    ]


def test_merged_conditions_keeps_the_transition_time_when_status_holds() -> None:
    old = {"type": ROOT_CAUSE_CONDITION, "status": "True", "reason": "UserCode", "lastTransitionTime": "T0"}
    other = {"type": "Failed", "status": "True"}
    merged = kp.merged_conditions([other, old], kp.condition(decision(revision=2), 100.0))
    assert merged[0] == other and merged[1]["lastTransitionTime"] == "T0" and "revision 2" in merged[1]["message"]


def test_kube_publishers_follows_the_settings(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    client = make_kube(kube_api, tmp_path)
    settings = KubeSettings(publish=frozenset({"annotations", "events"}), nodes=NodeActions(enabled=False))
    names = [p.name for p in kube_publishers(settings, client)]
    assert names == ["kube-annotations", "kube-events"]
    assert kube_publishers(KubeSettings(publish=frozenset(), nodes=NodeActions(enabled=False)), client) == []
    assert [p.name for p in kube_publishers(KubeSettings(publish=frozenset()), client)] == ["kube-nodes"]
    assert isinstance(kube_publishers(KubeSettings(), client)[0], AnnotationPublisher)
    assert isinstance(kube_publishers(KubeSettings(), client)[2], EventPublisher)
    client.close()


async def test_kubectl_reads_the_annotations(kube_api: EmulatorHandle, kube: Kube, tmp_path: Path) -> None:
    """The real kubectl binary against the emulator: what a user would type."""
    job, _ = seed_pytorchjob(kube_api)
    await publish_all(kube, decision())
    config = kube_api.kubeconfig(tmp_path / "kubectl-config", NS)
    kube_api.emulator.token = None  # kubectl (client-go) sends no bearer token over plain http
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(config), "get", "pytorchjob", job["metadata"]["name"],
         "-o", r"jsonpath={.metadata.annotations.podmortem\.io/summary}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("rank 1 (pod mixtral-cpt-worker-1 on node-1) failed first: user_code")
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(config), "get", "pod", "mixtral-cpt-worker-1",
         "-o", r"jsonpath={.metadata.annotations.podmortem\.io/verdict}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["category"] == "user_code"


def test_an_uncertain_verdict_is_annotated_as_likely_with_its_runner_up() -> None:
    d = decision()
    sure = kp.summary(d)
    assert not sure.startswith("likely")
    hedged = dataclasses.replace(
        d,
        verdict=dataclasses.replace(d.verdict, confidence=0.4, runner_up_pod="p-2", runner_up_category="network"),
    )
    text = kp.summary(hedged)
    assert text.startswith("likely ") and "runner-up pod p-2 (network)" in text and "confidence 0.40" in text


async def test_nothing_is_written_outside_the_watched_namespaces(kube_api: EmulatorHandle, kube: Kube) -> None:
    seed_pytorchjob(kube_api, workers=3)  # the job exists (in NS), so a write would succeed if attempted
    guarded = kube_publishers(KubeSettings(reporting_instance="aggregator-0", namespaces=("team-a",)), kube)
    for p in guarded:
        await p.publish(decision())
    assert writes(kube_api) == []
    for p in kube_publishers(KubeSettings(reporting_instance="aggregator-0", namespaces=(NS,)), kube):
        await p.publish(decision())
    assert writes(kube_api) != []  # the same decision in a watched namespace is written


async def test_a_provisional_verdict_is_annotated_and_evented_but_sets_no_condition(
    kube_api: EmulatorHandle, kube: Kube
) -> None:
    # A stalled job whose pods still run: nothing has failed, so nothing may act on it.
    job, _ = seed_pytorchjob(kube_api)
    await publish_all(kube, decision(category="hang", closed_by="stall"))
    stored = kube_api.get(PYTORCHJOBS, NS, job["metadata"]["name"])
    assert stored is not None
    assert stored["status"]["conditions"] == job["status"]["conditions"]  # no PodmortemRootCause
    annotations = stored["metadata"]["annotations"]
    doc = json.loads(annotations[VERDICT_ANNOTATION])
    assert (doc["final"], doc["provisional"], doc["category"]) == (False, True, "hang")
    assert annotations[SUMMARY_ANNOTATION].startswith("provisional (the pods still run): ")
    events = kube_api.list("v1/events", NS)
    assert sorted((e["type"], e["reason"]) for e in events) == [("Warning", "PodmortemStall")] * 2

    # The job moved again: the annotations say so, a Normal Event on the job; still no condition.
    await publish_all(kube, decision(pod=None, category=None, revision=2, closed_by="resumed"))
    stored = kube_api.get(PYTORCHJOBS, NS, job["metadata"]["name"])
    assert stored is not None and stored["status"]["conditions"] == job["status"]["conditions"]
    doc = json.loads(stored["metadata"]["annotations"][VERDICT_ANNOTATION])
    assert (doc["revision"], doc["pod"], doc["provisional"], doc["final"]) == (2, None, True, False)
    cleared = [e for e in kube_api.list("v1/events", NS) if e["reason"] == "PodmortemStallCleared"]
    assert [(e["type"], e["involvedObject"]["kind"]) for e in cleared] == [("Normal", "PyTorchJob")]

    # It failed after all: the final verdict takes over, condition included.
    await publish_all(kube, decision(category="hang", revision=3))
    stored = kube_api.get(PYTORCHJOBS, NS, job["metadata"]["name"])
    assert stored is not None
    assert [c["reason"] for c in stored["status"]["conditions"] if c["type"] == ROOT_CAUSE_CONDITION] == ["Hang"]
    assert json.loads(stored["metadata"]["annotations"][VERDICT_ANNOTATION])["final"] is True


def test_the_verdict_annotation_says_when_the_job_stalled() -> None:
    d = decision()
    assert kp.verdict_document(d)["stalledAt"] is None
    stalled = dataclasses.replace(d, incident=dataclasses.replace(d.incident, stalled_at=1795273081.4))
    assert kp.verdict_document(stalled)["stalledAt"] == "2026-11-21T14:58:01Z"
