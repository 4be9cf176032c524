"""Is the training container still making progress? `Activity` events, on change only.

A hung job prints nothing: every rank waits in a collective until its timeout (10 to 30 minutes). With a
stall-after S (`PODMORTEM_STALL_AFTER`, the pod's `podmortem.io/stall-after`), the sidecar sends
`Activity(quiet=true)` once its training container has shown no progress for S, and `Activity(quiet=false)`
when progress resumes; nothing else, and nothing while it keeps doing what it did. The aggregator calls a
job stalled when every member is quiet, and asks every sidecar to capture.

Progress is:

* **Output**: the training container's log grew. Locally (`PODMORTEM_LOG_FILE`) its size and mtime (a
  `stat`); in a cluster, the timestamp of the log's last line, read from the API server as
  `GET .../pods/<pod>/log?container=<c>&tailLines=1&timestamps=true&limitBytes=512` (`OwnPod.last_output`).
  The kubelet answers a `tailLines` read by seeking back from the end of the log file
  (`tail.FindTailLineStartIndex` in pkg/kubelet/kuberuntime/logs/logs.go), so the read costs a block of
  the file however long the log is; `sinceSeconds` would scan the file from its start.
* **A completed collective**, where the worker control plane is there (`Capturer.completed`): the
  `last_completed_collective` of each process group in each local worker's Flight Recorder. It is sampled
  only while the log is silent, at S/2 and S after the last output, so a job that prints is never asked.

Cost: the detector sleeps until the earliest moment the container could become quiet, the last progress
+ S (+ S/2 for the collective sample), and looks again then: one look per S while the job prints at least
once per S (one log read of the API per pod per S in a cluster: with S = 5 min and 1,000 pods, 3.3 reads a
second for the whole cluster), and one every `QUIET_POLL` (or S, when shorter) while quiet, to see it
resume: any progress since the report, however long ago, is reported (`quiet=false`), and quiet again at
the next look if it has been silent for S since. Quiet is sent within S (+ the look's own time) of the
last progress (`bench/capture_cost.py` measures the idle CPU).
The detector stops once the training container has ended (its termination says the rest).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb

logger = logging.getLogger(__name__)

QUIET_POLL = 10.0  # seconds between looks while quiet, to see progress resume
MIN_SLEEP = 0.5

# The last output's time (pod clock), or None when unknown; and the collectives' progress sample.
LastOutput = Callable[[], Awaitable[float | None]]
Completed = Callable[[], Awaitable[object | None]]


def file_output(path: Path) -> LastOutput:
    """The last output of a local log file: its mtime, when it exists."""

    async def last() -> float | None:
        try:
            return os.stat(path).st_mtime
        except OSError:
            return None

    return last


class ActivityDetector:
    """Sends `Activity` on each quiet <-> active change of the training container (module docstring)."""

    def __init__(
        self,
        stall_after: float,
        emit: Callable[[pb.Event], object],
        *,
        last_output: LastOutput | None = None,
        completed: Completed | None = None,
        ended: Callable[[], bool] = lambda: False,
        pod_key: str = "",
        clock: Callable[[], float] = time.time,
        quiet_poll: float = QUIET_POLL,
    ) -> None:
        if stall_after <= 0:
            raise ValueError("stall_after must be > 0")
        self.stall_after = stall_after
        self._emit = emit
        self._last_output = last_output
        self._completed = completed
        self._ended = ended
        self._clock = clock
        self.quiet_poll = min(quiet_poll, stall_after)
        self.progress = clock()  # the sidecar's start counts as progress: nothing is quiet before S
        self.quiet = False
        self.sent = 0
        self.looks = 0
        self._sample: object | None = None  # the collectives' last sample during this silence
        self._sampled_at: float | None = None
        self._ids = f"{pod_key}/activity/{os.urandom(6).hex()}"  # unique per sidecar process

    async def run(self) -> None:
        """Look, sleep until the next moment that matters, again; until cancelled or the container ended."""
        while not self._ended():
            wake = await self.step()
            await asyncio.sleep(max(wake - self._clock(), MIN_SLEEP))
        logger.info("the training container ended: activity detection stops")

    async def step(self) -> float:
        """One look: update the progress, send a change; the time of the next look (this clock)."""
        self.looks += 1
        moved = False
        if self._last_output is not None:
            out = await self._last_output()
            if out is not None and out > self.progress:
                self.progress = min(out, self._clock())  # a file's mtime may lie in the future
                self._sample, self._sampled_at = None, None
                moved = True
        now = self._clock()
        half = self.stall_after / 2
        if self._completed is not None and now - self.progress >= half:
            sample = await self._completed()
            now = self._clock()
            if sample is not None:
                if self._sample is not None and sample != self._sample:
                    self.progress = now  # a collective completed while the log was silent
                    moved = True
                self._sample, self._sampled_at = sample, now
        silent = now - self.progress
        if self.quiet and moved:  # it moved since it was reported quiet, however long ago: say so
            self.quiet = False
            self._send(False, 0.0)
        quiet = silent >= self.stall_after
        if quiet != self.quiet:
            self.quiet = quiet
            self._send(quiet, silent if quiet else 0.0)
        if quiet:
            return now + self.quiet_poll
        if self._completed is not None and self._sampled_at is None:
            return max(self.progress + half, now + MIN_SLEEP)
        return max(self.progress + self.stall_after, now + MIN_SLEEP)

    def _send(self, quiet: bool, silent: float) -> None:
        self.sent += 1
        activity = wire.activity_to_pb(quiet, max(silent, 0.0), last_progress=self.progress)
        event_id = f"{self._ids}/{self.sent}"
        logger.info(
            "training container %s (last progress %.1fs ago)", "quiet" if quiet else "active again", max(silent, 0.0)
        )
        self._emit(wire.make_event(activity, event_id))
