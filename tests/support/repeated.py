"""Attempts of one job failing the same way, or not: shared by tests/e2e/test_repeats_kube.py and
bench/repeat_cost.py. Pods fail in the kubelet's order with real sidecar processes (`kubelet_order`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from podmortem.aggregator.running import Aggregator
from support.common import eventually
from support.kube_emulator import JOBS, PODS, EmulatorHandle
from support.kube_objects import NS, indexed_job, indexed_pod
from support.kubelet_order import GUARD, Sidecar, fail_pods, with_sidecar

NCCL_IB = (
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, remote process exited "
    "or there was a network error, NCCL version 2.18.1\nncclRemoteError: A call failed possibly due to a network "
    "error or a remote process exiting prematurely.\nLast error:\nNET/IB : Got completion from peer "
    "10.1.0.{peer}<4{peer}325> with error 12, opcode 0, len 0, vendor err 129 (Recv)"
)
NCCL_SOCKET = (
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, unhandled system "
    "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1\nncclSystemError: System call (e.g. socket, "
    "malloc) or external library call failed or device error.\nLast error:\nsocketStartConnect: Connect to "
    "10.1.0.13<55213> failed : Software caused connection abort"
)
RESTART = "jobset.sigs.k8s.io/restart-attempt"


async def fail_attempt(
    api: EmulatorHandle, agg: Aggregator, tmp_path: Path, pods: list[dict[str, Any]], root: int, message: str
) -> list[Sidecar]:
    """One attempt (`kubelet_order.fail_pods`), then until `agg` saw every sidecar go."""
    before = agg.metrics.connected._value.get()
    names = [with_sidecar(api, pod, i) for i, pod in enumerate(pods)]
    sidecars = await fail_pods(api, agg, tmp_path, names, root, message)
    await eventually(lambda: agg.metrics.connected._value.get() == before, "sidecars gone", within=GUARD)
    return sidecars


def restart_jobset(
    api: EmulatorHandle, jobset: dict[str, Any], old: list[dict[str, Any]], attempt: int
) -> list[dict[str, Any]]:
    """What the JobSet controller does on a restart: the child Job (one, `<jobset>-workers-0`) and its pods
    go, and come back with the next restart attempt (new pods, new names)."""
    name = f"{jobset['metadata']['name']}-workers-0"
    for pod in old:
        api.remove(PODS, NS, pod["metadata"]["name"])
    child = api.get(JOBS, NS, name)
    assert child is not None
    api.remove(JOBS, NS, name)
    labels = {k: v for k, v in child["metadata"]["labels"].items()} | {RESTART: str(attempt)}
    job = api.put(JOBS, indexed_job(name, len(old), jobset, **labels))
    pods = []
    for i in range(len(old)):
        pod = indexed_pod(job, i, **labels)
        pod["metadata"]["name"] = f"{name}-{i}-a{attempt}xyz"
        pods.append(api.put(PODS, pod))
    return pods
