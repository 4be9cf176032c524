"""The hold desk: each failed member pod's condition, decided while its sidecar holds the pod.

A Job controller with a `podFailurePolicy` acts the moment a pod is terminal, on the conditions the pod
has then. A pod whose native sidecar still runs is not terminal; so a sidecar whose training container
failed holds its pod (proto `Hold`) until this desk answers (`HoldReply`): the pod's condition
(`podmortem.core.conditions`) is written on its `status.conditions`, or it gets none, or it could not be
written. The desk decides once per member and never rewrites: a later `Hold` (a reconnect) gets the same
answer, and a later revision of the incident changes annotations, Events and metrics, never a condition.

When: a member that failed with a plain echo is decided at once; one that failed on its own waits for
its peers' first evidence (`conditions.ready`), at most `peer_wait` and always within the sidecar's own
timeout, less a margin for the write. The verdict it is decided against is the engine's on the incident
as known then.

Pods that cannot be held get their condition when the pod watch shows their end (`pod_seen`): no
podmortem sidecar in the pod's spec, a sidecar that does not hold (an older one; `registered`), a pod on
a lost node. The Job controller may have acted by then. A pod being deleted and not held gets none:
whoever deletes it (the Job controller after FailJob, a JobSet restart, a drain, a preemption, which
Kubernetes' DisruptionTarget condition names) has acted already, and a large job torn down at once would
otherwise cost a write per pod.
A pod whose sidecar could hold it but which became terminal without a decision (the aggregator was
unreachable, or the sidecar's hold timed out) gets none, ever: a condition written after the Job
controller acted would say something the retry did not follow. The same holds for a decision under way
when the pod watch shows the pod terminal: it is not written. A sidecar sends, with a hold it sends again
after a reconnect, only what is left of its own timeout, so a restarted aggregator decides within it.

A podmortem condition already on the pod is taken as this desk's own (written before an aggregator
restart) only when the decision agrees with it. One that disagrees was written by someone else with
`pods/status` rights: it is logged, counted (`podmortem_foreign_conditions_total{type}`), never answered as
written, and no second podmortem condition is written beside it (the Job controller would match either).

A failure that repeats (`core.repeats`): a root whose condition is `RetryableFailure` is compared with
its job's earlier attempts (`aggregator.history`, completed first from the job's own annotation by
`lookup`, which also gives the job's `podmortem.io/repeat-limit`); the same signature on `repeat_limit`
attempts in a row makes it `PermanentFailure`/`RepeatedFailure`. Only an attempt the pod watch placed the
root in is compared (`IncidentBook.is_watched`). Once written, `on_repeat` tells the job (a Warning Event).

Who may write: only for a member whose job membership is verified against the API (`verified`: by
default, the pod watch placed this pod in this job attempt), and only while this replica may act
(its `fence`: the leader holding its Lease). Otherwise the answer is NOT_WRITTEN with the reason, and the
pod falls back to Kubernetes' defaults. Writes go through `write` (the Kubernetes writer,
`kube.podconditions`), bounded by the hold's deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.deciding import Decide, Deciding, Reused
from podmortem.aggregator.incidents import IncidentBook, JobKey, MemberKey
from podmortem.aggregator.members import is_terminal
from podmortem.aggregator.metrics import Metrics, condition_label
from podmortem.aggregator.publishing import Fence
from podmortem.core import conditions, repeats
from podmortem.core.assess import Finding, assess
from podmortem.core.conditions import PodCondition
from podmortem.core.model import Incident, JobRef, Member, Verdict
from podmortem.core.names import REPEATED_REASON, RETRYABLE, VICTIM, ConditionType
from podmortem.core.podstatus import PodSnapshot
from podmortem.core.rules import DEFAULT_RULES, RuleSet
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import hold_seconds

log = logging.getLogger(__name__)

WriteCondition = Callable[[str, str, PodCondition], Awaitable[None]]  # namespace, pod, condition
# The job's attempts as its own object records them, and its repeat limit override (None: the flag's).
LookUp = Callable[[JobRef], Awaitable[tuple[tuple[repeats.Attempt, ...], int | None]]]
OnRepeat = Callable[[Incident, PodCondition, repeats.Attempt], Coroutine[Any, Any, None]]
# Seconds a job's look-up may take when nothing else bounds it (a pod that cannot be held).
LOOKUP_TIMEOUT = 5.0
# Seconds of the sidecar's hold kept for the write after the decision.
WRITE_MARGIN = 1.0
# A waiting decision looks again at most this often, however many events wake it (each look reads every
# member of the job).
MIN_RECHECK = 0.1
# How often a waiting decision looks again when nothing woke it (pod-watch events that arrive after a
# log read do not wake it).
RECHECK = 0.5


@dataclass(frozen=True)
class Outcome:
    """How one member's condition was settled."""

    condition: PodCondition | None  # the condition decided (None: none for this pod)
    written: bool  # on the pod (or found there)
    detail: str = ""

    def reply(self, seq: int) -> pb.HoldReply:
        if self.condition is not None and self.written:
            return pb.HoldReply(seq=seq, outcome=pb.HoldReply.WRITTEN, condition_type=self.condition.type)
        if self.condition is None and not self.detail:
            return pb.HoldReply(seq=seq, outcome=pb.HoldReply.NO_CONDITION)
        return pb.HoldReply(seq=seq, outcome=pb.HoldReply.NOT_WRITTEN, detail=self.detail)


