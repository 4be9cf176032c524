"""Deciding: when and where the engine runs on an incident, so that acks never wait behind it.

The book says what to decide; this module runs `decide` on it. A small incident is decided inline on
the loop; one with at least `offload_members` members in a worker thread, its verdict handed back on
the loop. Late events after a verdict are coalesced: one revision per `revise_delay` seconds (on the
loop clock), and one more when late events arrived while a decision ran. A member whose data makes the
engine fail is set aside with a logged reason (found by deciding each member alone), and the incident
is decided without it.

`Deciding.verdict` is the one way to the engine outside the book's own decisions: the hold desk asks it
through `Reused`, which keeps each job's incident and verdict for a short window so that a burst of
holds costs one decision, not one per pod.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from podmortem.core.model import Incident, Verdict

log = logging.getLogger(__name__)

Decide = Callable[[Incident], Verdict]
K = TypeVar("K", bound=Hashable)

# The incident and its verdict, built for one member of a job, are reused for the next ones asked for within
# this long, or within VERDICT_REUSE_PER_DECISION times as long as the job's last decision took, whichever
# is longer (a burst of victims holding at once: one incident and one engine decision, not one per pod;
# each member's own facts are read fresh). A verdict is then about as old as a decision takes, and
# deciding for the holds takes at most about a third of the time, however large the job (`bench/hold_cost.py
# --api` measures it; figures in docs/benchmarks.md).
VERDICT_REUSE = 0.25
VERDICT_REUSE_PER_DECISION = 3.0


@dataclass
class Pending:
    """One job's decisions in flight: a revision due (late events coalesce), a decision in a worker thread."""

    revise: Callable[[], None]  # when due: clears `revise_timer`, decides the job again (the book's)
    revise_timer: asyncio.TimerHandle | None = None  # a revision is due
    deciding: bool = False  # a decision runs in a worker thread
    dirty: bool = False  # more late events arrived while it ran


class Deciding:
    def __init__(self, decide: Decide, revise_delay: float = 0.5, offload_members: int = 256) -> None:
        self._decide = decide
        self.revise_delay = revise_delay
        self.offload_members = offload_members
        self._tasks: set[asyncio.Task[None]] = set()  # decisions running in worker threads

    def decide(
        self, pending: Pending, name: str, incident: Incident, then: Callable[[Verdict], None], inline: bool = False
    ) -> None:
        """Decide `incident` and pass the verdict to `then`: now, or from a worker thread for a large one."""
        if inline or len(incident.members) < self.offload_members:
            then(self.safe_decide(incident))
        else:
            self._offload(pending, name, incident, then)

    def schedule_revision(self, pending: Pending) -> None:
        """A late event: revise once the burst it belongs to is over (one revision per `revise_delay`)."""
        if pending.deciding:
            pending.dirty = True
        elif pending.revise_timer is None:
            pending.revise_timer = asyncio.get_running_loop().call_later(self.revise_delay, pending.revise)

    def take_due(self, pending: Pending) -> bool:
        """Shutdown: is a revision due? Its timer is cancelled (the caller decides it now)."""
        if pending.revise_timer is None and not pending.dirty:
            return False
        if pending.revise_timer is not None:
            pending.revise_timer.cancel()
        pending.revise_timer, pending.dirty = None, False
        return True

    async def settle(self) -> None:
        """Wait for the decisions running in worker threads (before the book's `close_all` at shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _offload(self, pending: Pending, name: str, incident: Incident, then: Callable[[Verdict], None]) -> None:
        """Decide a large incident in a worker thread; `then` runs back on the loop with the verdict."""
        pending.deciding = True

        async def run() -> None:
            try:
                verdict, _ = await self.verdict(incident)  # large: in a worker thread
            finally:
                pending.deciding = False
            then(verdict)
            if pending.dirty:  # late events arrived meanwhile: one more revision
                pending.dirty = False
                self.schedule_revision(pending)

        task = asyncio.get_running_loop().create_task(run(), name=f"decide {name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def verdict(
        self, incident: Incident, timer: Callable[[], float] = time.perf_counter
    ) -> tuple[Verdict, float]:
        """The engine's verdict on `incident` (`safe_decide`) and the seconds it took by `timer`: in a worker
        thread for a large incident (`offload_members`), else here."""

        def timed() -> tuple[Verdict, float]:
            start = timer()
            verdict = self.safe_decide(incident)
            return verdict, timer() - start

        if len(incident.members) >= self.offload_members:
            return await asyncio.to_thread(timed)
        return timed()

    def safe_decide(self, incident: Incident) -> Verdict:
        """The engine's verdict; a member whose data makes it fail is set aside (logged) and the rest decided."""
        try:
            return self._decide(incident)
        except Exception:
            log.exception(
                "incident %s: the engine failed; looking for the member that makes it fail", incident.incident_id
            )
        bad: list[str] = []
        for member in incident.members:
            try:
                self._decide(dataclasses.replace(incident, members=(member,)))
            except Exception as exc:
                bad.append(member.pod)
                log.error("incident %s: member %s set aside: %s", incident.incident_id, member.pod, exc)
        kept = tuple(m for m in incident.members if m.pod not in bad)
        verdict = self._decide(dataclasses.replace(incident, members=kept))
        note = f"set aside (its data made the engine fail): {', '.join(bad) or 'none found'}"
        return dataclasses.replace(verdict, evidence=(*verdict.evidence, note))


class Reused(Generic[K]):
    """Each job's incident and the engine's verdict on it (`Deciding.verdict`), kept for the reuse window
    (VERDICT_REUSE): the holds that ask meanwhile get the same incident and await the same decision."""

    def __init__(
        self, deciding: Deciding, build: Callable[[K], Incident | None], timer: Callable[[], float] = time.perf_counter
    ) -> None:
        self._deciding = deciding
        self._build = build  # the job's incident as the book has it now (None: not known)
        self._timer = timer  # times each decision (VERDICT_REUSE_PER_DECISION)
        self._kept: dict[K, tuple[float, Incident, asyncio.Task[Verdict] | None]] = {}
        self._seconds: dict[K, float] = {}  # how long each job's last decision took

    def incident(self, job: K, fresh: bool) -> Incident | None:
        """The job's incident: built now when `fresh` or when the one kept is older than its reuse."""
        loop = asyncio.get_running_loop()
        kept = self._kept.get(job)
        reuse = max(VERDICT_REUSE, VERDICT_REUSE_PER_DECISION * self._seconds.get(job, 0.0))
        if kept is not None and not fresh and loop.time() - kept[0] < reuse:
            return kept[1]
        incident = self._build(job)
        if incident is not None:
            self._kept[job] = (loop.time(), incident, None)
        return incident

    async def verdict(self, job: K, incident: Incident) -> Verdict:
        """The engine's verdict on `incident`, decided once per incident kept: the holds that ask meanwhile
        await the same decision."""
        kept = self._kept.get(job)
        if kept is not None and kept[1] is incident and kept[2] is not None:
            return await asyncio.shield(kept[2])
        task = asyncio.ensure_future(self._decide(job, incident))
        if kept is not None and kept[1] is incident:
            self._kept[job] = (kept[0], incident, task)
        return await asyncio.shield(task)

    async def _decide(self, job: K, incident: Incident) -> Verdict:
        verdict, self._seconds[job] = await self._deciding.verdict(incident, self._timer)
        return verdict

    def forget(self, job: K) -> None:
        """The job's pods are gone: its incident, verdict and timing go too."""
        self._kept.pop(job, None)
        self._seconds.pop(job, None)
