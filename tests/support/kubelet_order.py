"""Pods failing in the kubelet's order on the Kubernetes emulator, with real sidecar processes holding them.

Shared by tests/e2e/test_conditions_kube.py and bench/hold_cost.py. Per failing pod (`Kubelet.fail`):
the training container writes its error file and exits; the kubelet SIGTERMs the native sidecar at once;
the pod status that shows the container's end reaches the API `STATUS_LAG` later, the pod still Running
(its sidecar runs); only once the sidecar has exited does the pod turn Failed, the moment a Job
controller acts on it. The test's write at that moment carries a resourceVersion (`Sidecar.exit_version`)
that orders it against the write of the pod's condition (`condition_version`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from podmortem.aggregator.config import AggregatorConfig, KubeSettings
from podmortem.aggregator.running import Aggregator
from support.common import eventually
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import NS

ROOT_ERROR = "ValueError: label 7 out of range"
GLOO_PEER = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [{ip}]:29500"
STATUS_LAG = 0.5  # the kubelet's status reaches the API this long after the sidecar's SIGTERM
TYPES = ("podmortem.io/Victim", "podmortem.io/PermanentFailure", "podmortem.io/RetryableFailure")
GUARD = 60.0


def error_doc(message: str) -> str:
    ts = str(int(time.time()))
    return json.dumps({"message": {"message": message, "extraInfo": {"py_callstack": "tb", "timestamp": ts}}})


def with_sidecar(api: EmulatorHandle, pod: dict[str, Any], index: int, ip: str = "") -> str:
    """The pod as the injection webhook leaves it: a native podmortem sidecar; and an IP peers can name."""
    name = str(pod["metadata"]["name"])
    api.change(
        PODS,
        NS,
        name,
        {
            "spec": {
                "terminationGracePeriodSeconds": 30,
                "initContainers": [
                    {
                        "name": "podmortem-sidecar",
                        "restartPolicy": "Always",
                        "env": [{"name": "PODMORTEM_AGGREGATOR", "value": "podmortem-aggregator:50051"}],
                    }
                ],
            },
            "status": {
                "phase": "Running",
                "podIP": ip or f"10.1.0.{10 + index}",
                "containerStatuses": [{"name": _container(pod), "state": {"running": {}}}],
            },
        },
    )
    return name


def _container(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["containers"][0]["name"])


def ended(container: str, exit_code: int, message: str = "") -> dict[str, Any]:
    """The status the kubelet reports once the training container ended, its sidecar still running.
    `message`: the container's termination message (FallbackToLogsOnError: its log's tail)."""
    state = {"exitCode": exit_code, "reason": "Error", "startedAt": "2026-11-25T19:00:00Z", "message": message}
    state["finishedAt"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"status": {"phase": "Running", "containerStatuses": [{"name": container, "state": {"terminated": state}}]}}


def our_condition(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    found = [c for c in conditions if c.get("type") in TYPES]
    assert len(found) <= 1, found  # exactly one of the three, never two
    return found[0] if found else None


def condition_version(api: EmulatorHandle, pod: str) -> int | None:
    """The resourceVersion of the write that first showed our condition on the pod (the emulator's log)."""
    for rv, res, _, obj in list(api.emulator.history):
        if res.plural == "pods" and obj["metadata"]["name"] == pod and our_condition(obj) is not None:
            return rv
    return None


@dataclass
class Sidecar:
    pod: str
    container: str
    error_file: Path
    proc: asyncio.subprocess.Process
    log: Path
    sigterm_at: float = 0.0
    exited_at: float = 0.0
    exit_version: int = 0  # the resourceVersion of the test's write as it saw the exit
    code: int | None = None
    lines: list[str] = field(default_factory=list)


async def start_sidecar(
    api: EmulatorHandle, tmp_path: Path, pod: dict[str, Any], aggregator: str, hold_timeout: str = "15"
) -> Sidecar:
    name = str(pod["metadata"]["name"])
    error_file = tmp_path / name / "error.json"
    error_file.parent.mkdir(exist_ok=True)
    log = tmp_path / f"{name}.log"
    env = {
        **os.environ,
        "POD_NAME": name,
        "POD_NAMESPACE": NS,
        "TORCHELASTIC_ERROR_FILE": str(error_file),
        "PODMORTEM_AGGREGATOR": aggregator,
        "PODMORTEM_POD_SOURCE": "api",
        "KUBECONFIG": str(api.kubeconfig(tmp_path / "kubeconfig", NS)),
        "PODMORTEM_HOLD_TIMEOUT": hold_timeout,
        "PODMORTEM_FLUSH_TIMEOUT": "10",
        "PODMORTEM_LOG_TAIL_BYTES": "0",
    }  # no PODMORTEM_JOB_NAME: the sidecar reads its job from its own pod, as the pod watch does
    env.pop("KUBERNETES_SERVICE_HOST", None)
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "podmortem.sidecar.running", env=env, stdout=out, stderr=out
        )
    return Sidecar(name, _container(pod), error_file, proc, log)


