"""Bad nodes on the API emulator: hardware root causes recorded on the node; two of them mark it suspect."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from support.kube_emulator import EVENTS, NS, EmulatorHandle, decision, make_kube

from podmortem.aggregator.config import KubeSettings, NodeActions
from podmortem.aggregator.decisions import Decision, Term
from podmortem.aggregator.kube import nodes
from podmortem.aggregator.kube.client import Kube
from podmortem.aggregator.kube.nodes import NodeFaultPublisher
from podmortem.aggregator.kube.publish import kube_publishers
from podmortem.aggregator.publishing import PublishQueue
from podmortem.core.model import JobRef
from podmortem.core.names import HARDWARE_FAULTS_ANNOTATION, SUSPECT_HARDWARE_CONDITION, SUSPECT_HARDWARE_TAINT
from podmortem.k8s.objects import rfc3339

NODES = "v1/nodes"
NODE = "gpu-7"
DAY = 86400.0
T0 = 1795271125.0  # the emulator's decisions are decided here
KUBELET_CONDITIONS = [
    {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"},
    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "message": "ok"},
]


@pytest.fixture
def kube(kube_api: EmulatorHandle, tmp_path: Path) -> Iterator[Kube]:
    kube_api.put(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            "status": {"conditions": KUBELET_CONDITIONS},
        },
    )
    client = make_kube(kube_api, tmp_path)
    yield client
    client.close()


def hardware(
    incident: int, at: float, node: str = NODE, category: str = "hardware", job: JobRef | None = None
) -> Decision:
    """A hardware root cause on `node`; by default each incident is its own job's (`ddp-<incident>`)."""
    job = job or JobRef(NS, f"ddp-{incident}", "PyTorchJob", f"uid-ddp-{incident}")
    d: Decision = decision(pod=f"ddp-{incident}-3", category=category, job=job)
    verdict = dataclasses.replace(
        d.verdict, node=node, failed_at=at, evidence=("Xid 79: GPU has fallen off the bus", "NCCL error")
    )
    incident_obj = dataclasses.replace(d.incident, incident_id=f"{NS}.ddp.{incident}")
    return dataclasses.replace(d, incident=incident_obj, verdict=verdict, decided_at=at)


def node(api: EmulatorHandle) -> dict[str, Any]:
    found = api.get(NODES, None, NODE)
    assert found is not None
    return found


def ours(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in obj["status"]["conditions"] if c["type"] == SUSPECT_HARDWARE_CONDITION), None)


def node_events(api: EmulatorHandle) -> list[dict[str, Any]]:
    return [e for e in api.list(EVENTS, "default") if e["involvedObject"].get("kind") == "Node"]


def publisher(kube: Kube, taint: bool = False, per_hour: int = 100, **kwargs: Any) -> NodeFaultPublisher:
    actions = NodeActions(taint=taint, per_namespace_per_hour=per_hour)
    return NodeFaultPublisher(kube, actions, clock=lambda: T0 + 2 * DAY, **kwargs)


async def test_two_hardware_incidents_set_the_condition_and_an_event(kube_api: EmulatorHandle, kube: Kube) -> None:
    gauge: list[int] = []
    pub = publisher(kube, on_suspects=gauge.append)
    await pub.publish(hardware(1, T0))
    first = node(kube_api)
    record = json.loads(first["metadata"]["annotations"][HARDWARE_FAULTS_ANNOTATION])
    assert record == [
        {
            "time": rfc3339(T0),
            "incident": f"{NS}.ddp.1",
            "job": f"{NS}/PyTorchJob/ddp-1",
            "job_uid": "uid-ddp-1",
            "pod": "ddp-1-3",
            "evidence": ["Xid 79: GPU has fallen off the bus", "NCCL error"],
        }
    ]
    assert ours(first) is None and node_events(kube_api) == []  # one fault is not a pattern
    await pub.publish(hardware(2, T0 + DAY))
    second = node(kube_api)
    condition = ours(second)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "RepeatedHardwareFaults")
    assert "2 hardware root causes within 7d" in condition["message"] and "ddp-2-3" in condition["message"]
    assert second["status"]["conditions"][:2] == [
        {k: v for k, v in c.items()} for c in KUBELET_CONDITIONS
    ]  # the kubelet's conditions are carried over as read
    kubernetes_validate.validate(second, "1.33.0", strict=True)  # condition and annotation as a Node allows
    [event] = node_events(kube_api)
    assert (event["type"], event["reason"], event["involvedObject"]["name"]) == ("Warning", "SuspectHardware", NODE)
    kubernetes_validate.validate(event, "1.33.0", strict=True)
    assert second["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert gauge == [0, 1]


async def test_the_taint_only_when_enabled(kube_api: EmulatorHandle, kube: Kube) -> None:
    pub = publisher(kube, taint=True)
    await pub.publish(hardware(1, T0))
    assert len(node(kube_api)["spec"]["taints"]) == 1
    await pub.publish(hardware(2, T0 + DAY))
    taints = node(kube_api)["spec"]["taints"]
    assert taints == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "podmortem.io/suspect-hardware", "value": "true", "effect": "NoSchedule"},
    ]
    await pub.publish(hardware(3, T0 + DAY))
    assert node(kube_api)["spec"]["taints"] == taints  # added once


