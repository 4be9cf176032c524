"""Step 1 of the engine: each member of a failed job assessed on its own.

`assess(member, rules)` reads one member's error file, log tail (torch's failure summary, worker
tracebacks, glog lines), container termination, DisruptionTarget condition and pod phase, classifies its
failure with the rules (`podmortem.core.rules`) as *primary* (its own: strong, or weak when it might be an
echo), *secondary* (died of another member's failure), *clean* or *unknown*, and estimates when it
happened on the reference clock. It is pure and looks at no other member: `podmortem.core.engine.decide`
compares the findings (step 2), and the aggregator's hold desk (`podmortem.core.conditions`) uses a
single finding to decide a pod's condition before its peers have reported.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from podmortem.core.categories import Category
from podmortem.core.errorfile import exception_type_of
from podmortem.core.logtail import (
    NAMED_HOST,
    NAMED_RANK,
    PEER_ADDR,
    SIGNAL_NAMES,
    TIMEOUT_MS,
    LauncherReport,
    LogFacts,
    parse_log,
    several_workers_failed,
    time_hint,
)
from podmortem.core.model import Member
from podmortem.core.names import DISRUPTION_TARGET
from podmortem.core.rules import DEFAULT_RULES, Rule, RuleSet, SecondaryKind

Role = Literal["primary", "secondary", "clean", "unknown"]

# Two failures closer than this (seconds, after clock correction) are not ordered with confidence:
# error files carry whole seconds and unmeasured clocks drift by about a second.
TIE_SECONDS = 1.0
MAX_EXCERPT = 300
# A failure read from a log is believed to precede its container's end by at most this much (seconds).
LOG_TIME_WINDOW = 2 * 3600.0


# Built-in exception classes that describe the program's own logic or data, never a system failure they carry
# (RuntimeError, OSError and custom classes may carry anything: storage, a device, a remote endpoint).
PROGRAM_ERRORS = frozenset(
    {
        "ValueError",
        "KeyError",
        "TypeError",
        "IndexError",
        "AttributeError",
        "AssertionError",
        "NameError",
        "UnboundLocalError",
        "ZeroDivisionError",
        "NotImplementedError",
        "ImportError",
        "ModuleNotFoundError",
        "SyntaxError",
        "IndentationError",
        "LookupError",
        "StopIteration",
        "RecursionError",
        "UnicodeDecodeError",
        "UnicodeEncodeError",
        "json.decoder.JSONDecodeError",
        "JSONDecodeError",
    }
)
# A carrier exception (any class but those) whose next lines, its own detail, say the call it reports timed out waiting
# or lost a peer: this many lines at most.
DETAIL_LINES = 8
# ...not counting the native stack trace a runtime writes into the message itself, between its check and the words that
# say why (torch_xla's debug_macros.h: XLA_CHECK(c) is TF_CHECK(c) << "\n" << tsl::CurrentStackTrace(), whose frames sit
# between "*** Begin stack trace ***" and "*** End stack trace ***", then the check's own text): frames, not detail.
_NATIVE_STACK = re.compile(r"\*\*\* Begin stack trace \*\*\*.*?\*\*\* End stack trace \*\*\*", re.S)
_RANK_PREFIX = re.compile(r"\[rank\d{1,6}\]:")
# A line the process logged at error or fatal severity: glog's and absl's "E0510 20:48:44.272031  1 file.cc:83] ...",
# TensorFlow's "2023-05-25 11:10:57.934547: E tensorflow/...cc:103] ...", Python logging's "ERROR:name:..." and
# "... - ERROR - ...". A native crash's exit status (SIGSEGV, SIGILL, SIGFPE) beside such a line is how the process
# ended, not necessarily why: a process whose start failed (a server that could not bind its port, a device it could
# not open) often faults on its way out. The status then says less than the line, read or not, and less than a failure
# of its own the log or the error file names in words a rule reads (not a bare exception class: a `Name: value` line of
# a pasted description reads as one).
_ERROR_LINE = re.compile(
    r"^(?:\[rank\d{1,6}\]:\s?)?[EF]\d{4} \d\d:\d\d:\d\d[.\d]{0,10} +\d{1,10} [^\]\n]{1,200}\] \S"
    r"|^[^\n]{0,40}\d\d:\d\d:\d\d\.\d{1,9}: [EF] [^\]\n]{1,200}\] \S"
    r"|^ERROR:[\w.]{1,80}:|^[^\n]{0,80} - ERROR - ",
    re.M,
)
# ...so a crash read from the exit status alone stays below the PermanentFailure threshold there (the capped readings'
# value, docs/engine.md "Which verdicts may reach 0.9").
CRASH_STATUS_BESIDE_ERROR_CAP = 0.85
# An exception known only from the `raise` statement a cut-off traceback ends at (LogFacts.raised_at_cut).
RAISED_AT_CUT_CAP = 0.85
# An exception known only from Python 2's form of a built-in class (LogFacts.py2_type_form): read by meaning, on words
# no development line reached the threshold with.
PY2_TYPE_FORM_CAP = 0.85


@dataclass(frozen=True)
class Finding:
    """One member's failure as judged on its own, before comparing members."""

    member: Member
    role: Role
    rule: Rule | None = None
    source: str = ""  # error file, log, termination, condition, phase
    text: str = ""  # the message the classification is based on
    exception_type: str = ""
    time: float | None = None  # estimated reference-clock time of this member's own failure
    spread: float = math.inf  # half-width of the time estimate
    timeout_s: float | None = None  # collective timeout a secondary waited, when stated
    named_ips: tuple[str, ...] = ()  # peer addresses named by its secondary messages
    named_hosts: tuple[str, ...] = ()  # peer host names (or addresses) its secondary messages name
    named_ranks: tuple[int, ...] = ()  # global ranks its secondary messages name as the one they waited for
    own_ranks: frozenset[int] = frozenset()  # global ranks its own log shows it hosts ([rank3]:, [Rank 3])
    silent_ranks: tuple[int, ...] = ()
    desync: tuple[tuple[int, int, str], ...] = ()  # its ranks timed out in different collectives
    global_rank: int | None = None
    evidence: tuple[str, ...] = ()
    # An MPI launcher's report in its log of one process's death, and what the report's signal or exit code says
    # (a primary rule, or None when it says neither or names no cause): the launcher's second-hand word.
    report: LauncherReport | None = None
    report_rule: Rule | None = None

    @property
    def category(self) -> Category | None:
        return self.rule.category if self.rule is not None else None

    @property
    def secondary(self) -> SecondaryKind | None:
        return self.rule.secondary if self.rule is not None and self.role == "secondary" else None

    @property
    def weak(self) -> bool:
        return self.rule is not None and self.rule.weak

    @property
    def failed(self) -> bool:
        return self.role in ("primary", "secondary")


