"""Each member's events and their fold into a `Member`, kept until something it depends on changes.

The book keeps a member's events (deduplicated by id) and folds them into a `Member` when it needs one:
on every quorum check and when deciding. The fold uses the member's best clock offset at that moment,
so an offset measured after an event arrived still corrects it; an event that comes last in the pod's
own order is folded onto the kept fold instead of refolding them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podmortem.core.model import Member, evolve
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import apply_event

# Capture events kept per member, the newest (each up to 64 workers x (32 KiB stack + 64 KiB Flight
# Recorder summary), the proto's bounds, checked at intake): a few requests per incident
# (`aggregator.stalls`), and the sidecar's own.
MAX_MEMBER_CAPTURES = 4


def is_terminal(member: Member) -> bool:
    """Has this member reported how it ended (so quorum need not wait for it)?"""
    return member.ended or member.phase_reason in ("NodeLost", "Deleted")


@dataclass
class MemberState:
    """One member as the book holds it: who it is, its events, its clock and streams, its cached fold."""

    identity: Member
    events: dict[str, pb.Event] = field(default_factory=dict)  # id -> event, in arrival order
    clock_offset: float | None = None
    clock_round_trip: float | None = None
    streams: int = 0  # open sidecar streams of this member
    sidecar_saw_end: bool = False  # its sidecar itself reported the termination / deletion
    counted: bool = False  # included in its job's running `reported` count
    ended_counted: bool = False  # included in its job's running `ended` count (its end is known)
    flooded: bool = False  # reached MAX_MEMBER_EVENTS (counted once)
    # Its job membership was verified against the API: seen by the pod watch, or registered by a
    # stream whose token and pod object were checked (aggregator.kube.membership). Never unset.
    verified: bool = False
    # The pod watch placed this pod in this job attempt (the attempt as the API shows it, not as a stream
    # claims it): only such a root's attempt enters the job's history (`aggregator.history`).
    watched: bool = False
    # The newest log tail's text, kept once as a compact str: its event in `events` is stored without
    # it, so a tail is not held twice, in the protobuf event and in the folded member (the aggregator's
    # peak RSS under a burst: bench/burst.py, docs/benchmarks.md).
    log_text: str | None = None
    # Its sidecar's newest `Activity`: quiet (no progress for its stall-after) or not, and when it was
    # sent (pod clock: an older one resent after a reconnect does not undo a newer one).
    quiet: bool = False
    activity_at: tuple[int, int] | None = None
    # The fold of `events` is needed on every quorum check (for every member); it is kept until
    # something it depends on changes, so that an ingest does not re-fold the whole job.
    _folded: Member | None = field(default=None, repr=False)
    _folded_through: tuple[int, int] | None = field(default=None, repr=False)  # newest event folded

    def changed(self) -> None:
        self._folded = None

    def make_room(self, kind: str | None) -> None:
        """Before a new event of `kind` is kept: only the newest log tail matters (one is kept), and of an
        error file's versions the first (when it failed) and the newest."""
        if kind == "log_tail":
            for old in [i for i, e in self.events.items() if e.WhichOneof("payload") == "log_tail"]:
                del self.events[old]
                self.changed()
        if kind == "error_file":
            versions = [i for i, e in self.events.items() if e.WhichOneof("payload") == "error_file"]
            for old in versions[1:]:
                del self.events[old]
                self.changed()
        if kind == "activity":  # only the newest says anything (`quiet`); the fold does not read them
            for old in [i for i, e in self.events.items() if e.WhichOneof("payload") == "activity"]:
                del self.events[old]
        if kind == "capture":  # the newest few (requests per incident are bounded: `aggregator.stalls`)
            kept = [i for i, e in self.events.items() if e.WhichOneof("payload") == "capture"]
            for old in kept[: max(len(kept) - MAX_MEMBER_CAPTURES + 1, 0)]:
                del self.events[old]
                self.changed()

    def active(self, event: pb.Event) -> bool | None:
        """Take an `Activity` event: did the member's quiet flag change (None: an older one, ignored)?"""
        when = (event.wall_time.seconds, event.wall_time.nanos)
        if self.activity_at is not None and when < self.activity_at:
            return None
        self.activity_at = when
        changed = self.quiet != event.activity.quiet
        self.quiet = event.activity.quiet
        return changed

    def added(self, event: pb.Event) -> None:
        """One more event in `events`: folded onto the kept fold when it comes last in the fold's order
        (the pod's wall time; a tie goes after, as the stable sort puts it), else the fold is redone when
        next needed. A burst's member gets its events in order: one `apply_event` each, not a re-fold of
        all of them on every ingest (bench/ingest_speed.py)."""
        m, when = self._folded, (event.wall_time.seconds, event.wall_time.nanos)
        if m is None or (self._folded_through is not None and when < self._folded_through):
            self._folded = None
            return
        m = apply_event(m, event, self.clock_offset)
        if self.log_text is not None and m.log_tail is not self.log_text:
            m = evolve(m, log_tail=self.log_text)
        self._folded, self._folded_through = m, when

    def reported(self, ended: bool | None = None) -> bool:
        """Terminal for quorum (`ended`: `is_terminal` of it, where the caller has it already). While its
        sidecar is connected, only the sidecar's own report of the end counts: the sidecar sends the error
        file before the termination, whereas the aggregator's pod watch may see the exit before the error
        file's event arrives."""
        if ended is None:
            ended = is_terminal(self.member())
        return ended and (self.streams == 0 or self.sidecar_saw_end)

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
