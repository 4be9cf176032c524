"""How far the real aggregator trusts a tenant with nodes: `--kube --auth tokenreview` over TLS on the API
emulator, streams presenting their own pods' tokens and reporting an uncorrectable ECC error (a `hardware`
verdict, from text the tenant controls), node actions on with the taint.

The issue's two attacks: one pod inventing attempts (each attempt its own incident), and twelve one-pod jobs
in one namespace pinned two to each of six nodes. A job counts once per node, a mark needs two jobs, and a
namespace records at most `--node-faults-per-namespace` faults an hour (docs/reliability.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from support.aggregators import secure_aggregator
from support.common import eventually, jwt
from support.kube_emulator import PODS, PYTORCHJOBS, EmulatorHandle
from support.kube_objects import NS, pytorchjob, training_pod

from podmortem.aggregator.config import KubeSettings, NodeActions
from podmortem.aggregator.kube import nodes
from podmortem.aggregator.running import Aggregator
from podmortem.core.model import ErrorRecord
from podmortem.core.names import HARDWARE_FAULTS_ANNOTATION, SUSPECT_HARDWARE_CONDITION
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import error_to_pb, make_event

NODES = "v1/nodes"
EXPIRES = time.time() + 3600
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def aggregator(kube_api: EmulatorHandle, tmp_path: Path, ca: trustme.CA) -> AsyncIterator[Aggregator]:
    kube = {"nodes": NodeActions(taint=True)}
    async with secure_aggregator(kube_api, tmp_path, ca, kube, quorum_timeout=1.0) as agg:
        yield agg


def token(job: str) -> str:
    return jwt(EXPIRES, jti=int.from_bytes(job.encode()[-4:], "big"))


def one_pod_job(api: EmulatorHandle, name: str, node: str) -> str:
    """A one-worker PyTorchJob whose pod is pinned to `node`; its pod's token bound (the pod's name)."""
    job = api.put(PYTORCHJOBS, pytorchjob(name=name, workers=1))
    pod = training_pod(job, 0)
    pod["spec"]["nodeName"] = node
    stored = api.put(PODS, pod)
    api.bind_token(token(name), NS, stored["metadata"]["name"], uid=stored["metadata"]["uid"])
    return str(stored["metadata"]["name"])


def seed_nodes(api: EmulatorHandle, names: list[str]) -> None:
    for name in names:
        api.put(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}, "status": {}})


async def report_ecc(agg: Aggregator, ca: trustme.CA, job: str, pod: str, attempt: str) -> None:
    """One stream with `pod`'s own token: registers at `attempt` (as the pod claims it) and reports ECC."""
    creds = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
    async with grpc.aio.secure_channel(f"127.0.0.1:{agg.port}", creds) as channel:
        call = pb_grpc.CollectorStub(channel).Report(metadata=(("authorization", f"Bearer {token(job)}"),))  # type: ignore[no-untyped-call]
        await call.write(pb.SidecarMessage(register=pb.Register(job=pb.JobRef(namespace=NS, name=job), pod=pod,
                                                                 attempt=attempt)))  # fmt: skip
        await call.read()
        event = make_event(error_to_pb(ErrorRecord(message=ECC, exception_type="RuntimeError", timestamp=5)), "e-1")
        await call.write(pb.SidecarMessage(event=event))
        await call.read()
        await call.done_writing()


def record(api: EmulatorHandle, node: str) -> list[dict[str, Any]]:
    found = api.get(NODES, None, node) or {}
    raw = ((found.get("metadata") or {}).get("annotations") or {}).get(HARDWARE_FAULTS_ANNOTATION)
    return list(json.loads(raw)) if raw else []


def marked(api: EmulatorHandle, names: list[str]) -> list[str]:
    out = []
    for name in names:
        found = api.get(NODES, None, name) or {}
        conditions = (found.get("status") or {}).get("conditions") or []
        taints = (found.get("spec") or {}).get("taints") or []
        if any(c.get("type") == SUSPECT_HARDWARE_CONDITION for c in conditions) or taints:
            out.append(name)
    return out


def refused(agg: Aggregator, reason: str) -> float:
    return agg.metrics.registry.get_sample_value("podmortem_node_faults_refused_total", {"reason": reason}) or 0.0


def hardware_verdicts(agg: Aggregator) -> float:
    return agg.metrics.registry.get_sample_value("podmortem_verdicts_total", {"category": "hardware"}) or 0.0


async def test_one_pod_inventing_attempts_marks_nothing(
    kube_api: EmulatorHandle, aggregator: Aggregator, ca: trustme.CA
) -> None:
    seed_nodes(kube_api, ["gpu-0"])
    pod = one_pod_job(kube_api, "ddp", "gpu-0")
    for attempt in ("n0", "n1", "n2"):
        await report_ecc(aggregator, ca, "ddp", pod, attempt)

    def settled() -> bool:  # every incident decided; the first hardware verdict recorded, every other refused
        gauge = aggregator.metrics.registry.get_sample_value("podmortem_open_incidents")
        decided = hardware_verdicts(aggregator) == refused(aggregator, nodes.JOB_COUNTED) + 1
        return gauge == 0 and decided and len(record(kube_api, "gpu-0")) == 1

    await eventually(settled, "every attempt decided and published")
    assert len(record(kube_api, "gpu-0")) == 1
    assert marked(kube_api, ["gpu-0"]) == []


async def test_many_one_pod_jobs_of_one_namespace_mark_at_most_two_nodes(
    kube_api: EmulatorHandle, aggregator: Aggregator, ca: trustme.CA
) -> None:
    names = [f"gpu-{i}" for i in range(6)]
    seed_nodes(kube_api, names)
    for i in range(12):
        job = f"ecc-{i}"
        await report_ecc(aggregator, ca, job, one_pod_job(kube_api, job, names[i % 6]), "0")
    limit = KubeSettings().nodes.per_namespace_per_hour

    def settled() -> bool:
        recorded = sum(len(record(kube_api, n)) for n in names)
        return recorded == limit and refused(aggregator, nodes.NAMESPACE_RATE) == 12 - limit

    await eventually(settled, "four faults recorded, eight refused")
    assert len(marked(kube_api, names)) <= limit // 2
