"""The cross-rank matcher: from what was captured of every worker of a hung job, who stopped, and where.

A collective finishes only when every rank of its process group has entered it. When a job hangs, the
ranks that entered wait; the rank that did not is somewhere else. Two kinds of capture say which is which
(`podmortem.core.model.WorkerCapture`): a Flight Recorder summary (`podmortem.core.flightrecorder`) says how
far each rank got in each process group, and a stack (`podmortem.core.stacks`) says where its program is.
`match` reads them in this order and returns the first rule that decides (`HangFinding`), or None:

1. **Mismatch.** Ranks of one group whose entries of the *same* sequence number disagree (another operation,
   or other dtypes, or other sizes where the operation needs equal ones): the program issued different
   collectives on different ranks, a bug of the program (`user_code`), not something a retry fixes. The
   earliest disagreeing sequence is the one reported; the ranks outside the largest agreeing set are named.
2. **Behind.** Per group, each rank's last *enqueued* sequence number (`pg_status`). The highest one, M, is
   the collective the others wait in, when some rank enqueued M but has not completed it. A rank whose last
   enqueued is below M never entered it. It is the culprit, unless it is itself waiting in another group's
   collective (then it waits for that group's laggard, who is named instead). When *every* laggard waits in
   another group's collective that its own waiters never entered, the ranks issued their collectives in
   different orders: a mismatch (rule 1's kind), naming the smaller side. A member of the group whose
   summary is missing while every present rank entered M is named too: the others' dumps and the group's
   member list (`pg_config`; for the default group, every rank known) say who did not come.
3. **Stacks.** Without a decisive Flight Recorder state: the ranks whose program thread is *not* inside a
   collective while the others are (their stack is in torch.distributed or autograd's backward, or their logs
   show they timed out waiting; given one of those, ranks sharing one place with others count as waiting too)
   are the culprits.
4. **Waited apart.** Without captures of that kind, the tracebacks of ranks that timed out (their logs): when
   every one but a single rank timed out at one place and that rank at another, it waited in a collective the
   others never entered — a mismatch (ranks split into several groups, as pipeline stages are, decide nothing).
5. **All in, none behind.** Every member of a group entered the same collective M, none completed it and
   none is behind: the collective itself is stuck (network or device), reported with its operation and M.

**Where.** The culprit's own stack (any capture of its rank) gives the frame: the innermost frame of the
user's code (`podmortem.core.stacks.user_frame`). A Flight Recorder entry's frames say where a rank
*entered* a collective, not where it is now, so they never give the culprit's frame.

Pure: no I/O; captures come from the sidecars (control plane, py-spy, dump files) and from the log tails
(faulthandler at SIGTERM) through the engine.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from podmortem.core.flightrecorder import FREntry, FRSummary
from podmortem.core.model import Frame, HangFinding, WorkerCapture
from podmortem.core.stacks import StackDump, in_collective, parse_one, user_frame

# Operations whose tensors may differ in size across ranks by design (uneven splits, a root's buffers).
_SIZES_VARY = ("all_to_all", "alltoall", "gather", "scatter", "send", "recv", "_v")
# The default group: every rank of the job is a member.
_DEFAULT_DESC = "default_pg"


@dataclass(frozen=True)
class RankCapture:
    """One captured worker, placed: its global rank and the pod it runs in."""

    rank: int
    pod: str
    capture: WorkerCapture


@dataclass
class _Rank:
    pod: str
    summary: FRSummary | None = None
    summary_path: str = ""
    stack: StackDump | None = None
    stack_path: str = ""


def op_name(op: str) -> str:
    """ "nccl:all_reduce" -> "all_reduce" (the backend prefix says nothing to a reader)."""
    return op.split(":", 1)[1] if ":" in op else op


def _gather(captures: Iterable[RankCapture]) -> dict[int, _Rank]:
    """Per global rank, its most informative Flight Recorder summary and stack (the latest capture wins)."""
    ranks: dict[int, _Rank] = {}
    order = sorted(captures, key=lambda c: c.capture.captured_at if c.capture.captured_at is not None else 0.0)
    for c in order:
        r = ranks.setdefault(c.rank, _Rank(c.pod))
        if c.capture.flight_recorder is not None:
            r.summary, r.summary_path = c.capture.flight_recorder, c.capture.path
        if c.capture.stack.strip():
            dump = parse_one(c.capture.stack)
            if dump is not None and dump.main_thread() is not None:
                r.stack, r.stack_path = dump, c.capture.path
    return ranks


def _where(ranks: Mapping[int, _Rank], culprits: Sequence[int]) -> tuple[Frame | None, str]:
    for r in culprits:
        info = ranks.get(r)
        if info is not None and info.stack is not None:
            frame = user_frame(info.stack)
            if frame is not None:
                return frame, info.stack_path
    return None, ""


def _members(pg: str, summaries: Mapping[int, FRSummary], all_ranks: frozenset[int]) -> frozenset[int]:
    """A group's members: its config's ranks (any dump that has them), the whole job for the default group."""
    listed: set[int] = set()
    default = pg == "0"
    for s in summaries.values():
        cfg = s.pg_config.get(pg)
        if cfg is not None:
            listed.update(cfg.ranks)
            default = default or cfg.desc == _DEFAULT_DESC
    if listed:
        return frozenset(listed)
    if default:
        return all_ranks | frozenset(summaries)
    return frozenset(r for r, s in summaries.items() if pg in s.pg_status)


def _entry(s: FRSummary, pg: str, seq: int) -> FREntry | None:
    for e in reversed(s.entries):
        if e.pg_id == pg and e.seq == seq and not e.is_p2p:
            return e
    return None


def _signature(e: FREntry) -> tuple[object, ...]:
    name = op_name(e.op)
    if any(v in name for v in _SIZES_VARY):
        return (name, e.input_dtypes, e.output_dtypes)
    return (name, e.input_sizes, e.output_sizes, e.input_dtypes, e.output_dtypes)


def _describe(e: FREntry) -> str:
    sizes = ",".join("x".join(str(d) for d in s) or "scalar" for s in e.input_sizes) or "-"
    dtypes = ",".join(e.input_dtypes) or "-"
    return f"{op_name(e.op)} [{sizes}] {dtypes}"


def _mismatch(summaries: Mapping[int, FRSummary], ranks: Mapping[int, _Rank]) -> HangFinding | None:
    by_key: dict[tuple[str, int], dict[int, FREntry]] = {}
    for r, s in summaries.items():
        for e in s.entries:
            if not e.is_p2p:
                by_key.setdefault((e.pg_id, e.seq), {})[r] = e
    for (pg, seq), entries in sorted(by_key.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if len(entries) < 2:
            continue
        groups: dict[tuple[object, ...], list[int]] = {}
        for r, e in sorted(entries.items()):
            groups.setdefault(_signature(e), []).append(r)
        if len(groups) < 2:
            continue
        # The largest agreeing set is taken as what the program meant; on a tie, the one holding the lowest rank.
        main = max(groups.values(), key=lambda rs: (len(rs), -min(rs)))
        odd = sorted(r for rs in groups.values() if rs is not main for r in rs)
        expected = entries[main[0]]
        frame, path = _where(ranks, odd)
        seen = "; ".join(f"rank {r}: {_describe(entries[r])}" for r in odd[:4])
        detail = (
            f"rank(s) {_ranks(odd)} issued a different collective as #{seq} of group {pg} than "
            f"rank(s) {_ranks(main)} ({_describe(expected)}): {seen}"
        )
        return HangFinding(
            finding="mismatch",
            stuck_ranks=tuple(odd),
            stuck_pods=_pods(ranks, odd),
            process_group=pg,
            seq=seq,
            op=op_name(expected.op),
            frame=frame,
            path=path or ranks[odd[0]].summary_path,
            detail=detail,
        )
    return None


def _ranks(rs: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in rs[:8])
    return shown + (f" and {len(rs) - 8} more" if len(rs) > 8 else "")


def _pods(ranks: Mapping[int, _Rank], rs: Sequence[int], owners: Mapping[int, str] | None = None) -> tuple[str, ...]:
    pods: list[str] = []
    for r in rs:
        pod = ranks[r].pod if r in ranks else (owners or {}).get(r, "")
        if pod and pod not in pods:
            pods.append(pod)
    return tuple(pods)


@dataclass(frozen=True)
class _Stall:
    pg: str
    seq: int  # M: the collective the group waits in
    op: str
    waiting: tuple[int, ...]  # entered M, not completed
    behind: tuple[int, ...]  # present, last enqueued below M
    missing: tuple[int, ...]  # members without a summary
    members: int


def _stalls(summaries: Mapping[int, FRSummary], all_ranks: frozenset[int]) -> list[_Stall]:
    pgs = sorted({pg for s in summaries.values() for pg in s.pg_status}, key=lambda k: (len(k), k))
    out: list[_Stall] = []
    for pg in pgs:
        members = _members(pg, summaries, all_ranks)
        enq: dict[int, int] = {}
        done: dict[int, int] = {}
        for r in members:
            s = summaries.get(r)
            if s is None:
                continue
            st = s.pg_status.get(pg)
            enq[r] = st.last_enqueued if st is not None and st.last_enqueued is not None else -1
            done[r] = st.last_completed if st is not None and st.last_completed is not None else -1
        if not enq:
            continue
        top = max(enq.values())
        waiting = tuple(sorted(r for r, e in enq.items() if e == top and done[r] < top))
        if top < 0 or not waiting:
            continue
        op = ""
        for r in waiting:
            e = _entry(summaries[r], pg, top)
            if e is not None:
                op = op_name(e.op)
                break
        out.append(
            _Stall(
                pg,
                top,
                op,
                waiting,
                tuple(sorted(r for r, e in enq.items() if e < top)),
                tuple(sorted(members - set(summaries))),
                len(members),
            )
        )
    return out


def _from_flight_recorder(
    summaries: Mapping[int, FRSummary],
    ranks: Mapping[int, _Rank],
    all_ranks: frozenset[int],
    owners: Mapping[int, str],
) -> HangFinding | None:
    stalls = _stalls(summaries, all_ranks)
    if not stalls:
        return None
    waiting_anywhere = {r for st in stalls for r in st.waiting}
    # Behind in a group, and not itself waiting in another group's collective: the ones that stopped.
    for st in stalls:
        culprits = [r for r in st.behind if r not in waiting_anywhere]
        if culprits:
            return _behind(st, culprits, ranks, owners, missing_dump=False)
    crossed = [st for st in stalls if st.behind]
    if crossed:  # every laggard waits in another group's collective, which its waiters never entered: a desync
        st = min(crossed, key=lambda x: (len(x.behind), x.pg))
        return _crossed(st, stalls, ranks, owners)
    for st in stalls:
        absent = [r for r in st.missing if r not in waiting_anywhere]
        if absent:
            return _behind(st, absent, ranks, owners, missing_dump=True)
    st = stalls[0]
    path = ranks[st.waiting[0]].summary_path if st.waiting[0] in ranks else ""
    return HangFinding(
        finding="all_in",
        stuck_ranks=(),
        stuck_pods=(),
        process_group=st.pg,
        seq=st.seq,
        op=st.op,
        frame=None,
        path=path,
        detail=(
            f"all {len(st.waiting)} rank(s) of group {st.pg} are inside {st.op or 'a collective'} #{st.seq} and none "
            "is behind: the collective itself is stuck (network or device)"
        ),
    )


def _who(rs: Sequence[int]) -> str:
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {_ranks(rs)}"


def _in_stall(
    finding: str, st: _Stall, culprits: Sequence[int], ranks: Mapping[int, _Rank], owners: Mapping[int, str], why: str
) -> HangFinding:
    """A finding about ranks that never entered the collective `st` waits in (`why` completes its detail)."""
    frame, stack_path = _where(ranks, culprits)
    waiter = ranks.get(st.waiting[0])
    return HangFinding(
        finding=finding,
        stuck_ranks=tuple(culprits),
        stuck_pods=_pods(ranks, culprits, owners),
        process_group=st.pg,
        seq=st.seq,
        op=st.op,
        frame=frame,
        path=stack_path or (waiter.summary_path if waiter is not None else ""),
        detail=f"{_who(culprits)} never entered {st.op or 'a collective'} #{st.seq} of group {st.pg}{why}",
    )


def _behind(
    st: _Stall, culprits: Sequence[int], ranks: Mapping[int, _Rank], owners: Mapping[int, str], missing_dump: bool
) -> HangFinding:
    if missing_dump:
        why = f": the {len(st.waiting)} rank(s) whose state was captured all wait in it, and no state of theirs came"
    else:
        why = f", where rank(s) {_ranks(st.waiting)} wait"
    return _in_stall("behind", st, culprits, ranks, owners, why)


def _crossed(
    st: _Stall, stalls: Sequence[_Stall], ranks: Mapping[int, _Rank], owners: Mapping[int, str]
) -> HangFinding:
    """Ranks wait in collectives of different groups, each for the other: they issued them in another order."""
    odd = list(st.behind)
    there = next((o for o in stalls if o is not st and set(odd) & set(o.waiting)), None)
    elsewhere = (
        f"{there.op or 'a collective'} #{there.seq} of group {there.pg}" if there is not None else "another group"
    )
    why = (
        f", where rank(s) {_ranks(st.waiting)} wait, and waits in {elsewhere}, which they never entered: the ranks "
        "issued their collectives in a different order"
    )
    return _in_stall("mismatch", st, odd, ranks, owners, why)


def _from_stacks(ranks: Mapping[int, _Rank], timed_out: frozenset[int]) -> HangFinding | None:
    stacks = {r: info.stack for r, info in ranks.items() if info.stack is not None}
    if not stacks:
        return None
    waiting = {r for r, d in stacks.items() if in_collective(d)}
    if not waiting and not timed_out:
        # Nothing shows anyone waiting in a collective: ranks at different lines of their own code may just be
        # busy (a long evaluation with no output), not hung.
        return None
    # Ranks stopped at one and the same place as others are waiting together (a collective torch's Python frames
    # do not show, e.g. `pg.allreduce(...).wait()`), when a rank elsewhere is what sets the others apart.
    places = Counter(_place(d) for d in stacks.values())
    common, count = places.most_common(1)[0]
    if count >= 2 and len(places) > 1:
        waiting |= {r for r, d in stacks.items() if _place(d) == common}
    waiting |= timed_out
    elsewhere = sorted(r for r in stacks if r not in waiting)
    if not elsewhere or not (waiting - set(elsewhere)):
        return None
    frame, path = _where(ranks, elsewhere)
    who = _who(elsewhere)
    where = f"; it was at {frame.where()}" if frame is not None else ""
    others = sorted(waiting - set(elsewhere))
    return HangFinding(
        finding="behind",
        stuck_ranks=tuple(elsewhere),
        stuck_pods=_pods(ranks, elsewhere),
        process_group="",
        seq=None,
        op="",
        frame=frame,
        path=path,
        detail=f"{who} was not in a collective while rank(s) {_ranks(others)} waited in one{where}",
    )


def _waited_apart(
    waited_at: Mapping[int, Frame], ranks: Mapping[int, _Rank], owners: Mapping[int, str]
) -> HangFinding | None:
    """Every rank timed out, one of them in another collective than all the others, which agree on one: it issued
    a collective they did not (or skipped one they issued). Ranks split into groups of two or more sizes (pipeline
    stages) decide nothing."""
    sites: dict[tuple[str, int | None], list[int]] = {}
    for r, f in sorted(waited_at.items()):
        sites.setdefault((f.file, f.line), []).append(r)
    if len(sites) != 2:
        return None
    small, large = sorted(sites.values(), key=len)
    if len(small) != 1 or len(large) < 2:
        return None
    odd, frame, there = small[0], waited_at[small[0]], waited_at[large[0]]
    return HangFinding(
        finding="mismatch",
        stuck_ranks=(odd,),
        stuck_pods=_pods(ranks, [odd], owners),
        process_group="",
        seq=None,
        op="",
        frame=frame,
        path="log",
        detail=(
            f"rank {odd} timed out waiting at {frame.where()}, every other rank that timed out ({_ranks(large)}) at "
            f"{there.where()}: they waited in different collectives"
        ),
    )


def _place(d: StackDump) -> tuple[str, int | None] | None:
    f = user_frame(d)
    return (f.file, f.line) if f is not None else None


def match(
    captures: Iterable[RankCapture],
    *,
    all_ranks: Iterable[int] = (),
    timed_out: Iterable[int] = (),
    owners: Mapping[int, str] | None = None,
    waited_at: Mapping[int, Frame] | None = None,
) -> HangFinding | None:
    """What the captures of a hung job say (see the module docstring), or None when they decide nothing.

    `all_ranks`: every global rank the job is known to have (the default group's members when the dumps do
    not list them). `timed_out`: ranks whose own logs show they timed out in a collective. `owners`: the pod
    of a rank that has no capture of its own (to name the pod of a rank whose dump is missing). `waited_at`: where
    each rank that timed out was, from the traceback its log shows (the last rule's evidence).
    """
    ranks = _gather(captures)
    summaries = {r: info.summary for r, info in ranks.items() if info.summary is not None}
    owned = owners or {}
    if summaries:
        found = _mismatch(summaries, ranks) or _from_flight_recorder(
            summaries, ranks, frozenset(all_ranks) | frozenset(ranks), owned
        )
        if found is not None:
            return found
    return _from_stacks(ranks, frozenset(timed_out)) or _waited_apart(waited_at or {}, ranks, owned)
