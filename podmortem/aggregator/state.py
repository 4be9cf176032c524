"""Durable incident state: what the aggregator acknowledged survives its own death.

A sidecar flushes and exits when its pod ends — the root's sidecar usually first. If the aggregator
then dies before quorum, an in-memory book has lost the root's events, and the verdict blames a
victim after the timeout. With `--state-dir` every sidecar registration and every event is committed
to an embedded SQLite database (standard library) *before* the event is acknowledged, and a restarted
aggregator replays the file into its book before it opens its port, so every incident that was open
resumes with what was acknowledged (the quorum timer restarts at the replay). Sidecars that are
still alive reconnect and resend too; ids deduplicate.

Rows of a job attempt are deleted once a final verdict on it has been published (every expected
member had reported: nothing more is expected to change it), and rows older than `retention`
seconds are dropped at start-up, so the file stays bounded. Each verdict published is kept too (its
answer, revision and members, and while a provisional verdict on a stall of the attempt is out (not
withdrawn), the moment that stall was first seen, `stalled_at`: the verdict on the failure that follows
says it after a restart too;
`decisions`), final or not: a restarted aggregator knows what it decided,
so replaying a decided incident's events publishes nothing again (a revision only if the answer
changes), and a run of a job after a final verdict stays filed under the attempt it was filed under
(`<attempt>.g2`: the book's generations), never under the decided one. A verdict published in the
moment before the process died and before its row was committed is published again after the restart.
Journal mode WAL with `synchronous=NORMAL`: a commit survives the process being killed (SIGKILL, OOM) —
the case this is for — though not necessarily a power loss of the node.

Each job's attempt history (`aggregator.history`) is kept here too, in `attempts`: one row per job uid
and attempt, written when a verdict whose attempt is the job's own is published, at most MAX_ATTEMPTS
rows a job and history.MAX_JOBS jobs (the jobs decided longest ago go first), read back into the book's
history at start-up. It outlives the job's incident rows: it is what the next attempt is compared with.

The layout is versioned (`PRAGMA user_version`, `SCHEMA_VERSION`). A file of an older version is
migrated forward in place at start-up, its rows kept. A file the aggregator must not use is moved
aside with an error in the log, and the aggregator starts empty rather than not at all (sidecars
still running send their events again): `<name>.corrupt-<time>` (not a readable database),
`<name>.newer-<time>` (a version newer than this code: a downgrade) and `<name>.foreign-<time>` (a
database whose tables are not those of its version).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.history import MAX_JOBS
from podmortem.aggregator.incidents import IncidentBook, MemberKey, Restored
from podmortem.aggregator.intake import LimitExceeded
from podmortem.core.model import JobRef, Verdict
from podmortem.core.repeats import MAX_ATTEMPTS, Attempt
from podmortem.protocol.v1 import collector_pb2 as pb

log = logging.getLogger(__name__)

FILE_NAME = "incidents.sqlite3"
RETENTION = 7 * 24 * 3600.0

# The layout's version, kept in the file's `PRAGMA user_version`. A file written before versioning
# says 0 and has layout 1. Each step of `_MIGRATIONS` takes version N to N + 1 in one transaction.
SCHEMA_VERSION = 5
_DECISIONS = (
    "ns", "job", "attempt", "kind", "uid", "revision", "closed_by", "opened_at", "pod", "category",
    "retryable", "members", "final", "at", "stalled_at",
)  # fmt: skip
# Read back at replay, in this order (`Restored`).
_RESTORED = (
    "ns", "job", "attempt", "kind", "uid", "revision", "closed_by", "opened_at", "pod", "category",
    "retryable", "members", "final", "stalled_at",
)  # fmt: skip
_LAYOUTS: dict[int, dict[str, tuple[str, ...]]] = {
    1: {
        "registrations": ("ns", "job", "attempt", "pod", "register", "at"),
        "events": ("seq", "ns", "job", "attempt", "pod", "id", "event", "at"),
    },
    2: {
        "registrations": ("ns", "job", "attempt", "pod", "register", "at", "verified"),
        "events": ("seq", "ns", "job", "attempt", "pod", "id", "event", "at"),
    },
    3: {
        "registrations": ("ns", "job", "attempt", "pod", "register", "at", "verified"),
        "events": ("seq", "ns", "job", "attempt", "pod", "id", "event", "at"),
        "attempts": ("uid", "attempt", "ns", "job", "entry", "at"),
    },
    4: {
        "registrations": ("ns", "job", "attempt", "pod", "register", "at", "verified"),
        "events": ("seq", "ns", "job", "attempt", "pod", "id", "event", "at"),
        "attempts": ("uid", "attempt", "ns", "job", "entry", "at"),
        "decisions": _DECISIONS[:-1],
    },
    5: {
        "registrations": ("ns", "job", "attempt", "pod", "register", "at", "verified"),
        "events": ("seq", "ns", "job", "attempt", "pod", "id", "event", "at"),
        "attempts": ("uid", "attempt", "ns", "job", "entry", "at"),
        "decisions": _DECISIONS,
    },
}
_STALLED_AT = "stalled_at REAL"  # its stall verdict's moment, when first seen (NULL: none, or withdrawn)
_DECISIONS_COLUMNS = """
    ns TEXT NOT NULL, job TEXT NOT NULL, attempt TEXT NOT NULL, kind TEXT NOT NULL, uid TEXT NOT NULL,
    revision INTEGER NOT NULL, closed_by TEXT NOT NULL, opened_at REAL, pod TEXT, category TEXT,
    retryable INTEGER, members TEXT NOT NULL, final INTEGER NOT NULL, at REAL NOT NULL,"""
_DECISIONS_KEY = "\n    PRIMARY KEY (ns, job, attempt)\n)"
_DECISIONS_TABLE_4 = "CREATE TABLE decisions (" + _DECISIONS_COLUMNS + _DECISIONS_KEY
_DECISIONS_TABLE = "CREATE TABLE decisions (" + _DECISIONS_COLUMNS + f" {_STALLED_AT}," + _DECISIONS_KEY
_ATTEMPTS = """CREATE TABLE attempts (
    uid TEXT NOT NULL, attempt TEXT NOT NULL, ns TEXT NOT NULL, job TEXT NOT NULL,
    entry TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (uid, attempt)
)"""
_SCHEMA = (
    """
