"""An incident laid out as a timeline: one row per pod, grouped by node, every event on one clock.

Pure data for `podmortem.page.render`. Each member is assessed on its own (`core.assess`, the engine's
step 1) to find its matched line, its own failure time and, for a victim, what it echoed; its events are
put on the reference clock with its measured clock offset (aggregator clock = pod clock + offset; a
member whose offset was never measured is shown with none applied, and says so):

* the error file's timestamp (whole seconds, the pod's clock), and a matched log line's time when the
  failure was read from the log;
* the container's end: exit code, signal or OOMKilled (the pod's clock);
* `DisruptionTarget` and the deletion (control-plane clock, already the reference);
* the podmortem condition on the pod: as written (read from the pod) or, where nothing was written
  (an offline bundle), the one the aggregator would write (`core.conditions.decide`);
* for a hang's root (a verdict whose `hang` names its pod), the moment its stack or Flight Recorder state
  was captured, labelled with the line it was stuck on; its row says what the capture showed (the
  collective it never entered), not the timeout it printed.

Incident-wide moments: opened, stalled (`Incident.stalled_at`, when the aggregator first saw every member
quiet, the stall its provisional verdict is about; else the first capture taken for the stall) and the
verdict (a provisional verdict's own page: published then, after the captures it asked for at the stall).

Scale: up to `SHOW_ALL` pods every pod has its row. Above it, victims whose findings say the same thing
(the same rule) fold into one band per node — or, where every node holds one pod or the job spans more
than `MAX_NODE_GROUPS` nodes, per replica group —
while the root, the runner-up, members that failed on their own or did not fail, and any victim whose
echo fewer than `FOLD_MIN` members of its group share keep their own rows (`bench/page.py` measures the
4,096-pod page).
"""

from __future__ import annotations

import signal as _signal
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from podmortem.core import conditions, names
from podmortem.core.assess import Finding, assess
from podmortem.core.model import HangFinding, Incident, Member, Secondary, Verdict
from podmortem.core.rules import DEFAULT_RULES, RuleSet

SHOW_ALL = 64  # pods up to which every pod has its own row
FOLD_MIN = 3  # victims of one group saying one thing: fewer keep their rows
MAX_NODE_GROUPS = 64  # nodes beyond this many: bands per replica group, not per node (one band per node
# of a 512-node job would be 1,500 bands: neither readable nor small)
MAX_ROWS = 400  # individual rows beyond this fold too (by group and role), so the page stays small
MAX_LINE = 400  # characters of one log line or message kept on the page

Role = Literal["root", "runner-up", "own", "victim", "clean", "running", "unknown"]
MarkKind = Literal["error", "log", "end", "disruption", "deletion", "condition", "capture"]
ROLE_WORDS: dict[str, str] = {
    "root": "root cause",
    "runner-up": "runner-up",
    "own": "failed on its own",
    "victim": "victim",
    "clean": "did not fail",
    "running": "still running",
    "unknown": "no failure of its own recorded",
}


@dataclass(frozen=True)
class Mark:
    """One event on the timeline, on the reference clock."""

    kind: MarkKind
    at: float
    label: str  # shown beside its shape
    detail: str  # the whole fact (tooltip, table)


@dataclass(frozen=True)
class Row:
    pod: str
    node: str
    rank: int | None
    role: Role
    why: str  # a victim's echo in words, the root's or an own failure's category and message
    line: str  # the matched line or message its finding rests on
    source: str  # where it was read: error file, log, termination, ...
    marks: tuple[Mark, ...]
    offset: float | None  # measured clock offset applied to its own times; None: not measured
    condition: str  # "Victim (written)", "PermanentFailure (would write)", ""
    condition_text: str
    log: tuple[tuple[str, bool], ...]  # log excerpt: (line, is the matched one)


@dataclass(frozen=True)
class Band:
    """Members of one group that say the same thing, folded into one bar."""

    role: Role
    why: str
    pods: tuple[str, ...]
    start: float | None
    end: float | None
    kinds: tuple[tuple[str, int], ...]  # (mark kind, how many members have it)
    conditions: tuple[tuple[str, tuple[str, ...]], ...]  # (condition, the pods that carry it), most first
    example: Row  # the first member, shown with its log excerpt


