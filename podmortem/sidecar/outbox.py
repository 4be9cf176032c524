"""Every event the sidecar observed, kept until the aggregator acknowledges it.

The aggregator may restart, or the network between pod and aggregator may break, exactly when a job
fails — the moment the events matter most. So observations do not go to the stream directly: they go
into this outbox, in order, deduplicated by event id, and leave it only when an `Ack` names them. After
a reconnect the stream sends `pending()` again; the aggregator deduplicates by id, so sending twice is
harmless and losing is not.

Bound and policy: the outbox holds at most `max_events` events / `max_bytes` serialized bytes *of
droppable events*. Failure facts — error files, terminations, conditions, deletions — are never
dropped: they are few by construction (one per distinct error-file content, one per container run,
one per condition or deletion) and each is small (messages and tracebacks are cut by the parser). Log
tails are big and only context: when the outbox is over its bound, older pending log tails are dropped
first, oldest first, keeping the newest; a failure event is still accepted when the bound is exceeded,
with a warning. One exception keeps memory bounded when the aggregator is away for long: an error file
rewritten again and again is one *source*, and of its pending versions only the first (the earliest
failure time) and the newest are kept — the ones a verdict reads.

The same rule holds for what is kept for a restarted aggregator (`redeliver`): over its bound, the
middle of a source's history goes first, never the first or the newest of any kind.

Single event loop, no locks: `put`/`ack` are plain methods; the stream's writer waits with
`wait_beyond(seq)` for events it has not sent on its current connection, and the shutdown path waits
with `wait_empty()` until everything is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass

from podmortem.protocol.v1 import collector_pb2 as pb

logger = logging.getLogger(__name__)

DROPPABLE_KINDS = frozenset({"log_tail"})


def describe(event: pb.Event) -> str:
    """One short line about an event for the logs."""
    kind = event.WhichOneof("payload") or "empty"
    if kind == "error_file":
        e = event.error_file
        if e.parse_error:
            what = f"unparsable error file ({e.parse_error}, {e.size_bytes} bytes)"
        else:
            ts = str(e.timestamp) if e.HasField("timestamp") else "?"
            code = f" errorCode={e.error_code}" if e.HasField("error_code") else ""
            what = f"error file {e.message[:160]!r} (timestamp {ts}{code})"
    elif kind == "termination":
        t = event.termination
        code = str(t.exit_code) if t.HasField("exit_code") else "?"
        sig = f" signal {t.signal}" if t.HasField("signal") else ""
        what = f"termination exit {code}{sig} reason {t.reason or '?'} (run {t.restart_count})"
    elif kind == "condition":
        c = event.condition
        what = f"condition {c.type}={c.status} reason {c.reason or '?'}"
    elif kind == "deletion":
        d = event.deletion
        what = f"deletion phase {d.phase or '?'} reason {d.reason or '?'}"
    elif kind == "log_tail":
        what = f"log tail {len(event.log_tail.text)} bytes{' (truncated)' if event.log_tail.truncated else ''}"
    elif kind == "activity":
        a = event.activity
        what = f"activity {'quiet' if a.quiet else 'active'} ({a.quiet_seconds:.0f}s)"
    elif kind == "capture":
        cap = event.capture
        paths = ", ".join(sorted({w.path for w in cap.workers})) or "no path"
        note = f": {cap.note}" if cap.note else ""
        what = f"capture ({cap.trigger}) of {len(cap.workers)} worker(s) via {paths}{note}"
    else:
        what = kind
    return f"{what} [id {event.id}]"


def _middle_of_a_source(events: OrderedDict[str, pb.Event]) -> str | None:
    """The oldest event that is neither the first nor the newest of its kind (None when all are)."""
    first: dict[str, str] = {}
    last: dict[str, str] = {}
    for event_id, event in events.items():
        kind = event.WhichOneof("payload") or ""
        first.setdefault(kind, event_id)
        last[kind] = event_id
    keep = set(first.values()) | set(last.values())
    return next((event_id for event_id in events if event_id not in keep), None)


@dataclass
class _Entry:
    seq: int
    event: pb.Event
    size: int
    kind: str


class Outbox:
    """Ordered, deduplicated, bounded store of unacknowledged events."""

    def __init__(self, max_events: int = 256, max_bytes: int = 8 << 20, remember_acked: int = 4096) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0
        self._seq = 0
        self._acked: deque[str] = deque(maxlen=remember_acked)
        self._acked_set: set[str] = set()
        # Acknowledged events, kept (bounded) so that a *restarted* aggregator, which lost what its
        # previous incarnation acknowledged, can be given them again (`redeliver`).
        self._delivered: OrderedDict[str, pb.Event] = OrderedDict()
        self._waiters: list[asyncio.Future[None]] = []
        self.dropped = 0
        self._over_warned = False

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._entries

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest event ever put (0 when none)."""
        return self._seq

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def put(self, event: pb.Event) -> bool:
        """Keep an event until acknowledged. False when its id is already pending or was acknowledged."""
        if not event.id:
            raise ValueError("an event needs an id")
        if event.id in self._entries or event.id in self._acked_set:
            return False
        self._seq += 1
        entry = _Entry(self._seq, event, event.ByteSize(), event.WhichOneof("payload") or "")
        self._entries[event.id] = entry
        self._bytes += entry.size
        if entry.kind == "error_file":
            self._keep_first_and_newest(entry.kind)
        self._enforce_bound()
        self._wake()
        return True

    def ack(self, event_ids: Iterable[str]) -> list[pb.Event]:
        """Forget acknowledged events; returns those that were pending (unknown ids are ignored)."""
        done: list[pb.Event] = []
        for event_id in event_ids:
            entry = self._entries.pop(event_id, None)
            if entry is None:
                continue
            self._bytes -= entry.size
            done.append(entry.event)
            self._remember(event_id)
            self._keep_delivered(entry)
        if done:
            self._wake()
        return done

    def redeliver(self) -> int:
        """Put every kept acknowledged event back in line (the aggregator restarted); returns how many."""
        moved = 0
        for event_id, event in list(self._delivered.items()):
            if event_id in self._entries:
                continue
            self._seq += 1
            self._entries[event_id] = _Entry(self._seq, event, event.ByteSize(), event.WhichOneof("payload") or "")
            self._bytes += self._entries[event_id].size
            moved += 1
        self._delivered.clear()
        if moved:
            self._wake()
        return moved

    def _keep_delivered(self, entry: _Entry) -> None:
        if entry.kind in DROPPABLE_KINDS:  # only the newest log tail is worth giving again
            for old in [i for i, e in self._delivered.items() if e.WhichOneof("payload") == entry.kind]:
                del self._delivered[old]
        self._delivered[entry.event.id] = entry.event
        while len(self._delivered) > self.max_events:
            victim = _middle_of_a_source(self._delivered)
            if victim is None:
                break
            dropped = self._delivered.pop(victim)
            logger.warning("forgetting acknowledged %s (history bound)", describe(dropped))

    def _keep_first_and_newest(self, kind: str) -> None:
        """Of the pending events of one source, keep the first and the newest; drop those between."""
        same = [e for e in self._entries.values() if e.kind == kind]
        for entry in same[1:-1]:
            del self._entries[entry.event.id]
            self._bytes -= entry.size
            self.dropped += 1
            logger.info("superseded before it was acknowledged: %s", describe(entry.event))

    def pending(self) -> list[pb.Event]:
        """Every unacknowledged event, oldest first."""
        return [e.event for e in self._entries.values()]

    def after(self, seq: int) -> list[tuple[int, pb.Event]]:
        """Pending events put after sequence number `seq`, oldest first, with their sequence numbers."""
        return [(e.seq, e.event) for e in self._entries.values() if e.seq > seq]

    async def wait_beyond(self, seq: int) -> None:
        """Return once an event newer than `seq` has been put."""
        while self._seq <= seq:
            await self._wait_change()

    async def wait_empty(self) -> None:
        """Return once every event put so far has been acknowledged (or dropped)."""
        while self._entries:
            await self._wait_change()

    async def _wait_change(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        finally:
            if fut in self._waiters:
                self._waiters.remove(fut)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def _remember(self, event_id: str) -> None:
        if len(self._acked) == self._acked.maxlen:
            self._acked_set.discard(self._acked[0])
        self._acked.append(event_id)
        self._acked_set.add(event_id)

    def _over(self) -> bool:
        return len(self._entries) > self.max_events or self._bytes > self.max_bytes

    def _enforce_bound(self) -> None:
        if not self._over():
            self._over_warned = False
            return
        droppable = [e for e in self._entries.values() if e.kind in DROPPABLE_KINDS]
        for entry in droppable[:-1]:  # oldest first; the newest log tail stays
            if not self._over():
                break
            del self._entries[entry.event.id]
            self._bytes -= entry.size
            self.dropped += 1
            logger.warning(
                "outbox over its bound (%d events, %d bytes): dropped %s",
                len(self._entries),
                self._bytes,
                describe(entry.event),
            )
        if self._over() and not self._over_warned:
            self._over_warned = True
            logger.warning(
                "outbox holds %d unacknowledged events (%d bytes), over its bound of %d events / %d bytes; "
                "failure events are never dropped — is the aggregator reachable?",
                len(self._entries),
                self._bytes,
                self.max_events,
                self.max_bytes,
            )
