"""The captured evidence of a hang, gathered from an incident and put to the cross-rank matcher.

Captures reach the engine two ways (and the tracebacks that ranks print as they time out, a third kind of
evidence: where each waited, `tracebacks_in_log`): the sidecars' (`Member.captures`: the worker control plane, py-spy,
Flight Recorder dump files) and the log tails' — a worker whose faulthandler is registered for SIGTERM
prints every thread's stack when torchrun tears it down, and that text is in its pod's log
(`sigterm_captures`). Each is placed by global rank and pod, and `podmortem.core.hangs.match` decides.

Placing a log's dump on a rank: the line prefix names it (`[rank3]:`, or torchrun's `--tee` `[default1]:`
with torch's summary pairing local and global ranks); without a prefix, a pod whose log shows one rank
only, or one dump and one rank of the pod that never raised while its siblings timed out (the silent rank
of `podmortem.core.assess`), says whose it is. A dump that cannot be placed is not used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from podmortem.core.assess import Finding, assess, log_text
from podmortem.core.hangs import RankCapture, match
from podmortem.core.model import Frame, HangFinding, Member, WorkerCapture
from podmortem.core.stacks import dumps_in_log, in_collective, parse_one, tracebacks_in_log, user_frame

# A log tail's SIGTERM stacks: how many are read per member (a pod runs a handful of workers).
MAX_LOG_DUMPS = 64


def sigterm_captures(member: Member, finding: Finding | None = None) -> tuple[WorkerCapture, ...]:
    """The faulthandler dumps in a member's log tail, as captures placed on a global rank where possible."""
    text = log_text(member)
    dumps = dumps_in_log(text)[-MAX_LOG_DUMPS:]
    if not dumps:
        return ()
    if finding is None or not finding.own_ranks:  # its log read in full only now (a torn-down member's is not)
        finding = assess(member, full_log=True)
    own = sorted(finding.own_ranks)
    silent = list(finding.silent_ranks)
    unplaced = [d for d in dumps if d.rank is None]
    guess: int | None = None
    if len(own) == 1:
        guess = own[0]
    elif len(unplaced) == 1 and len(silent) == 1:
        guess = silent[0]
    out = []
    for d in dumps:
        rank = d.rank if d.rank is not None else guess
        out.append(
            WorkerCapture(
                path="sigterm_stack",
                local_rank=d.local_rank,
                global_rank=rank,
                stack=d.text,
                trigger="teardown",
                note="" if rank is not None else "a stack in the log that no rank prefix or sibling places",
            )
        )
    return tuple(out)


# The timeout tracebacks of at most this many members are compared (each is a parse of its log's tracebacks; a
# cascade of thousands of timeouts is decided without them: `bench/engine_speed.py`).
MAX_TRACEBACK_MEMBERS = 512
_RANK_TRACEBACK = "]: Traceback (most recent call last):"


def has_captures(findings: Sequence[Finding]) -> bool:
    """Any capture to read (the cheap test before the matcher runs): a sidecar's, a stack in a log, or the
    tracebacks of ranks that timed out."""
    if any(f.member.captures or "(most recent call first)" in log_text(f.member) for f in findings):
        return True
    timeouts = [f for f in findings if f.secondary == "timeout"]
    return len(timeouts) <= MAX_TRACEBACK_MEMBERS and any(_RANK_TRACEBACK in log_text(f.member) for f in timeouts)


