"""A training container restarted in place (restartPolicy OnFailure) and no attempt given: each run is its
own job attempt, so a second failure never rewrites the first one's verdict, and the first run's error
file, left in the shared volume, is never sent as the new run's.

A real sidecar (`running.serve`) and a real aggregator speak real gRPC on 127.0.0.1; the test writes the
pod's status file the way the kubelet reports a container that fails, restarts and fails again (the
local harness's kubelet does the same for the demo), and the error files the way torch writes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from support.common import HANG_GUARD, eventually
from support.fake_collector import FakeCollector, serving

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.running import Aggregator
from podmortem.k8s.backoff import Backoff
from podmortem.sidecar import config, running
from podmortem.sidecar.config import Settings
from podmortem.sidecar.outbox import Outbox

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
