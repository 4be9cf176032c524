"""docs/kubernetes.md stays true: its RBAC is valid and covers what the code asks of the API server."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from pathlib import Path

import kubernetes_validate
import yaml
from support.common import eventually
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import NS, decision, make_kube, seed_pytorchjob, terminated

from podmortem.aggregator.config import KubeSettings, NodeActions
from podmortem.aggregator.incidents import IncidentBook
from podmortem.aggregator.kube import publish as kp
from podmortem.aggregator.kube.leader import LeaderElector, LeaseTimings
from podmortem.aggregator.kube.nodes import NodeFaultPublisher
from podmortem.aggregator.kube.podconditions import PodConditionWriter
from podmortem.aggregator.kube.podwatch import PodWatch
from podmortem.core.conditions import PodCondition
from podmortem.core.model import JobRef
from podmortem.core.names import VICTIM
from podmortem.sidecar.apiserver import ApiEndpoint, OwnPod

DOC = Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md"


def roles() -> dict[str, dict[str, object]]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    docs = [yaml.safe_load(b) for b in blocks]
    return {d["metadata"]["name"]: d for d in docs if isinstance(d, dict) and d.get("kind") in ("Role", "ClusterRole")}


def granted(role: dict[str, object]) -> set[tuple[str, str, str]]:
    out = set()
    for rule in role["rules"]:  # type: ignore[attr-defined]
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                for verb in rule["verbs"]:
                    out.add((group, res, verb))
    return out


def test_the_rbac_snippets_are_valid_objects() -> None:
    found = roles()
    assert set(found) == {
        "podmortem-aggregator",
        "podmortem-aggregator-leader-election",
        "podmortem-aggregator-nodes",
        "podmortem-sidecar",
    }
    for role in found.values():
        kubernetes_validate.validate(role, "1.33.0", strict=True)


def test_our_event_is_a_valid_core_event() -> None:
    target = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
    kubernetes_validate.validate(kp.event_body(target, decision(), 1795271125.0, "aggregator-0"), "1.33.0", strict=True)


VERBS = {"GET": "get", "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
GROUPS = {"api": ""}


def needed(requests: list[tuple[str, str]]) -> set[tuple[str, str, str]]:
    """(apiGroup, resource[/subresource], verb) for every API request the emulator saw."""
    out = set()
    for method, path_qs in requests:
        path, _, query = path_qs.partition("?")
        parts = path.strip("/").split("/")
        if parts[0] == "api":
            group, rest = "", parts[2:]
        elif parts[0] == "apis" and len(parts) > 3:
            group, rest = parts[1], parts[3:]
        else:
            continue  # discovery
        if rest and rest[0] == "namespaces":
            rest = rest[2:]
        if not rest:
            continue
        resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
        verb = VERBS[method]
        if method == "GET" and len(rest) == 1:
            verb = "watch" if "watch=true" in query else "list"
        out.add((group, resource, verb))
    return out


async def test_the_aggregator_role_covers_its_requests(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    seed_pytorchjob(kube_api)
    kube = make_kube(kube_api, tmp_path)
    book = IncidentBook(lambda inc: decision().verdict, lambda d: None)
    task = asyncio.create_task(PodWatch(kube, book, KubeSettings()).run())
    await eventually(lambda: kube_api.emulator.open_watches == 2, "both pod watches")
    # A pod without a sidecar ends with no termination message: its log is read.
    kube_api.set_log(NS, "mixtral-cpt-worker-1", "pytorch", "ValueError: bad label\n")
    kube_api.change(PODS, NS, "mixtral-cpt-worker-1", terminated(1))
    await eventually(lambda: any("/log?" in path for _, path in kube_api.requests()), "the log read")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    for publisher in kp.kube_publishers(KubeSettings(), kube):
        await publisher.publish(decision())
    victim = PodCondition("mixtral-cpt-worker-0", VICTIM, "Victim", "gloo: connection closed by peer")
    await PodConditionWriter(kube).write(NS, victim.pod, victim)
    kube.close()
    asked = needed(kube_api.requests())
    assert ("", "pods", "watch") in asked and ("kubeflow.org", "pytorchjobs/status", "patch") in asked
    assert ("", "pods/status", "patch") in asked
    assert ("", "pods/log", "get") in asked
    assert asked <= granted(roles()["podmortem-aggregator"])


async def test_the_sidecar_role_covers_its_requests(kube_api: EmulatorHandle) -> None:
    seed_pytorchjob(kube_api)
    kube_api.set_log(NS, "mixtral-cpt-worker-1", "pytorch", "line\n")
    watch = OwnPod(ApiEndpoint(kube_api.url, token=kube_api.emulator.token), NS, "mixtral-cpt-worker-1")
    async for _ in watch.pods():
        break
    assert await watch.read() is not None
    assert await watch.log_tail("pytorch", 1024) == "line\n"
    asked = needed(kube_api.requests())
    assert asked == {("", "pods", "list"), ("", "pods", "get"), ("", "pods/log", "get")}
    assert asked <= granted(roles()["podmortem-sidecar"])


async def test_the_leader_election_role_covers_its_requests(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    kube = make_kube(kube_api, tmp_path)
    timings = LeaseTimings(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)
    first, second = (LeaderElector(kube, NS, "lease", who, timings) for who in ("a", "b"))
    assert await first.acquire()  # creates the Lease
    task = asyncio.create_task(first.hold())  # reads and updates it
    await eventually(lambda: any(m == "PUT" and "/leases/" in p for m, p in kube_api.requests()), "a renewal")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert await second.acquire()  # takes it over once it expired
    await second.release()
    kube.close()
    asked = needed(kube_api.requests())
    assert {("coordination.k8s.io", "leases", v) for v in ("create", "get", "update")} <= asked
    assert asked <= granted(roles()["podmortem-aggregator-leader-election"])


async def test_the_node_role_covers_the_bad_node_actions(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    kube_api.put("v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}, "status": {}})
    kube = make_kube(kube_api, tmp_path)
    actions = NodeActions(threshold=2, taint=True)
    publisher = NodeFaultPublisher(kube, actions, clock=lambda: 1795271125.0)
    for n in (1, 2):  # two jobs' hardware root causes on node-1: record, condition, Event, taint
        d = decision(category="hardware", job=JobRef(NS, f"j{n}", "Job", f"uid-j{n}"))
        d = dataclasses.replace(d, incident=dataclasses.replace(d.incident, incident_id=f"{NS}.j.{n}"))
        await publisher.publish(d)
    kube.close()
    asked = needed(kube_api.requests())
    assert {("", "nodes", "patch"), ("", "nodes/status", "patch"), ("", "events", "create")} <= asked
    assert asked <= granted(roles()["podmortem-aggregator-nodes"])
