"""Durable incident state (--state-dir): what was acknowledged survives the aggregator's death.

The normal order is that the root's sidecar flushes and exits first. If the aggregator then dies
before quorum, only the state file still knows the root's error: a restarted aggregator must replay it
and, once the victims report, name the root — not blame a victim after the quorum timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from support.common import GLOO_PEER, eventually, free_port, report
from support.streams import Sidecar, answer, quiet

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import IncidentBook, MemberKey
from podmortem.aggregator.running import Aggregator, make_decide
from podmortem.aggregator.state import FILE_NAME, SCHEMA_VERSION, StateStore
from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb

JOB = pb.JobRef(namespace="ml", name="llm", kind="PyTorchJob")
PODS = ["llm-worker-0", "llm-worker-1", "llm-worker-2"]
ROOT = PODS[1]


def register(pod: str, rank: int) -> pb.Register:
    return pb.Register(job=JOB, pod=pod, rank=rank, world_size_hint=3, session_id=f"s-{pod}")


def failure(pod: str, message: str, at: int) -> list[pb.Event]:
    rec = ErrorRecord(message=message, exception_type=message.split(":")[0], timestamp=at)
    error = wire.make_event(wire.error_to_pb(rec), wire.error_event_id(pod, rec))
    term = Termination(exit_code=1, reason="Error", finished_at=float(at))
    return [error, wire.make_event(wire.termination_to_pb(term), f"{pod}/termination/0")]


def root_events() -> list[pb.Event]:
    return failure(ROOT, "ValueError: bad label 7 in batch 1234", 1_800_000_010)


def victim_events(pod: str) -> list[pb.Event]:
    return failure(pod, GLOO_PEER, 1_800_000_009)  # "ended" a second before the root


# -- the store on its own ---------------------------------------------------------------------------


def book_for(decisions: list[Decision]) -> IncidentBook:
    return IncidentBook(make_decide(), decisions.append, quorum_timeout=600)


async def test_a_replayed_store_resumes_the_incident(tmp_path: Path) -> None:
    first: list[Decision] = []
    book = book_for(first)
    store = StateStore(tmp_path)
    key = book.register(register(ROOT, 1))
    await store.register(key, register(ROOT, 1))
    for event in root_events():
        book.ingest(key, event, from_sidecar=True)
        await store.event(key, event)
    store.close()  # the aggregator dies here: nothing was decided
    assert first == []

    decisions: list[Decision] = []
    again = book_for(decisions)
    assert StateStore(tmp_path).replay(again) == (1, 2)
    for i, pod in enumerate(PODS):
        if pod != ROOT:
            k = again.register(register(pod, i))
            for event in victim_events(pod):
                again.ingest(k, event, from_sidecar=True)
    await eventually(lambda: len(decisions) == 1, "a verdict")
    assert decisions[0].closed_by == "quorum"
    assert (decisions[0].verdict.pod, decisions[0].verdict.category) == (ROOT, "user_code")


async def test_a_final_verdict_forgets_its_job(tmp_path: Path) -> None:
    decisions: list[Decision] = []
    book = book_for(decisions)
    store = StateStore(tmp_path)
    for i, pod in enumerate(PODS):
        key = book.register(register(pod, i))
        await store.register(key, register(pod, i))
        for event in root_events() if pod == ROOT else victim_events(pod):
            book.ingest(key, event, from_sidecar=True)
            await store.event(key, event)
    await eventually(lambda: len(decisions) == 1, "a verdict")
    assert decisions[0].final
    await store.publish(decisions[0])
    assert StateStore(tmp_path).replay(book_for([])) == (0, 0)


async def test_writes_that_arrive_together_share_a_commit_and_are_durable_once_awaited(tmp_path: Path) -> None:
    # The writer commits off the event loop; what arrives while it works goes into its next transaction.
    store = StateStore(tmp_path)
    key = book_for([]).register(register(ROOT, 1))
    await store.register(key, register(ROOT, 1))
    events = [
        wire.make_event(wire.error_to_pb(ErrorRecord(message=f"ValueError: {i}", timestamp=i)), f"e-{i}")
        for i in range(50)
    ]
    before = store.commits
    await asyncio.gather(*(store.event(key, e) for e in events))
    assert store.commits - before <= 2  # not one per event
    with contextlib.closing(sqlite3.connect(tmp_path / FILE_NAME)) as db:  # another reader sees them all
        assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 50
    store.close()


def test_an_unreadable_state_file_is_moved_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"this is not a database " * 100)
    store = StateStore(tmp_path, clock=lambda: 1234.0)
    assert store.replay(book_for([])) == (0, 0)
    assert (tmp_path / f"{FILE_NAME}.corrupt-1234").read_bytes().startswith(b"this is not")
    assert "moved to" in caplog.text
    store.close()


async def test_old_rows_are_dropped_at_replay(tmp_path: Path) -> None:
    now = [1_000.0]
    store = StateStore(tmp_path, clock=lambda: now[0])
    book = book_for([])
    key = book.register(register(ROOT, 1))
    await store.register(key, register(ROOT, 1))
    await store.event(key, root_events()[0])
    now[0] += 8 * 24 * 3600
    assert store.replay(book_for([])) == (0, 0)


async def test_a_refused_write_is_not_acked(tmp_path: Path) -> None:
    # The state file cannot take the event (here: its table is gone; in life: disk full, I/O error):
    # the stream is refused with UNAVAILABLE and the event is not acknowledged, so the sidecar keeps it.
    config = AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir="", state_dir=str(tmp_path))
    agg = Aggregator(config, registry=CollectorRegistry())
    await agg.start()
    try:
        with sqlite3.connect(tmp_path / FILE_NAME) as db:
            db.execute("DROP TABLE events")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await report(agg.port, register(ROOT, 1), root_events())
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "state file refused a write" in (refused.value.details() or "")
    finally:
        await agg.stop(grace=1)


async def test_a_long_log_tail_is_stored_as_the_book_keeps_it_and_replayed_unchanged(tmp_path: Path) -> None:
    # The state file holds what the book keeps of a 64 KiB tail (its end and the line a rule names), not
    # the whole tail: a burst writes a quarter of the bytes, and a replay gives the book the same text.
    chatter = "".join(f"[rank1]: step {i} loss 1.{i % 97:02d}\n" for i in range(3000))  # ~90 KB
    tail = ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n" + chatter)[-64_000:]
    tail = "[rank1]: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n" + tail + "exiting\n"
    events = [*root_events(), wire.make_event(pb.LogTail(text=tail.encode(), truncated=True), f"{ROOT}/log")]
    config = AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir="", state_dir=str(tmp_path))
    agg = Aggregator(config, registry=CollectorRegistry())
    await agg.start()
    try:
        assert len(await report(agg.port, register(ROOT, 1), events)) == 3
        live = agg.book.member(MemberKey(("ml", "llm", ""), ROOT))
    finally:
        await agg.stop(grace=1)
    assert live is not None and live.log_tail is not None
    assert live.log_tail.startswith("[rank1]: NVRM: Xid") and live.log_tail.endswith("exiting\n")
    with contextlib.closing(sqlite3.connect(tmp_path / FILE_NAME)) as db:
        [(stored,)] = db.execute("SELECT event FROM events WHERE id = ?", (f"{ROOT}/log",)).fetchall()
    assert len(stored) <= 16 * 1024 + 100 < len(tail.encode())  # the text and the event's own fields
    again = book_for([])
    assert StateStore(tmp_path).replay(again) == (1, 3)
    assert again.member(MemberKey(("ml", "llm", ""), ROOT)) == live


# -- schema versions: older migrated, newer and foreign set aside ------------------------------------

# The layout of state files written before versioning (user_version 0), exactly as that code made it.
SCHEMA_1 = """
CREATE TABLE IF NOT EXISTS registrations (
    ns TEXT NOT NULL, job TEXT NOT NULL, attempt TEXT NOT NULL, pod TEXT NOT NULL,
    register BLOB NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (ns, job, attempt, pod)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ns TEXT NOT NULL, job TEXT NOT NULL, attempt TEXT NOT NULL, pod TEXT NOT NULL,
    id TEXT NOT NULL, event BLOB NOT NULL, at REAL NOT NULL,
    UNIQUE (ns, job, attempt, pod, id)
);
"""


def write_file(path: Path, script: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript(script)


def user_version(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("PRAGMA user_version").fetchone()[0])


async def test_an_older_schema_is_migrated_with_nothing_lost(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    write_file(tmp_path / FILE_NAME, SCHEMA_1)
    with contextlib.closing(sqlite3.connect(tmp_path / FILE_NAME)) as db, db:
        db.execute(
            "INSERT INTO registrations VALUES (?, ?, ?, ?, ?, ?)",
            ("ml", "llm", "", ROOT, register(ROOT, 1).SerializeToString(), time.time()),
        )
        for event in root_events():
            db.execute(
                "INSERT INTO events (ns, job, attempt, pod, id, event, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                ("ml", "llm", "", ROOT, event.id, event.SerializeToString(), time.time()),
            )
    store = StateStore(tmp_path)
    book = book_for([])
    assert store.replay(book) == (1, 2)  # every row of the old file
    assert user_version(tmp_path / FILE_NAME) == SCHEMA_VERSION
    assert f"schema version 1 migrated to {SCHEMA_VERSION}" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir() if ".sqlite3." in p.name) == []  # nothing set aside
    key = MemberKey(("ml", "llm", ""), ROOT)
    assert not book.is_verified(key)  # written before membership was verified: not claimed to be
    await store.register(key, register(ROOT, 1), verified=True)  # the new layout takes writes
    store.close()
    assert StateStore(tmp_path).replay(again := book_for([])) == (1, 2)
    assert again.is_verified(key)


@pytest.mark.parametrize(
    ("case", "script", "aside"),
    [
        # The file: our table names, other columns, a version from the future.
        ("newer", "CREATE TABLE registrations (a, b); CREATE TABLE events (c); PRAGMA user_version = 99;", "newer"),
        ("foreign: another program's database", "CREATE TABLE notes (id, text);", "foreign"),
        (
            "foreign: our names, other columns",
            "CREATE TABLE registrations (a, b); CREATE TABLE events (at); PRAGMA user_version = 1;",
            "foreign",
        ),
    ],
)
async def test_a_newer_or_foreign_schema_is_moved_aside_and_the_aggregator_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, script: str, aside: str
) -> None:
    write_file(tmp_path / FILE_NAME, script)
    before = (tmp_path / FILE_NAME).read_bytes()
    config = AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir="", state_dir=str(tmp_path))
    agg = Aggregator(config, registry=CollectorRegistry(), clock=lambda: 1234.0)
    await agg.start()
    try:
        assert await report(agg.port, register(ROOT, 1), root_events()) == [e.id for e in root_events()]
    finally:
        await agg.stop(grace=1)
    assert (tmp_path / f"{FILE_NAME}.{aside}-1234").read_bytes() == before  # kept as it was, for a look
    assert user_version(tmp_path / FILE_NAME) == SCHEMA_VERSION
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert f"moved to {FILE_NAME}.{aside}-1234; starting empty" in error.getMessage()
    assert ("newer than this aggregator's" if aside == "newer" else "not an incident state file") in error.getMessage()


# -- real processes: SIGKILL between the root's report and the victims' -----------------------------


def start(tmp_path: Path, port: int, state: bool) -> subprocess.Popen[bytes]:
    args = [
        sys.executable, "-m", "podmortem.cli", "aggregator", "--listen", f"127.0.0.1:{port}",
        "--metrics-listen", "", "--verdict-dir", str(tmp_path / "verdicts"), "--quorum-timeout", "3",
        "--ready-file", str(tmp_path / "ready"),
    ]  # fmt: skip
    if state:
        args += ["--state-dir", str(tmp_path / "state")]
    (tmp_path / "ready").unlink(missing_ok=True)
    log = (tmp_path / "aggregator.log").open("ab")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))


def verdicts(tmp_path: Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted((tmp_path / "verdicts").glob("*.json")):
        out.append(json.loads(f.read_text()))
    return out


async def kill_between_root_and_victims(tmp_path: Path, state: bool) -> list[dict[str, Any]]:
    port = free_port()  # the restarted process must listen where the first did: the sidecars' one address
    proc = start(tmp_path, port, state)
    try:
        await eventually(lambda: (tmp_path / "ready").exists(), "serving", within=60)
        acked = await report(port, register(ROOT, 1), root_events())
        assert len(acked) == 2  # the root's sidecar flushed everything, and exits
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc = start(tmp_path, port, state)
        await eventually(lambda: (tmp_path / "ready").exists(), "serving again", within=60)
        for i, pod in enumerate(PODS):
            if pod != ROOT:
                await report(port, register(pod, i), victim_events(pod))
        await eventually(lambda: any(v.get("closed_by") for v in verdicts(tmp_path)), "a verdict", within=30)
        # Its stop path decides every pending revision and publishes it before it exits: a revision, if
        # one were coming, is in the file once the process is gone.
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
        return verdicts(tmp_path)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


async def test_sigkill_before_quorum_with_a_state_dir_still_names_the_root(tmp_path: Path) -> None:
    [doc] = await kill_between_root_and_victims(tmp_path, state=True)
    assert doc["root_cause"] == {"pod": ROOT, "category": "user_code", "retryable": False}
    assert (doc["closed_by"], doc["final"], doc["revision"]) == ("quorum", True, 1)


async def test_without_a_state_dir_the_same_death_blames_a_victim(tmp_path: Path) -> None:
    # The premise of the test above: in memory, the root's events die with the process.
    [doc] = await kill_between_root_and_victims(tmp_path, state=False)
    assert doc["root_cause"]["pod"] != ROOT and doc["closed_by"] == "timeout"


async def restarted(tmp_path: Path, port: int, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """SIGKILL the aggregator and start it again on the same port and state directory, serving."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc = start(tmp_path, port, True)
    await eventually(lambda: (tmp_path / "ready").exists(), "serving again", within=60)
    return proc