async def test_replays_record_once_and_old_or_cleared_faults_do_not_count(kube_api: EmulatorHandle, kube: Kube) -> None:
    pub = publisher(kube)
    await pub.publish(hardware(1, T0 - 10 * DAY))  # outside the 7-day window
    await pub.publish(hardware(2, T0))
    await pub.publish(hardware(2, T0))  # a replay or a revision of the same incident
    assert len(json.loads(node(kube_api)["metadata"]["annotations"][HARDWARE_FAULTS_ANNOTATION])) == 2
    assert ours(node(kube_api)) is None
    await pub.publish(hardware(3, T0 + DAY))
    assert ours(node(kube_api))["status"] == "True"  # type: ignore[index]
    # A person clears it (docs/kubernetes.md): only faults after that count again.
    cleared = [c for c in node(kube_api)["status"]["conditions"] if c["type"] != SUSPECT_HARDWARE_CONDITION]
    cleared.append({"type": SUSPECT_HARDWARE_CONDITION, "status": "False", "reason": "Repaired",
                    "message": "GPU replaced", "lastTransitionTime": rfc3339(T0 + 1.6 * DAY)})  # fmt: skip
    kube_api.change(NODES, None, NODE, {"status": {"conditions": cleared}})
    await pub.publish(hardware(4, T0 + 1.5 * DAY))  # before the clearing: counted in the record only
    assert ours(node(kube_api))["status"] == "False"  # type: ignore[index]
    await pub.publish(hardware(5, T0 + 1.8 * DAY))
    await pub.publish(hardware(6, T0 + 1.9 * DAY))
    assert ours(node(kube_api))["status"] == "True"  # type: ignore[index]


class NotLeading:
    """The fence of a replica that does not hold the Lease (as `LeaderElector` answers then)."""

    async def confirm(self) -> Term | None:
        return None

    def may_act(self) -> bool:
        return False


async def test_only_hardware_root_causes_with_a_node_and_only_when_allowed(
    kube_api: EmulatorHandle, kube: Kube
) -> None:
    # Not the leader: the publish queue's fence stops the node publisher's turn (it has no check of its own).
    fenced = PublishQueue([publisher(kube)], fence=NotLeading())
    worker = asyncio.create_task(fenced.run())
    fenced.submit(hardware(1, T0))
    assert await fenced.drain(5)
    worker.cancel()
    assert fenced.fenced == 1
    pub = publisher(kube)
    await pub.publish(hardware(2, T0, category="user_code"))
    await pub.publish(hardware(3, T0, node=""))
    await pub.publish(hardware(4, T0, node="gone-node"))  # 404: logged, nothing written
    assert HARDWARE_FAULTS_ANNOTATION not in (node(kube_api)["metadata"].get("annotations") or {})
    writes = [(m, p) for m, p in kube_api.requests() if m != "GET"]
    assert writes == []


async def test_node_actions_off_adds_no_node_publisher(kube: Kube) -> None:
    on = [p.name for p in kube_publishers(KubeSettings(), kube)]
    off = [p.name for p in kube_publishers(KubeSettings(nodes=NodeActions(enabled=False)), kube)]
    assert "kube-nodes" in on and "kube-nodes" not in off


def test_a_damaged_record_reads_as_empty() -> None:
    assert nodes.read_faults({"metadata": {"annotations": {HARDWARE_FAULTS_ANNOTATION: "{not json"}}}) == []
    kept = [{"incident": str(i), "time": "2026-11-22T00:00:00Z"} for i in range(nodes.MAX_FAULTS)]
    grown = nodes.with_fault(kept, {"incident": "new", "time": "2026-11-22T00:00:01Z"})
    assert grown is not None and len(grown) == nodes.MAX_FAULTS and grown[-1]["incident"] == "new"


# -- how far a tenant's text is trusted (docs/reliability.md) ---------------------------------------


def seed_nodes(api: EmulatorHandle, names: list[str]) -> None:
    for name in names:
        api.put(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                        "status": {"conditions": KUBELET_CONDITIONS}})  # fmt: skip


def marked(api: EmulatorHandle, names: list[str]) -> list[str]:
    out = []
    for name in names:
        found = api.get(NODES, None, name)
        assert found is not None
        if ours(found) is not None or any(
            t["key"] == SUSPECT_HARDWARE_TAINT for t in (found.get("spec") or {}).get("taints") or []
        ):
            out.append(name)
    return out