@dataclass(frozen=True)
class Group:
    name: str  # "node gpu-7", "replica group worker"
    rows: tuple[Row, ...]
    bands: tuple[Band, ...]

    @property
    def size(self) -> int:
        return len(self.rows) + sum(len(b.pods) for b in self.bands)


@dataclass(frozen=True)
class Moment:
    """An incident-wide instant: opened, quorum or timeout, the verdict."""

    at: float
    label: str


@dataclass(frozen=True)
class Timeline:
    groups: tuple[Group, ...]
    moments: tuple[Moment, ...]
    start: float | None  # earliest time shown
    end: float | None
    folded: bool
    pods: int
    offsets_measured: int  # members whose clock offset is known


def signal_name(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def verdict_of(doc: Mapping[str, Any]) -> Verdict:
    """A Verdict from its dictionary (`Verdict.to_dict()`'s keys; unknown keys are ignored)."""
    known = {k: v for k, v in doc.items() if k in Verdict.__dataclass_fields__}
    known["evidence"] = tuple(str(e) for e in doc.get("evidence") or ())
    known["secondary"] = tuple(
        Secondary(str(s.get("pod", "")), str(s.get("reason", "")))
        for s in doc.get("secondary") or ()
        if isinstance(s, Mapping)
    )
    for key in ("missing_ranks", "missing_pods"):
        known[key] = tuple(doc.get(key) or ())
    known.setdefault("pod", None)
    known.setdefault("category", None)
    known.setdefault("retryable", None)
    known.setdefault("summary", "")
    known["confidence"] = float(doc.get("confidence") or 0.0)
    known["hang"] = HangFinding.from_dict(doc.get("hang"))
    return Verdict(**known)


def _cut(text: str, limit: int = MAX_LINE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _own_time(t: float | None, m: Member) -> float | None:
    return None if t is None else t + (m.clock_offset or 0.0)


def _end_label(m: Member) -> tuple[str, str]:
    term = m.termination
    assert term is not None
    if term.reason == "OOMKilled":
        label = "OOMKilled"
    elif term.signal:
        label = signal_name(term.signal)
    elif term.exit_code is not None and term.exit_code > 128:
        label = f"exit {term.exit_code} ({signal_name(term.exit_code - 128)})"
    else:
        label = f"exit {term.exit_code}" if term.exit_code is not None else "ended"
    detail = f"container ended: {label}" + (f", reason {term.reason}" if term.reason else "")
    if term.message:
        detail += f": {_cut(term.message, 200)}"
    return label, detail


def _marks(m: Member, f: Finding, written: tuple[str, str, float | None] | None) -> tuple[Mark, ...]:
    marks: list[Mark] = []
    if m.error is not None and m.error.timestamp is not None:
        at = _own_time(float(m.error.timestamp), m)
        assert at is not None
        marks.append(Mark("error", at, "error file", f"error file: {_cut(m.error.message)}"))
    if f.source == "log" and f.time is not None:
        marks.append(Mark("log", f.time, "log line", f"matched log line: {_cut(f.text)}"))
    if m.termination is not None and m.termination.finished_at is not None:
        at = _own_time(m.termination.finished_at, m)
        assert at is not None
        label, detail = _end_label(m)
        marks.append(Mark("end", at, label, detail))
    disruption = m.condition(names.DISRUPTION_TARGET)
    if disruption is not None and disruption.status == "True" and disruption.last_transition_time is not None:
        why = f"{disruption.reason}: {disruption.message}" if disruption.message else disruption.reason
        marks.append(
            Mark(
                "disruption",
                disruption.last_transition_time,
                names.DISRUPTION_TARGET,
                f"{names.DISRUPTION_TARGET} {why}",
            )
        )
    if m.deleted_at is not None:
        marks.append(Mark("deletion", m.deleted_at, "deleted", "deletionTimestamp set"))
    if written is not None and written[2] is not None:
        marks.append(Mark("condition", written[2], written[0], f"{names.PREFIX}{written[0]}: {written[1]}"))
    return tuple(sorted(marks, key=lambda k: k.at))


def _log_excerpt(m: Member, f: Finding, lines: int = 30) -> tuple[tuple[str, bool], ...]:
    text = m.log_tail
    if not text:
        return ()
    all_lines = text.splitlines()
    needle = f.text.strip().splitlines()[0][:120] if f.text.strip() else ""
    hit = next((i for i in range(len(all_lines) - 1, -1, -1) if needle and needle in all_lines[i]), None)
    if hit is None:
        chosen = range(max(0, len(all_lines) - lines), len(all_lines))
    else:
        first = max(0, min(hit - lines // 2, len(all_lines) - lines))
        chosen = range(first, min(len(all_lines), first + lines))
    return tuple((_cut(all_lines[i]), i == hit) for i in chosen)


def _written(m: Member) -> tuple[str, str, float | None] | None:
    for c in m.conditions:
        if c.type in names.CONDITION_TYPES and c.status == "True":
            return c.type.rpartition("/")[2], c.message, c.last_transition_time
    return None


def _role(m: Member, f: Finding, verdict: Verdict, victims: Mapping[str, str]) -> Role:
    if m.pod == verdict.pod:
        return "root"
    if m.pod == verdict.runner_up_pod:
        return "runner-up"
    if m.pod in victims:
        return "victim"
    if f.role == "primary":
        return "own"
    if f.role == "clean":
        return "clean"
    if m.running or m.phase == "Running":
        return "running"
    return "victim" if f.role == "secondary" else "unknown"


def _why(role: Role, f: Finding, victims: Mapping[str, str]) -> str:
    if role == "victim":
        return victims.get(f.member.pod) or (f.rule.describe() if f.rule else "an echo of another member's failure")
    if f.rule is not None and f.role == "primary":
        return f"{f.category or f.rule.describe()}: {_cut(f.text.strip().splitlines()[0], 200)}" if f.text else ""
    if f.role == "secondary" and f.rule is not None:
        return f.rule.describe()
    return ROLE_WORDS[role]


def hang_words(hang: HangFinding) -> tuple[str, str]:
    """What the captures showed of the stuck rank, for its row: (why, line) — "rank 2 never entered
    all_reduce #4 that the others wait in", "stuck at train.py:211 in load_batch" — instead of the timeout
    it printed. The category is on the page already: the why fits the row (64 characters)."""
    ranks = hang.stuck_ranks
    who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks[:4]) if ranks else ""
    op = f"{hang.op or 'a collective'}" + (f" #{hang.seq}" if hang.seq is not None else "")
    if hang.finding == "mismatch":
        why = f"{who} issued a different collective than its peers" + (f" at {op}" if hang.seq is not None else "")
    elif hang.seq is not None:
        why = f"{who} never entered {op} that the others wait in"
    else:
        why = f"{who} was not in a collective while the others waited in one"
    line = f"stuck at {hang.frame.where()}" if hang.frame is not None else hang.detail
    return why.strip(), line


LIVE_PATHS = frozenset({"control_plane", "py_spy"})


def _capture_mark(m: Member, hang: HangFinding, line: str, stalled_at: float | None) -> tuple[Mark, ...]:
    """The moment the stuck rank's stack or Flight Recorder state was captured, labelled with what it showed.
    Where the incident holds no capture time (a bundle copied without the sidecars' captures, beside the
    verdict file that says what they showed; the cluster's annotation), a live path's capture is placed at
    the stall's moment: the aggregator asks for captures once it has seen the stall, so the capture came
    after it (how long after is not kept), and its text says so. None for a stack read from the log (no
    time)."""
    taken = [
        c.captured_at
        for c in m.captures
        if c.captured_at is not None
        and (c.stack or c.flight_recorder is not None)
        and (c.global_rank is None or c.global_rank in hang.stuck_ranks)
    ]
    detail = f"captured ({hang.path or 'stack'}): {_cut(hang.detail)}"
    if not taken and stalled_at is not None and hang.path in LIVE_PATHS:
        return (Mark("capture", stalled_at, _cut(line, 60), f"{detail} ({UNTIMED_CAPTURE})"),)
    if not taken:
        return ()
    return (Mark("capture", min(taken), _cut(line, 60), detail),)


def _fold_key(f: Finding, why: str) -> str:
    return f.rule.id if f.rule is not None else why


def build(
    incident: Incident,
    verdict: Verdict,
    *,
    decided_at: float | None = None,
    closed_by: str = "",
    rules: RuleSet = DEFAULT_RULES,
    would_write: bool = True,
) -> Timeline:
    """The timeline of `incident` as `verdict` explains it (pure). `would_write`: for a member that carries
    no podmortem condition, show the one the aggregator would write (offline); False for a live cluster,
    where what was written is what the pods carry."""
    victims = {s.pod: s.reason for s in verdict.secondary}
    hang = verdict.hang if verdict.hang is None or isinstance(verdict.hang, HangFinding) else None
    findings = [assess(m, rules) for m in incident.members]
    marked: set[str] = set()
    rows: list[tuple[Row, Finding]] = []
    for m, f in zip(incident.members, findings, strict=True):
        written = _written(m)
        if written is not None:
            condition, ctext = f"{written[0]} (written)", written[1]
        elif not would_write:
            condition, ctext = "", ""
        else:
            decided = conditions.decide(m, incident, verdict, rules=rules, victims=marked)
            condition = f"{decided.type.rpartition('/')[2]} (would write)" if decided else ""
            ctext = decided.message if decided else ""
        if condition.startswith("Victim"):
            marked.add(m.pod)
        role = _role(m, f, verdict, victims)
        why = _why(role, f, victims)
        if written is not None and written[0] == "Victim" and role in ("own", "unknown"):
            role, why = "victim", written[1]  # podmortem marked it a victim when its condition was decided
        line, source = (_cut(f.text.strip()) if f.text else ""), f.source
        marks = _marks(m, f, written)
        if role == "root" and hang is not None and hang.finding != "all_in" and m.pod in hang.stuck_pods:
            why, line = hang_words(hang)  # what the captures showed, not the timeout the rank printed
            source = f"captured ({hang.path})" if hang.path else "captured"
            marks = tuple(sorted((*marks, *_capture_mark(m, hang, line, incident.stalled_at)), key=lambda k: k.at))
        rows.append(
            (
                Row(
                    m.pod, m.node, m.rank, role, why, line, source, marks, m.clock_offset,
                    condition, ctext, (),
                ),
                f,
            )
        )  # fmt: skip
    folded = len(rows) > SHOW_ALL
    groups = _fold(rows, incident.members) if folded else _unfolded(rows, incident.members)
    times = [k.at for g in groups for r in g.rows for k in r.marks]
    times += [t for g in groups for b in g.bands for t in (b.start, b.end) if t is not None]
    moments: list[Moment] = []
    if incident.opened_at is not None:
        moments.append(Moment(incident.opened_at, "incident opened"))
    stalled = _stall(incident)
    if stalled is not None:
        moments.append(stalled)
    if decided_at is not None:
        label = f"verdict ({closed_by})" if closed_by else "verdict"
        moments.append(Moment(decided_at, PROVISIONAL_LABEL if closed_by == "stall" else label))
    times += [mo.at for mo in moments]
    return Timeline(
        groups=groups,
        moments=tuple(moments),
        start=min(times) if times else None,
        end=max(times) if times else None,
        folded=folded,
        pods=len(rows),
        offsets_measured=sum(1 for m in incident.members if m.clock_offset is not None),
    )


STALL_LABEL = "stalled: every member quiet"  # `Incident.stalled_at`: when the aggregator first saw it
PROVISIONAL_LABEL = "provisional verdict"  # a stall's verdict published (`closed_by` stall), nothing failed
UNTIMED_CAPTURE = "taken after the stall was seen, its own time not kept: drawn at the stall"


def _stall(incident: Incident) -> Moment | None:
    """The stall of the job, where one is known: when the aggregator first saw every member quiet (the moment
    its provisional verdict says, on its own page too, before that verdict's publish), else (a bundle
    without it) when the first capture asked for the stall was taken."""
    if incident.stalled_at is not None:
        return Moment(incident.stalled_at, STALL_LABEL)
    taken = [c.captured_at for m in incident.members for c in m.captures if c.trigger == "stall" and c.captured_at]
    return Moment(min(taken), "stalled: stacks captured") if taken else None


def _with_log(row: Row, f: Finding) -> Row:
    from dataclasses import replace

    return replace(row, log=_log_excerpt(f.member, f))


_ORDER = {"root": 0, "runner-up": 1, "own": 2, "unknown": 3, "running": 4, "victim": 5, "clean": 6}


def _row_key(row: Row) -> tuple[int, float, str]:
    first = row.marks[0].at if row.marks else float("inf")
    return (_ORDER[row.role], first, row.pod)


def _group_names(members: Sequence[Member]) -> dict[str, str]:
    """Each pod's group: its node when the node holds more than one member and the job spans at most
    MAX_NODE_GROUPS such nodes, else its replica group (the node is then named on the pod's row)."""
    per_node = Counter(m.node for m in members if m.node)
    shared = {node for node, n in per_node.items() if n > 1}
    if len(shared) > MAX_NODE_GROUPS:
        shared = set()
    return {
        m.pod: f"node {m.node}" if m.node in shared else f"replica group {m.replica_type or 'pods'}" for m in members
    }


def _ordered_groups(named: Mapping[str, list[Any]], first: Iterable[str]) -> list[str]:
    lead = [g for g in dict.fromkeys(first) if g in named]
    return lead + sorted(g for g in named if g not in lead)


def _unfolded(rows: Sequence[tuple[Row, Finding]], members: Sequence[Member]) -> tuple[Group, ...]:
    names = _group_names(members)
    grouped: dict[str, list[Row]] = defaultdict(list)
    for row, f in rows:
        grouped[names[row.pod]].append(_with_log(row, f))
    for items in grouped.values():
        items.sort(key=_row_key)
    lead = [names[r.pod] for r, _ in sorted(rows, key=lambda p: _row_key(p[0]))]
    return tuple(Group(g, tuple(grouped[g]), ()) for g in _ordered_groups(grouped, lead))


def _fold(rows: Sequence[tuple[Row, Finding]], members: Sequence[Member]) -> tuple[Group, ...]:
    names = _group_names(members)
    by_group: dict[str, list[tuple[Row, Finding]]] = defaultdict(list)
    for pair in rows:
        by_group[names[pair[0].pod]].append(pair)
    keep: dict[str, list[Row]] = defaultdict(list)
    fold: dict[str, dict[tuple[str, str], list[tuple[Row, Finding]]]] = defaultdict(lambda: defaultdict(list))
    singles: list[tuple[str, Row, Finding]] = []
    for g, pairs in by_group.items():
        counts = Counter(_fold_key(f, r.why) for r, f in pairs if r.role in ("victim", "clean"))
        for r, f in pairs:
            if r.role in ("victim", "clean") and counts[_fold_key(f, r.why)] >= FOLD_MIN:
                fold[g][(r.role, _fold_key(f, r.why))].append((r, f))
            else:
                singles.append((g, r, f))
    singles.sort(key=lambda t: _row_key(t[1]))
    for g, r, f in singles[:MAX_ROWS]:
        keep[g].append(_with_log(r, f) if len(keep[g]) < MAX_ROWS else r)
    for g, r, f in singles[MAX_ROWS:]:  # more odd ones out than a page can hold: fold them by role
        fold[g][(r.role, f"more: {r.role}")].append((r, f))
    bands: dict[str, list[Band]] = defaultdict(list)
    for g, keyed in fold.items():
        for (role, _key), pairs in keyed.items():
            bands[g].append(_band(role, pairs))
        bands[g].sort(key=lambda b: (-len(b.pods), b.why))
    lead = [g for g, _, _ in singles]
    named: dict[str, list[Any]] = {g: [] for g in set(keep) | set(bands)}
    return tuple(Group(g, tuple(keep.get(g, ())), tuple(bands.get(g, ()))) for g in _ordered_groups(named, lead))


def _by_rank(pair: tuple[Row, Finding]) -> tuple[int, int, str]:
    rank = pair[0].rank
    return (0 if rank is not None else 1, rank or 0, pair[0].pod)


def _band(role: str, pairs: Sequence[tuple[Row, Finding]]) -> Band:
    pairs = sorted(pairs, key=_by_rank)
    times = [k.at for r, _ in pairs for k in r.marks]
    kinds = Counter(k for r, _ in pairs for k in {mk.kind for mk in r.marks})
    whys = Counter(r.why for r, _ in pairs)
    why = whys.most_common(1)[0][0]
    rule = pairs[0][1].rule
    if len(whys) > 1 and rule is not None:  # the same echo in different words (addresses, timeouts)
        why = rule.describe()
    conds: dict[str, list[str]] = defaultdict(list)
    for r, _ in pairs:
        if r.condition:
            conds[r.condition].append(r.pod)
    example, f = pairs[0]
    return Band(
        role=example.role,
        why=why,
        pods=tuple(r.pod for r, _ in pairs),
        start=min(times) if times else None,
        end=max(times) if times else None,
        kinds=tuple(sorted(kinds.items())),
        conditions=tuple(sorted(((c, tuple(p)) for c, p in conds.items()), key=lambda cp: -len(cp[1]))),
        example=_with_log(example, f),
    )