class Kubelet:
    """Plays each pod's kubelet in the order described in the module docstring."""

    def __init__(self, api: EmulatorHandle) -> None:
        self.api = api
        self.tasks: list[asyncio.Task[None]] = []

    def fail(
        self, sidecar: Sidecar, message: str | None, exit_code: int = 1, extra: dict[str, Any] | None = None
    ) -> None:
        self.tasks.append(asyncio.create_task(self._fail(sidecar, message, exit_code, extra or {})))

    async def _fail(self, sidecar: Sidecar, message: str | None, exit_code: int, extra: dict[str, Any]) -> None:
        if message is not None:
            sidecar.error_file.write_text(error_doc(message))
        await asyncio.sleep(0.2)  # the container exits after writing its error file
        await self.exited(sidecar, exit_code, message or "", extra)

    async def exited(
        self, sidecar: Sidecar, exit_code: int, message: str = "", extra: dict[str, Any] | None = None
    ) -> None:
        """The training container has just exited with `exit_code`: the rest of the kubelet's order."""
        sidecar.sigterm_at = time.monotonic()
        sidecar.proc.terminate()  # the training container is gone: SIGTERM to the native sidecar
        await asyncio.sleep(STATUS_LAG)
        status = ended(sidecar.container, exit_code, message)
        status["status"].update(extra or {})
        await asyncio.to_thread(self.api.change, PODS, NS, sidecar.pod, status)
        async with asyncio.timeout(GUARD):
            sidecar.code = await sidecar.proc.wait()
        sidecar.exited_at = time.monotonic()
        # The sidecar has exited: the kubelet makes the pod terminal (this write's version marks the exit).
        marked = await asyncio.to_thread(self.api.change, PODS, NS, sidecar.pod, {"status": {"phase": "Failed"}})
        sidecar.exit_version = int(marked["metadata"]["resourceVersion"])
        sidecar.lines = sidecar.log.read_text().splitlines()

    async def done(self) -> None:
        await asyncio.gather(*self.tasks)


@contextlib.asynccontextmanager
async def aggregator(api: EmulatorHandle, tmp_path: Path) -> AsyncIterator[Aggregator]:
    settings = KubeSettings(enabled=True, kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig", NS)), namespaces=(NS,))
    agg = Aggregator(
        AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir="", quorum_timeout=600),
        registry=CollectorRegistry(),
        kube_settings=settings,
    )
    await agg.start()
    try:
        yield agg
    finally:
        await agg.stop(grace=2)


async def run_incident(
    api: EmulatorHandle,
    tmp_path: Path,
    pods: list[dict[str, Any]],
    root: int,
    root_extra: dict[str, Any] | None = None,
    root_message: str | None = ROOT_ERROR,
    root_exit: int = 1,
    hold_timeouts: dict[int, str] | None = None,
) -> tuple[Aggregator, list[Sidecar]]:
    names = [with_sidecar(api, pod, i) for i, pod in enumerate(pods)]
    async with aggregator(api, tmp_path) as agg:
        sidecars = await fail_pods(api, agg, tmp_path, names, root, root_message, root_exit, root_extra, hold_timeouts)
    return agg, sidecars


async def fail_pods(
    api: EmulatorHandle,
    agg: Aggregator,
    tmp_path: Path,
    names: list[str],
    root: int,
    root_message: str | None = ROOT_ERROR,
    root_exit: int = 1,
    root_extra: dict[str, Any] | None = None,
    hold_timeouts: dict[int, str] | None = None,
) -> list[Sidecar]:
    """A sidecar per pod (`with_sidecar` first) streaming to `agg`; the root fails, a second later its peers
    with gloo's echo naming it, each in the kubelet's order. Every sidecar has exited on return."""
    target = f"127.0.0.1:{agg.port}"
    before = agg.metrics.connected._value.get()
    sidecars = [
        await start_sidecar(api, tmp_path, api.get(PODS, NS, n) or {}, target, (hold_timeouts or {}).get(i, "15"))
        for i, n in enumerate(names)
    ]
    try:
        await eventually(
            lambda: agg.metrics.connected._value.get() >= before + len(names), "every sidecar", within=GUARD
        )
        kubelet = Kubelet(api)
        kubelet.fail(sidecars[root], root_message, root_exit, root_extra)
        await asyncio.sleep(1.0)  # the root ends a second before its victims
        for i, sidecar in enumerate(sidecars):
            if i != root:
                kubelet.fail(sidecar, GLOO_PEER.format(ip=f"10.1.0.{10 + root}"))
        await kubelet.done()
    finally:
        await kill_remaining(sidecars)
    return sidecars


async def kill_remaining(sidecars: list[Sidecar]) -> None:
    """Kill and reap every sidecar process still running (a test's clean-up, whatever it ended with)."""
    for sidecar in sidecars:
        if sidecar.proc.returncode is None:
            sidecar.proc.kill()
            await sidecar.proc.wait()


def says(log: Path, text: str) -> bool:
    return text in log.read_text()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