@dataclass(frozen=True)
class _Cand:
    source: str
    rule: Rule
    text: str
    exception_type: str = ""
    global_rank: int | None = None


def excerpt(text: str, limit: int = MAX_EXCERPT) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _timeout_seconds(text: str) -> float | None:
    m = TIMEOUT_MS.search(text)
    if not m:
        return None
    if m.group(1) or m.group(2):
        return int(m.group(1) or m.group(2)) / 1000.0
    return float(m.group(3))


def _error_rule(member: Member, rules: RuleSet) -> Rule | None:
    err = member.error
    if err is None or err.parse_error or not err.message.strip():
        return None
    return rules.classify_message(err.message, err.exception_type)


def _candidates(member: Member, text: str, log: LogFacts, rules: RuleSet, err_rule: Rule | None) -> list[_Cand]:
    """Classified observations of one member, most specific source first."""
    out: list[_Cand] = []
    err = member.error
    if err is not None and err_rule is not None:
        out.append(_Cand("error file", err_rule, err.message, err.exception_type, log.summary_rank))
    # The log: torch's summary names the first failed rank of this pod; its exception line or signal.
    # The NCCL watchdog aborts a process (SIGABRT) once a collective timed out: an abort in a log that
    # shows the member lost a peer or timed out is that echo, not a crash of its own. ProcessGroupNCCL's
    # heartbeat monitor aborts the process whose own watchdog got stuck the same way: beside a hang of its
    # own, the abort is how that hang ended.
    # A runtime that found its device faulted aborts the process the same way (ROCm's prints its hardware exception,
    # then std::abort()): beside a device fault in its own log, the abort is how that fault ended.
    explained_abort = _echo_line(log) is not None or (
        log.log_rule is not None and log.log_rule[0].category in ("hang", "hardware")
    )
    if log.summary_exitcode is not None:
        code, grank = log.summary_exitcode, log.summary_rank
        exc = log.exceptions.get(grank, "") if grank is not None else ""
        exc = exc or log.summary_exception
        if code < 0:
            sig = -code
            r = None if (sig == 6 and explained_abort) else rules.classify_signal(sig)
            if r is not None:
                name = SIGNAL_NAMES.get(sig, f"signal {sig}")
                out.append(_Cand("log", r, f"worker rank {grank} died of {name} (no error file)", "", grank))
        elif exc:
            r = rules.classify_message(exc, exception_type_of(exc))
            if r is not None:
                out.append(_Cand("log", r, exc, exception_type_of(exc), grank))
        elif code > 0 and not (log.summary_has_error_file and member.error is not None):
            # torch's summary says the worker exited non-zero; with an error file we have not read, that is all we know.
            r = rules.classify_exit_code(code)
            if r is not None:
                how = "its error file not read" if log.summary_has_error_file else "without raising an exception"
                text = f"worker rank {grank} exited with code {code} ({how})"
                out.append(_Cand("log", r, text, "", grank))
        # The other failed workers of this pod, when one of them failed on its own: the pod's own failure,
        # whichever worker torch happened to list as the first (its order is by whole seconds and polls).
        for grank3, code3, exc3 in log.other_failures:
            exc3 = (log.exceptions.get(grank3, "") if grank3 is not None else "") or exc3
            r3: Rule | None = None
            if exc3:
                r3 = rules.classify_message(exc3, exception_type_of(exc3))
                text3 = exc3
            elif code3 is not None and code3 < 0 and not (code3 == -6 and explained_abort):
                r3 = rules.classify_signal(-code3)
                text3 = f"worker rank {grank3} died of {SIGNAL_NAMES.get(-code3, f'signal {-code3}')} (no error file)"
            if r3 is not None and r3.is_primary and not r3.weak:
                out.append(_Cand("log", r3, text3, exception_type_of(exc3) if exc3 else "", grank3))
    elif (
        log.agent_exitcode is not None and log.agent_exitcode < 0 and not (log.agent_exitcode == -6 and explained_abort)
    ):
        sig = -log.agent_exitcode
        r = rules.classify_signal(sig)
        if r is not None:
            name = SIGNAL_NAMES.get(sig, f"signal {sig}")
            out.append(_Cand("log", r, f"a worker died of {name} (the agent's log)", ""))
    elif log.agent_exitcode is not None and log.agent_exitcode > 0:
        # The launcher's own word that a worker exited non-zero (torchrun's "failed (exitcode: 1)", its Failures list,
        # a subprocess launcher's "returned non-zero exit status 1"): this pod's own failure, in words of its own —
        # weak, as any worker that died of anything exits so, but more than the container's exit code.
        r = rules.classify_exit_code(log.agent_exitcode)
        if r is not None:
            out.append(_Cand("log", r, f"a worker exited with code {log.agent_exitcode} (the launcher's log)", ""))
    if log.summary_exitcode is None and (log.exception_order or log.loose_exceptions):
        if log.exception_order:
            grank2: int | None = log.exception_order[0]
            exc = log.exceptions[log.exception_order[0]]
        else:
            grank2, exc = None, log.loose_exceptions[0]
        r = rules.classify_message(exc, exception_type_of(exc))
        # An exception whose words name no cause, printed after the pod was told to stop, is that stop's consequence;
        # one whose own detail (the lines after it) is an echo's words carries that echo (torch_npu's "NPU function
        # error: ..., error code is N" and the runtime's reason printed under it); one an echo's log rule read together
        # with the frame that raised it is that echo (a bare errno raised from torch's rendezvous).
        if r is not None and not (
            r.generic and (log.stopped_first or _carries_echo(text, exc, log) or _read_as_echo(exc, log))
        ):
            if exc in log.py2_type_form:
                r = dataclasses.replace(r, max_confidence=min(r.max_confidence, PY2_TYPE_FORM_CAP))
            out.append(_Cand("log", r, exc, exception_type_of(exc), grank2))
    elif log.summary_exitcode is None and log.raised_at_cut:
        # A traceback cut off after its last frame's `raise` statement: that statement names what the process died of,
        # unless the exception was caught and another one chained to it in the lines cut off — below the threshold.
        exc = log.raised_at_cut
        r = rules.classify_message(exc, exception_type_of(exc))
        if r is not None:
            r = dataclasses.replace(r, max_confidence=min(r.max_confidence, RAISED_AT_CUT_CAP))
            out.append(_Cand("log", r, exc, exception_type_of(exc)))
    if log.log_rule is not None:
        # The launcher stopping the other workers after one of this pod's own exited non-zero is the
        # consequence of that exit (named above), not a teardown from outside.
        own_exit = (log.summary_exitcode or log.agent_exitcode or 0) > 0
        if not (log.log_rule[0].secondary == "teardown" and own_exit):
            out.append(_Cand("log", log.log_rule[0], log.log_rule[1]))
    for c in member.conditions:
        if c.type == DISRUPTION_TARGET and c.status == "True":
            r = rules.classify_disruption(c.reason)
            # A node-pressure eviction (TerminationByKubelet) names the resource the node ran short of in
            # its message: memory is the host running out of memory, disk the storage — more than "evicted".
            cause = rules.first_log_rule(c.message) if r is not None and c.message else None
            if cause is not None and cause.is_primary and not cause.weak:
                r = cause
            if r is not None:
                out.append(_Cand("condition", r, f"DisruptionTarget {c.reason}: {c.message}".rstrip(": ")))
    r = rules.classify_phase(member.phase, member.phase_reason)
    if r is not None:
        out.append(_Cand("phase", r, f"pod phase {member.phase or '?'} {member.phase_reason}".strip()))
    t = member.termination
    if t is not None:
        r = rules.classify_reason(t.reason) if t.reason else None
        if r is not None:
            out.append(_Cand("termination", r, f"container {t.reason} (exit code {t.exit_code})"))
        code2 = t.exit_code if t.exit_code is not None else (128 + t.signal if t.signal else None)
        if code2 and not (code2 == 128 + 6 and explained_abort):
            r = rules.classify_exit_code(code2)
            if (
                r is not None
                and r.category == "crash"
                and (
                    any(c.rule.is_primary and not c.rule.generic and c.source != "termination" for c in out)
                    or _ERROR_LINE.search(text)
                )
            ):
                r = dataclasses.replace(r, max_confidence=min(r.max_confidence, CRASH_STATUS_BESIDE_ERROR_CAP))
            if r is not None:
                out.append(_Cand("termination", r, f"container exit code {code2}"))
    return out


