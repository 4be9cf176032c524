"""A hold across an aggregator restart: the condition is never written after the pod is terminal.

A real aggregator process (`--kube --state-dir`) on the Kubernetes emulator and real sidecar processes,
in the kubelet's order (tests/support/kubelet_order.py). The root fails on its own with a retryable cause
and holds its pod while it waits for its peers; the aggregator is SIGKILLed a second into that hold and
serves again seconds later. The sidecar asks again with what is left of its own hold, and exits at its
deadline; the kubelet then makes the pod Failed, the moment a Job controller acts on it. Whatever the
restarted aggregator decides is on the pod before that, or never: its stop path, which settles every
decision under way, writes nothing later.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

from support.common import eventually
from support.kube_emulator import JOBS, PODS, EmulatorHandle
from support.kube_objects import NS, indexed_job, indexed_pod
from support.kubelet_order import (
    GUARD,
    Kubelet,
    condition_version,
    free_port,
    our_condition,
    says,
    start_sidecar,
    with_sidecar,
)

ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"  # retryable: RetryableFailure
RESTART_GAP = 8.0  # seconds the aggregator is down (the issue's: 9 s, of a 15 s hold)


def start(api: EmulatorHandle, tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    (tmp_path / "ready").unlink(missing_ok=True)
    args = [
        sys.executable, "-m", "podmortem.cli", "aggregator", "--kube", "--auth", "none",
        "--kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig", NS)), "--namespaces", NS,
        "--listen", f"127.0.0.1:{port}", "--metrics-listen", "", "--verdict-dir", "",
        "--ready-file", str(tmp_path / "ready"), "--state-dir", str(tmp_path / "state"), "--quorum-timeout", "600",
    ]  # fmt: skip
    log = (tmp_path / "aggregator.log").open("ab")
    return subprocess.Popen(args, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT)


async def test_a_hold_across_an_aggregator_restart_writes_nothing_after_the_pod_ended(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    job = kube_api.put(JOBS, indexed_job("train", 3))
    names = [with_sidecar(kube_api, kube_api.put(PODS, indexed_pod(job, i)), i) for i in range(3)]
    port = free_port()
    proc = start(kube_api, tmp_path, port)
    try:
        await eventually(lambda: (tmp_path / "ready").exists(), "serving", within=60)
        sidecars = [
            await start_sidecar(kube_api, tmp_path, kube_api.get(PODS, NS, n) or {}, f"127.0.0.1:{port}") for n in names
        ]
        for s in sidecars:
            await eventually(partial(says, s.log, "registered with aggregator"), f"{s.pod} registered", within=GUARD)
        root = sidecars[1]
        kubelet = Kubelet(kube_api)
        kubelet.fail(root, ECC)  # alone: its peers run on, so it waits for their evidence
        await eventually(partial(says, root.log, "holding the pod"), "the root holding", within=GUARD)
        await asyncio.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)
        await asyncio.sleep(RESTART_GAP)
        proc = start(kube_api, tmp_path, port)
        await eventually(lambda: (tmp_path / "ready").exists(), "serving again", within=60)
        await kubelet.done()  # the root's sidecar exited and its pod is Failed
        proc.send_signal(signal.SIGTERM)  # settles every decision under way, and exits
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for s in sidecars:
            if s.proc.returncode is None:
                s.proc.kill()
                await s.proc.wait()
    assert root.code == 0, "\n".join(root.lines)
    assert sum("asked the aggregator to confirm" in line for line in root.lines) >= 2  # asked again after the restart
    version = condition_version(kube_api, root.pod)
    condition = our_condition(kube_api.get(PODS, NS, root.pod))
    assert version is None or version < root.exit_version, (condition, version, root.exit_version)