def find_hang(findings: Sequence[Finding], owners: Mapping[int, str]) -> HangFinding | None:
    """What the incident's captures say about a hang (None: nothing decisive)."""
    placed: list[RankCapture] = []
    all_ranks: set[int] = set(owners)
    timed_out: set[int] = set()
    waited_at: dict[int, Frame] = {}
    compare = sum(1 for f in findings if f.secondary == "timeout") <= MAX_TRACEBACK_MEMBERS
    for f in findings:
        all_ranks.update(f.own_ranks)
        if f.secondary == "timeout":
            timed_out.update(f.own_ranks - set(f.silent_ranks))
        if f.secondary == "timeout" and compare:
            for rank, tb in tracebacks_in_log(log_text(f.member)).items():
                frame = user_frame(tb)
                if frame is not None and rank in f.own_ranks and rank not in f.silent_ranks:
                    waited_at[rank] = frame
        for cap in (*sigterm_captures(f.member, f), *f.member.captures):
            if cap.global_rank is not None:
                placed.append(RankCapture(cap.global_rank, f.member.pod, cap))
                all_ranks.add(cap.global_rank)
    for c in placed:  # a rank torn down inside a collective before it could time out: its stack says which one
        dump = parse_one(c.capture.stack) if c.rank not in waited_at and c.capture.stack else None
        frame = user_frame(dump) if dump is not None and in_collective(dump) else None
        if frame is not None:
            waited_at[c.rank] = frame
    if not placed and len(waited_at) < 3:
        return None
    return match(placed, all_ranks=all_ranks, timed_out=timed_out, owners=owners, waited_at=waited_at)


MAX_NOTES = 5
LIVE_PATHS = frozenset({"control_plane", "py_spy"})  # paths that ask a running worker (not a file it left)


def _ended_at(m: Member) -> float | None:
    """When the member's workers were known to be going (reference clock): its error file seen (the agent
    tears the pod's other workers down once one fails), its container's end, its deletion; None: not known."""
    times = [m.error_observed_at, m.termination_observed_at, m.deleted_at]
    if m.termination is not None and m.termination.finished_at is not None:
        times.append(m.termination.finished_at + (m.clock_offset or 0.0))
    known = [t for t in times if t is not None]
    return min(known) if known else None


def capture_notes(members: Sequence[Member]) -> list[str]:
    """The failed captures that explain a gap in the evidence, a line each (a few), then how many others
    there were. A capture failed when it brought neither a stack nor a Flight Recorder summary; it explains a
    gap when nothing else was captured for its rank (by any path, in any member, or a stack in its pod's log)
    and, for a path that asks a running worker, its rank still ran when it was asked. A request that reached a
    pod after its rank had exited ("Connection refused" from a socket whose worker is gone) says nothing an
    owner needs: counted, not listed. Notes of captures that did bring a stack (one cut to its bound) are not
    listed either."""
    noted = [(m, c) for m in members for c in m.captures if c.note]
    if not noted:
        return []
    covered: set[int] = set()
    pods_with_content: set[str] = set()
    for m in members:
        for c in m.captures:
            if c.stack or c.flight_recorder is not None:
                pods_with_content.add(m.pod)
                if c.global_rank is not None:
                    covered.add(c.global_rank)
    for m in {m.pod: m for m, _ in noted}.values():  # a stack in the log: read for these members only
        for c in sigterm_captures(m):
            pods_with_content.add(m.pod)
            if c.global_rank is not None:
                covered.add(c.global_rank)
    gaps: list[str] = []
    late = other = 0
    for m, c in noted:
        if c.stack or c.flight_recorder is not None:
            other += 1
            continue
        if c.global_rank in covered if c.global_rank is not None else m.pod in pods_with_content:
            other += 1
            continue
        ended = _ended_at(m)
        if c.path in LIVE_PATHS and ended is not None and c.captured_at is not None and ended <= c.captured_at:
            late += 1
            continue
        who = f"rank {c.global_rank}" if c.global_rank is not None else "a worker"
        gaps.append(f"{m.pod}: capture of {who} ({c.path}) failed, and nothing else shows where it was: {c.note[:200]}")
    notes = gaps[:MAX_NOTES]
    more = len(gaps) - len(notes)
    counted = [
        f"{late} asked after the rank had exited" if late else "",
        f"{other} for ranks captured another way" if other else "",
        f"{more} more like the above" if more else "",
    ]
    if any(counted):
        notes.append("capture notes not listed: " + ", ".join(c for c in counted if c))
    return notes