def _echo_line(log: LogFacts) -> str | None:
    """What the log's first log rule matched when that rule reads a member that waited or lost another (a timeout, a
    lost peer or store); None otherwise."""
    if log.log_rule is None or log.log_rule[0].secondary not in ("timeout", "peer", "store"):
        return None
    return log.log_rule[1]


def _read_as_echo(exc: str, log: LogFacts) -> bool:
    """The exception line `exc` is part of what the log's echo rule matched (its frames and the exception together)."""
    echo = _echo_line(log)
    return echo is not None and "\n" in echo and exc in echo


def _carries_echo(text: str, exc: str, log: LogFacts) -> bool:
    """The exception line `exc` of the member's output `text` (`log_text`) is of a carrier class (not a program error:
    PROGRAM_ERRORS) and the log's echo words (a timeout, a lost peer or store) follow it within its own detail:
    DETAIL_LINES at most, before any other traceback, and printed by the same process (no other rank's prefix)."""
    said = _echo_line(log)
    if said is None or exception_type_of(exc).rsplit(".", 1)[-1] in PROGRAM_ERRORS:
        return False
    at = text.find(exc)
    echo = text.find(said, at + len(exc)) if at >= 0 else -1
    if echo < 0:
        return False
    between = _NATIVE_STACK.sub("", text[at + len(exc) : echo])
    if between.count("\n") > DETAIL_LINES or "Traceback (most recent call last)" in between:
        return False
    # ...printed by the same process: no line of another rank's ([rankN]: prefix) between, nor the echo itself
    own = _RANK_PREFIX.match(text, text.rfind("\n", 0, at) + 1)
    mine = own.group(0) if own else ""
    lines = [*between.split("\n")[1:], said]
    return all((m.group(0) if (m := _RANK_PREFIX.match(line)) else mine) == mine for line in lines)


