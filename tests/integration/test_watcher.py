"""The error-file watcher against real files: late files and directories, rewrites, partial writes, garbage.

Waiting is by outcome (an event arrives), bounded only by a generous hang guard; nothing asserts on
how long anything took.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.common import eventually

from podmortem.core.errorfile import read_error_file
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar.watcher import FORCE_POLLING_ENV, ErrorFileWatcher, force_polling_from_env


def record(message: str, ts: int = 1795271119) -> dict[str, object]:
    return {"message": {"message": message, "extraInfo": {"py_callstack": "Traceback ...", "timestamp": str(ts)}}}


class Collected:
    def __init__(self) -> None:
        self.events: list[pb.Event] = []

    def __call__(self, event: pb.Event) -> None:
        self.events.append(event)

    async def at_least(self, count: int) -> list[pb.Event]:
        await eventually(lambda: len(self.events) >= count, f"{count} events")
        return self.events


class Fixture:
    def __init__(self, path: Path, collected: Collected, watcher: ErrorFileWatcher) -> None:
        self.path = path
        self.collected = collected
        self.watcher = watcher


def messages(events: list[pb.Event]) -> list[str]:
    return [e.error_file.message or f"<{e.error_file.parse_error}>" for e in events]


@pytest.fixture
async def watching(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Fixture]:
    sub = getattr(request, "param", "run")
    path = tmp_path / sub / "error.json"
    collected = Collected()
    watcher = ErrorFileWatcher(path, "ns/pod", collected, settle_seconds=0.3)
    task = asyncio.create_task(watcher.run())
    await asyncio.sleep(0.05)  # let the watch start (a missed start is caught by the tick anyway)
    yield Fixture(path, collected, watcher)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("watching", ["run", "late/dir/deep"], indirect=True)
async def test_file_and_directories_appearing_late(watching: Fixture) -> None:
    assert not watching.path.parent.exists() or watching.path.parent.name == "run"
    watching.path.parent.mkdir(parents=True, exist_ok=True)
    watching.path.write_text(json.dumps(record("ValueError: bad label")))
    events = await watching.collected.at_least(1)
    assert messages(events) == ["ValueError: bad label"]
    ev = events[0]
    assert ev.id == wire.error_event_id("ns/pod", read_error_file(watching.path))  # type: ignore[arg-type]
    assert ev.error_file.timestamp == 1795271119
    # The wall time is the file's mtime (when it was written), on this pod's clock.
    assert wire.from_ts(ev.wall_time) == pytest.approx(watching.path.stat().st_mtime, abs=1e-6)


async def test_rewrites_new_content_is_a_new_event_same_content_is_not(watching: Fixture) -> None:
    watching.path.parent.mkdir(parents=True)
    watching.path.write_text(json.dumps(record("ValueError: first")))
    await watching.collected.at_least(1)
    watching.path.write_text(json.dumps(record("ValueError: first")))  # same content again
    os.utime(watching.path)
    watching.path.unlink()  # deleted ...
    watching.path.write_text(json.dumps(record("ValueError: first")))  # ... and rewritten unchanged
    watching.path.write_text(json.dumps(record("SignalException: Process 7 got signal: 15", ts=1795271130)))
    events = await watching.collected.at_least(2)
    assert messages(events) == ["ValueError: first", "SignalException: Process 7 got signal: 15"]
    assert len({e.id for e in events}) == 2


async def test_rewrite_by_rename(watching: Fixture) -> None:
    watching.path.parent.mkdir(parents=True)
    tmp = watching.path.with_name("error.json.tmp")
    tmp.write_text(json.dumps(record("RuntimeError: atomically")))
    tmp.rename(watching.path)
    assert messages(await watching.collected.at_least(1)) == ["RuntimeError: atomically"]


async def test_partial_then_complete_write_is_one_event(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    collected = Collected()
    watcher = ErrorFileWatcher(path, "ns/pod", collected, settle_seconds=3600)
    task = asyncio.create_task(watcher.run())
    try:
        data = json.dumps(record("ValueError: written in two parts")).encode()
        with path.open("wb") as f:
            f.write(data[:25])
            f.flush()
            os.fsync(f.fileno())
            watcher.check(force=True)  # the half-written file is seen for certain ...
            assert collected.events == []  # ... and not reported
            await asyncio.sleep(0.05)
            f.write(data[25:])
        events = await collected.at_least(1)
        assert messages(events) == ["ValueError: written in two parts"]
        assert events[0].error_file.parse_error == ""
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_garbage_settles_to_one_parse_error_event(watching: Fixture) -> None:
    watching.path.parent.mkdir(parents=True)
    watching.path.write_bytes(b"\x00\x01 definitely not json")
    events = await watching.collected.at_least(1)
    assert events[0].error_file.parse_error.startswith("not valid JSON")
    assert events[0].error_file.size_bytes == len(b"\x00\x01 definitely not json")
    # Nothing more comes from the unchanged garbage: the next event is the next real content.
    watching.watcher.check(force=True)
    watching.path.write_text(json.dumps(record("ValueError: finally")))
    events = await watching.collected.at_least(2)
    assert messages(events)[1:] == ["ValueError: finally"]
    assert len(events) == 2


async def test_huge_garbage_file_is_reported_once_with_a_clear_reason(watching: Fixture) -> None:
    watching.path.parent.mkdir(parents=True)
    with watching.path.open("wb") as f:
        for _ in range(8):
            f.write(b"\xff garbage " * (1 << 17))
    events = await watching.collected.at_least(1)
    assert "over the 1048576-byte limit" in events[0].error_file.parse_error


async def test_a_deeply_nested_file_is_reported_and_the_watch_goes_on(watching: Fixture) -> None:
    # 5,000 bytes of '[' raised RecursionError out of the parser: the watcher task died with it, and the
    # real sidecar process exited 1 (checked on the commit before the fix).
    watching.path.parent.mkdir(parents=True)
    watching.path.write_text("[" * 5000)
    [event] = await watching.collected.at_least(1)
    assert "nested too deeply" in event.error_file.parse_error
    watching.path.write_text(json.dumps(record("ValueError: the real one")))
    assert messages(await watching.collected.at_least(2))[1] == "ValueError: the real one"


async def test_directory_removed_and_recreated(watching: Fixture) -> None:
    watching.path.parent.mkdir(parents=True)
    watching.path.write_text(json.dumps(record("ValueError: one")))
    await watching.collected.at_least(1)
    shutil.rmtree(watching.path.parent)
    watching.path.parent.mkdir(parents=True)
    watching.path.write_text(json.dumps(record("ValueError: two")))
    assert messages(await watching.collected.at_least(2)) == ["ValueError: one", "ValueError: two"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_settle_period_with_a_fake_clock(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    clock = FakeClock()
    collected = Collected()
    watcher = ErrorFileWatcher(path, "ns/pod", collected, settle_seconds=2.0, monotonic=clock)
    assert watcher.check() is None  # no file
    path.write_text('{"message": {"mess')
    assert watcher.check() is None  # unparsable: maybe half written
    clock.now += 1.9
    assert watcher.check() is None
    path.write_text('{"message": {"message": "Val')  # it changed: the settle period starts again
    assert watcher.check(force=True) is None
    clock.now += 1.9
    assert watcher.check() is None
    clock.now += 0.2
    event = watcher.check()
    assert event is not None and event.error_file.parse_error
    clock.now += 100
    assert watcher.check() is None and watcher.check(force=True) is None  # once only
    assert len(collected.events) == 1


def test_final_check_reports_unparsable_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    path.write_text("{")
    collected = Collected()
    watcher = ErrorFileWatcher(path, "ns/pod", collected, settle_seconds=3600, monotonic=FakeClock())
    assert watcher.check() is None
    event = watcher.check(final=True)
    assert event is not None and event.error_file.parse_error.startswith("not valid JSON")


def test_mtime_in_the_future_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    path.write_text(json.dumps(record("ValueError: x")))
    os.utime(path, (4_000_000_000, 4_000_000_000))
    watcher = ErrorFileWatcher(path, "ns/pod", Collected(), wall=lambda: 1_800_000_000.5)
    event = watcher.check()
    assert event is not None and wire.from_ts(event.wall_time) == 1_800_000_000.5


def test_huge_file_still_growing_is_reported_once_settled(tmp_path: Path) -> None:
    path = tmp_path / "error.json"
    clock = FakeClock()
    collected = Collected()
    watcher = ErrorFileWatcher(path, "ns/pod", collected, settle_seconds=2.0, monotonic=clock)
    head = '{"message": {"message": "RecursionError: deep", "extraInfo": {"py_callstack": "'
    with path.open("w") as f:
        f.write(head + "frame\\n" * 400_000)  # 2.4 MB so far
        f.flush()
        assert watcher.check(force=True) is None  # over 1 MiB: wait until it stops growing
        f.write("frame\\n" * 400_000 + 'RecursionError: deep\\n", "timestamp": "5"}}}')
    clock.now += 1.0
    assert watcher.check() is None  # it changed: the settle period started again
    clock.now += 2.0
    event = watcher.check()
    assert event is not None
    assert event.error_file.message == "RecursionError: deep"
    assert event.error_file.size_bytes == path.stat().st_size
    assert event.error_file.traceback.endswith("RecursionError: deep\n")
    assert len(collected.events) == 1


def inotify_instances() -> int:
    """inotify instances this process holds (each is an `anon_inode:inotify` file descriptor)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:  # closed meanwhile
            pass
    return count


