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
seconds are dropped at start-up, so the file stays bounded. Journal mode WAL with
`synchronous=NORMAL`: a commit survives the process being killed (SIGKILL, OOM) — the case this is
for — though not necessarily a power loss of the node.

A file that is not a readable database is moved aside (`<name>.corrupt-<time>`) with an error in
the log, and the aggregator starts empty rather than not at all.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import IncidentBook, JobKey, MemberKey
from podmortem.aggregator.intake import LimitExceeded
from podmortem.protocol.v1 import collector_pb2 as pb

log = logging.getLogger(__name__)

FILE_NAME = "incidents.sqlite3"
RETENTION = 7 * 24 * 3600.0

_SCHEMA = """
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


class StateError(RuntimeError):
    """The state directory cannot be used at all (not a directory, not writable)."""


class StateStore:
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

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(self._clock())}")
            log.error("state file %s is unusable (%s): moved to %s; starting empty", self.path, exc, aside.name)
            for suffix in ("", "-wal", "-shm"):
                src = Path(str(self.path) + suffix)
                if src.exists():
                    src.replace(Path(str(aside) + suffix))
            try:
                return self._connect()
            except sqlite3.DatabaseError as again:
                raise StateError(f"state file {self.path}: {again}") from None
        except sqlite3.OperationalError as exc:  # pragma: no cover - a read-only mount, say
            raise StateError(f"state file {self.path}: {exc}") from None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            db.execute("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def close(self) -> None:
        self._db.close()

    # -- writes (before the ack) -----------------------------------------------------------------

    def register(self, key: MemberKey, reg: pb.Register) -> None:
        ns, job, attempt = key.job
        self._db.execute(
            "INSERT OR REPLACE INTO registrations VALUES (?, ?, ?, ?, ?, ?)",
            (ns, job, attempt, key.pod, reg.SerializeToString(), self._clock()),
        )

    def event(self, key: MemberKey, event: pb.Event) -> None:
        ns, job, attempt = key.job
        self._db.execute(
            "INSERT OR IGNORE INTO events (ns, job, attempt, pod, id, event, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (ns, job, attempt, key.pod, event.id, event.SerializeToString(), self._clock()),
        )
        self.events_written += 1

    def forget(self, job: JobKey) -> None:
        with self._db:
            self._db.execute("BEGIN")
            for table in ("registrations", "events"):
                self._db.execute(f"DELETE FROM {table} WHERE ns = ? AND job = ? AND attempt = ?", job)

    # -- a publisher: a final verdict ends the need to remember its job ---------------------------

    async def publish(self, decision: Decision) -> None:
        if decision.final:
            inc = decision.incident
            self.forget((inc.job.namespace, inc.job.name, inc.attempt))

    # -- restart -------------------------------------------------------------------------------

    def replay(self, book: IncidentBook, retention: float = RETENTION) -> tuple[int, int]:
        """Feed what was acknowledged before a restart into `book`: (members, events)."""
        cutoff = self._clock() - retention
        with self._db:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM registrations WHERE at < ?", (cutoff,))
            self._db.execute("DELETE FROM events WHERE at < ?", (cutoff,))
        members = events = 0
        known: dict[tuple[str, str, str, str], MemberKey] = {}
        for ns, job, attempt, pod, blob in self._db.execute(
            "SELECT ns, job, attempt, pod, register FROM registrations ORDER BY at"
        ):
            reg = pb.Register()
            try:
                reg.ParseFromString(blob)
            except Exception as exc:  # a row we cannot read must not stop the rest
                log.error("state: registration of %s/%s unreadable: %s", ns, pod, exc)
                continue
            try:
                key = book.register(reg)
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
        if members or events:
            log.info("state: replayed %d member(s) and %d event(s) from %s", members, events, self.path)
        return members, events