def log_text(member: Member) -> str:
    """What the member's own output says: its log tail, and the container's termination message.

    With `terminationMessagePolicy: FallbackToLogsOnError` the kubelet keeps the tail of a failed
    container's log as its termination message — often the only log left of a pod whose node is gone, or
    when no sidecar read the log. It is evidence of the same standing as a log tail.
    """
    tail = member.log_tail
    messages = [t.message for t in (member.termination,) if t is not None and t.message.strip()]
    extra = [m for m in messages if m.strip() not in tail]
    return "\n".join([tail, *extra]) if tail else "\n".join(extra)


def _pick(cands: Sequence[_Cand]) -> _Cand | None:
    """Specific strong primary > generic strong primary (any exception) > secondary from the member's own
    messages > weak primary > secondary exit code. A known cause anywhere in the member's own output
    (storage full, an OOM kill, Xid) says more than the Python class that carried it, and among those, words no
    other family prints (glibc's "free(): invalid pointer") more than words it does (a bare SIGABRT: max_confidence),
    and at the same cap, words more than an exit code (srun's "exit code 2" beside the exec that failed with ENOENT)."""
    specific = [c for c in cands if c.rule.is_primary and not c.rule.weak and not c.rule.generic]
    if specific:
        return max(specific, key=lambda c: (c.rule.max_confidence, c.rule.kind != "exit_code"))
    for c in cands:
        if c.rule.is_primary and not c.rule.weak:
            return c
    for c in cands:
        if c.rule.secondary is not None and c.source in ("error file", "log"):
            return c
    weak = [c for c in cands if c.rule.is_primary]
    if weak:
        # among weak ones too, words of its own (NCCL's internal error) say more than the exit code any failure has
        # (the pod's own output before the container's exit code; then the reading allowed more confidence: a launcher's
        # exit code in the log before words that only say the pod failed, unread)
        return min(weak, key=lambda c: (c.source == "termination", -c.rule.max_confidence, c.rule.kind == "exit_code"))
    for c in cands:
        if c.rule.secondary is not None:
            return c
    return None