CREATE TABLE registrations (
    ns TEXT NOT NULL, job TEXT NOT NULL, attempt TEXT NOT NULL, pod TEXT NOT NULL,
    register BLOB NOT NULL, at REAL NOT NULL, verified INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (ns, job, attempt, pod)
);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ns TEXT NOT NULL, job TEXT NOT NULL, attempt TEXT NOT NULL, pod TEXT NOT NULL,
    id TEXT NOT NULL, event BLOB NOT NULL, at REAL NOT NULL,
    UNIQUE (ns, job, attempt, pod, id)
);
"""
    + _ATTEMPTS
    + ";\n"
    + _DECISIONS_TABLE
    + ";"
)
_MIGRATIONS: dict[int, str] = {
    # 1 -> 2: whether the member's job membership was verified against the API (rows written before
    # say no; a live sidecar registering again is verified again).
    1: "ALTER TABLE registrations ADD COLUMN verified INTEGER NOT NULL DEFAULT 0",
    # 2 -> 3: each job's attempt history.
    2: _ATTEMPTS,
    # 3 -> 4: the verdicts published (a restart does not publish them again).
    3: _DECISIONS_TABLE_4,
    # 4 -> 5: when a stall's provisional verdict was published (a final verdict after a restart says it).
    4: f"ALTER TABLE decisions ADD COLUMN {_STALLED_AT}",
}
# Attempts written between two trims of the whole history to MAX_JOBS jobs.
TRIM_EVERY = 256

Statement = tuple[str, tuple[Any, ...]]
# Bytes of rows waiting for the next commit: past this, a write waits for that commit before it is
# queued, so one transaction stays bounded (bench/burst.py --state-dir prints the peak RSS).
MAX_PENDING_BYTES = 8 << 20


# Keeps the attempts of the MAX_JOBS jobs decided most recently.
_TRIM_JOBS: Statement = (
    "DELETE FROM attempts WHERE uid IN (SELECT uid FROM attempts GROUP BY uid ORDER BY MAX(at) DESC LIMIT -1 OFFSET ?)",
    (MAX_JOBS,),
)


class StateError(RuntimeError):
    """The state store cannot do what was asked: the directory is unusable, or the file refused a write
    (disk full, I/O error). sqlite3's errors do not leave this module."""


