"""The sidecar's capture: a real worker's control plane, real py-spy, Flight Recorder files, and the bounds."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.common import HANG_GUARD, free_port

from podmortem.core.flightrecorder import FRSummary
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar import capture
from podmortem.sidecar.capture import Capturer

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "flightrecorder"


def _start(cmd: list[str], env: dict[str, str], ready: str, log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    # Its own process group, so that `_stop` ends a forked child too (a DataLoader worker's stand-in).
    proc = subprocess.Popen(
        cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + HANG_GUARD * 2
    while ready not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{cmd} never got ready:\n{log.read_text(errors='replace')}")
        time.sleep(0.05)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A real torch worker under `worker_main()`, its control plane on capture/worker-3.sock, stuck."""
    cap = tmp_path / "capture"
    cap.mkdir()
    env = {
        "TORCH_WORKER_SERVER_SOCKET": str(cap / "worker-3.sock"),
        "TORCH_FR_BUFFER_SIZE": "64",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "CP_COLLECTIVES": "2",
    }
    script = ROOT / "tests" / "support" / "control_plane_worker.py"
    proc = _start([sys.executable, str(script)], env, "ready", tmp_path / "worker.log")
    try:
        yield cap, proc
    finally:
        _stop(proc)


@pytest.mark.torch
async def test_a_real_worker_answers_with_its_stack_and_flight_recorder(
    worker: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    cap, _ = worker
    event = await Capturer(cap, "ns/pod").answer(wire.capture_request_to_pb("req-1", "stall", 5.0))
    assert event is not None and event.id == "ns/pod/capture/req-1"
    c = event.capture
    assert (c.request_id, c.trigger, c.note) == ("req-1", "stall", "")
    (w,) = c.workers
    assert (w.path, w.global_rank, w.note) == ("control_plane", 3, "")
    assert "stuck_in_user_code" in w.stack and "control_plane_worker.py" in w.stack
    summary = FRSummary.from_json(w.flight_recorder)
    assert summary.rank == 3 and summary.source == "json"
    assert [s.last_completed for s in summary.pg_status.values()] == [2]
    wire.check_capture(c)


@pytest.mark.torch
async def test_a_request_is_answered_once_and_captures_are_counted(
    worker: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    cap, _ = worker
    capturer = Capturer(cap, "ns/pod", max_captures=1)
    first = await capturer.answer(wire.capture_request_to_pb("a", "first_timeout"))
    assert first is not None and len(first.capture.workers) == 1
    assert await capturer.answer(wire.capture_request_to_pb("a", "first_timeout")) is None
    over = await capturer.answer(wire.capture_request_to_pb("b", "stall"))
    assert over is not None and not over.capture.workers and "capture limit reached" in over.capture.note
    capturer.new_attempt()
    again = await capturer.answer(wire.capture_request_to_pb("c", "stall"))
    assert again is not None and len(again.capture.workers) == 1


def _sleeper(tmp_path: Path, name: str, env: dict[str, str], child: bool = False) -> subprocess.Popen[bytes]:
    """A plain python process stopped in `waiting_here` (and, with `child`, a forked child like a DataLoader's)."""
    code = (
        "import os, time\n"
        "def waiting_here():\n"
        "    time.sleep(3600)\n"
        f"if {child!r} and os.fork() == 0:\n"
        "    waiting_here()\n"
        "print('ready', flush=True)\n"
        "waiting_here()\n"
    )
    return _start([sys.executable, "-c", code], env, "ready", tmp_path / f"{name}.log")


async def test_py_spy_dumps_this_pods_worker_processes_only(tmp_path: Path) -> None:
    if capture.find_pyspy() is None:
        pytest.fail("py-spy is a dependency: its binary must be installed beside this Python")
    cap = tmp_path / "capture"
    cap.mkdir()
    mine = _sleeper(tmp_path, "mine", {"RANK": "5", "LOCAL_RANK": "1", "PODMORTEM_CAPTURE_DIR": str(cap)}, child=True)
    other = _sleeper(tmp_path, "other", {"RANK": "6", "LOCAL_RANK": "0", "PODMORTEM_CAPTURE_DIR": str(tmp_path)})
    try:
        c = await Capturer(cap, "ns/pod", pyspy=True).capture("r", "stall", 10.0)
    finally:
        _stop(mine)
        _stop(other)
    (w,) = c.workers  # not the other pod's worker, not the forked child
    assert (w.path, w.global_rank, w.local_rank, w.pid) == ("py_spy", 5, 1, mine.pid)
    assert "waiting_here" in w.stack, w.note
    assert c.note == ""


async def test_without_any_path_the_capture_says_so(tmp_path: Path) -> None:
    c = await Capturer(tmp_path, "ns/pod").capture("r", "stall", 5.0)
    assert not c.workers
    assert c.note == f"no capture path: no control-plane socket in {tmp_path}, py-spy off"
    assert "no capture dir" in (await Capturer(None, "ns/pod").capture("r", "stall", 5.0)).note


def test_flight_recorder_files_are_summarised_once_each(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "fr-2.pkl", tmp_path / "fr-2")  # written by torch's _dump_fr_trace
    capturer = Capturer(tmp_path, "ns/pod")
    event = asyncio.run(capturer.teardown())
    assert event is not None and event.id.startswith("ns/pod/capture/teardown/")
    c = event.capture
    assert (c.request_id, c.trigger) == ("", "teardown")
    (w,) = c.workers
    assert (w.path, w.global_rank, w.note, w.stack) == ("fr_file", 2, "", "")
    summary = FRSummary.from_json(w.flight_recorder)
    assert summary.source == "pickle" and summary.rank == 2 and summary.entries
    assert asyncio.run(capturer.teardown()) is None  # sent already
    os.utime(tmp_path / "fr-2", ns=(1, 1))  # a new version of the file goes again
    assert asyncio.run(capturer.teardown()) is not None


async def test_dump_files_of_a_capture_cut_at_its_budget_go_in_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long dump read (a big file, a slow disk) outlasts the request's budget. The files read before it in
    # that capture were never sent: they must not count as sent. The slow read is made here by holding the
    # second file's read until the capture was cut (a real 8 MiB dump takes ~5 s: bench/fr_memory.py).
    shutil.copy(FIXTURES / "fr-1.pkl", tmp_path / "fr-1")
    shutil.copy(FIXTURES / "fr-2.pkl", tmp_path / "fr-2")
    cut = threading.Event()
    real = capture._fr_file

    def slow(path: Path, rank: int, size: int) -> pb.WorkerCapture:
        if rank == 2:
            cut.wait(HANG_GUARD)
        return real(path, rank, size)

    monkeypatch.setattr(capture, "_fr_file", slow)
    capturer = Capturer(tmp_path, "ns/pod")
    c = await capturer.capture("r", "stall", 0.3)
    cut.set()  # the held read ends (in its thread, which the loop's executor joins at the end)
    assert not c.workers and c.note.startswith("capture cut at its 0.3 s budget")
    event = await capturer.teardown()
    assert event is not None
    assert sorted(w.global_rank for w in event.capture.workers if w.flight_recorder) == [1, 2]


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {_Evil.marker}",))

    marker = ""


def test_a_malicious_pickle_is_refused_and_reported_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    _Evil.marker = str(marker)
    (tmp_path / "fr-1").write_bytes(pickle.dumps({"entries": [_Evil()]}))
    event = asyncio.run(Capturer(tmp_path, "ns/pod").teardown())
    assert event is not None
    (w,) = event.capture.workers
    assert (w.path, w.global_rank, w.flight_recorder) == ("fr_file", 1, "")
    assert w.note.startswith("refused fr-1:") and "system" in w.note
    assert not marker.exists()


def test_truncated_and_oversized_dumps_are_noted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = (FIXTURES / "fr-0.pkl").read_bytes()
    (tmp_path / "fr-0").write_bytes(data[: len(data) // 2])
    (tmp_path / "fr-1").write_bytes(b"\x80" * 4096)
    monkeypatch.setattr(capture, "FR_FILE_MAX_BYTES", 2048)
    event = asyncio.run(Capturer(tmp_path, "ns/pod").teardown())
    assert event is not None
    notes = {w.global_rank: w.note for w in event.capture.workers}
    assert notes[0].startswith("refused fr-0:")
    assert notes[1] == "fr-1 is 4096 bytes, over the 0 MiB read bound: not read"


def test_a_dump_file_above_2_mib_is_summarised(tmp_path: Path) -> None:
    # A bigger ring (TORCH_FR_BUFFER_SIZE) or deep frames: streamed from the file, summarised, not refused.
    rows = [
        {"pg_id": 0, "collective_seq_id": i, "profiling_name": "nccl:all_reduce", "thread_name": f"{i:08}" * 128}
        for i in range(1, 3001)
    ]
    (tmp_path / "fr-5").write_bytes(pickle.dumps({"version": "2.10", "pg_status": {}, "entries": rows}, protocol=2))
    assert (tmp_path / "fr-5").stat().st_size > 3 << 20
    event = asyncio.run(Capturer(tmp_path, "ns/pod").teardown())
    assert event is not None
    (w,) = event.capture.workers
    assert (w.path, w.global_rank, w.note) == ("fr_file", 5, "")
    summary = FRSummary.from_json(w.flight_recorder)
    assert summary.entries[-1].seq == 3000 and "kept the last 64 of 3000 entries" in summary.note


def test_the_file_bound_is_the_readers_own() -> None:
    from podmortem.core.flightrecorder import MAX_DUMP_BYTES

    assert capture.FR_FILE_MAX_BYTES == MAX_DUMP_BYTES


async def _serve(path: Path, answer: bytes | None) -> asyncio.Server:
    """A stand-in control plane: answers every request with `answer`, or never (None)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        if answer is None:
            await asyncio.sleep(3600)
            return
        writer.write(answer)
        await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(handle, str(path))


async def test_a_worker_that_does_not_answer_is_cut_off_and_says_so(tmp_path: Path) -> None:
    server = await _serve(tmp_path / "worker-4.sock", None)
    try:
        c = await Capturer(tmp_path, "ns/pod", worker_timeout=0.3).capture("r", "stall", 5.0)
    finally:
        server.close()
    (w,) = c.workers
    assert (w.path, w.global_rank, w.stack) == ("control_plane", 4, "")
    assert w.note == "timed out after 0.3 s"


async def test_a_huge_stack_keeps_its_tail_and_a_bad_answer_is_noted(tmp_path: Path) -> None:
    stack = b"x" * 100_000 + b'\n  File "train.py", line 9 in innermost\n'
    ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    ok += b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (stack[:50_000], stack[50_000:])) + b"0\r\n\r\n"
    server = await _serve(tmp_path / "worker-0.sock", ok)
    try:
        c = await Capturer(tmp_path, "ns/pod").capture("r", "stall", 5.0)
    finally:
        server.close()
    (w,) = c.workers
    assert w.stack.endswith("line 9 in innermost\n") and len(w.stack) == wire.STACK_LIMIT
    assert "stack cut at 32 KiB (tail kept)" in w.note
    assert "fr_trace_json: refused" in w.note  # the same answer is no Flight Recorder JSON
    wire.check_capture(c)


def test_find_pyspy_looks_on_path_then_beside_python(tmp_path: Path) -> None:
    fake = tmp_path / "py-spy"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert capture.find_pyspy(str(tmp_path)) == str(fake)
    assert capture.find_pyspy("") in (None, str(Path(sys.executable).parent / "py-spy"))


def test_a_capture_request_event_is_what_the_stream_carries() -> None:
    msg = pb.AggregatorMessage(capture_request=wire.capture_request_to_pb("x", "stall"))
    assert msg.WhichOneof("body") == "capture_request"


def test_at_most_one_captures_worth_of_dump_files_is_read_at_a_time(tmp_path: Path) -> None:
    data = (FIXTURES / "fr-0.pkl").read_bytes()
    for rank in range(wire.MAX_WORKERS + 6):
        (tmp_path / f"fr-{rank}").write_bytes(data)
    capturer = Capturer(tmp_path, "ns/pod")
    first = asyncio.run(capturer.teardown())
    second = asyncio.run(capturer.teardown())
    assert first is not None and second is not None
    assert len(first.capture.workers) == wire.MAX_WORKERS and len(second.capture.workers) == 6
    ranks = {w.global_rank for w in [*first.capture.workers, *second.capture.workers]}
    assert ranks == set(range(wire.MAX_WORKERS + 6))