def _interval(lo: float | None, hi: float | None) -> tuple[float | None, float]:
    if lo is None or hi is None:
        return None, math.inf
    if hi < lo:
        lo, hi = hi, lo
    return (lo + hi) / 2.0, (hi - lo) / 2.0


def _finite(t: float | None) -> float | None:
    """A time as evidence: None for a missing, infinite or NaN one (a hand-edited or corrupted record)."""
    return t if t is not None and math.isfinite(t) else None


def _time_of(member: Member, cand: _Cand | None, log: LogFacts) -> tuple[float | None, float]:
    """Reference-clock estimate (and half-width) of when this member's own failure happened."""
    offset = _finite(member.clock_offset) or 0.0
    source = cand.source if cand is not None else ""
    teardown = cand is not None and cand.rule.secondary == "teardown"
    if source == "condition" and cand is not None and cand.rule.category not in (None, "node_lost"):
        for c in member.conditions:
            if c.type == DISRUPTION_TARGET and _finite(c.last_transition_time) is not None:
                return c.last_transition_time, 1.0  # control-plane clock: not skewed
    lo: float | None = None
    hi: float | None = None
    err = member.error
    if err is not None and err.timestamp is not None and not err.parse_error:
        lo, hi = float(err.timestamp), float(err.timestamp) + 1.0
    glog = log.teardown_at if teardown and log.teardown_at is not None else log.first_failure_at
    if glog is not None:
        if lo is None or hi is None:
            lo, hi = glog - 1.0, glog
        elif lo - 0.5 <= glog < hi:
            hi = max(glog, lo)
    if lo is None and log.summary_time is not None:
        lo, hi = log.summary_time, log.summary_time + 1.0
    end = _finite(member.termination.finished_at) if member.termination is not None else None
    if lo is None and end is not None:
        lo, hi = end - 1.0, end + 1.0
    if lo is not None and end is not None and not end - LOG_TIME_WINDOW <= lo <= end + TIE_SECONDS:
        # A time read from the log (a glog line placed in a year by guesswork, a summary from an earlier
        # attempt) that the kubelet's own record of the container's end contradicts is not this failure's.
        lo, hi = end - 1.0, end + 1.0
    mid, spread = _interval(lo, hi)
    if mid is not None:
        mid += offset
        if member.clock_offset is None:
            spread += TIE_SECONDS / 2  # unmeasured clock
    observed = _finite(member.error_observed_at) if (err is not None and source == "error file") else None
    if observed is None and source == "termination":
        observed = _finite(member.termination_observed_at)
    if observed is not None and (mid is None or member.clock_offset is None):
        return observed - 0.5, 0.5  # seen by the sidecar shortly after it happened
    if mid is None:
        for c in member.conditions:
            if c.type == DISRUPTION_TARGET and _finite(c.last_transition_time) is not None:
                return c.last_transition_time, 1.0
        if _finite(member.deleted_at) is not None:
            return member.deleted_at, 2.0
    return (mid, spread) if _finite(mid) is not None else (None, math.inf)


