"""Incidents: group events per job attempt, open on the first failure, close on quorum or timeout.

Every sidecar registers when its pod starts, so the book knows a job's members before anything
fails. The first event that means failure (an error file, a non-zero exit, a DisruptionTarget
condition, a lost or deleted pod) opens the job attempt's incident and arms a timer. The incident
closes — and the engine decides — as soon as every expected member has reported a terminal state
(quorum), or when the timer fires with members still silent. A member reporting after that may
change the verdict; the book then publishes a revision. The expected size is the largest of the
configured size, the job's own size (`expect`, from the Kubernetes job spec) and the sidecars'
world-size hints.

Events are kept per member (deduplicated by id) and folded into `Member`s only when deciding, with
the member's best clock offset at that moment — an offset measured after an event arrived still
corrects it. This module does no I/O: decisions go to a `publish` callable (the publish queue).

Cost per event is O(1) apart from the decisions themselves: each job keeps a running count of its
reported members (updated when a member changes, never recounted), late events after a verdict are
coalesced into one revision per `revise_delay` seconds (on the loop clock), and an incident with at
least `offload_members` members is decided in a worker thread, so that acks never wait behind a
10,000-member decision. A member whose data makes the engine fail is set aside with a logged reason,
and the incident is decided without it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from podmortem.aggregator.metrics import Metrics
from podmortem.aggregator.publishing import ClosedBy, Decision
from podmortem.core import logtail
from podmortem.core.model import Incident, JobRef, Member, Verdict, evolve
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import apply_event, compact_text

log = logging.getLogger(__name__)

Decide = Callable[[Incident], Verdict]
JobKey = tuple[str, str, str]  # namespace, name, attempt
RETAINED_TAIL_CHARS = 16 << 10  # of each member's log tail (see `retained`)
# No training job has more pods than this; a larger world-size hint is capped (not trusted as is).
MAX_WORLD_SIZE = 65_536
# Limits against a flood (a bug or a hostile client): beyond each, new things are refused — with a
# reason in the log and `podmortem_limit_hits_total{limit}` — and nothing already held is dropped.
MAX_MEMBERS_PER_JOB = MAX_WORLD_SIZE
MAX_OPEN_INCIDENTS = 1_000
MAX_NAMESPACES = 1_000
# Bytes kept per event and events kept per member: a hostile or broken client sending 4 MiB messages
# or endless versions must not grow the book. A sidecar sends a handful per pod run.
MAX_MEMBER_EVENTS = 256
MAX_TEXT_CHARS = 16 << 10  # error messages, tracebacks (their end), termination and condition messages


class LimitExceeded(Exception):
    """A registration that would pass a limit; `limit` names it (the metric's label)."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


@dataclass(frozen=True)
class MemberKey:
    job: JobKey
    pod: str


def job_key(job: JobRef, attempt: str) -> JobKey:
    return (job.namespace, job.name, attempt)


def is_failure(event: pb.Event) -> bool:
    """Does this event mean something went wrong (and so open an incident)?"""
    kind = event.WhichOneof("payload")
    if kind == "error_file":
        return True
    if kind == "termination":
        t = event.termination
        return (t.HasField("exit_code") and t.exit_code != 0) or t.HasField("signal") or t.reason == "OOMKilled"
    if kind == "condition":
        return event.condition.type == "DisruptionTarget" and event.condition.status == "True"
    if kind == "deletion":
        return event.deletion.phase in ("Unknown", "Failed", "Running", "") or event.deletion.reason == "NodeLost"
    return False


def bounded(event: pb.Event) -> pb.Event:
    """The event with every free-text field cut to what the engine reads (a no-op for a sidecar's own
    events, whose error files are already bounded when parsed): at most `MAX_TEXT_CHARS` each."""
    kind = event.WhichOneof("payload")
    if kind == "log_tail":
        return retained(event)
    fields = {
        "error_file": ("message", "traceback", "exception_type", "parse_error"),
        "termination": ("message", "reason", "container"),
        "condition": ("message", "reason", "type", "status"),
        "deletion": ("phase", "reason"),
    }.get(kind or "", ())
    body = getattr(event, kind) if kind else None
    if body is None or all(len(getattr(body, f)) <= MAX_TEXT_CHARS for f in fields):
        return event
    kept = pb.Event()
    kept.CopyFrom(event)
    body = getattr(kept, kind)
    for f in fields:
        text = getattr(body, f)
        if len(text) > MAX_TEXT_CHARS:
            setattr(body, f, text[-MAX_TEXT_CHARS:] if f == "traceback" else text[:MAX_TEXT_CHARS])
    if kind == "error_file":
        kept.error_file.truncated = True
    return kept


def retained(event: pb.Event, keep: int = RETAINED_TAIL_CHARS) -> pb.Event:
    """The part of a log tail the book keeps: its last `keep` characters, plus the line a log rule matched
    when that lies earlier. Thousands of members x 64 KiB tails held until the incident is decided were
    most of the aggregator's memory in a burst; the decision needs the end of the log (torch's failure
    summary, the last tracebacks) and the lines that name a cause, not the training chatter before."""
    text, cut = retained_text(event.log_tail.text, keep)
    if not cut:
        return event
    kept = pb.Event()
    kept.CopyFrom(event)
    kept.log_tail.text = text
    kept.log_tail.truncated = True
    return kept


def retained_text(text: str, keep: int = RETAINED_TAIL_CHARS) -> tuple[str, bool]:
    """`retained` on the text itself: (what is kept, whether anything was cut)."""
    if len(text) <= keep:
        return text, False
    tail = text[-keep:]
    cut = tail.find("\n")
    tail = tail[cut + 1 :] if 0 <= cut < len(tail) - 1 else tail
    # The line a rule names, looked for only in the part not kept (the rest is in `tail` anyway).
    hit = logtail.first_log_line(text[: len(text) - len(tail)])
    head = f"{hit}\n" if hit else ""
    return f"{head}[... {len(text) - len(tail) - len(head)} characters of the log not kept ...]\n{tail}", True


def _without_text(event: pb.Event, truncated: bool) -> pb.Event:
    """A log-tail event as the book stores it: every field but the text. Built field by field, not copied
    and cleared: a copy's arena keeps the 64 KiB it copied (peak RSS 122 -> 166 MiB at W=1,024)."""
    stripped = pb.Event(id=event.id, monotonic_ns=event.monotonic_ns, log_tail=pb.LogTail(truncated=truncated))
    if event.HasField("wall_time"):
        stripped.wall_time.CopyFrom(event.wall_time)
    return stripped


def is_terminal(member: Member) -> bool:
    """Has this member reported how it ended (so quorum need not wait for it)?"""
    return (
        member.termination is not None
        or member.phase in ("Failed", "Succeeded", "Unknown")
        or member.phase_reason in ("NodeLost", "Deleted")
    )


@dataclass
class _MemberState:
    identity: Member
    events: dict[str, pb.Event] = field(default_factory=dict)  # id -> event, in arrival order
    clock_offset: float | None = None
    clock_round_trip: float | None = None
    streams: int = 0  # open sidecar streams of this member
    sidecar_saw_end: bool = False  # its sidecar itself reported the termination / deletion
    counted: bool = False  # included in its job's running `reported` count
    flooded: bool = False  # reached MAX_MEMBER_EVENTS (counted once)
    # Its job membership was verified against the API: seen by the pod watch, or registered by a
    # stream whose token and pod object were checked (aggregator.kube.membership). Never unset.
    verified: bool = False
    # The newest log tail's text, kept once as a compact str: its event in `events` is stored without
    # it (held twice, in the protobuf event and in the folded member, a 4,096-pod burst peaked at 543
    # MiB; once, at 244 MiB — bench/burst.py, docs/benchmarks.md).
    log_text: str | None = None
    # The fold of `events` is needed on every quorum check (for every member); it is kept until
    # something it depends on changes, so that an ingest does not re-fold the whole job.
    _folded: Member | None = field(default=None, repr=False)
    _folded_through: tuple[int, int] | None = field(default=None, repr=False)  # newest event folded

    def changed(self) -> None:
        self._folded = None

    def added(self, event: pb.Event) -> None:
        """One more event in `events`: folded onto the kept fold when it comes last in the fold's order
        (the pod's wall time; a tie goes after, as the stable sort puts it), else the fold is redone when
        next needed. A burst's member gets its events in order: one `apply_event` each, not a re-fold of
        all of them on every ingest (a fifth of `ingest`)."""
        m, when = self._folded, (event.wall_time.seconds, event.wall_time.nanos)
        if m is None or (self._folded_through is not None and when < self._folded_through):
            self._folded = None
            return
        m = apply_event(m, event, self.clock_offset)
        if self.log_text is not None and m.log_tail is not self.log_text:
            m = evolve(m, log_tail=self.log_text)
        self._folded, self._folded_through = m, when

    def reported(self) -> bool:
        """Terminal for quorum. While its sidecar is connected, only the sidecar's own report of the end
        counts: the sidecar sends the error file before the termination, whereas the aggregator's pod
        watch may see the exit before the error file's event arrives."""
        return is_terminal(self.member()) and (self.streams == 0 or self.sidecar_saw_end)

    def member(self) -> Member:
        if self._folded is not None:
            return self._folded
        m = evolve(self.identity, clock_offset=self.clock_offset, clock_round_trip=self.clock_round_trip)
        # In the pod's own order, not arrival order: events resent after a reconnect arrive late.
        ordered = sorted(self.events.values(), key=lambda e: (e.wall_time.seconds, e.wall_time.nanos))
        for event in ordered:
            m = apply_event(m, event, self.clock_offset)
        if self.log_text is not None:
            m = evolve(m, log_tail=self.log_text)
        self._folded = m
        self._folded_through = (ordered[-1].wall_time.seconds, ordered[-1].wall_time.nanos) if ordered else None
        return m


@dataclass
class _JobState:
    job: JobRef
    attempt: str
    members: dict[str, _MemberState] = field(default_factory=dict)
    world_size_hint: int | None = None
    expected: int | None = None
    opened_at: float | None = None
    timer: asyncio.TimerHandle | None = None
    closed_by: ClosedBy | None = None
    revision: int = 0
    verdict: Verdict | None = None
    reported: int = 0  # members whose `reported()` is true, kept by IncidentBook._recount
    revise_timer: asyncio.TimerHandle | None = None  # a revision is due (late events coalesce)
    deciding: bool = False  # a decision runs in a worker thread
    dirty: bool = False  # more late events arrived while it ran
    refused: bool = False  # not opened: too many incidents were open (counted once)

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
    ) -> None:
        self._decide = decide
        self._publish = publish
        self.quorum_timeout = quorum_timeout
        self.default_world_size = default_world_size
        self._clock = clock
        self._metrics = metrics
        self._max_jobs = max_jobs
        self.revise_delay = revise_delay
        self.offload_members = offload_members
        self.max_members, self.max_open, self.max_namespaces = max_members, max_open, max_namespaces
        self._open_count = 0
        self._waiting: list[JobKey] = []  # jobs with a failure, refused an incident at the limit (oldest first)
        self._namespaces: dict[str, int] = {}  # namespace -> jobs held
        self._jobs: dict[JobKey, _JobState] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # decisions running in worker threads

    # -- inputs ------------------------------------------------------------------------------

    def register(self, reg: pb.Register, verified: bool = False) -> MemberKey:
        """A sidecar says who it is (again after every reconnect). Raises `LimitExceeded` for a job that
        would pass its member limit, or a namespace beyond the number tracked. `verified`: the
        registration's job and position were checked against the API (see `is_verified`)."""
        job = JobRef(reg.job.namespace, reg.job.name, reg.job.kind, reg.job.uid)
        known = self._jobs.get(job_key(job, reg.attempt))
        if known is None and job.namespace not in self._namespaces and len(self._namespaces) >= self.max_namespaces:
            self._limit_hit("namespaces")
            raise LimitExceeded("namespaces", f"more than {self.max_namespaces} namespaces tracked")
        if known is not None and reg.pod not in known.members and len(known.members) >= self.max_members:
            self._limit_hit("members_per_job")
            raise LimitExceeded("members_per_job", f"job {job.key} already has {self.max_members} members")
        state = self._job(job, reg.attempt)
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
        return MemberKey(job_key(job, reg.attempt), reg.pod)

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
        state = self._job(job, attempt)
        self._merge_identity(state, identity)
        member = state.members[identity.pod]
        member.verified = True  # the pod watch resolved it from the pod object
        self._recount(state, member)
        return MemberKey(job_key(job, attempt), identity.pod)

    def is_verified(self, key: MemberKey) -> bool:
        """Was this member's job membership verified against the API? True for a pod the aggregator's
        pod watch resolved into this job, or a sidecar whose token is bound to a pod whose object says
        it belongs here; False for a member known only from an unauthenticated stream (`--auth none`)
        or from a state file written before verification. Only verified members may be acted on."""
        member = self._member(key)
        return member is not None and member.verified

    def lacks_log(self, key: MemberKey) -> bool:
        """Is this member without a sidecar now and without any log tail? (so the pod watch reads one)"""
        member = self._member(key)
        if member is None or member.streams > 0:
            return False
        return not any(e.WhichOneof("payload") == "log_tail" for e in member.events.values())

    def expect(self, job: JobRef, attempt: str, world_size: int) -> None:
        """The job's own size (from its spec or an annotation)."""
        state = self._job(job, attempt)
        state.expected = world_size
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
        kind = event.WhichOneof("payload")
        log_text: str | None = None
        if kind == "log_tail":  # only the newest tail matters: keep one, its text once (see `log_text`)
            for old in [i for i, e in member.events.items() if e.WhichOneof("payload") == "log_tail"]:
                del member.events[old]
                member.changed()
            # `retained` on the str, read from the message once: not set into a copy and read back out.
            text, cut = retained_text(event.log_tail.text)
            log_text = compact_text(text)
            event = _without_text(event, truncated=event.log_tail.truncated or cut)
        else:
            event = bounded(event)
        if kind == "error_file":  # versions of one file: the first (when it failed) and the newest
            versions = [i for i, e in member.events.items() if e.WhichOneof("payload") == "error_file"]
            for old in versions[1:]:
                del member.events[old]
                member.changed()
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
        if log_text is not None:
            member.log_text = log_text
        member.added(event)
        self._recount(state, member)
        if self._metrics and kind:
            counter = self._metrics.events_by_kind.get(kind)
            (counter if counter is not None else self._metrics.events.labels(kind=kind)).inc()
        if state.opened_at is None and is_failure(event):
            if self._open_count >= self.max_open:
                if not state.refused:
                    state.refused = True
                    self._waiting.append(job_key(state.job, state.attempt))
                    self._limit_hit("open_incidents")
                    log.warning(
                        "incident %s not opened: %d incidents are open (the limit); its events are kept",
                        state.incident_id,
                        self._open_count,
                    )
            else:
                self._open(state)
        elif state.closed_by is not None:
            self._schedule_revision(state)
            return True
        self._check_quorum(state)
        return True

    # -- state -------------------------------------------------------------------------------

    def incident(self, key: JobKey) -> Incident | None:
        state = self._jobs.get(key)
        return self._incident(state) if state else None

    def open_incidents(self) -> list[JobKey]:
        return [k for k, s in self._jobs.items() if s.opened_at is not None and s.closed_by is None]

    def close_all(self) -> None:
        """Shutdown: decide every open incident and every due revision now rather than lose it."""
        for key in self.open_incidents():
            self._close(self._jobs[key], "timeout", inline=True)
        for state in self._jobs.values():
            if state.revise_timer is not None or state.dirty:
                if state.revise_timer is not None:
                    state.revise_timer.cancel()
                state.revise_timer, state.dirty = None, False
                incident = self._incident(state)
                self._revised(state, incident, self._safe_decide(incident))

    async def settle(self) -> None:
        """Wait for the decisions running in worker threads (before `close_all` at shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- internals ---------------------------------------------------------------------------

    def _job(self, job: JobRef, attempt: str) -> _JobState:
        key = job_key(job, attempt)
        state = self._jobs.get(key)
        if state is None:
            if len(self._jobs) >= self._max_jobs:
                self._evict()
            state = self._jobs[key] = _JobState(job=job, attempt=attempt)
            self._namespaces[job.namespace] = self._namespaces.get(job.namespace, 0) + 1
        elif (job.kind and not state.job.kind) or (job.uid and not state.job.uid):
            state.job = JobRef(job.namespace, job.name, job.kind or state.job.kind, job.uid or state.job.uid)
        return state

    def _evict(self) -> None:
        """Forget the oldest decided jobs (never an open incident)."""
        for key in [k for k, s in self._jobs.items() if s.closed_by is not None or s.opened_at is None]:
            del self._jobs[key]
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
            state.members[identity.pod] = _MemberState(identity=identity)
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

    def _member(self, key: MemberKey) -> _MemberState | None:
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
    def _recount(state: _JobState, member: _MemberState) -> None:
        """Keep the job's running count of reported members (O(1); call after any change to a member)."""
        now = member.reported()
        if now != member.counted:
            state.reported += 1 if now else -1
            member.counted = now

    def _limit_hit(self, limit: str) -> None:
        if self._metrics:
            self._metrics.limit_hits.labels(limit=limit).inc()

    def _open(self, state: _JobState) -> None:
        self._open_count += 1
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
        if state.opened_at is None or state.closed_by is not None:
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
        )

    def _close(self, state: _JobState, closed_by: ClosedBy, inline: bool = False) -> None:
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        state.closed_by = closed_by
        self._open_count -= 1
        if self._metrics:
            self._metrics.open_incidents.dec()
        while self._waiting and self._open_count < self.max_open:  # a place is free: the oldest refused opens
            waiting = self._jobs.get(self._waiting.pop(0))
            if waiting is not None and waiting.opened_at is None:
                waiting.refused = False
                self._open(waiting)
                loop = asyncio.get_running_loop()
                loop.call_soon(self._check_quorum, waiting)
        incident = self._incident(state)
        if inline or len(incident.members) < self.offload_members:
            self._emit(state, closed_by, incident, self._safe_decide(incident))
        else:
            self._offload(state, incident, lambda verdict: self._emit(state, closed_by, incident, verdict))

    def _schedule_revision(self, state: _JobState) -> None:
        """A late event: revise once the burst it belongs to is over (one revision per `revise_delay`)."""
        if state.deciding:
            state.dirty = True
        elif state.revise_timer is None:
            key = job_key(state.job, state.attempt)
            state.revise_timer = asyncio.get_running_loop().call_later(self.revise_delay, self._revise, key)

    def _revise(self, key: JobKey) -> None:
        state = self._jobs.get(key)
        if state is None:
            return
        state.revise_timer = None
        incident = self._incident(state)
        if len(incident.members) < self.offload_members:
            self._revised(state, incident, self._safe_decide(incident))
        else:
            self._offload(state, incident, lambda verdict: self._revised(state, incident, verdict))

    def _revised(self, state: _JobState, incident: Incident, verdict: Verdict) -> None:
        old = state.verdict
        same = old is not None and (old.pod, old.category, old.retryable) == (
            verdict.pod,
            verdict.category,
            verdict.retryable,
        )
        if same:
            state.verdict = verdict  # same answer; evidence may have grown, nothing to republish
            return
        self._emit(state, "revision", incident, verdict)

    def _offload(self, state: _JobState, incident: Incident, then: Callable[[Verdict], None]) -> None:
        """Decide a large incident in a worker thread; `then` runs back on the loop with the verdict."""
        state.deciding = True

        async def run() -> None:
            try:
                verdict = await asyncio.to_thread(self._safe_decide, incident)
            finally:
                state.deciding = False
            then(verdict)
            if state.dirty:  # late events arrived meanwhile: one more revision
                state.dirty = False
                self._schedule_revision(state)

        task = asyncio.get_running_loop().create_task(run(), name=f"decide {state.incident_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _safe_decide(self, incident: Incident) -> Verdict:
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

    def _emit(
        self, state: _JobState, closed_by: ClosedBy, incident: Incident | None = None, verdict: Verdict | None = None
    ) -> None:
        incident = incident or self._incident(state)
        verdict = verdict or self._safe_decide(incident)
        state.verdict = verdict
        state.revision += 1
        reported = self._reported(state)
        self._publish(
            Decision(
                incident=incident,
                verdict=verdict,
                decided_at=self._clock(),
                revision=state.revision,
                closed_by=closed_by,
                reported=reported,
            )
        )