class _SetAside(Exception):
    """A readable database this aggregator must not use: `kind` names why (newer, foreign)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _layout(db: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {
        name: tuple(row[1] for row in db.execute(f"PRAGMA table_info({_quoted(name)})"))
        for name in names
        if not name.startswith("sqlite_")
    }


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class StateStore:
    """The state file. Writes (`register`, `event`, a final verdict's `publish`) are awaited: they
    return once committed, so an event is durable before it is acknowledged. The writes of every
    stream ready in one turn of the event loop are committed together, in one transaction, at the
    end of that turn: a burst's thousands of events cost a few commits, not one each (`bench/burst.py
    --state-dir` measures the ingest CPU and peak RSS). The commit runs on the loop's thread, its size
    bounded by MAX_PENDING_BYTES."""

    name = "state"

    def __init__(self, directory: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        self._clock = clock
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"state directory {self.directory}: {exc.strerror or exc}") from None
        self._db = self._open()
        self.events_written = 0
        self.commits = 0  # transactions committed by the writer (a burst's writes share one)
        self._pending: list[tuple[list[Statement], asyncio.Future[None]]] = []
        self._pending_bytes = 0
        self._committed: asyncio.Event | None = None  # set after each commit (writes over the bound wait)
        self._flushing: asyncio.Task[None] | None = None
        self._attempts_written = 0

    # -- opening: corrupt, newer and foreign files are set aside --------------------------------

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError as exc:
            self._set_aside("corrupt", f"state file {self.path} is unusable ({exc})")
        except _SetAside as exc:
            self._set_aside(exc.kind, str(exc))
        except sqlite3.Error as exc:  # pragma: no cover - a read-only mount, say
            raise StateError(f"state file {self.path}: {exc}") from None
        try:
            return self._connect()
        except (sqlite3.Error, _SetAside) as again:
            raise StateError(f"state file {self.path}: {again}") from None

    def _set_aside(self, kind: str, why: str) -> None:
        aside = self.path.with_name(f"{self.path.name}.{kind}-{int(self._clock())}")
        log.error("%s: moved to %s; starting empty (sidecars still running send their events again)", why, aside.name)
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                src.replace(Path(str(aside) + suffix))

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA quick_check").fetchall()
            found = self._version(db)  # before anything writes: a file set aside stays as it was
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._upgrade(db, found)
        except (sqlite3.Error, _SetAside):
            db.close()
            raise
        return db

    def _version(self, db: sqlite3.Connection) -> int:
        """The file's layout version (0: a new, empty file), or _SetAside."""
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        tables = _layout(db)
        if version > SCHEMA_VERSION:
            raise _SetAside(
                "newer",
                f"state file {self.path} has schema version {version}, newer than this aggregator's "
                f"{SCHEMA_VERSION} (written by a newer podmortem)",
            )
        if version == 0 and not tables:
            return 0
        found = version or 1  # a file written before versioning has layout 1
        if tables != _LAYOUTS.get(found):
            raise _SetAside(
                "foreign",
                f"state file {self.path} is not an incident state file of schema version {found} "
                f"(tables {sorted(tables)})",
            )
        return found

    def _upgrade(self, db: sqlite3.Connection, found: int) -> None:
        """Bring the file from layout `found` to SCHEMA_VERSION (0: create it), in one transaction."""
        if found == 0:
            db.executescript(f"BEGIN; {_SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
            return
        if found == SCHEMA_VERSION:
            return
        db.execute("BEGIN")
        for step in range(found, SCHEMA_VERSION):
            db.execute(_MIGRATIONS[step])
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
        log.info("state file %s: schema version %d migrated to %d", self.path, found, SCHEMA_VERSION)

    def close(self) -> None:
        self._db.close()

    # -- writes (before the ack), committed in batches ------------------------------------------------

    async def register(self, key: MemberKey, reg: pb.Register, *, verified: bool = False) -> None:
        ns, job, attempt = key.job
        size = await self._room(reg.ByteSize())
        row = (ns, job, attempt, key.pod, reg.SerializeToString(), self._clock(), int(verified))
        await self._commit([("INSERT OR REPLACE INTO registrations VALUES (?, ?, ?, ?, ?, ?, ?)", row)], size)

    async def event(self, key: MemberKey, event: pb.Event) -> None:
        ns, job, attempt = key.job
        size = await self._room(event.ByteSize())  # before serializing: a waiting write holds no copy
        row = (ns, job, attempt, key.pod, event.id, event.SerializeToString(), self._clock())
        await self._commit(
            [("INSERT OR IGNORE INTO events (ns, job, attempt, pod, id, event, at) VALUES (?, ?, ?, ?, ?, ?, ?)", row)],
            size,
        )
        self.events_written += 1

    async def _room(self, size: int) -> int:
        """Wait until `size` more bytes fit under MAX_PENDING_BYTES (or nothing else waits); `size`."""
        while self._pending_bytes + size > MAX_PENDING_BYTES and self._pending:
            if self._committed is None:
                self._committed = asyncio.Event()
            await self._committed.wait()
        return size

    async def _commit(self, statements: list[Statement], size: int = 0) -> None:
        """Returns once `statements` are committed (with whatever else was waiting); StateError if not.
        `size`: their bytes, made room for by `_room` just before (no await in between)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._pending.append((statements, done))
        self._pending_bytes += size
        if self._flushing is None or self._flushing.done():
            self._flushing = loop.create_task(self._flush(), name="state-writer")
        await done

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # one loop turn: the writes of every stream that is ready join the batch
        while self._pending:
            batch, self._pending, self._pending_bytes = self._pending, [], 0
            try:
                self._write([s for statements, _ in batch for s in statements])
            except StateError as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(StateError(str(exc)))
            else:
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)
            if self._committed is not None:
                self._committed.set()
                self._committed = None

    def _write(self, statements: Sequence[Statement]) -> None:
        """One transaction."""
        try:
            self._db.execute("BEGIN")
            for sql, params in statements:
                self._db.execute(sql, params)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            if self._db.in_transaction:
                try:
                    self._db.execute("ROLLBACK")
                except sqlite3.Error:
                    log.exception("state file %s: rollback failed", self.path)
            raise StateError(f"{exc}") from None
        self.commits += 1

    # -- a publisher: a final verdict ends the need to remember its job ---------------------------

    async def publish(self, decision: Decision) -> None:
        entry = decision.attempt
        if decision.own_attempt and entry is not None:
            await self._commit(self._attempt_rows(decision, entry))
        await self._commit(self._decision_rows(decision))

    def _decision_rows(self, decision: Decision) -> list[Statement]:
        """The verdict kept (`decisions`); a final one's job attempt forgotten."""
        inc, verdict = decision.incident, decision.verdict
        key = (inc.job.namespace, inc.job.name, inc.attempt)
        retryable = None if verdict.retryable is None else int(verdict.retryable)
        row = (
            *key, inc.job.kind, inc.job.uid, decision.revision, decision.closed_by, inc.opened_at, verdict.pod,
            verdict.category, retryable, json.dumps([m.pod for m in inc.members]), int(decision.final), self._clock(),
            inc.stalled_at,
        )  # fmt: skip
        rows: list[Statement] = [(f"INSERT OR REPLACE INTO decisions VALUES ({', '.join('?' * len(row))})", row)]
        if decision.final:
            rows += [
                (f"DELETE FROM {table} WHERE ns = ? AND job = ? AND attempt = ?", key)
                for table in ("registrations", "events")
            ]
        return rows

    def _attempt_rows(self, decision: Decision, entry: Attempt) -> list[Statement]:
        job = decision.incident.job
        rows: list[Statement] = [
            (
                "INSERT OR REPLACE INTO attempts VALUES (?, ?, ?, ?, ?, ?)",
                (job.uid, entry.attempt, job.namespace, job.name, json.dumps(entry.to_dict()), entry.decided_at),
            ),
            (
                "DELETE FROM attempts WHERE uid = ? AND attempt NOT IN "
                "(SELECT attempt FROM attempts WHERE uid = ? ORDER BY at DESC LIMIT ?)",
                (job.uid, job.uid, MAX_ATTEMPTS),
            ),
        ]
        self._attempts_written += 1
        if self._attempts_written % TRIM_EVERY == 0:
            rows.append(_TRIM_JOBS)
        return rows

    # -- restart -------------------------------------------------------------------------------

    def replay(self, book: IncidentBook, retention: float = RETENTION) -> tuple[int, int]:
        """Feed what was acknowledged before a restart into `book`: (members, events). Runs at start-up,
        before the port opens (so on the loop's thread, with nothing else to wait for it)."""
        try:
            return self._replay(book, retention)
        except sqlite3.Error as exc:
            raise StateError(f"state file {self.path}: cannot replay: {exc}") from None

    def _replay(self, book: IncidentBook, retention: float) -> tuple[int, int]:
        cutoff = self._clock() - retention
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM registrations WHERE at < ?", (cutoff,))
            self._db.execute("DELETE FROM events WHERE at < ?", (cutoff,))
            self._db.execute("DELETE FROM decisions WHERE at < ?", (cutoff,))
        self._db.execute(_TRIM_JOBS[0], _TRIM_JOBS[1])
        self._db.execute("DELETE FROM attempts WHERE at < ?", (cutoff,))
        uids: set[str] = set()
        for uid, blob in self._db.execute("SELECT uid, entry FROM attempts ORDER BY at"):
            try:
                entry = Attempt.from_dict(json.loads(blob))
            except ValueError:
                entry = None
            if entry is None:
                log.error("state: an attempt of job uid %s is unreadable; skipped", uid)
                continue
            book.history.merge(uid, (entry,))
            uids.add(uid)
        jobs = len(uids)
        for (
            ns,
            job,
            attempt,
            kind,
            uid,
            revision,
            closed_by,
            opened_at,
            pod,
            category,
            retryable,
            names,
            final,
            stalled_at,
        ) in self._db.execute(f"SELECT {', '.join(_RESTORED)} FROM decisions ORDER BY at"):
            verdict = Verdict(pod, category, None if retryable is None else bool(retryable), summary="")
            book.restore_decision(
                JobRef(ns, job, kind, uid),
                attempt,
                Restored(verdict, revision, closed_by, opened_at, tuple(json.loads(names)), bool(final), stalled_at),
            )
        members = events = 0
        known: dict[tuple[str, str, str, str], MemberKey] = {}
        for ns, job, attempt, pod, blob, verified in self._db.execute(
            "SELECT ns, job, attempt, pod, register, verified FROM registrations ORDER BY at"
        ):  # filed where they were (a later run: `<attempt>.g2`), not where the sidecar's attempt would put them
            reg = pb.Register()
            try:
                reg.ParseFromString(blob)
            except Exception as exc:  # a row we cannot read must not stop the rest
                log.error("state: registration of %s/%s unreadable: %s", ns, pod, exc)
                continue
            try:
                key = book.register(reg, verified=bool(verified), filed_under=attempt)
            except LimitExceeded as exc:
                log.error("state: registration of %s/%s not replayed: %s", ns, pod, exc)
                continue
            book.disconnected(key)  # its stream is gone; a live sidecar registers again
            known[(ns, job, attempt, pod)] = key
            members += 1
        for ns, job, attempt, pod, blob in self._db.execute(
            "SELECT ns, job, attempt, pod, event FROM events ORDER BY seq"
        ):
            member = known.get((ns, job, attempt, pod))
            if member is None:
                continue
            event = pb.Event()
            try:
                event.ParseFromString(blob)
                book.ingest(member, event, from_sidecar=True)
            except Exception as exc:
                log.error("state: an event of %s/%s could not be replayed: %s", ns, pod, exc)
                continue
            events += 1
        if members or events or jobs:
            log.info(
                "state: replayed %d member(s), %d event(s) and the attempt history of %d job(s) from %s",
                members, events, jobs, self.path,
            )  # fmt: skip
        return members, events
