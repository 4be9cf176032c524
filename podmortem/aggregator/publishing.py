"""Verdicts leave the aggregator through one queue drained by one worker.

The incident book decides; it never waits on a slow disk or on the Kubernetes API. It puts a
`Decision` on the `PublishQueue`, and a single worker hands each decision to every publisher in
turn. A publisher that fails is logged and does not stop the others (publishers that talk to remote
APIs retry on their own, see the Kubernetes publishers). On shutdown the queue is drained with a
deadline so a verdict decided just before a SIGTERM still lands.

Publishers here: a log line, a JSON verdict file per incident (the embedded default when no cluster
is configured) and Prometheus metrics (`metrics.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from podmortem.aggregator.decisions import Decision, Term

log = logging.getLogger(__name__)


class Fence(Protocol):
    """May this replica act now? Under leader election it is the `LeaderElector`; a process that runs
    alone has none, and every write may go ahead."""

    async def confirm(self) -> Term | None:
        """The term to act under, re-verified against the API when in doubt; None: do not write."""
        ...

    def may_act(self) -> bool:
        """The same without waiting: the last renewal of the Lease is within the renew deadline."""
        ...


class Publisher(Protocol):
    name: str

    async def publish(self, decision: Decision) -> None: ...


class LogPublisher:
    """One readable log line per decision."""

    name = "log"

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or log

    async def publish(self, decision: Decision) -> None:
        v = decision.verdict
        where = f"pod {v.pod}" + (f" (rank {v.rank})" if v.rank is not None else "")
        where += f" on {v.node}" if v.node else ""
        self._log.warning(
            "verdict for %s attempt %r [revision %d, %s, %d/%d reported]: %s — %s, retryable=%s: %s",
            decision.incident.job.key,
            decision.incident.attempt,
            decision.revision,
            decision.closed_by,
            decision.reported,
            decision.incident.world_size,
            where if v.pod else "no failed pod",
            v.category,
            v.retryable,
            v.summary,
        )


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def verdict_path(directory: Path, incident_id: str) -> Path:
    return directory / (_UNSAFE.sub("_", incident_id) + ".json")


class JsonFilePublisher:
    """Writes `<dir>/<incident-id>.json`, atomically replaced on every revision.

    A verdict that cannot be written (disk full, a read-only or vanished mount) is not lost: the newest
    revision of each incident waits in `unwritten`, is tried again before every later write and every
    `retry_interval` seconds (`retry_forever`, a root task of the aggregator), and at shutdown. Each
    failed attempt raises, so the publish queue logs it and `podmortem_publish_errors_total` counts it.

    Files get `mode` (0600 unless `--verdict-file-mode` says otherwise: podmortem/aggregator/config.py says
    why), whatever the umask.
    """

    name = "json-file"

    def __init__(self, directory: str | os.PathLike[str], retry_interval: float = 30.0, mode: int = 0o600) -> None:
        self.directory = Path(directory)
        self.retry_interval = retry_interval
        self.mode = mode
        self.unwritten: dict[str, Decision] = {}  # incident id -> newest revision not yet on disk

    async def publish(self, decision: Decision) -> None:
        self.unwritten[decision.incident.incident_id] = decision
        await self.flush()

    async def flush(self) -> None:
        """Write every unwritten verdict, oldest incident first; raises the first failure (the rest wait)."""
        for incident_id, decision in list(self.unwritten.items()):
            await asyncio.to_thread(self._write, decision)
            if self.unwritten.get(incident_id) is decision:
                del self.unwritten[incident_id]

    async def retry_forever(self) -> None:
        while True:
            await asyncio.sleep(self.retry_interval)
            if self.unwritten:
                try:
                    await self.flush()
                    log.info("verdict files written again")
                except OSError as exc:
                    log.warning("%d verdict file(s) still not written: %s", len(self.unwritten), exc)

    def _write(self, decision: Decision) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        target = verdict_path(self.directory, decision.incident.incident_id)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".verdict-", suffix=".tmp")
        try:
            os.fchmod(fd, self.mode)  # mkstemp makes it 0600
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(decision.to_dict(), f, indent=2, sort_keys=True)
                f.write("\n")
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


class PublishQueue:
    """The one path from decisions to publishers: `submit` from anywhere on the loop, one worker drains.

    With a `fence` (leader election), every publisher's turn waits for it: a decision is published
    only under a confirmed term, which is stamped on it (`Decision.term`); when the fence says no, the
    rest of the decision is not published here (logged, counted in `fenced`, `on_fenced` called) and
    is left to the replica that leads."""

    def __init__(
        self,
        publishers: Sequence[Publisher],
        fence: Fence | None = None,
        on_fenced: Callable[[Decision], None] | None = None,
    ) -> None:
        self.publishers = list(publishers)
        self.fence = fence
        self.on_fenced = on_fenced
        self._queue: asyncio.Queue[Decision] = asyncio.Queue()
        self.published = 0
        self.fenced = 0

    def submit(self, decision: Decision) -> None:
        self._queue.put_nowait(decision)

    async def run(self) -> None:
        while True:
            decision = await self._queue.get()
            try:
                await self._publish(decision)
            finally:
                self._queue.task_done()

    async def _publish(self, decision: Decision) -> None:
        for publisher in self.publishers:
            if self.fence is not None:
                term = await self.fence.confirm()
                if term is None:
                    self.fenced += 1
                    log.error(
                        "not the leader (the lease is not confirmed): incident %s revision %d not published "
                        "by this replica (%s and later publishers skipped)",
                        decision.incident.incident_id,
                        decision.revision,
                        publisher.name,
                    )
                    if self.on_fenced is not None:
                        self.on_fenced(decision)
                    return
                if decision.term != term:
                    decision = replace(decision, term=term)
            try:
                await publisher.publish(decision)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "publisher %s failed for incident %s (revision %d)",
                    publisher.name,
                    decision.incident.incident_id,
                    decision.revision,
                )
        self.published += 1

    async def drain(self, within: float) -> bool:
        """Wait until everything submitted is published; False when the deadline passed first."""
        try:
            await asyncio.wait_for(self._queue.join(), within)
        except TimeoutError:
            log.error("shutdown: %d verdict(s) not published within %.1fs", self._queue.qsize(), within)
            return False
        return True
