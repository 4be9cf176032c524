"""Watch the TorchElastic error file and turn each new content of it into one `ErrorFile` event.

The error file is the best evidence of *why* a pod failed, and the moment it is written is the best
evidence of *when*; both must reach the aggregator quickly and exactly once per content. The file is
written by another container, at a time nobody knows, maybe into a directory that does not exist yet,
maybe in several writes, maybe rewritten (the agent copies a worker's file, later writes its own), and
it is user-controlled (it can be huge or garbage). So:

* The *parent directory* is watched, not the file (a watch on a file misses a file created later or
  replaced by rename); while the directory itself does not exist, its nearest existing ancestor is
  watched (non-recursively) until it appears. The watch is the kernel's inotify
  (`podmortem.sidecar.inotify`, its file descriptor read by the event loop): an idle sidecar sleeps in
  the kernel until something in the directory changes, and wakes within a millisecond or two when it
  does. (watchfiles, used before, polls its watcher thread every `step` ms: 100 wake-ups a second per
  watched file, 0.7 % of a core for a sidecar that does nothing, in every training pod.)
* The watch also ticks every ~0.5 s; each tick compares the file's (inode, size, mtime) with the last
  read, so an event lost by the kernel (a full queue, a filesystem without inotify such as some network
  mounts) delays a report by a tick, never forever. Where inotify cannot be had at all (not Linux, no
  watches left: `fs.inotify.max_user_watches`) or `PODMORTEM_FORCE_POLLING` is set, the tick is all.
* A file that does not parse may be half written: it is reported (once, with `parse_error`) only after
  it stayed unchanged and unparsable for the settle period, or at shutdown. The same goes for a file
  over 1 MiB (torch writes a few KiB; a huge one is probably still growing). Parsing is bounded in
  memory by `podmortem.core.errorfile.read_error_file` (files over 1 MiB are salvaged from head and tail).
* Event ids are `wire.error_event_id` (a hash of the content's facts): a rewrite with new content is
  a new event, the same content seen again (or after a sidecar restart) is the same event.
* The event's wall time is the file's mtime (the pod's clock, sub-second) when it is not in the
  future: it says when the failing process wrote the file, which is what orders pods that failed
  within the same second of the file's own whole-second timestamp.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from podmortem import settings
from podmortem.core import errorfile
from podmortem.core.model import ErrorRecord
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar import inotify
from podmortem.sidecar.config import FORCE_POLLING
from podmortem.sidecar.outbox import describe

logger = logging.getLogger(__name__)

TICK_MS = 500
# After the first change, wait this long for the rest of a write (torch writes its error file in a few
# write() calls, then closes it): one read of the whole file instead of one per part.
COALESCE_S = 0.005
FORCE_POLLING_ENV = FORCE_POLLING.env

# What changes a file in the watched directory (written and closed, written, created, moved in or out,
# deleted), and what ends the watch itself (the directory deleted or moved; the kernel then drops it).
_DIR_MASK = (
    inotify.CLOSE_WRITE
    | inotify.MODIFY
    | inotify.CREATE
    | inotify.MOVED_TO
    | inotify.MOVED_FROM
    | inotify.DELETE
    | inotify.DELETE_SELF
    | inotify.MOVE_SELF
)
_GONE = inotify.DELETE_SELF | inotify.MOVE_SELF | inotify.IGNORED


def force_polling_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """The --force-polling setting as the environment gives it (the process's own when `environ` is None)."""
    return settings.is_true(settings.read((FORCE_POLLING,), environ).get(FORCE_POLLING.dest))


def _nearest_existing_dir(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            return candidate
    return Path(path.anchor or "/")


def _moved_on(watched: Path, target: Path) -> bool:
    """The watched directory went away, or a deeper one on the way to the target appeared."""
    return not watched.is_dir() or (watched != target and _nearest_existing_dir(target) != watched)


def _open_inotify() -> inotify.INotify | None:
    try:
        return inotify.INotify()
    except (OSError, AttributeError) as exc:  # not Linux, or the per-user instance limit reached
        logger.warning("inotify is not available (%s): watching by polling every tick", exc)
        return None


async def _ticks(tick_s: float) -> AsyncIterator[bool]:
    while True:
        await asyncio.sleep(tick_s)
        yield False


async def watch_path(
    path: Path,
    *,
    tick_ms: int = TICK_MS,
    force_polling: bool | None = None,
) -> AsyncIterator[bool]:
    """Yield True when `path` may have changed (also once at the start and after every re-watch), False
    on a quiet tick. Copes with the file or its directories being created late or deleted."""
    path = Path.cwd() / path if not path.is_absolute() else path
    target, name = path.parent, path.name
    tick_s = tick_ms / 1000
    yield True
    polling = force_polling if force_polling is not None else force_polling_from_env()
    notify = None if polling else _open_inotify()
    if notify is None:
        async for quiet in _ticks(tick_s):
            yield quiet
        return
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    loop.add_reader(notify.fileno(), ready.set)
    try:
        while True:
            watched = _nearest_existing_dir(target)
            try:
                wd = notify.add_watch(watched, _DIR_MASK)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):  # removed while the watch was being set up
                    logger.debug("re-watching %s after %s", path, exc)
                    await asyncio.sleep(tick_s)
                    yield True
                    continue
                logger.warning("cannot watch %s (%s): watching by polling every tick", watched, exc)
                async for quiet in _ticks(tick_s):
                    yield quiet
                return
            if watched != target:
                logger.info("%s does not exist yet; watching %s until it appears", target, watched)
            async for changed in _events(notify, ready, wd, watched, target, name, tick_s):
                yield changed
            try:
                notify.rm_watch(wd)
            except OSError:  # the kernel dropped it already (the directory went away)
                pass
            yield True
    finally:
        loop.remove_reader(notify.fileno())
        notify.close()


async def _events(
    notify: inotify.INotify,
    ready: asyncio.Event,
    wd: int,
    watched: Path,
    target: Path,
    name: str,
    tick_s: float,
) -> AsyncIterator[bool]:
    """One directory's watch: True for a change of `name` in `target`, False on a quiet tick; ends when
    the watch must be set up again (the directory went away, or a deeper one on the way appeared)."""
    while True:
        try:
            # Not asyncio.wait_for: on 3.11 it swallows a cancellation that arrives as the event is set
            # (a shutdown that never ends); a timeout scope only ever converts its own.
            async with asyncio.timeout(tick_s):
                await ready.wait()
        except TimeoutError:
            if _moved_on(watched, target):
                return  # missed by the kernel's events (a full queue): caught by the tick
            yield False
            continue
        await asyncio.sleep(COALESCE_S)
        ready.clear()
        ours = again = False
        for event in notify.read():
            if event.mask & inotify.Q_OVERFLOW:
                ours = True  # events were lost: look
            elif event.wd != wd:
                continue  # a watch removed earlier
            elif event.mask & _GONE:
                again = True
            elif watched == target:
                ours = ours or event.name == name
            else:
                again = again or _moved_on(watched, target)
        if again:
            return
        if ours:
            yield True


@dataclass
class _Unsettled:
    record: ErrorRecord
    since: float  # monotonic seconds
    wall: float


class ErrorFileWatcher:
    """Turns the error file's contents into events handed to `emit` (usually `Outbox.put`)."""

    def __init__(
        self,
        path: Path,
        pod_key: str,
        emit: Callable[[pb.Event], object],
        *,
        settle_seconds: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        tick_ms: int | None = None,
        force_polling: bool | None = None,
    ) -> None:
        self.path = Path(path)
        self.pod_key = pod_key
        self._emit = emit
        self.settle_seconds = settle_seconds
        self._monotonic = monotonic
        self._wall = wall
        self._tick_ms = tick_ms if tick_ms is not None else max(50, min(TICK_MS, int(settle_seconds * 500)))
        self._force_polling = force_polling
        self._signature: tuple[int, int, int] | None = None
        self._unsettled: _Unsettled | None = None
        self._sent: set[str] = set()
        # When the training container's current run started (pod clock, whole seconds, from the pod's
        # status): a file last written before it is the previous run's, left in the shared volume, and
        # is not this run's failure. None: not known (then every file counts).
        self.not_before: float | None = None
        self._stale: tuple[int, int, int] | None = None  # the stale file last logged as such

    async def run(self) -> None:
        """Watch until cancelled."""
        logger.info("watching error file %s", self.path)
        async for changed in watch_path(self.path, tick_ms=self._tick_ms, force_polling=self._force_polling):
            self.check(force=changed)

    def check(self, *, force: bool = False, final: bool = False) -> pb.Event | None:
        """Look at the file once; emit and return an event when it holds something new.

        `force` re-reads even if (inode, size, mtime) look unchanged; `final` (shutdown) reports an
        unparsable file without waiting for it to settle.
        """
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._signature is not None:
                logger.info("error file %s was removed", self.path)
            self._signature = None
            self._unsettled = None
            return None
        except OSError:
            st = None  # read_error_file reports it as a parse error
        signature = (st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else None
        if st is not None and self.not_before is not None and st.st_mtime < self.not_before:
            if signature != self._stale:
                self._stale = signature
                logger.info(
                    "error file %s predates the container's current run: the previous run's, not sent", self.path
                )
            self._signature, self._unsettled = None, None
            return None
        if signature is not None and signature == self._signature and not (force or final):
            return self._settle(final)
        self._signature = signature
        record = errorfile.read_error_file(self.path, within=self.path.parent)
        if record is None:  # removed between stat and open
            self._signature = None
            self._unsettled = None
            return None
        wall = self._wall_time(st)
        huge = record.size_bytes > errorfile.MAX_FILE_BYTES
        if record.parse_error or huge:
            # Maybe still being written: report it once it stopped changing (a huge file would
            # otherwise give one event per watch batch while it grows).
            if self._unsettled is None or self._unsettled.record != record:
                if record.parse_error:
                    logger.info("error file %s is not parsable (yet): %s", self.path, record.parse_error)
                else:
                    logger.info("error file %s is %d bytes; waiting for it to settle", self.path, record.size_bytes)
                self._unsettled = _Unsettled(record, self._monotonic(), wall)
            return self._settle(final)
        self._unsettled = None
        return self._send(record, wall)

    def _settle(self, final: bool) -> pb.Event | None:
        pending = self._unsettled
        if pending is None:
            return None
        if not final and self._monotonic() - pending.since < self.settle_seconds:
            return None
        self._unsettled = None
        record = pending.record
        if record.parse_error:
            logger.warning(
                "error file %s stayed unparsable%s: %s",
                self.path,
                "" if final else f" for {self.settle_seconds:g}s",
                record.parse_error,
            )
        else:
            logger.warning(
                "error file %s is %d bytes (over the %d-byte limit): only its head and tail were read",
                self.path,
                record.size_bytes,
                errorfile.MAX_FILE_BYTES,
            )
        return self._send(record, pending.wall)

    def _send(self, record: ErrorRecord, wall: float) -> pb.Event | None:
        event_id = wire.error_event_id(self.pod_key, record)
        if event_id in self._sent:
            logger.debug("error file %s: same content as already reported [id %s]", self.path, event_id)
            return None
        self._sent.add(event_id)
        event = wire.make_event(wire.error_to_pb(record), event_id, wall=wall)
        logger.info("observed %s", describe(event))
        self._emit(event)
        return event

    def _wall_time(self, st: os.stat_result | None) -> float:
        now = self._wall()
        if st is None:
            return now
        mtime = st.st_mtime_ns / 1e9
        return mtime if mtime <= now else now
