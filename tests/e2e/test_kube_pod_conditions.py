"""Pod conditions in the kubelet's order: real sidecar processes hold their failed pods, the real aggregator
writes each pod's `podmortem.io/*` condition on the Kubernetes emulator before that sidecar exits.

The kubelet's order with native sidecars, played here per failing pod: the training container writes its
error file and exits; the kubelet SIGTERMs the native sidecar at once; the pod status that shows the
container's end reaches the API up to a second later (0.5 s here), the pod still Running (its sidecar
runs); only once the sidecar has exited does the pod turn Failed, the moment a Job controller acts on it.
The order is proved on the emulator's logical clock (resourceVersion): the write that added the
condition comes before the write the test makes as it sees the sidecar exit. Times of both are printed.

Cover: an indexed Job and a JobSet (two replicated Jobs) failing in user code (the root PermanentFailure,
every victim Victim), a PyTorchJob whose root was preempted by its kubelet (RetryableFailure), an older
sidecar that does not hold (its condition comes at its end), and an aggregator the sidecars cannot reach
(each exits at its hold timeout, and no condition is written late).
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
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from support.kube_emulator import (
    JOBS,
    NS,
    PODS,
    EmulatorHandle,
    eventually,
    indexed_job,
    indexed_pod,
    seed_jobset,
    seed_pytorchjob,
)

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.kube.client import KubeSettings
from podmortem.aggregator.running import Aggregator

ROOT_ERROR = "ValueError: label 7 out of range"
GLOO_PEER = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [{ip}]:29500"
STATUS_LAG = 0.5  # the kubelet's status reaches the API this long after the sidecar's SIGTERM
TYPES = ("podmortem.io/Victim", "podmortem.io/PermanentFailure", "podmortem.io/RetryableFailure")
GUARD = 60.0


def error_doc(message: str) -> str:
    ts = str(int(time.time()))
    return json.dumps({"message": {"message": message, "extraInfo": {"py_callstack": "tb", "timestamp": ts}}})


def with_sidecar(api: EmulatorHandle, pod: dict[str, Any], index: int) -> str:
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
                "podIP": f"10.1.0.{10 + index}",
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
        sidecar.sigterm_at = time.monotonic()
        sidecar.proc.terminate()  # the training container is gone: SIGTERM to the native sidecar
        await asyncio.sleep(STATUS_LAG)
        status = ended(sidecar.container, exit_code, message or "")
        status["status"].update(extra)
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
    root_ip = f"10.1.0.{10 + root}"
    async with aggregator(api, tmp_path) as agg:
        target = f"127.0.0.1:{agg.port}"
        sidecars = [
            await start_sidecar(api, tmp_path, api.get(PODS, NS, n) or {}, target, (hold_timeouts or {}).get(i, "15"))
            for i, n in enumerate(names)
        ]
        try:
            await eventually(lambda: agg.metrics.connected._value.get() == len(pods), "every sidecar", limit=GUARD)
            kubelet = Kubelet(api)
            kubelet.fail(sidecars[root], root_message, root_exit, root_extra)
            await asyncio.sleep(1.0)  # the root ends a second before its victims
            for i, sidecar in enumerate(sidecars):
                if i != root:
                    kubelet.fail(sidecar, GLOO_PEER.format(ip=root_ip))
            await kubelet.done()
        finally:
            for sidecar in sidecars:
                if sidecar.proc.returncode is None:
                    sidecar.proc.kill()
                    await sidecar.proc.wait()
    return agg, sidecars


def check_order(api: EmulatorHandle, sidecars: list[Sidecar]) -> dict[str, dict[str, Any]]:
    """Each pod's condition, proved written before its sidecar exited; prints both times."""
    out = {}
    for s in sidecars:
        assert s.code == 0, "\n".join(s.lines)
        condition = our_condition(api.get(PODS, NS, s.pod))
        assert condition is not None, (s.pod, "\n".join(s.lines))
        version = condition_version(api, s.pod)
        assert version is not None and version < s.exit_version, (s.pod, version, s.exit_version)
        print(
            f"{s.pod}: {condition['type']} at resourceVersion {version} ({condition['lastTransitionTime']}); "
            f"sidecar exited {s.exited_at - s.sigterm_at:.2f}s after its SIGTERM, marked at {s.exit_version}"
        )
        out[s.pod] = condition
    return out


