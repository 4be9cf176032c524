"""Bad nodes on the API emulator: hardware root causes recorded on the node; two of them mark it suspect."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from support.kube_emulator import EVENTS, NS, EmulatorHandle, decision, make_kube

from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.kube import nodes
from podmortem.aggregator.kube.client import Kube, KubeSettings
from podmortem.aggregator.kube.nodes import NodeActions, NodeFaultPublisher
from podmortem.aggregator.kube.publish import kube_publishers
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


def hardware(incident: int, at: float, node: str = NODE, category: str = "hardware") -> Decision:
    d: Decision = decision(pod=f"ddp-{incident}-3", category=category)
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
    return next((c for c in obj["status"]["conditions"] if c["type"] == nodes.CONDITION_TYPE), None)


def node_events(api: EmulatorHandle) -> list[dict[str, Any]]:
    return [e for e in api.list(EVENTS, "default") if e["involvedObject"].get("kind") == "Node"]


def publisher(kube: Kube, taint: bool = False, **kwargs: Any) -> NodeFaultPublisher:
    return NodeFaultPublisher(kube, NodeActions(taint=taint), clock=lambda: T0 + 2 * DAY, **kwargs)


async def test_two_hardware_incidents_set_the_condition_and_an_event(kube_api: EmulatorHandle, kube: Kube) -> None:
    gauge: list[int] = []
    pub = publisher(kube, on_suspects=gauge.append)
    await pub.publish(hardware(1, T0))
    first = node(kube_api)
    record = json.loads(first["metadata"]["annotations"][nodes.FAULTS_ANNOTATION])
    assert record == [
        {
            "time": rfc3339(T0),
            "incident": f"{NS}.ddp.1",
            "job": f"{NS}/PyTorchJob/mixtral-cpt",
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
    assert len(json.loads(node(kube_api)["metadata"]["annotations"][nodes.FAULTS_ANNOTATION])) == 2
    assert ours(node(kube_api)) is None
    await pub.publish(hardware(3, T0 + DAY))
    assert ours(node(kube_api))["status"] == "True"  # type: ignore[index]
    # A person clears it (docs/kubernetes.md): only faults after that count again.
    cleared = [c for c in node(kube_api)["status"]["conditions"] if c["type"] != nodes.CONDITION_TYPE]
    cleared.append({"type": nodes.CONDITION_TYPE, "status": "False", "reason": "Repaired",
                    "message": "GPU replaced", "lastTransitionTime": rfc3339(T0 + 1.6 * DAY)})  # fmt: skip
    kube_api.change(NODES, None, NODE, {"status": {"conditions": cleared}})
    await pub.publish(hardware(4, T0 + 1.5 * DAY))  # before the clearing: counted in the record only
    assert ours(node(kube_api))["status"] == "False"  # type: ignore[index]
    await pub.publish(hardware(5, T0 + 1.8 * DAY))
    await pub.publish(hardware(6, T0 + 1.9 * DAY))
    assert ours(node(kube_api))["status"] == "True"  # type: ignore[index]


async def test_only_hardware_root_causes_with_a_node_and_only_when_allowed(
    kube_api: EmulatorHandle, kube: Kube
) -> None:
    fenced = publisher(kube, fence=lambda: False)
    await fenced.publish(hardware(1, T0))
    pub = publisher(kube)
    await pub.publish(hardware(2, T0, category="user_code"))
    await pub.publish(hardware(3, T0, node=""))
    await pub.publish(hardware(4, T0, node="gone-node"))  # 404: logged, nothing written
    assert nodes.FAULTS_ANNOTATION not in (node(kube_api)["metadata"].get("annotations") or {})
    writes = [(m, p) for m, p in kube_api.requests() if m != "GET"]
    assert writes == []


async def test_node_actions_off_adds_no_node_publisher(kube: Kube) -> None:
    on = [p.name for p in kube_publishers(KubeSettings(), kube)]
    off = [p.name for p in kube_publishers(KubeSettings(node_actions=False), kube)]
    assert "kube-nodes" in on and "kube-nodes" not in off


def test_a_damaged_record_reads_as_empty() -> None:
    assert nodes.read_faults({"metadata": {"annotations": {nodes.FAULTS_ANNOTATION: "{not json"}}}) == []
    kept = [{"incident": str(i), "time": "2026-11-22T00:00:00Z"} for i in range(nodes.MAX_FAULTS)]
    grown = nodes.with_fault(kept, {"incident": "new", "time": "2026-11-22T00:00:01Z"})
    assert grown is not None and len(grown) == nodes.MAX_FAULTS and grown[-1]["incident"] == "new"
