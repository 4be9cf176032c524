"""The captured evidence of a hang, gathered from an incident and put to the cross-rank matcher.

Captures reach the engine two ways: the sidecars' (`Member.captures`: the worker control plane, py-spy,
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
from podmortem.core.model import HangFinding, Member, WorkerCapture
from podmortem.core.stacks import dumps_in_log

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


def has_captures(members: Sequence[Member]) -> bool:
    """Any capture to read (the cheap test before the matcher runs)."""
    return any(m.captures or "(most recent call first)" in log_text(m) for m in members)


def find_hang(findings: Sequence[Finding], owners: Mapping[int, str]) -> HangFinding | None:
    """What the incident's captures say about a hang (None: nothing decisive)."""
    placed: list[RankCapture] = []
    all_ranks: set[int] = set(owners)
    timed_out: set[int] = set()
    for f in findings:
        all_ranks.update(f.own_ranks)
        if f.secondary == "timeout":
            timed_out.update(f.own_ranks - set(f.silent_ranks))
        for cap in (*sigterm_captures(f.member, f), *f.member.captures):
            if cap.global_rank is not None:
                placed.append(RankCapture(cap.global_rank, f.member.pod, cap))
                all_ranks.add(cap.global_rank)
    if not placed:
        return None
    captured = {c.rank for c in placed}
    # A rank that timed out waiting is not also a laggard, unless its own capture says otherwise.
    return match(placed, all_ranks=all_ranks, timed_out=timed_out - captured, owners=owners)
