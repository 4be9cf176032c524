"""The pod-status side of the sidecar: the local pod file source and the events a pod adds.

A training container restarted in place (restartPolicy OnFailure) and no attempt given: each run is its
own job attempt, so a second failure never rewrites the first one's verdict, and the first run's error
file, left in the shared volume, is never sent as the new run's.

A real sidecar (`running.serve`) and a real aggregator speak real gRPC on 127.0.0.1; the test writes the
pod's status file the way the kubelet reports a container that fails, restarts and fails again (the
local harness's kubelet does the same for the demo), and the error files the way torch writes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.common import HANG_GUARD, eventually
from support.fake_collector import FakeCollector, serving

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.running import Aggregator
from podmortem.core import podstatus
from podmortem.k8s.backoff import Backoff
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar import config, running
from podmortem.sidecar.config import Settings
from podmortem.sidecar.outbox import Outbox
from podmortem.sidecar.podsource import (
    LocalFilePodSource,
    PodReporter,
    PodSource,
    make_pod_source,
    read_log_tail,
)

UID = "0f4e4e6d-4bd6-41be-a5e4-4da901c2e623"


def running_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "job-worker-0",
            "namespace": "ns",
            "uid": UID,
            "labels": {
                "training.kubeflow.org/job-name": "job",
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": "0",
            },
            "ownerReferences": [{"kind": "PyTorchJob", "name": "job", "uid": "j", "controller": True}],
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "pytorch"}]},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.3",
            "containerStatuses": [
                {"name": "podmortem", "restartCount": 0, "state": {"running": {"startedAt": "2026-11-21T15:05:40Z"}}},
                {"name": "pytorch", "restartCount": 0, "state": {"running": {"startedAt": "2026-11-21T15:05:49Z"}}},
            ],
        },
    }


def terminated(pod: dict[str, Any], exit_code: int = 137, signal: int | None = 9) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["status"]["phase"] = "Failed"
    term: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": "OOMKilled",
        "startedAt": "2026-11-21T15:05:49Z",
        "finishedAt": "2026-11-21T15:06:12Z",
    }
    if signal is not None:
        term["signal"] = signal
    pod["status"]["containerStatuses"][1]["state"] = {"terminated": term}
    return pod


def preempted(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["deletionTimestamp"] = "2026-11-21T15:06:18Z"
    pod["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-21T15:06:12Z"},
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "lastTransitionTime": "2026-11-21T15:06:10Z",
        },
    ]
    return pod


def kinds(events: list[pb.Event]) -> list[str]:
    return [e.WhichOneof("payload") or "" for e in events]


async def test_reporter_turns_pod_versions_into_new_facts_only(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("".join(f"line {i}\n" for i in range(10_000)))
    sent: list[pb.Event] = []
    reporter = PodReporter(
        LocalFilePodSource(tmp_path / "pod.json"),
        sent.append,
        pod_name="job-worker-0",
        log_file=log,
        log_tail_bytes=1000,
    )
    assert await reporter.observe(running_pod()) == []
    events = await reporter.observe(terminated(running_pod()))
    # The log tail first: the aggregator may decide as soon as the termination arrives.
    assert kinds(events) == ["log_tail", "termination"]
    assert kinds(sent) == ["log_tail", "termination"]
    term = events[1].termination
    assert (term.exit_code, term.signal, term.reason, term.container) == (137, 9, "OOMKilled", "pytorch")
    assert events[1].id == f"{UID}/termination/0"
    tail = events[0].log_tail
    assert tail.truncated and tail.text.endswith(b"line 9999\n") and tail.text.startswith(b"line ")
    assert len(tail.text) <= 1000
    assert events[0].id == f"{UID}/log_tail/0"
    assert await reporter.observe(terminated(running_pod())) == []  # the same again: nothing new
    events = await reporter.observe(preempted(terminated(running_pod())))
    assert kinds(events) == ["condition", "deletion"]
    assert events[0].condition.reason == "PreemptionByScheduler"
    assert kinds(sent) == ["log_tail", "termination", "condition", "deletion"]


async def test_reporter_without_log_file_sends_no_tail(tmp_path: Path) -> None:
    reporter = PodReporter(LocalFilePodSource(tmp_path / "pod.json"), lambda e: None)
    assert kinds(await reporter.observe(terminated(running_pod(), exit_code=1, signal=None))) == ["termination"]


async def test_reporter_warns_about_another_pods_status(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    reporter = PodReporter(LocalFilePodSource(tmp_path / "p.json"), lambda e: None, pod_name="someone-else")
    await reporter.observe(running_pod())
    await reporter.observe(running_pod())
    assert caplog.text.count("but this sidecar is for 'someone-else'") == 1


def test_read_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    assert read_log_tail(log, 100) is None
    log.write_bytes(b"short\n")
    tail = read_log_tail(log, 100)
    assert tail is not None and (tail.text, tail.truncated) == (b"short\n", False)
    log.write_bytes(b"a" * 50 + b"\n" + b"\xff\xfe end\n")
    tail = read_log_tail(log, 20)
    assert tail is not None and tail.truncated and tail.text == "\ufffd\ufffd end\n".encode()  # valid UTF-8 on the wire
    assert read_log_tail(log, 0) is None


async def test_local_file_source_yields_complete_new_versions(tmp_path: Path) -> None:
    path = tmp_path / "status" / "pod.json"  # the directory, too, appears late
    source = LocalFilePodSource(path, tick_ms=100)
    assert await source.read() is None
    got: list[dict[str, Any]] = []
    arrived = asyncio.Event()

    async def consume() -> None:
        async for pod in source.pods():
            got.append(pod)
            arrived.set()

    task = asyncio.create_task(consume())
    try:
        path.parent.mkdir()
        data = json.dumps(running_pod())
        path.write_text(data[: len(data) // 2])  # a partial write is skipped
        path.write_text(data)
        async with asyncio.timeout(HANG_GUARD):
            while not got:
                arrived.clear()
                await arrived.wait()
        path.write_text(data)  # unchanged content: not yielded again
        path.write_text(json.dumps(terminated(running_pod())))
        async with asyncio.timeout(HANG_GUARD):
            while len(got) < 2:
                arrived.clear()
                await arrived.wait()
        assert [p["status"]["phase"] for p in got] == ["Running", "Failed"]
        assert await source.read() == terminated(running_pod())
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_local_file_source_ignores_non_objects(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "pod.json"
    path.write_text("[1, 2]")
    source = LocalFilePodSource(path)
    assert await source.read() is None
    assert "does not hold a JSON object" in caplog.text


async def test_local_file_source_refuses_json_nested_too_deeply(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # json recurses once per level: a pod file of 5,000 '[' raised RecursionError out of the source.
    path = tmp_path / "pod.json"
    path.write_text("[" * 5000)
    source = LocalFilePodSource(path)
    assert await source.read() is None
    assert "nested too deeply" in caplog.text


class MemorySource:
    """A drop-in PodSource (what podwatch.py implements against the API)."""

    def __init__(self, versions: list[dict[str, Any]]) -> None:
        self.versions = versions

    async def pods(self) -> AsyncIterator[dict[str, Any]]:
        for pod in self.versions:
            yield pod

    async def read(self) -> dict[str, Any] | None:
        return self.versions[-1] if self.versions else None


async def test_any_pod_source_plugs_into_the_reporter() -> None:
    source = MemorySource([running_pod(), terminated(running_pod()), preempted(terminated(running_pod()))])
    assert isinstance(source, PodSource)
    assert isinstance(LocalFilePodSource(Path("x")), PodSource)
    sent: list[pb.Event] = []
    reporter = PodReporter(source, sent.append)
    await reporter.run()
    assert kinds(sent) == ["termination", "condition", "deletion"]
    assert await reporter.refresh() == []  # the last look finds nothing new


ENV = {"POD_NAME": "p", "POD_NAMESPACE": "n", "TORCHELASTIC_ERROR_FILE": "/e", "PODMORTEM_AGGREGATOR": "h:1"}


def test_make_pod_source() -> None:
    assert make_pod_source(config.from_env_and_args(ENV)) is None
    source = make_pod_source(config.from_env_and_args({**ENV, "PODMORTEM_POD_STATUS_FILE": "/run/pod.json"}))
    assert isinstance(source, LocalFilePodSource) and source.path == Path("/run/pod.json")


def test_in_a_pod_the_source_is_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from podmortem.sidecar.apiserver import OwnPod

    env = {**ENV, "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    settings = config.from_env_and_args(env)
    assert settings.pod_source == "api"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    source = make_pod_source(settings)
    assert isinstance(source, OwnPod) and isinstance(source, PodSource)
    assert (source.namespace, source.name) == ("n", "p")
    # A pod status file wins over the API; "none" switches pod status off.
    assert config.from_env_and_args({**env, "PODMORTEM_POD_STATUS_FILE": "/p.json"}).pod_source == "file"
    assert make_pod_source(config.from_env_and_args({**env, "PODMORTEM_POD_SOURCE": "none"})) is None


class LoggingSource(MemorySource):
    """A pod source that can fetch logs, as OwnPod does (the current run's, or the one before a restart)."""

    async def log_tail(self, container: str, limit_bytes: int, previous: bool = False) -> str:
        return f"{container}: {'the failed run' if previous else 'this run'}: last words\n"


async def test_log_tail_from_a_source_that_can_fetch_logs() -> None:
    sent: list[pb.Event] = []
    reporter = PodReporter(LoggingSource([terminated(running_pod())]), sent.append)
    await reporter.run()
    assert kinds(sent) == ["log_tail", "termination"]
    assert sent[0].log_tail.text == b"pytorch: this run: last words\n" and not sent[0].log_tail.truncated


def restarted(pod: dict[str, Any]) -> dict[str, Any]:
    """The training container failed, was restarted, and runs again: its end is in lastState."""
    pod = terminated(pod)
    status = pod["status"]["containerStatuses"][1]
    status["lastState"], status["restartCount"] = status["state"], 1
    status["state"] = {"running": {"startedAt": "2026-11-21T15:06:20Z"}}
    pod["status"]["phase"] = "Running"
    return pod


async def test_after_a_restart_the_failed_runs_log_is_read() -> None:
    sent: list[pb.Event] = []
    reporter = PodReporter(LoggingSource([restarted(running_pod())]), sent.append)
    await reporter.run()
    assert kinds(sent) == ["log_tail", "termination"]
    assert sent[0].log_tail.text == b"pytorch: the failed run: last words\n"


def test_the_container_that_failed_is_the_training_container_not_the_first_listed() -> None:
    pod = terminated(running_pod())
    statuses = pod["status"]["containerStatuses"]
    statuses.insert(0, {"name": "log-shipper", "restartCount": 0, "state": {"running": {}}})  # listed first
    snap = podstatus.snapshot(pod)
    assert snap.container == "pytorch" and snap.termination is not None and snap.termination.exit_code == 137
    # With nothing failed, the first container that is not podmortem's.
    assert podstatus.snapshot(running_pod()).container == "pytorch"


async def test_a_look_aside_does_not_hide_the_pod_from_the_watch(tmp_path: Path) -> None:
    # A sidecar told no job name reads its pod once at start-up (its labels say the job); the watch must
    # still yield that first version, or the reporter never sees the pod until it changes.
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(running_pod()))
    source = LocalFilePodSource(path, tick_ms=50)
    assert await source.read() == running_pod()
    pods = source.pods()
    try:
        first = await asyncio.wait_for(anext(pods), HANG_GUARD)
    finally:
        await pods.aclose()  # type: ignore[attr-defined]
    assert first == running_pod()