@dataclass
class _Pod:
    """What the desk knows of one member pod."""

    namespace: str = ""
    verified: bool = False  # the pod watch placed this pod in this job attempt
    sidecar: bool | None = None  # its spec has a podmortem sidecar (None: spec not seen)
    holds: bool | None = None  # its sidecar registered, saying whether it holds
    deleting: bool = False
    node_lost: bool = False
    terminal: bool = False  # phase Failed or Succeeded: no container runs any more
    outcome: Outcome | None = None
    deciding: asyncio.Task[Outcome] | None = None
    found: PodCondition | None = None  # a podmortem condition the pod carries that this desk did not write
    foreign: bool = False  # `found` disagreed with the decision (logged and counted once)

    def unholdable(self) -> str:
        """Why no sidecar will hold this pod ("" when one should)."""
        if self.holds is False:
            return "its sidecar does not hold (an older version)"
        if self.node_lost:
            return "its node was lost"
        if self.sidecar is False and not self.holds:
            return "it has no podmortem sidecar"
        return ""


class HoldDesk:
    def __init__(
        self,
        book: IncidentBook,
        decide: Decide,
        write: WriteCondition | None,
        *,
        rules: RuleSet = DEFAULT_RULES,
        permanent_confidence: float = conditions.PERMANENT_CONFIDENCE,
        peer_wait: float = AggregatorConfig.peer_wait,
        metrics: Metrics | None = None,
        fence: Fence | None = None,
        verified: Callable[[MemberKey], bool] | None = None,
        timer: Callable[[], float] = time.perf_counter,
        repeat_limit: int = repeats.DEFAULT_LIMIT,
        lookup: LookUp | None = None,
        on_repeat: OnRepeat | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.repeat_limit = repeat_limit
        self._lookup = lookup
        self._on_repeat = on_repeat
        self._clock = clock
        self.book = book
        # The engine, as the book runs it, behind the reuse window (`deciding.VERDICT_REUSE`).
        self._reused: Reused[JobKey] = Reused(
            Deciding(decide, offload_members=book.offload_members), book.incident, timer
        )
        self._write = write
        self.rules = rules
        self.permanent_confidence = permanent_confidence
        self.peer_wait = peer_wait
        self.metrics = metrics
        self.fence = fence  # None: this aggregator runs alone, and may always write
        self._verified = verified
        self._pods: dict[MemberKey, _Pod] = {}
        self._changes: dict[JobKey, asyncio.Event] = {}
        self._victims: dict[JobKey, set[str]] = {}  # pods decided Victim, per job (the last-member guard)
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- inputs --------------------------------------------------------------------------------

    def registered(self, key: MemberKey, holds: bool) -> None:
        """A sidecar registered; `holds`: it will hold its pod (an older sidecar does not)."""
        self._pod(key).holds = holds

    def changed(self, job: JobKey) -> None:
        """Something about the job's members changed: waiting decisions look again."""
        event = self._changes.pop(job, None)
        if event is not None:
            event.set()

    def pod_seen(self, key: MemberKey, pod: PodSnapshot) -> None:
        """One version of a member pod from the pod watch (the API's view: membership verified)."""
        state = self._pod(key)
        state.namespace = pod.namespace or state.namespace
        state.verified = True
        state.sidecar = pod.has_sidecar
        state.deleting = pod.deleted_at is not None
        state.node_lost = pod.node_lost
        state.terminal = pod.terminal
        own = pod.own_condition
        found = None if own is None else PodCondition(pod.name, cast(ConditionType, own.type), own.reason, own.message)
        if found is not None and (state.outcome is None or not state.outcome.written):
            state.found = found  # ours from before a restart, or someone else's: the decision tells (`_settle`)
        self.changed(key.job)
        if state.outcome is not None or state.deciding is not None:
            return
        if state.deleting and not state.node_lost:
            # Deleted (Job cleanup after FailJob, a JobSet restart, a drain, a preemption: Kubernetes' own
            # DisruptionTarget says so): whoever deletes it has acted already. No condition, and no write
            # for each pod of a large job torn down at once.
            state.outcome = Outcome(None, written=False, detail="the pod is being deleted")
            return
        if why := state.unholdable():
            if pod.ended:
                log.info("pod %s ended and cannot be held (%s): deciding its condition now", key.pod, why)
                self._start(key, state, asyncio.get_running_loop().time() + self.peer_wait, None)
        elif state.terminal:
            # Its sidecar could have held it and did not (the aggregator unreachable, its hold timed out):
            # the Job controller may have acted already. Never a condition now.
            state.outcome = Outcome(None, written=False, detail="the pod ended without a hold")
            log.info("pod %s ended without a hold: no condition will be written", key.pod)

    async def hold(self, key: MemberKey, request: pb.Hold) -> pb.HoldReply:
        """A sidecar holds its pod: decide (once) and write its condition within `request.timeout_seconds`."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        limit = hold_seconds(request)
        if limit is None:  # NaN or infinite: as a deadline it would break the loop's timer heap
            self.book.refused_value("hold_timeout")
            log.warning("pod %s: hold refused: its timeout %r is not a finite number", key.pod, request.timeout_seconds)
            return Outcome(None, written=False, detail="hold refused: its timeout is not a finite number >= 0").reply(
                request.seq
            )
        give_up = now + limit  # the sidecar stops waiting then
        state = self._pod(key)
        if state.outcome is None and state.deciding is None:
            decide_by = now + min(self.peer_wait, max(limit - WRITE_MARGIN, 0.0))
            self._start(key, state, decide_by, give_up)
        task = state.deciding
        outcome = state.outcome
        if task is not None:
            try:
                async with asyncio.timeout(max(give_up - loop.time(), 0.0)):
                    outcome = await asyncio.shield(task)
            except TimeoutError:
                pass
            except Exception as exc:  # logged where the task ends (`_start`); the sidecar is answered
                outcome = Outcome(None, written=False, detail=f"deciding the condition failed: {exc}")
        if outcome is None:
            outcome = Outcome(None, written=False, detail="not decided within the hold")
        return outcome.reply(request.seq)

    async def settle(self) -> None:
        """Let decisions under way finish (shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- deciding ------------------------------------------------------------------------------

    def _pod(self, key: MemberKey) -> _Pod:
        state = self._pods.get(key)
        if state is None:
            state = self._pods[key] = _Pod(namespace=key.job[0])
        return state

    def is_verified(self, key: MemberKey) -> bool:
        if self._verified is not None:
            return self._verified(key)
        state = self._pods.get(key)
        return state is not None and state.verified

    def _start(self, key: MemberKey, state: _Pod, decide_by: float, give_up: float | None) -> None:
        task = asyncio.get_running_loop().create_task(self._settle(key, decide_by, give_up), name=f"hold {key.pod}")
        state.deciding = task
        self._tasks.add(task)

        def done(t: asyncio.Task[Outcome]) -> None:
            self._tasks.discard(t)
            if state.deciding is t:
                state.deciding = None
            if not t.cancelled() and t.exception() is not None:
                log.error("pod %s: deciding its condition failed", key.pod, exc_info=t.exception())

        task.add_done_callback(done)

    async def _settle(self, key: MemberKey, decide_by: float, give_up: float | None) -> Outcome:
        member, incident, finding = await self._wait(key, decide_by)
        state = self._pod(key)
        if member is None or incident is None:
            return Outcome(None, written=False, detail="the member is not known to the aggregator")
        if state.outcome is not None:  # the pod ended without a hold, or was deleted
            return state.outcome
        verdict = await self._reused.verdict(key.job, incident)
        victims = self._victims.setdefault(key.job, set())
        condition = conditions.decide(
            member,
            incident,
            verdict,
            rules=self.rules,
            permanent_confidence=self.permanent_confidence,
            victims=victims,
            finding=finding,
        )
        if condition is not None and condition.type == RETRYABLE and verdict.pod == key.pod:
            condition = await self._repeated(key, incident, verdict, condition, give_up)
        if condition is not None and condition.type == VICTIM:
            victims.add(key.pod)  # at the decision, not the write: two last echoes must not both pass
        if state.found is not None:
            if condition is not None and condition.type == state.found.type:
                # The same decision as the condition on the pod: written before an aggregator restart.
                state.outcome = Outcome(state.found, written=True, detail="found on the pod")
                return state.outcome
            return self._foreign(key, state, condition)
        if condition is None:
            state.outcome = Outcome(None, written=False)
            log.info(
                "pod %s: no condition (verdict: %s, %s, confidence %.2f)",
                key.pod,
                verdict.pod,
                verdict.category,
                verdict.confidence,
            )
            return state.outcome
        if state.terminal and not state.unholdable():
            # A held pod ended while this was decided (its sidecar's hold ran out, or a hold re-sent after
            # an aggregator restart asked for more than was left): the Job controller has acted on the pod
            # as it was. A condition now would say what the retry did not follow. Never written.
            state.outcome = Outcome(condition, written=False, detail="the pod is terminal: too late for a condition")
            log.warning("pod %s: %s not written: the pod ended before it was decided", key.pod, condition.type)
            return state.outcome
        refused = self._refusal(key)
        if refused:
            log.warning("pod %s: %s not written: %s", key.pod, condition.type, refused)
            return Outcome(condition, written=False, detail=refused)  # not kept: a later hold may write it
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None if give_up is None else max(give_up - loop.time(), 0.0)):
                assert self._write is not None
                await self._write(state.namespace, key.pod, condition)
        except TimeoutError:
            log.warning("pod %s: writing %s did not finish within the hold", key.pod, condition.type)
            return Outcome(condition, written=False, detail="the write did not finish within the hold")
        except Exception as exc:
            log.warning("pod %s: writing %s failed: %s", key.pod, condition.type, exc)
            return Outcome(condition, written=False, detail=f"the write failed: {exc}")
        state.outcome = Outcome(condition, written=True)
        log.info("pod %s: %s (%s) written: %s", key.pod, condition.type, condition.reason, condition.message)
        if self.metrics is not None:
            self.metrics.pod_condition_written(condition.type)
        if condition.reason == REPEATED_REASON:
            self._repeat_written(incident, verdict, condition)
        return state.outcome

    def _foreign(self, key: MemberKey, state: _Pod, decided: PodCondition | None) -> Outcome:
        """The pod carries a podmortem condition that disagrees with this desk's decision (`decided`): not
        podmortem's (a client with `pods/status` rights wrote it). Logged and counted once, never answered
        as written, and this desk writes no second podmortem condition beside it."""
        found = state.found
        assert found is not None
        ours = decided.type if decided is not None else "none"
        if decided is not None and decided.type == found.type:
            return state.outcome or Outcome(found, written=True, detail="found on the pod")
        if not state.foreign:
            state.foreign = True
            log.warning(
                "pod %s carries %s (reason %r), which podmortem did not write; its decision is %s: "
                "not reported as podmortem's, and nothing written beside it",
                key.pod,
                found.type,
                found.reason,
                ours,
            )
            if self.metrics is not None:
                self.metrics.foreign_conditions.labels(type=condition_label(found.type)).inc()
        if state.outcome is None:
            state.outcome = Outcome(
                None,
                written=False,
                detail=f"the pod carries {found.type}, which podmortem did not write (its decision: {ours})",
            )
        return state.outcome

    async def _repeated(
        self, key: MemberKey, incident: Incident, verdict: Verdict, condition: PodCondition, give_up: float | None
    ) -> PodCondition:
        """`condition` (the root's RetryableFailure), escalated when its failure repeats (`core.repeats`)."""
        uid = incident.job.uid
        current = repeats.entry(incident, verdict, self._clock())
        if not uid or current is None or not self.book.is_watched(key):
            return condition
        limit = self.repeat_limit
        if self._lookup is not None:
            loop = asyncio.get_running_loop()
            budget = LOOKUP_TIMEOUT if give_up is None else max(give_up - WRITE_MARGIN - loop.time(), 0.0)
            try:
                async with asyncio.timeout(min(budget, LOOKUP_TIMEOUT)):
                    found, override = await self._lookup(incident.job)
            except Exception as exc:  # the history kept here still applies, with the flag's limit
                log.warning("job %s: its attempt history could not be read: %s", incident.job.key, exc)
            else:
                self.book.history.merge(uid, found)
                limit = override if override is not None else limit
        history = self.book.history.get(uid)
        escalated = repeats.escalate(
            condition, current, history, limit=limit, permanent_confidence=self.permanent_confidence, root=True
        )
        if escalated is not condition:
            log.warning("pod %s: %s", key.pod, escalated.message)
        return escalated

    def _repeat_written(self, incident: Incident, verdict: Verdict, condition: PodCondition) -> None:
        if self.metrics is not None:
            self.metrics.repeated_failures.labels(category=verdict.category or "none").inc()
        entry = repeats.entry(incident, verdict, self._clock())
        if self._on_repeat is None or entry is None:
            return
        task = asyncio.get_running_loop().create_task(self._on_repeat(incident, condition, entry))
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.warning("job %s: the repeated failure's Event failed: %s", incident.job.key, t.exception())

        task.add_done_callback(done)

    def _refusal(self, key: MemberKey) -> str:
        if self._write is None:
            return "this aggregator writes no pod conditions"
        if not self.is_verified(key):
            return "the pod's membership in the job is not verified against the API"
        if self.fence is not None and not self.fence.may_act():
            return "this replica does not hold the leader Lease"
        return ""

    async def _wait(self, key: MemberKey, decide_by: float) -> tuple[Member | None, Incident | None, Finding | None]:
        """The member and its incident once its end is known and it is `ready`, or at `decide_by`; with the
        member's assessment when this look made it (each look assesses the member once)."""
        loop = asyncio.get_running_loop()
        while True:
            event = self._changes.setdefault(key.job, asyncio.Event())
            looked = loop.time()
            member = self.book.member(key)
            incident = self._reused.incident(key.job, fresh=False)
            if incident is None or member is None:
                return None, None, None
            if looked >= decide_by:
                return member, incident, None
            if is_terminal(member):
                finding = assess(member, self.rules)
                if conditions.plain_echo(finding):
                    return member, incident, finding  # a Victim at once: the others as known a moment ago will do
                incident = self._reused.incident(key.job, fresh=True)
                if incident is not None and conditions.ready(member, incident, self.rules, finding=finding):
                    return member, incident, finding
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(min(decide_by - loop.time(), RECHECK), 0.0)):
                    await event.wait()
            await asyncio.sleep(max(looked + MIN_RECHECK - loop.time(), 0.0))

    def vanished(self, key: MemberKey) -> None:
        """The pod is gone from the API: nothing more to write on it; its record goes."""
        state = self._pods.get(key)
        if state is not None and state.deciding is not None:
            state.deciding.cancel()
        self._pods.pop(key, None)
        if not any(k.job == key.job for k in self._pods):
            self._reused.forget(key.job)
            self._victims.pop(key.job, None)