async def test_indexed_job_user_code_root_is_permanent_and_victims_are_victims(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    job = kube_api.put(JOBS, indexed_job("train", 3))
    pods = [kube_api.put(PODS, indexed_pod(job, i)) for i in range(3)]
    agg, sidecars = await run_incident(kube_api, tmp_path, pods, root=1)
    conditions = check_order(kube_api, sidecars)
    root = sidecars[1].pod
    assert conditions[root]["type"] == "podmortem.io/PermanentFailure"
    assert conditions[root]["reason"] == "UserCode" and root in conditions[root]["message"]
    for s in sidecars:
        if s.pod != root:
            assert conditions[s.pod]["type"] == "podmortem.io/Victim"
            assert conditions[s.pod]["reason"] == "Victim"
            assert f"root pod {root}" in conditions[s.pod]["message"] and "user_code" in conditions[s.pod]["message"]
    assert agg.metrics.retry_budget_saved._value.get() == 2
    assert agg.metrics.pod_conditions.labels(type="PermanentFailure")._value.get() == 1


async def test_jobset_of_two_replicated_jobs(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    _, pods = seed_jobset(kube_api, "llm", [("leader", 1, 1), ("workers", 1, 2)])
    _, sidecars = await run_incident(kube_api, tmp_path, pods, root=2)
    conditions = check_order(kube_api, sidecars)
    assert [conditions[s.pod]["type"].rsplit("/", 1)[1] for s in sidecars] == ["Victim", "Victim", "PermanentFailure"]


async def test_pytorchjob_preempted_root_is_retryable(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    # The kubelet preempts the pod to admit a critical one: DisruptionTarget, SIGTERM (exit 143), no deletion.
    _, names = seed_pytorchjob(kube_api, workers=3)
    pods = [kube_api.get(PODS, NS, n) or {} for n in names]
    preempted = {
        "conditions": [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": "Preempted in order to admit critical pod",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ]
    }
    _, sidecars = await run_incident(
        kube_api, tmp_path, pods, root=0, root_extra=preempted, root_message=None, root_exit=143
    )
    conditions = check_order(kube_api, sidecars)
    assert conditions[sidecars[0].pod]["type"] == "podmortem.io/RetryableFailure"
    assert conditions[sidecars[0].pod]["reason"] == "Preemption"
    assert {conditions[s.pod]["type"] for s in sidecars[1:]} == {"podmortem.io/Victim"}


async def test_an_older_sidecar_that_does_not_hold_gets_its_condition_at_its_end(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # A sidecar that does not hold registers as one from before the hold did: Register.holds false.
    job = kube_api.put(JOBS, indexed_job("train", 2))
    pods = [kube_api.put(PODS, indexed_pod(job, i)) for i in range(2)]
    _, sidecars = await run_incident(kube_api, tmp_path, pods, root=0, hold_timeouts={1: "0"})
    old = sidecars[1]
    assert old.code == 0
    assert not any("holding the pod" in line for line in old.lines)
    await eventually(lambda: our_condition(kube_api.get(PODS, NS, old.pod)) is not None, "its condition", GUARD)
    assert (our_condition(kube_api.get(PODS, NS, old.pod)) or {})["type"] == "podmortem.io/Victim"
    check_order(kube_api, sidecars[:1])  # the one that held: before its exit, as ever


async def test_unreachable_aggregator_no_condition_is_written_late(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    # The sidecars cannot reach the aggregator (a port nobody listens on); the aggregator itself watches the
    # pods, whose termination messages say enough to decide (a ValueError, a peer closed): it could write.
    job = kube_api.put(JOBS, indexed_job("train", 2))
    pods = [kube_api.put(PODS, indexed_pod(job, i)) for i in range(2)]
    names = [with_sidecar(kube_api, pod, i) for i, pod in enumerate(pods)]
    async with aggregator(kube_api, tmp_path) as agg:
        nobody = f"127.0.0.1:{_free_port()}"
        sidecars = [
            await start_sidecar(kube_api, tmp_path, kube_api.get(PODS, NS, n) or {}, nobody, "2") for n in names
        ]
        for s in sidecars:  # started (signal handlers in place) and trying to reach the aggregator
            await eventually(partial(_says, s.log, "opening stream 1"), f"{s.pod} started", GUARD)
        kubelet = Kubelet(kube_api)
        kubelet.fail(sidecars[1], ROOT_ERROR)
        await asyncio.sleep(1.0)
        kubelet.fail(sidecars[0], GLOO_PEER.format(ip="10.1.0.11"))
        await kubelet.done()
        # The pods are terminal now; the aggregator sees them end without a hold: never a condition.
        holds = agg.holds
        assert holds is not None
        await eventually(
            lambda: all((p := holds._pods.get(k)) is not None and p.outcome is not None for k in _keys(agg, names)),
            "the aggregator saw both pods end",
            GUARD,
        )
        await asyncio.sleep(1.0)  # room for a late write, had one been made
    for s in sidecars:
        assert s.code == 0, "\n".join(s.lines)
        # Held until 2 s after its SIGTERM, the flush of its unacknowledged events included, then gone.
        assert any("no confirmation within" in line for line in s.lines), "\n".join(s.lines)
        assert any("event(s) the aggregator never acknowledged" in line for line in s.lines)
        assert our_condition(kube_api.get(PODS, NS, s.pod)) is None
    assert agg.metrics.pod_conditions.labels(type="Victim")._value.get() == 0


def _says(log: Path, text: str) -> bool:
    return text in log.read_text()


def _keys(agg: Aggregator, names: list[str]) -> list[Any]:
    from podmortem.aggregator.incidents import MemberKey

    return [MemberKey((NS, "train", ""), n) for n in names]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