@pytest.mark.parametrize("how", ["inotify", "argument", "environment"])
async def test_polling_fallback_sees_late_files_and_rewrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Where inotify is not wanted (or not available) the tick alone finds the file: late directories,
    a rewrite. The default watch sleeps in one inotify instance; polling opens none."""
    if how == "environment":
        monkeypatch.setenv(FORCE_POLLING_ENV, "true")
    before = inotify_instances()
    path = tmp_path / "late" / "dir" / "error.json"
    collected = Collected()
    watcher = ErrorFileWatcher(
        path, "ns/pod", collected, settle_seconds=0.3, force_polling=True if how == "argument" else None
    )
    task = asyncio.create_task(watcher.run())
    try:
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(record("ValueError: seen by the tick")))
        await collected.at_least(1)
        # It has reported, so it is running: its inotify instance, if it uses one, is open now.
        assert inotify_instances() - before == (1 if how == "inotify" else 0)
        path.write_text(json.dumps(record("RuntimeError: rewritten", ts=1795271130)))
        events = await collected.at_least(2)
        assert messages(events) == ["ValueError: seen by the tick", "RuntimeError: rewritten"]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert inotify_instances() == before  # the watch's instance is closed with it


def test_force_polling_from_env_reads_the_usual_truthy_spellings() -> None:
    assert force_polling_from_env({FORCE_POLLING_ENV: " Yes "})
    assert force_polling_from_env({FORCE_POLLING_ENV: "1"})
    assert not force_polling_from_env({FORCE_POLLING_ENV: "0"})
    assert not force_polling_from_env({})