async def test_one_job_counts_once_whatever_its_attempts_or_pods(kube_api: EmulatorHandle, kube: Kube) -> None:
    refused: list[str] = []
    pub = publisher(kube, taint=True, on_refused=refused.append)
    job = JobRef(NS, "ddp", "PyTorchJob", "uid-ddp")
    for attempt in range(5):  # five incidents of one job: invented attempts, or its pods one by one
        await pub.publish(hardware(attempt, T0 + attempt, job=job))
    record = json.loads(node(kube_api)["metadata"]["annotations"][HARDWARE_FAULTS_ANNOTATION])
    assert [f["incident"] for f in record] == [f"{NS}.ddp.0"]
    assert marked(kube_api, [NODE]) == [] and node_events(kube_api) == []
    assert refused == [nodes.JOB_COUNTED] * 4
    await pub.publish(hardware(9, T0 + 9))  # another job's fault: two jobs now
    assert marked(kube_api, [NODE]) == [NODE]


async def test_the_threshold_needs_different_jobs_and_namespaces(kube_api: EmulatorHandle, kube: Kube) -> None:
    one_enough = NodeActions(threshold=1, min_jobs=2)
    pub = NodeFaultPublisher(kube, one_enough, clock=lambda: T0 + 2 * DAY)
    await pub.publish(hardware(1, T0))
    assert marked(kube_api, [NODE]) == []  # one fault is enough by count, not by jobs
    two_namespaces = NodeActions(min_namespaces=2)
    pub = NodeFaultPublisher(kube, two_namespaces, clock=lambda: T0 + 2 * DAY)
    await pub.publish(hardware(2, T0))
    assert marked(kube_api, [NODE]) == []  # two jobs, one namespace
    await pub.publish(hardware(3, T0, job=JobRef("team-b", "train", "Job", "uid-train")))
    assert marked(kube_api, [NODE]) == [NODE]


async def test_many_one_pod_jobs_of_one_namespace_mark_few_nodes(kube_api: EmulatorHandle, kube: Kube) -> None:
    """The issue's attack: twelve one-pod Jobs printing an ECC line, two pinned to each of six nodes."""
    names = [f"gpu-{i}" for i in range(6)]
    seed_nodes(kube_api, names)
    now = [T0]
    refused: list[str] = []
    pub = NodeFaultPublisher(kube, NodeActions(taint=True), clock=lambda: now[0], on_refused=refused.append)
    for i in range(12):
        now[0] = T0 + i * 20 / 12  # within 20 s
        await pub.publish(hardware(i, now[0], node=names[i % 6]))
    per_hour = NodeActions().per_namespace_per_hour
    assert len(marked(kube_api, names)) <= per_hour // 2  # each mark takes two of the namespace's faults
    assert refused == [nodes.NAMESPACE_RATE] * (12 - per_hour)
    # Another namespace has its own budget; the first one's refills with time.
    await pub.publish(hardware(20, now[0], node=names[5], job=JobRef("team-b", "x", "Job", "uid-x")))
    now[0] += 3600
    await pub.publish(hardware(21, now[0], node=names[4]))
    assert refused == [nodes.NAMESPACE_RATE] * (12 - per_hour)


def test_the_namespace_budget_refills_evenly() -> None:
    now = [0.0]
    budget = nodes.NamespaceBudget(4, clock=lambda: now[0])
    assert [budget.take("a") for _ in range(5)] == [True, True, True, True, False]
    assert budget.take("b")
    now[0] = 899.0
    assert not budget.take("a")
    now[0] = 900.0  # a quarter of an hour: one more
    assert budget.take("a") and not budget.take("a")


def test_the_refusal_reasons_are_the_metrics_labels() -> None:
    from podmortem.aggregator.metrics import NODE_FAULT_REFUSALS

    assert nodes.REFUSALS == NODE_FAULT_REFUSALS


def test_the_namespace_budget_forgets_full_buckets_past_its_bound() -> None:
    now = [0.0]
    budget = nodes.NamespaceBudget(2, clock=lambda: now[0])
    for i in range(nodes.NamespaceBudget.TRACKED):
        assert budget.take(f"ns-{i}")
    now[0] = 3600.0  # every bucket full again
    assert budget.take("one-more") and len(budget._buckets) == 1


async def test_a_job_counts_again_once_its_fault_is_out_of_the_window(kube_api: EmulatorHandle, kube: Kube) -> None:
    """A long-lived job failing on the same node weeks apart: its old fault no longer counts, the new one does."""
    job = JobRef(NS, "ddp", "PyTorchJob", "uid-ddp")
    now = [T0]
    pub = NodeFaultPublisher(kube, NodeActions(per_namespace_per_hour=100), clock=lambda: now[0])
    await pub.publish(hardware(1, T0, job=job))
    now[0] = T0 + 10 * DAY
    await pub.publish(hardware(2, now[0], job=job))
    record = json.loads(node(kube_api)["metadata"]["annotations"][HARDWARE_FAULTS_ANNOTATION])
    assert [f["incident"] for f in record] == [f"{NS}.ddp.1", f"{NS}.ddp.2"]
    assert ours(node(kube_api)) is None  # one fault in the window