T0 = time.time() - 600  # the first run's start (pod clock)
FAST = Backoff(initial=0.01, maximum=0.05)


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def pod(restarts: int, started: float, exit_code: int | None, last_exit: int | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": rfc3339(started)}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": rfc3339(started)}}
    status: dict[str, Any] = {"name": "pytorch", "restartCount": restarts, "state": state}
    if last_exit is not None:
        status["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error"}}
    return {
        "metadata": {"name": "job-worker-0", "namespace": "ns", "uid": "u0"},
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running", "containerStatuses": [status]},
    }


def write_json(path: Path, doc: object, mtime: float | None = None) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    if mtime is not None:
        os.utime(tmp, (mtime, mtime))
    tmp.replace(path)


def error(message: str) -> dict[str, Any]:
    return {"message": {"message": message, "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "0"}}}


def settings_for(tmp_path: Path, target: str) -> Settings:
    env = {
        "POD_NAME": "job-worker-0",
        "POD_NAMESPACE": "ns",
        "POD_UID": "u0",
        "TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json"),
        "PODMORTEM_AGGREGATOR": target,
        "PODMORTEM_JOB_NAME": "job",
        "PET_NNODES": "1",
        "PODMORTEM_POD_STATUS_FILE": str(tmp_path / "pod.json"),
        "PODMORTEM_FLUSH_TIMEOUT": "5",
    }
    return config.from_env_and_args(env)


@contextlib.asynccontextmanager
async def sidecar(settings: Settings) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    task = asyncio.create_task(
        running.serve(settings, stop=stop, outbox=Outbox(), backoff=FAST, install_signal_handlers=False)
    )
    try:
        yield stop
        stop.set()
        assert await asyncio.wait_for(task, HANG_GUARD) == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def verdict(directory: Path, name: str) -> dict[str, Any] | None:
    path = directory / name
    return json.loads(path.read_text()) if path.exists() else None


async def test_a_restarted_containers_failure_is_a_new_incident_not_a_revision(tmp_path: Path) -> None:
    verdicts = tmp_path / "verdicts"
    agg = Aggregator(
        AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir=str(verdicts), quorum_timeout=3600),
        registry=CollectorRegistry(),
    )
    await agg.start()
    status, err = tmp_path / "pod.json", tmp_path / "error.json"
    try:
        write_json(status, pod(0, T0, None))
        async with sidecar(settings_for(tmp_path, f"127.0.0.1:{agg.port}")):
            # Run 0 fails with a KeyError.
            write_json(err, error("KeyError: 'label'"), mtime=T0 + 10)
            write_json(status, pod(0, T0, 1))
            await eventually(lambda: (verdict(verdicts, "ns_job.json") or {}).get("final"))
            # The kubelet restarts the container (run 1), which fails with a CUDA OOM.
            write_json(status, pod(1, T0 + 60, None, last_exit=1))
            await eventually(lambda: agg.book.incident(("ns", "job", "r1")) is not None)
            write_json(err, error("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"))
            write_json(status, pod(1, T0 + 60, 1, last_exit=1))
            await eventually(lambda: (verdict(verdicts, "ns_job_r1.json") or {}).get("final"))
    finally:
        await agg.stop(grace=1)
    first, second = verdict(verdicts, "ns_job.json"), verdict(verdicts, "ns_job_r1.json")
    assert first is not None and second is not None
    assert first["revision"] == 1 and "KeyError" in first["verdict"]["message"]
    assert first["incident"]["attempt"] == "" and second["incident"]["attempt"] == "r1"
    assert second["verdict"]["category"] == "gpu_oom" and "KeyError" not in json.dumps(second["verdict"])
    assert second["verdict"]["node"] == "node-a"  # from the pod's spec.nodeName: none was given


async def test_a_restarted_sidecar_does_not_resend_the_previous_runs_error_file(tmp_path: Path) -> None:
    # The container is in its second run; the first run's error file is still in the shared volume.
    write_json(tmp_path / "error.json", error("KeyError: 'label'"), mtime=T0 + 10)
    write_json(tmp_path / "pod.json", pod(1, T0 + 60, None, last_exit=1))
    async with serving(FakeCollector()) as served:
        async with sidecar(settings_for(tmp_path, served.target)):
            await eventually(lambda: bool(served.collector.registers), "a registration")
        # The stop path took its last look at the error file and the pod, and flushed.
    assert [r.attempt for r in served.collector.registers] == ["r1"]
    assert served.collector.registers[0].node == "node-a"
    kinds = [e.WhichOneof("payload") for e in served.collector.events]
    assert "error_file" not in kinds and "termination" not in kinds, kinds  # both are run 0's, not run 1's