def _report_rule(report: LauncherReport | None, rules: RuleSet) -> Rule | None:
    """What an MPI launcher's report says the process died of: its signal's rule, else its exit code's (primaries only:
    a SIGTERM is the job's teardown, no cause)."""
    if report is None:
        return None
    rule = None
    if report.node_lost:
        # the launcher's word that a node's daemon is gone: what the control plane's NodeLost phase says of a node
        rule = rules.classify_phase("NodeLost")
    elif report.signal is not None:
        rule = rules.classify_signal(report.signal)
    elif report.exit_code is not None:
        rule = rules.classify_exit_code(report.exit_code)
    elif report.nonzero:
        # an exit code it does not give: what any non-zero exit without a meaning of its own reads as (as 1 does)
        rule = rules.classify_exit_code(1)
    return rule if rule is not None and rule.is_primary else None


def assess(member: Member, rules: RuleSet = DEFAULT_RULES, full_log: bool | None = None) -> Finding:
    """Judge one member on its own evidence (see the module docstring).

    The structure of a log tail (torch's summary, tracebacks per rank, glog times) is read only when it
    can matter — not for a member whose error file already shows it died of a peer, unless `full_log` —
    so that a cascade of thousands of victims stays cheap. `decide` asks again for the logs of members
    that timed out when it has to find a silent (hung) rank among them.
    """
    if member.succeeded:
        return Finding(member, "clean", evidence=(f"{member.pod}: exited 0",))
    err_rule = _error_rule(member, rules)
    # An error file that already shows the member died of a peer: its log adds nothing decisive.
    text = log_text(member)
    # ...unless another worker of the pod failed too: torch's error file holds the one it listed first.
    if full_log is None:
        full = err_rule is None or err_rule.secondary is None or several_workers_failed(text)
    else:
        full = full_log
    log = parse_log(text, time_hint(member), rules, full) if text else LogFacts()
    cands = _candidates(member, text, log, rules, err_rule)
    cand = _pick(cands)
    report_rule = _report_rule(log.report, rules)
    if (
        cand is not None
        and cand.rule.weak
        and cand.rule.is_primary
        and log.report
        and report_rule
        and not report_rule.weak
    ):
        # Its own log carries an MPI launcher's word on how a process died (Hydra's "EXIT CODE: 9", a signal) and the
        # member said nothing else of its own but an exit status: the launcher's word says how (the process, killed,
        # printed nothing).
        cand = _Cand("log", report_rule, log.report.text, "", log.report.rank)
    time, spread = _time_of(member, cand, log)
    if cand is None:
        ev: list[str] = []
        if member.running:
            ev.append(f"{member.pod}: still running")
        if member.error is not None and member.error.parse_error:
            ev.append(f"{member.pod}: error file unreadable ({member.error.parse_error})")
        return Finding(member, "unknown", time=time, spread=spread, silent_ranks=log.silent_ranks, evidence=tuple(ev))
    role: Role = "primary" if cand.rule.is_primary else "secondary"
    texts = [cand.text]
    if member.error is not None:
        texts.append(member.error.message)
    texts.extend(log.exceptions.values())
    timeout = None
    ips: list[str] = []
    hosts: list[str] = []
    named_ranks: list[int] = []
    if role == "secondary":
        for text in texts:
            timeout = timeout or _timeout_seconds(text)
            ips.extend(PEER_ADDR.findall(text))
            # Cheap tests first: most victims' words name no rank and no host (a 10,000-member cascade).
            if "<" in text or "remote peer" in text or "on node" in text or "RUNNING AT" in text:
                hosts.extend(next(g for g in m.groups() if g) for m in NAMED_HOST.finditer(text))
            if "ank " in text or "ANK " in text or "ranks: " in text:
                named_ranks.extend(int(next(g for g in m.groups() if g)) for m in NAMED_RANK.finditer(text))
    evidence = [
        f"{member.pod}: {cand.source}: {excerpt(cand.text, 160)} -> "
        f"{cand.rule.category or cand.rule.secondary} [{cand.rule.id}]"
    ]
    for other in cands:
        if other is not cand and not other.rule.weak and other.rule.id != cand.rule.id and other.source != cand.source:
            evidence.append(f"{member.pod}: also {other.source}: {excerpt(other.text, 100)} [{other.rule.id}]")
            break
    return Finding(
        member=member,
        role=role,
        rule=cand.rule,
        source=cand.source,
        text=cand.text,
        exception_type=cand.exception_type,
        time=time,
        spread=spread,
        timeout_s=timeout,
        named_ips=tuple(dict.fromkeys(ips)),
        named_hosts=tuple(dict.fromkeys(hosts)),
        named_ranks=tuple(dict.fromkeys(named_ranks)),
        own_ranks=log.ranks_seen | ({cand.global_rank} if cand.global_rank is not None else frozenset()),
        silent_ranks=log.silent_ranks,
        desync=log.desync,
        global_rank=cand.global_rank,
        evidence=tuple(evidence),
        report=log.report,
        report_rule=report_rule,
    )


def assess_all(members: Iterable[Member], rules: RuleSet | None = None) -> list[Finding]:
    """Each member's own finding (for reports and debugging)."""
    return [assess(m, rules or DEFAULT_RULES) for m in members]
