"""Deciding: when and where the engine runs on an incident, so that acks never wait behind it.

The book says what to decide; this module runs `decide` on it. A small incident is decided inline on
the loop; one with at least `offload_members` members in a worker thread, its verdict handed back on
the loop. Late events after a verdict are coalesced: one revision per `revise_delay` seconds (on the
loop clock), and one more when late events arrived while a decision ran. A member whose data makes the
engine fail is set aside with a logged reason (found by deciding each member alone), and the incident
is decided without it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

from podmortem.core.model import Incident, Verdict

log = logging.getLogger(__name__)

Decide = Callable[[Incident], Verdict]


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
                verdict = await asyncio.to_thread(self.safe_decide, incident)
            finally:
                pending.deciding = False
            then(verdict)
            if pending.dirty:  # late events arrived meanwhile: one more revision
                pending.dirty = False
                self.schedule_revision(pending)

        task = asyncio.get_running_loop().create_task(run(), name=f"decide {name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
