"""Incidents: group events per job attempt, open on the first failure, close on quorum or timeout.

Every sidecar registers when its pod starts, so the book knows a job's members before anything
fails. The first event that means failure (an error file, a non-zero exit, a DisruptionTarget
condition, a lost or deleted pod) opens the job attempt's incident and arms a timer. The incident
closes — and the engine decides — as soon as every expected member has reported a terminal state
(quorum), or when the timer fires with members still silent. A member reporting after that may
change the verdict; the book then publishes a revision. The expected size is the largest of the
configured size, the job's own size (`expect`, from the Kubernetes job spec) and the sidecars'
world-size hints.

The book keeps members, quorum, timers and the incident lifecycle; the jobs around it live beside
it: `intake` trims what comes in and holds the limits, `members` keeps each member's events and
their cached fold, `deciding` runs the engine (off the loop for a large incident, coalescing late
revisions), and `decisions` is what leaves for the publishers. This module does no I/O: decisions
go to a `publish` callable (the publish queue).

Cost per event is O(1) apart from the decisions themselves: each job keeps a running count of its
reported members (updated when a member changes, never recounted).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.deciding import Decide, Deciding, Pending
from podmortem.aggregator.decisions import ClosedBy, Decision
from podmortem.aggregator.history import AttemptHistory
from podmortem.aggregator.intake import (
    MAX_MEMBER_EVENTS,
    MAX_MEMBERS_PER_JOB,
    MAX_NAMESPACES,
    MAX_OPEN_INCIDENTS,
    LimitExceeded,
    bounded,
    is_failure,
    retained_text,
    with_text,
    without_text,
)
from podmortem.aggregator.members import MemberState, is_terminal
from podmortem.aggregator.metrics import Metrics
from podmortem.core import repeats
from podmortem.core.model import MAX_WORLD_SIZE, Incident, JobRef, Member, Verdict
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import sanitized

log = logging.getLogger(__name__)

JobKey = tuple[str, str, str]  # namespace, name, attempt
K = TypeVar("K")


def _add(counts: dict[K, int], key: K, step: int) -> None:
    """Add `step` to a count kept only while it is above zero."""
    left = counts.get(key, 0) + step
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


@dataclass(frozen=True)
class MemberKey:
    job: JobKey
    pod: str


def job_key(job: JobRef, attempt: str) -> JobKey:
    return (job.namespace, job.name, attempt)


@dataclass(frozen=True)
class Restored:
    """A verdict published before a restart (`StateStore.replay`): what the book needs to publish it not
    again, and to file a later run of the job apart from it."""

    verdict: Verdict  # its answer (pod, category, retryable): a revision is published only if it changes
    revision: int
    closed_by: ClosedBy
    opened_at: float | None
    members: tuple[str, ...]
    final: bool
    stalled_at: float | None = None  # its stall's provisional verdict was out (`_JobState.stalled_at`)

    @property
    def provisional(self) -> bool:
        """A verdict on a stall, or its withdrawal: nothing had failed, so nothing was decided."""
        return self.closed_by in ("stall", "resumed")


@dataclass
class _JobState:
    job: JobRef
    attempt: str
    pending: Pending  # its decisions in flight (`deciding`)
    members: dict[str, MemberState] = field(default_factory=dict)
    world_size_hint: int | None = None
    expected: int | None = None
    opened_at: float | None = None
    timer: asyncio.TimerHandle | None = None
    closed_by: ClosedBy | None = None
    revision: int = 0
    verdict: Verdict | None = None
    reported: int = 0  # members whose `reported()` is true, kept by IncidentBook._recount
    ended: int = 0  # members whose end is known (`is_terminal`), kept by IncidentBook._recount
    refused: bool = False  # not opened: too many incidents were open (counted once)
    quiet: int = 0  # members whose sidecar's newest Activity says quiet (kept by IncidentBook._activity)
    # A capture round is out (`aggregator.stalls`): quorum waits for its answers (bounded by the desk's
    # wait; the quorum timer still closes the incident).
    capturing: bool = False
    restored_final: bool = False  # its final verdict was published before a restart (`Restored`)
    # A provisional verdict on a stall is out (not withdrawn): the moment that stall was first seen.
    stalled_at: float | None = None
    # The stall going on was first seen then (`IncidentBook.stalling`): every provisional verdict on it
    # says this moment, however often it is asked again; the next stall begins after progress.
    stall_since: float | None = None

    @property
    def incident_id(self) -> str:
        """namespace:name[:attempt]. A ':' is in no namespace or job name (names may hold dots, so a dotted
        id could collide), and an unknown attempt ("") is not attempt "0": two attempts, two ids."""
        base = f"{self.job.namespace}:{self.job.name}"
        return f"{base}:{self.attempt}" if self.attempt else base


class IncidentBook:
    def __init__(
        self,
        decide: Decide,
        publish: Callable[[Decision], None],
        quorum_timeout: float = 60.0,
        default_world_size: int | None = None,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        max_jobs: int = 10_000,
        revise_delay: float = 0.5,
        offload_members: int = 256,
        max_members: int = MAX_MEMBERS_PER_JOB,
        max_open: int = MAX_OPEN_INCIDENTS,
        max_namespaces: int = MAX_NAMESPACES,
        max_open_per_job: int = AggregatorConfig.max_open_per_job,
        max_open_per_namespace: int = AggregatorConfig.max_open_per_namespace,
        history: AttemptHistory | None = None,
    ) -> None:
        # Each job's attempts, by uid (`aggregator.history`): a decision records its own and carries the
        # ones before it.
        self.history = history if history is not None else AttemptHistory()
        self._deciding = Deciding(decide, revise_delay, offload_members)
        self._publish = publish
        self.quorum_timeout = quorum_timeout
        self.default_world_size = default_world_size
        self._clock = clock
        self._metrics = metrics
        self._max_jobs = max_jobs
        self.max_members, self.max_open, self.max_namespaces = max_members, max_open, max_namespaces
        self.max_open_per_job, self.max_open_per_namespace = max_open_per_job, max_open_per_namespace
        self._open_count = 0
        self._open_by_job: dict[tuple[str, str], int] = {}  # (namespace, name) -> its attempts' open incidents
        self._open_by_namespace: dict[str, int] = {}
        self._waiting: list[JobKey] = []  # jobs with a failure, refused an incident at the limit (oldest first)
        self._namespaces: dict[str, int] = {}  # namespace -> jobs held
        self._jobs: dict[JobKey, _JobState] = {}
        # (namespace, job, attempt as told) -> the attempt its newest run is kept under, and its number.
        self._generations: dict[JobKey, tuple[str, int]] = {}

    @property
    def revise_delay(self) -> float:
        return self._deciding.revise_delay

    @property
    def offload_members(self) -> int:
        return self._deciding.offload_members

    # -- inputs ------------------------------------------------------------------------------

    def register(self, reg: pb.Register, verified: bool = False, filed_under: str | None = None) -> MemberKey:
        """A sidecar says who it is (again after every reconnect). Raises `LimitExceeded` for a job that
        would pass its member limit, or a namespace beyond the number tracked. `verified`: the
        registration's job and position were checked against the API (see `is_verified`). `filed_under`:
        the attempt it was kept under before a restart (a later run's `<attempt>.g2`), kept so."""
        job = JobRef(reg.job.namespace, reg.job.name, reg.job.kind, reg.job.uid)
        if filed_under is None:
            attempt = self._attempt_for(job, reg.attempt, reg.pod)
        else:
            attempt = filed_under
            self._restore_generation(job, reg.attempt, filed_under)
        known = self._jobs.get(job_key(job, attempt))
        if known is None and job.namespace not in self._namespaces and len(self._namespaces) >= self.max_namespaces:
            self._limit_hit("namespaces")
            raise LimitExceeded("namespaces", f"more than {self.max_namespaces} namespaces tracked")
        if known is not None and reg.pod not in known.members and len(known.members) >= self.max_members:
            self._limit_hit("members_per_job")
            raise LimitExceeded("members_per_job", f"job {job.key} already has {self.max_members} members")
        state = self._job(job, attempt)
        identity = Member(
            pod=reg.pod,
            namespace=reg.job.namespace,
            node=reg.node,
            rank=reg.rank if reg.HasField("rank") else None,
            replica_type=reg.replica_type,
            replica_index=reg.replica_index if reg.HasField("replica_index") else None,
            pod_ip=reg.pod_ip,
        )
        self._merge_identity(state, identity)
        if reg.HasField("world_size_hint") and reg.world_size_hint > 0:
            hint = min(reg.world_size_hint, MAX_WORLD_SIZE)  # 2**31-1 must not hold a verdict for ever
            state.world_size_hint = max(state.world_size_hint or 0, hint)
        member = state.members[reg.pod]
        member.verified = member.verified or verified
        member.streams += 1
        self._recount(state, member)
        return MemberKey(job_key(job, attempt), reg.pod)

    def restore_decision(self, job: JobRef, attempt: str, restored: Restored) -> None:
        """A verdict published before a restart: its incident is decided (not opened again by its replayed
        events), its members are known, and a later run of the job is filed apart from it. A provisional
        one (a stall's, or its withdrawal) decided nothing: the incident stays unopened, its revisions
        counted and its stall's moment kept (the verdict on the failure that follows says it)."""
        state = self._job(job, attempt)
        state.revision, state.stalled_at = restored.revision, restored.stalled_at
        state.stall_since = restored.stalled_at
        if not restored.provisional:  # a provisional verdict leaves the incident unopened, as it found it
            state.verdict, state.closed_by = restored.verdict, restored.closed_by
            state.opened_at, state.restored_final = restored.opened_at, restored.final
        for pod in restored.members:
            self._merge_identity(state, Member(pod=pod, namespace=job.namespace))
        told = attempt.rpartition(".g")[0] if ".g" in attempt else ""
        self._restore_generation(job, told, attempt)

    def _restore_generation(self, job: JobRef, told: str, attempt: str) -> None:
        """`attempt` is generation N of `told` (`<told>.gN`, or `gN` for ""): the newest run is the newest N."""
        prefix = f"{told}.g" if told else "g"
        number = attempt.removeprefix(prefix)
        if attempt == told or not attempt.startswith(prefix) or not number.isdigit():
            return
        key = job_key(job, told)
        if int(number) > self._generations.get(key, (told, 1))[1]:
            self._generations[key] = (attempt, int(number))

    def disconnected(self, key: MemberKey) -> None:
        """A sidecar's stream ended: what it could say is said; quorum no longer waits on it."""
        state, member = self._jobs.get(key.job), self._member(key)
        if state is None or member is None:
            return
        member.streams = max(member.streams - 1, 0)
        self._recount(state, member)
        self._check_quorum(state)

    def observe_member(self, job: JobRef, attempt: str, identity: Member) -> MemberKey:
        """A member known from elsewhere than its sidecar (the aggregator's pod watch)."""
        attempt = self._attempt_for(job, attempt, identity.pod)
        state = self._job(job, attempt)
        if (job.uid and job.uid != state.job.uid) or (job.kind and job.kind != state.job.kind):
            state.job = JobRef(job.namespace, job.name, job.kind or state.job.kind, job.uid or state.job.uid)
        self._merge_identity(state, identity)
        member = state.members[identity.pod]
        member.verified = True  # the pod watch resolved it from the pod object
        member.watched = True  # ... in this attempt
        self._recount(state, member)
        return MemberKey(job_key(job, attempt), identity.pod)

    def is_verified(self, key: MemberKey) -> bool:
        """Was this member's job membership verified against the API? True for a pod the aggregator's
        pod watch resolved into this job, or a sidecar whose token is bound to a pod whose object says
        it belongs here; False for a member known only from an unauthenticated stream (`--auth none`)
        or from a state file written before verification. Only verified members may be acted on."""
        member = self._member(key)
        return member is not None and member.verified

    def is_watched(self, key: MemberKey) -> bool:
        """Did the pod watch place this member in this job attempt (`MemberState.watched`)?"""
        member = self._member(key)
        return member is not None and member.watched

    def lacks_log(self, key: MemberKey) -> bool:
        """Is this member without a sidecar now and without any log tail? (so the pod watch reads one)"""
        member = self._member(key)
        if member is None or member.streams > 0:
            return False
        return not any(e.WhichOneof("payload") == "log_tail" for e in member.events.values())

    def expect(self, job: JobRef, attempt: str, world_size: int) -> None:
        """The job's own size (from its spec or an annotation)."""
        attempt = self._generations.get(job_key(job, attempt), (attempt, 1))[0]
        state = self._job(job, attempt)
        state.expected = min(world_size, MAX_WORLD_SIZE)  # a spec's parallelism of 10**9 decides nothing
        self._check_quorum(state)

    def set_clock(self, key: MemberKey, offset: float, round_trip: float) -> None:
        member = self._member(key)
        if member is None:
            return
        if member.clock_round_trip is None or round_trip <= member.clock_round_trip:
            member.clock_offset, member.clock_round_trip = offset, round_trip
            member.changed()

    def ingest(self, key: MemberKey, event: pb.Event, from_sidecar: bool = False) -> bool:
        """Take one event. Returns False for a duplicate (already known id) — still to be acked."""
        state = self._jobs.get(key.job)
        member = self._member(key)
        if state is None or member is None:
            raise KeyError(f"unknown member {key}: register first")
        if event.id in member.events:
            if self._metrics:
                self._metrics.duplicates.inc()
            if from_sidecar and event.WhichOneof("payload") in ("termination", "deletion"):
                member.sidecar_saw_end = True  # the watch saw it first; the sidecar confirms it
                self._recount(state, member)
                self._check_quorum(state)
            return False
        event, dropped = sanitized(event)
        if dropped:
            self.refused_value("timestamp", len(dropped))
            log.warning("member %s: event %s: %s dropped (not a valid time)", key.pod, event.id, ", ".join(dropped))
        kind = event.WhichOneof("payload")
        log_text: str | None = None
        member.make_room(kind)
        if kind == "log_tail":  # its text kept once (see `MemberState.log_text`)
            # `retained` on the bytes, read from the message once: not set into a copy and read back out.
            log_text, cut = retained_text(event.log_tail.text)
            event = without_text(event, truncated=event.log_tail.truncated or cut)
        else:
            event = bounded(event)
        if len(member.events) >= MAX_MEMBER_EVENTS:
            if not member.flooded:
                member.flooded = True
                self._limit_hit("member_events")
                log.warning(
                    "member %s: %d events kept (the limit); later ones are ignored", key.pod, len(member.events)
                )
            return False
        if from_sidecar and kind in ("termination", "deletion"):
            member.sidecar_saw_end = True
        member.events[event.id] = event
        if kind == "activity":  # not folded into the member: it only says whether the job is stalled
            if member.active(event):
                state.quiet += 1 if member.quiet else -1
            self._count(kind)
            return True
        if log_text is not None:
            member.log_text = log_text
        member.added(event)
        self._recount(state, member)
        self._count(kind)
        if state.opened_at is None and is_failure(event):
            if limit := self._open_limit(state):
                if not state.refused:
                    state.refused = True
                    self._waiting.append(job_key(state.job, state.attempt))
                    self._limit_hit(limit)
                    log.warning(
                        "incident %s not opened: too many incidents open (%s); its events are kept, and it opens "
                        "when a place is free",
                        state.incident_id,
                        limit,
                    )
            else:
                self._open(state)
        elif state.closed_by is not None:
            self._deciding.schedule_revision(state.pending)
            return True
        self._check_quorum(state)
        return True

    def _count(self, kind: str | None) -> None:
        if self._metrics and kind:
            counter = self._metrics.events_by_kind.get(kind)
            (counter if counter is not None else self._metrics.events.labels(kind=kind)).inc()

    # -- stalls (aggregator.stalls asks; the book keeps the counts) -----------------------------------

    def stalled(self, key: JobKey) -> bool:
        """Has every expected member's sidecar said quiet (its newest Activity), with nothing failed yet, and
        not every member ended (a job that is over is not stalled, whatever its last activity said)?"""
        state = self._jobs.get(key)
        return (
            state is not None
            and state.opened_at is None
            and state.quiet > 0
            and state.quiet >= self.world_size(state)
            and not self._finished(state)
        )

    def finished(self, key: JobKey) -> bool:
        """Is this job attempt over with nothing failed: every member's end known (its pod's end or its
        deletion, from its sidecar or the pod watch), every expected member among them, and none a failure
        (a failure opens the incident)?"""
        state = self._jobs.get(key)
        return state is not None and self._finished(state)

    def _finished(self, state: _JobState) -> bool:
        return (
            state.opened_at is None
            and not state.refused  # a failure it was refused an incident for is a failure all the same
            and 0 < state.ended == len(state.members)
            and state.ended >= self.world_size(state)
        )

    def succeeded(self, key: JobKey) -> bool:
        """Did every member of this job attempt end successfully (`Member.succeeded`)?"""
        state = self._jobs.get(key)
        return state is not None and bool(state.members) and all(m.member().succeeded for m in state.members.values())

    def stall_published(self, key: JobKey) -> bool:
        """Is a provisional verdict on a stall of this job attempt out (published, not withdrawn, and no
        failure since)? After a restart, the state file's word (`Restored.stalled_at`)."""
        state = self._jobs.get(key)
        return state is not None and state.opened_at is None and state.stalled_at is not None

    def published_stalls(self) -> list[JobKey]:
        """The job attempts whose stall's provisional verdict is out (`stall_published`): after a restart,
        those the state file kept."""
        return [key for key in self._jobs if self.stall_published(key)]

    def stalling(self, key: JobKey, on: bool, since: float | None = None) -> None:
        """The stall desk saw every member quiet (`on`): a stall begins now (or at `since`), unless one is
        going on (its first moment stays, however often the job is asked again); or the job made progress
        that held (not `on`): the next stall is a new one."""
        state = self._jobs.get(key)
        if state is None:
            return
        if not on:
            state.stall_since = None
        elif state.stall_since is None:
            state.stall_since = since if since is not None else self._clock()

    def quiet_since(self, key: JobKey) -> float | None:
        """When the last member went quiet, by its sidecar's newest `Activity` (sent at: the pod's clock plus
        its measured offset, where one is): the moment a stall the state file replayed was first seen."""
        state = self._jobs.get(key)
        if state is None:
            return None
        sent = [
            m.activity_at[0] + m.activity_at[1] / 1e9 + (m.clock_offset or 0.0)
            for m in state.members.values()
            if m.quiet and m.activity_at is not None
        ]
        return max(sent, default=None)

    def heard(self, key: JobKey) -> bool:
        """Is anything of this job attempt heard now: a member's sidecar stream open, or a member's pod
        that the pod watch saw (since this process started) and that has not ended?"""
        state = self._jobs.get(key)
        return state is not None and any(
            m.streams > 0 or (m.watched and not is_terminal(m.member())) for m in state.members.values()
        )

    def failed(self, key: JobKey) -> bool:
        """Has this job attempt's incident opened (something failed)?"""
        state = self._jobs.get(key)
        return state is not None and state.opened_at is not None

    def pods(self, key: JobKey) -> list[str]:
        state = self._jobs.get(key)
        return list(state.members) if state is not None else []

    def incident_id(self, key: JobKey) -> str:
        state = self._jobs.get(key)
        return state.incident_id if state is not None else ":".join(p for p in key if p)

    def capturing(self, key: JobKey, on: bool) -> None:
        """A capture round is out (`on`), or over: quorum waits for it, and is checked again once it is."""
        state = self._jobs.get(key)
        if state is None:
            return
        state.capturing = on
        if not on:
            self._check_quorum(state)

    def provisional(self, key: JobKey, closed_by: ClosedBy, note: str = "") -> bool:
        """Decide and publish a provisional verdict on a job whose pods still run (`closed_by` "stall"; a
        large job is decided off the loop, as any), or withdraw it ("resumed": the job made progress
        again, or is over; `note` says so). Nothing is published once the job attempt's incident has
        opened (its verdict on the failure takes over), nor withdrawn while no stall verdict is out. False
        then."""
        state = self._jobs.get(key)
        if state is None or state.opened_at is not None:
            return False
        if closed_by != "stall" and state.stalled_at is None:
            return False  # no stall verdict is out (its decision still in flight is dropped on landing)
        incident = dataclasses.replace(self._incident(state), provisional=True)
        if closed_by != "stall":
            verdict = Verdict(pod=None, category=None, retryable=None, summary=note, confidence=1.0)
            self._publish_provisional(state, closed_by, incident, verdict)
            return True
        self._deciding.decide(
            state.pending,
            state.incident_id,
            incident,
            lambda verdict: self._publish_provisional(state, closed_by, incident, verdict),
        )
        return True

    def _publish_provisional(self, state: _JobState, closed_by: ClosedBy, incident: Incident, verdict: Verdict) -> None:
        if state.opened_at is not None:
            return  # it failed while this was decided: the verdict on the failure takes over
        if closed_by == "stall" and state.stall_since is None:
            return  # the stall ended while this was decided (withdrawn: the job moved or is over)
        state.revision += 1
        decided_at = self._clock()
        if closed_by == "stall":  # the moment the stall was first seen (before its captures were asked for)
            state.stalled_at = state.stall_since if state.stall_since is not None else decided_at
        else:  # "resumed": withdrawn
            state.stalled_at = state.stall_since = None
        self._publish(
            Decision(
                incident=dataclasses.replace(incident, stalled_at=state.stalled_at),
                verdict=verdict,
                decided_at=decided_at,
                revision=state.revision,
                closed_by=closed_by,
                reported=self._reported(state),
                verified=frozenset(pod for pod, m in state.members.items() if m.verified),
            )
        )

    def kept_event(self, key: MemberKey, event: pb.Event) -> pb.Event:
        """`event` as the book holds it, for the state file (`StateStore.event`): bounded, and a log tail
        with the text kept of it (`intake.retained_text`: it fits the same bound, so a replay keeps it as
        it is). An event the book does not hold (past the member's event limit) bounded here."""
        member = self._member(key)
        held = member.events.get(event.id) if member is not None else None
        if member is None or held is None:
            return bounded(event)
        if held.WhichOneof("payload") == "log_tail" and member.log_text is not None:
            return with_text(held, member.log_text, held.log_tail.truncated)
        return held

    # -- state -------------------------------------------------------------------------------

    def incident(self, key: JobKey) -> Incident | None:
        state = self._jobs.get(key)
        return self._incident(state) if state else None

    def member(self, key: MemberKey) -> Member | None:
        """One member as known now (its events folded), without building the whole incident."""
        state = self._member(key)
        return state.member() if state is not None else None

    def open_incidents(self) -> list[JobKey]:
        return [k for k, s in self._jobs.items() if s.opened_at is not None and s.closed_by is None]

    def close_all(self) -> None:
        """Shutdown: decide every open incident and every due revision now rather than lose it."""
        for key in self.open_incidents():
            self._close(self._jobs[key], "timeout", inline=True)
        for state in self._jobs.values():
            if self._deciding.take_due(state.pending):
                incident = self._incident(state)
                self._revised(state, incident, self._deciding.safe_decide(incident))

    async def settle(self) -> None:
        """Wait for the decisions running in worker threads (before `close_all` at shutdown)."""
        await self._deciding.settle()

    # -- internals ---------------------------------------------------------------------------

    def _attempt_for(self, job: JobRef, attempt: str, pod: str) -> str:
        """The attempt a member is kept under. Once an incident has its final verdict (every expected member
        reported), a pod that was not among its members is the start of a new run of the job (pods a job
        controller recreated, under new names, with no attempt to tell them apart): it opens the next
        generation, `<attempt>.g2` ("g2" for attempt ""), so one failure never rewrites another's
        verdict. Members of the decided run (a sidecar reconnecting) stay with it."""
        told = job_key(job, attempt)
        current, number = self._generations.get(told, (attempt, 1))
        for n in range(number - 1, 0, -1):  # a member of an earlier run (few: one per recreation)
            earlier = f"{attempt}.g{n}" if attempt else f"g{n}"
            kept = self._jobs.get(job_key(job, earlier if n > 1 else attempt))
            if kept is not None and pod in kept.members:
                return kept.attempt
        state = self._jobs.get(job_key(job, current))
        if state is None or pod in state.members or state.closed_by is None:
            return current
        if self._reported(state) < self.world_size(state) and not state.restored_final:
            return current  # not final: a late member of this run
        number += 1
        current = f"{attempt}.g{number}" if attempt else f"g{number}"
        self._generations[told] = (current, number)
        log.info(
            "job %s: pod %s starts a new run after a final verdict: incident %s:%s", job.key, pod, job.key, current
        )
        return current

    def _job(self, job: JobRef, attempt: str) -> _JobState:
        key = job_key(job, attempt)
        state = self._jobs.get(key)
        if state is None:
            if len(self._jobs) >= self._max_jobs:
                self._evict()
            pending = Pending(revise=functools.partial(self._revise, key))
            state = self._jobs[key] = _JobState(job=job, attempt=attempt, pending=pending)
            self._namespaces[job.namespace] = self._namespaces.get(job.namespace, 0) + 1
        elif (job.kind and not state.job.kind) or (job.uid and not state.job.uid):
            state.job = JobRef(job.namespace, job.name, job.kind or state.job.kind, job.uid or state.job.uid)
        return state

    def _evict(self) -> None:
        """Forget the oldest decided jobs (never an open incident)."""
        for key in [k for k, s in self._jobs.items() if s.closed_by is not None or s.opened_at is None]:
            del self._jobs[key]
            self._generations.pop(key, None)
            left = self._namespaces.get(key[0], 1) - 1
            if left > 0:
                self._namespaces[key[0]] = left
            else:
                self._namespaces.pop(key[0], None)
            if len(self._jobs) < self._max_jobs * 0.9:
                return

    @staticmethod
    def _merge_identity(state: _JobState, identity: Member) -> None:
        current = state.members.get(identity.pod)
        if current is None:
            state.members[identity.pod] = MemberState(identity=identity)
            return
        old = current.identity
        current.changed()
        current.identity = dataclasses.replace(
            old,
            namespace=identity.namespace or old.namespace,
            node=identity.node or old.node,
            rank=identity.rank if identity.rank is not None else old.rank,
            replica_type=identity.replica_type or old.replica_type,
            replica_index=identity.replica_index if identity.replica_index is not None else old.replica_index,
            pod_ip=identity.pod_ip or old.pod_ip,
        )

    def _member(self, key: MemberKey) -> MemberState | None:
        state = self._jobs.get(key.job)
        return state.members.get(key.pod) if state else None

    def world_size(self, state: _JobState) -> int:
        """The job's own size when known (from its spec): a sidecar's hint never exceeds it. Else the
        largest of the sidecars' hints (each capped at MAX_WORLD_SIZE) and the configured size."""
        if state.expected:
            return state.expected
        sizes = [s for s in (state.world_size_hint, self.default_world_size) if s]
        return max(sizes) if sizes else len(state.members)

    def _reported(self, state: _JobState) -> int:
        return state.reported

    @staticmethod
    def _recount(state: _JobState, member: MemberState) -> None:
        """Keep the job's running counts of ended and of reported members (O(1); call after any change to a
        member)."""
        ended = is_terminal(member.member())
        if ended != member.ended_counted:
            state.ended += 1 if ended else -1
            member.ended_counted = ended
        now = member.reported(ended)
        if now != member.counted:
            state.reported += 1 if now else -1
            member.counted = now

    def refused_value(self, field: str, count: int = 1) -> None:
        """A value from the wire refused (`podmortem_values_refused_total{field}`)."""
        if self._metrics:
            self._metrics.values_refused.labels(field=field).inc(count)

    def _limit_hit(self, limit: str) -> None:
        if self._metrics:
            self._metrics.limit_hits.labels(limit=limit).inc()

    def _open_limit(self, state: _JobState) -> str:
        """The limit opening `state`'s incident would pass ("" when none): all incidents, the job's attempts,
        the namespace's."""
        if self._open_count >= self.max_open:
            return "open_incidents"
        if self._open_by_job.get((state.job.namespace, state.job.name), 0) >= self.max_open_per_job:
            return "open_incidents_per_job"
        if self._open_by_namespace.get(state.job.namespace, 0) >= self.max_open_per_namespace:
            return "open_incidents_per_namespace"
        return ""

    def _count_open(self, state: _JobState, step: int) -> None:
        self._open_count += step
        _add(self._open_by_job, (state.job.namespace, state.job.name), step)
        _add(self._open_by_namespace, state.job.namespace, step)

    def _open(self, state: _JobState) -> None:
        self._count_open(state, 1)
        state.opened_at = self._clock()
        log.info("incident %s opened (%d members known)", state.incident_id, len(state.members))
        if self._metrics:
            self._metrics.open_incidents.inc()
        loop = asyncio.get_running_loop()
        state.timer = loop.call_later(self.quorum_timeout, self._on_timeout, job_key(state.job, state.attempt))

    def _on_timeout(self, key: JobKey) -> None:
        state = self._jobs.get(key)
        if state is not None and state.closed_by is None:
            log.info(
                "incident %s: quorum timeout after %.1fs (%d/%d reported)",
                state.incident_id,
                self.quorum_timeout,
                self._reported(state),
                self.world_size(state),
            )
            self._close(state, "timeout")

    def _check_quorum(self, state: _JobState) -> None:
        if state.opened_at is None or state.closed_by is not None or state.capturing:
            return
        if self._reported(state) >= self.world_size(state):
            self._close(state, "quorum")

    def _incident(self, state: _JobState) -> Incident:
        return Incident(
            job=state.job,
            world_size=self.world_size(state),
            members=tuple(m.member() for m in state.members.values()),
            attempt=state.attempt,
            incident_id=state.incident_id,
            opened_at=state.opened_at,
            stalled_at=state.stalled_at,
        )

    def _close(self, state: _JobState, closed_by: ClosedBy, inline: bool = False) -> None:
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        state.closed_by = closed_by
        self._count_open(state, -1)
        if self._metrics:
            self._metrics.open_incidents.dec()
        self._open_waiting()
        incident = self._incident(state)
        self._deciding.decide(
            state.pending,
            state.incident_id,
            incident,
            lambda verdict: self._emit(state, closed_by, incident, verdict),
            inline=inline,
        )

    def _open_waiting(self) -> None:
        """A place is free: the refused incidents that now fit their limits open, oldest first."""
        kept: list[JobKey] = []
        for key in self._waiting:
            waiting = self._jobs.get(key)
            if waiting is None or waiting.opened_at is not None:
                continue
            if self._open_limit(waiting):
                kept.append(key)
                continue
            waiting.refused = False
            self._open(waiting)
            asyncio.get_running_loop().call_soon(self._check_quorum, waiting)
        self._waiting = kept

    def _revise(self, key: JobKey) -> None:
        state = self._jobs.get(key)
        if state is None:
            return
        state.pending.revise_timer = None
        incident = self._incident(state)
        self._deciding.decide(
            state.pending, state.incident_id, incident, lambda verdict: self._revised(state, incident, verdict)
        )

    def _revised(self, state: _JobState, incident: Incident, verdict: Verdict) -> None:
        old = state.verdict
        # A capture arriving late may name the rank and the line without changing the pod: that is news too.
        same = old is not None and (old.pod, old.category, old.retryable, old.global_rank, old.hang) == (
            verdict.pod,
            verdict.category,
            verdict.retryable,
            verdict.global_rank,
            verdict.hang,
        )
        if same:
            state.verdict = verdict  # same answer; evidence may have grown, nothing to republish
            return
        self._emit(state, "revision", incident, verdict)

    def _emit(
        self, state: _JobState, closed_by: ClosedBy, incident: Incident | None = None, verdict: Verdict | None = None
    ) -> None:
        incident = incident or self._incident(state)
        verdict = verdict or self._deciding.safe_decide(incident)
        reported = self._reported(state)
        # The engine sees members, not which of them reported: "missing" is said here, where the count is.
        verdict = dataclasses.replace(verdict, members_missing=max(incident.world_size - reported, 0))
        state.verdict = verdict
        state.revision += 1
        decided_at = self._clock()
        entry = repeats.entry(incident, verdict, decided_at)
        uid = incident.job.uid
        root = state.members.get(verdict.pod) if verdict.pod is not None else None
        # Only an attempt the pod watch saw its root in is the job's own: a stream's invented attempt
        # never enters the history another attempt is compared with.
        own = entry is not None and bool(uid) and root is not None and root.watched
        history = tuple(a for a in self.history.get(uid) if a.attempt != incident.attempt) if uid else ()
        if own:
            assert entry is not None
            self.history.record(uid, entry)
        self._publish(
            Decision(
                incident=incident,
                verdict=verdict,
                decided_at=decided_at,
                revision=state.revision,
                closed_by=closed_by,
                reported=reported,
                verified=frozenset(pod for pod, m in state.members.items() if m.verified),
                attempt=entry,
                history=history,
                own_attempt=own,
            )
        )
