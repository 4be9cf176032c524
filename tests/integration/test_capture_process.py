"""A real sidecar process answers the aggregator's capture requests and reports its pod quiet or active.

The sidecar runs as `python -m podmortem.sidecar.running` against the test aggregator of
tests/support/fake_collector.py over real gRPC on 127.0.0.1; the workers are real processes (a python
process stopped in a function, dumped by the real py-spy) and a Flight Recorder dump torch wrote.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from support.common import HANG_GUARD, eventually
from support.fake_collector import FakeCollector, serving

from podmortem.core.flightrecorder import FRSummary
from podmortem.protocol.v1 import collector_pb2 as pb

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flightrecorder"


@asynccontextmanager
async def sidecar(tmp_path: Path, target: str, **env: str) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "podmortem.sidecar.running",
        env={
            **os.environ,
            "POD_NAME": "job-worker-1",
            "POD_NAMESPACE": "ns",
            "POD_UID": "u1",
            "TORCHELASTIC_ERROR_FILE": str(tmp_path / "error.json"),
            "PODMORTEM_AGGREGATOR": target,
            "PODMORTEM_POD_SOURCE": "none",
            "PODMORTEM_HOLD_TIMEOUT": "0",
            **env,
        },
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _stopped(proc: asyncio.subprocess.Process) -> str:
    proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(HANG_GUARD):
        _, stderr = await proc.communicate()
    log = stderr.decode()
    assert proc.returncode == 0, log
    return log


async def test_a_capture_request_is_answered_with_every_path_there(tmp_path: Path) -> None:
    cap = tmp_path / "capture"
    cap.mkdir()
    shutil.copy(FIXTURES / "fr-2.pkl", cap / "fr-2")  # as NCCL leaves it on a timeout (written by torch)
    code = "import time\ndef stuck_in_user_code():\n    time.sleep(3600)\nprint('ready', flush=True)\n"
    code += "stuck_in_user_code()\n"
    worker = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "RANK": "3", "LOCAL_RANK": "1", "PODMORTEM_CAPTURE_DIR": str(cap)},
        stdout=subprocess.PIPE,
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline() == b"ready\n"
        async with (
            serving(FakeCollector(captures=True)) as served,
            sidecar(tmp_path, served.target, PODMORTEM_CAPTURE_DIR=str(cap), PODMORTEM_PYSPY="1") as proc,
        ):
            fake = served.collector
            assert await eventually(lambda: fake.registers and fake.request_capture("req-7", "stall", 8.0))
            assert fake.registers[0].captures
            await eventually(lambda: fake.captures_received, "a capture")
            log = await _stopped(proc)
    finally:
        worker.kill()
        worker.wait()
    (c,) = fake.captures_received  # the FR file went with the request: no teardown capture repeats it
    (event,) = [e for e in fake.events if e.WhichOneof("payload") == "capture"]
    assert event.id == "u1/capture/req-7"
    assert (c.request_id, c.trigger, c.note) == ("req-7", "stall", "")
    by_path = {w.path: w for w in c.workers}
    assert set(by_path) == {"py_spy", "fr_file"}
    spy = by_path["py_spy"]
    assert (spy.global_rank, spy.local_rank, spy.pid) == (3, 1, worker.pid)
    assert "stuck_in_user_code" in spy.stack
    fr = FRSummary.from_json(by_path["fr_file"].flight_recorder)
    assert fr.rank == 2 and fr.source == "pickle"
    assert "the aggregator asks for a capture (stall, request req-7)" in log


async def test_a_capture_is_answered_between_two_releases_of_memory(tmp_path: Path) -> None:
    """Reading dumps touches code and memory the sidecar at rest does not use: it gives back what the rest
    since the last release touched before the capture (its peak starts lower) and what the capture
    touched after it (`residency.release`; `bench/capture_cost.py` measures both)."""
    cap = tmp_path / "capture"
    cap.mkdir()
    shutil.copy(FIXTURES / "fr-2.pkl", cap / "fr-2")
    async with (
        serving(FakeCollector(captures=True)) as served,
        sidecar(tmp_path, served.target, PODMORTEM_CAPTURE_DIR=str(cap), PODMORTEM_LOG_LEVEL="DEBUG") as proc,
    ):
        fake = served.collector
        assert await eventually(lambda: fake.registers and fake.request_capture("req-1", "stall", 8.0))
        await eventually(lambda: fake.captures_received, "a capture")
        log = await _stopped(proc)
    (c,) = fake.captures_received
    assert [(w.path, w.global_rank) for w in c.workers] == [("fr_file", 2)]
    asked = log.index("the aggregator asks for a capture (stall, request req-1)")
    assert log[:asked].count("released ") >= 1, log  # once the imports were done
    assert log[asked:].count("released ") >= 2, log  # before and after the capture


async def test_flight_recorder_files_go_at_teardown_to_an_aggregator_that_takes_captures(tmp_path: Path) -> None:
    cap = tmp_path / "capture"
    cap.mkdir()
    for taking in (True, False):
        async with (
            serving(FakeCollector(captures=taking)) as served,
            sidecar(tmp_path, served.target, PODMORTEM_CAPTURE_DIR=str(cap)) as proc,
        ):
            # A clock estimate follows the registration's answer: the sidecar knows what the aggregator takes.
            await eventually(lambda: served.collector.estimates)
            shutil.copy(FIXTURES / "fr-0.pkl", cap / "fr-0")  # the workers' dumps appear at their end
            log = await _stopped(proc)
        if taking:
            assert served.collector.captures_received, log
            (c,) = served.collector.captures_received
            assert (c.request_id, c.trigger) == ("", "teardown")
            assert [(w.path, w.global_rank) for w in c.workers] == [("fr_file", 0)]
            assert "found 1 Flight Recorder dump file(s)" in log
        else:
            assert not served.collector.captures_received  # an older aggregator: nothing it cannot read


async def test_a_silent_log_is_reported_quiet_once_then_active_again(tmp_path: Path) -> None:
    log_file = tmp_path / "train.log"
    log_file.write_text("step 1\n")
    async with (
        serving(FakeCollector(captures=True)) as served,
        sidecar(tmp_path, served.target, PODMORTEM_STALL_AFTER="1", PODMORTEM_LOG_FILE=str(log_file)) as proc,
    ):
        fake = served.collector

        def activities() -> list[pb.Activity]:
            return [e.activity for e in fake.events if e.WhichOneof("payload") == "activity"]

        await eventually(lambda: activities(), "quiet")
        with log_file.open("a") as f:
            f.write("step 2\n")
        await eventually(lambda: len(activities()) >= 2, "active again")
        log = await _stopped(proc)
    # Then quiet again, maybe at once: one second of silence is all this test's stall-after asks for.
    quiet, active, *again = activities()
    assert all(a.quiet != b.quiet for a, b in zip([active, *again], again, strict=False))
    assert quiet.quiet and quiet.quiet_seconds >= 1.0 and quiet.HasField("last_progress")
    assert not active.quiet and active.quiet_seconds == 0.0
    assert active.last_progress.ToNanoseconds() > quiet.last_progress.ToNanoseconds()
    assert "training container quiet" in log and "training container active again" in log