async def stopped(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM: its stop path decides every open incident and pending revision and publishes them first."""
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0


def by_id(tmp_path: Path) -> dict[str, dict[str, Any]]:
    return {doc["incident"]["id"]: doc for doc in verdicts(tmp_path)}


def kept_decisions(tmp_path: Path) -> list[tuple[str, float | None]]:
    """The verdicts the state file of a running aggregator holds: (closed_by, stalled_at) each."""
    with contextlib.closing(sqlite3.connect(tmp_path / "state" / FILE_NAME)) as db:
        return list(db.execute("SELECT closed_by, stalled_at FROM decisions"))


async def test_a_sigkill_after_a_verdict_does_not_publish_it_again(tmp_path: Path) -> None:
    # The verdict came at the quorum timeout (one member silent: not final, so its rows stay); then the
    # process is killed and restarted. The replayed incident is the one decided: nothing is published again,
    # not even at the stop path, which decides whatever is open or due.
    port = free_port()
    proc = start(tmp_path, port, True)
    try:
        await eventually(lambda: (tmp_path / "ready").exists(), "serving", within=60)
        await report(port, register(ROOT, 1), root_events())
        await report(port, register(PODS[0], 0), victim_events(PODS[0]))
        await eventually(lambda: bool(verdicts(tmp_path)), "a verdict at the quorum timeout", within=30)
        # The state file is the last publisher: a verdict killed between its file and its row is published
        # again after the restart (at least once, by design). This test is about the verdict kept.
        await eventually(lambda: len(kept_decisions(tmp_path)) == 1, "the verdict kept", within=30)
        [before] = verdicts(tmp_path)
        assert not before["final"] and before["root_cause"]["pod"] == ROOT
        proc = await restarted(tmp_path, port, proc)
        await stopped(proc)
        assert verdicts(tmp_path) == [before]  # the same answer, revision, decided_at and latency
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def test_a_later_run_resent_after_a_restart_keeps_its_generation(tmp_path: Path) -> None:
    # The job's first run is decided (final); a recreated pod (a new name: a new run, `g2`) fails, and the
    # aggregator is killed before its verdict. Restarted, the pod's sidecar sends it all again, under the
    # attempt it always told (""): it is filed under g2, and the first run's verdict stays as it was.
    port = free_port()
    proc = start(tmp_path, port, True)
    recreated = "llm-worker-0-b"
    try:
        await eventually(lambda: (tmp_path / "ready").exists(), "serving", within=60)
        for i, pod in enumerate(PODS):
            await report(port, register(pod, i), root_events() if pod == ROOT else victim_events(pod))
        await eventually(lambda: "ml:llm" in by_id(tmp_path), "the first run's verdict", within=30)
        await eventually(lambda: len(kept_decisions(tmp_path)) == 1, "the first run's verdict kept", within=30)
        first = by_id(tmp_path)["ml:llm"]
        assert first["final"] and first["root_cause"]["pod"] == ROOT
        second_run = failure(recreated, "ValueError: the second run's own bug", 1_800_000_100)
        await report(port, register(recreated, 0), second_run)
        proc = await restarted(tmp_path, port, proc)
        await report(port, register(recreated, 0), second_run)  # the sidecar resends to the new incarnation
        await eventually(lambda: "ml:llm:g2" in by_id(tmp_path), "the second run's verdict", within=30)
        await stopped(proc)
        docs = by_id(tmp_path)
        assert docs["ml:llm"] == first
        assert docs["ml:llm:g2"]["root_cause"]["pod"] == recreated
        assert set(docs) == {"ml:llm", "ml:llm:g2"}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


GLOO_TIMEOUT = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 6000ms"


async def test_a_stall_published_before_a_sigkill_is_still_said_by_the_verdict_on_the_failure(tmp_path: Path) -> None:
    # Every member went quiet and answered the stall's capture round: a provisional verdict, with the moment
    # of the stall. The aggregator is killed and restarted; the sidecars come back, and the job fails (the
    # collective times out) before the stall is asked about again. The verdict on the failure still says
    # when the job stalled (the page draws it), and it is the incident's next revision, decided at quorum.
    port = free_port()
    proc = start(tmp_path, port, True)
    pods = ["llm-worker-0", "llm-worker-1"]
    try:
        await eventually(lambda: (tmp_path / "ready").exists(), "serving", within=60)
        before = [Sidecar(port, pod, i) for i, pod in enumerate(pods)]
        for s in before:
            await s.register()
        for s, pod in zip(before, pods, strict=True):
            await s.send(quiet(pod))
        for i, (s, pod) in enumerate(zip(before, pods, strict=True)):
            await s.send(answer(pod, await s.request(), i))
        await eventually(lambda: [v["closed_by"] for v in verdicts(tmp_path)] == ["stall"], "the stall's verdict")
        [stall] = verdicts(tmp_path)
        assert stall["incident"]["stalled_at"] <= stall["decided_at"]  # first seen, then asked, then published
        # The state file is the publishers' last: the kill comes once it has the verdict too.
        kept = [("stall", stall["incident"]["stalled_at"])]
        await eventually(lambda: kept_decisions(tmp_path) == kept, "the stall kept")
        proc = await restarted(tmp_path, port, proc)
        for s in before:  # their streams died with the process
            await s.channel.close()
        after = [Sidecar(port, pod, i) for i, pod in enumerate(pods)]
        for s in after:
            await s.register()
        for i, (s, pod) in enumerate(zip(after, pods, strict=True)):
            for event in failure(pod, GLOO_TIMEOUT, 1_800_000_100 + i):
                await s.send(event)
        for i, (s, pod) in enumerate(zip(after, pods, strict=True)):  # the first timeout's capture round
            await s.send(answer(pod, await s.request(), i, n=2))
        await eventually(lambda: any(v["final"] for v in verdicts(tmp_path)), "the verdict on the failure")
        for s in after:
            await s.close()
        await stopped(proc)
        [doc] = verdicts(tmp_path)
        assert doc["incident"]["stalled_at"] == stall["incident"]["stalled_at"]
        assert (doc["closed_by"], doc["final"], doc["revision"]) == ("quorum", True, 2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def decision_of(uid: str, attempt: str, at: float, own: bool = True) -> Decision:
    from podmortem.core.model import Incident, JobRef, Verdict
    from podmortem.core.repeats import Attempt

    incident = Incident(JobRef("ml", "llm", "JobSet", uid), 1, (), attempt=attempt, incident_id=f"ml:llm:{attempt}")
    verdict = Verdict(pod="p", category="network", retryable=True, summary="", confidence=0.95)
    entry = Attempt(attempt, "network", "network:aa", at, 0.95, True)
    return Decision(incident, verdict, at, 1, "quorum", 0, attempt=entry, own_attempt=own)


async def test_a_jobs_attempts_outlive_its_incident_rows_and_are_bounded(tmp_path: Path) -> None:
    """The attempt history is read back after a restart; at most MAX_ATTEMPTS a job, MAX_JOBS in all; an
    attempt that is not the job's own (its root not placed there by the pod watch) is never written."""
    from podmortem.aggregator import state as state_module

    store = StateStore(tmp_path)
    now = time.time()
    for n in range(12):
        await store.publish(decision_of("uid-a", str(n), now - 100 + n))
    await store.publish(decision_of("uid-b", "0", now - 200))
    await store.publish(decision_of("uid-c", "0", now, own=False))
    store.close()
    book = book_for([])
    StateStore(tmp_path).replay(book)
    assert [a.attempt for a in book.history.get("uid-a")] == [str(n) for n in range(11, 3, -1)]
    assert [a.attempt for a in book.history.get("uid-b")] == ["0"]
    assert book.history.get("uid-c") == ()
    old = state_module._TRIM_JOBS
    state_module._TRIM_JOBS = (old[0], (1,))  # keep one job: the one decided last
    try:
        again = book_for([])
        StateStore(tmp_path).replay(again)
    finally:
        state_module._TRIM_JOBS = old
    assert (len(again.history), again.history.get("uid-b")) == (1, ())


# The layout of schema version 4, exactly as that code made it (its decisions table had no stalled_at).
SCHEMA_4 = (
    SCHEMA_1.replace("register BLOB NOT NULL, at REAL NOT NULL,", "register BLOB NOT NULL, at REAL NOT NULL, "
                     "verified INTEGER NOT NULL DEFAULT 0,")
    + """
CREATE TABLE attempts (
    uid TEXT NOT NULL, attempt TEXT NOT NULL, ns TEXT NOT NULL, job TEXT NOT NULL,
    entry TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (uid, attempt)
);
CREATE TABLE decisions (
    ns TEXT NOT NULL, job TEXT NOT NULL, attempt TEXT NOT NULL, kind TEXT NOT NULL, uid TEXT NOT NULL,
    revision INTEGER NOT NULL, closed_by TEXT NOT NULL, opened_at REAL, pod TEXT, category TEXT,
    retryable INTEGER, members TEXT NOT NULL, final INTEGER NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (ns, job, attempt)
);
PRAGMA user_version = 4;
"""
)  # fmt: skip


def stall_decision(closed_by: str, at: float) -> Decision:
    from podmortem.core.model import Incident, JobRef, Verdict

    stalled_at = at if closed_by == "stall" else None
    incident = Incident(JobRef("ml", "llm", "PyTorchJob"), 2, (), attempt="0", incident_id="ml:llm:0",
                        provisional=True, stalled_at=stalled_at)  # fmt: skip
    verdict = Verdict(pod=None, category=None, retryable=None, summary="")
    return Decision(incident, verdict, at, 1 if closed_by == "stall" else 2, closed_by, 0)  # type: ignore[arg-type]


async def test_a_version_4_file_is_migrated_and_its_decisions_kept_without_a_stall(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    write_file(tmp_path / FILE_NAME, SCHEMA_4)
    with contextlib.closing(sqlite3.connect(tmp_path / FILE_NAME)) as db, db:
        row = ("ml", "llm", "0", "PyTorchJob", "", 1, "stall", None, ROOT, "hang", 1, json.dumps(PODS), 0, time.time())
        db.execute(f"INSERT INTO decisions VALUES ({', '.join('?' * len(row))})", row)
    store = StateStore(tmp_path)
    assert user_version(tmp_path / FILE_NAME) == SCHEMA_VERSION == 5
    assert "schema version 4 migrated to 5" in caplog.text
    book = book_for([])
    store.replay(book)
    job = ("ml", "llm", "0")
    incident = book.incident(job)
    assert incident is not None and incident.stalled_at is None  # written before the moment was kept
    assert not book.failed(job) and {m.pod for m in incident.members} == set(PODS)
    await store.publish(stall_decision("stall", 1_800_000_000.0))  # the new column takes writes
    store.close()
    book = book_for([])
    StateStore(tmp_path).replay(book)
    assert book.stall_published(job) and book.incident(job).stalled_at == 1_800_000_000.0  # type: ignore[union-attr]


async def test_a_withdrawn_stall_is_not_brought_back_by_a_restart(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    await store.publish(stall_decision("stall", 1_800_000_000.0))
    await store.publish(stall_decision("resumed", 1_800_000_020.0))  # the job moved again: withdrawn
    store.close()
    book = book_for([])
    StateStore(tmp_path).replay(book)
    assert not book.stall_published(("ml", "llm", "0"))
    assert book.incident(("ml", "llm", "0")).stalled_at is None  # type: ignore[union-attr]
