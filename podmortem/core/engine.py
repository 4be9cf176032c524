"""The root-cause decision engine: which member of a failed job failed first, and why.

`decide(incident, rules)` is a pure function (no I/O, no clock, no logging) from everything known about
a job's members to one `Verdict`. Both `podmortem analyze` (offline bundles) and the aggregator (live
events, possibly before every member has reported) call it.

Why not simply "the earliest error-file timestamp" (torch's own `get_first_failure`)? Because in a real
cascade most members fail *because* one failed, and their clocks and whole-second timestamps cannot be
trusted to order them: peers of a crashed rank write "Connection closed by peer" within the same second,
a rank stuck in a slow exception handler writes its error after its victims timed out, a pod whose clock
runs seconds behind looks first, and hard deaths (SIGKILL, SIGSEGV, a lost node, a hung rank) write no
error file at all. So the engine decides in two steps:

1. **Assess each member on its own** (`assess`): from its error file, its log tail (torch's failure
   summary, worker tracebacks, glog lines), its container termination, its DisruptionTarget condition and
   pod phase, classify its failure with the rules (`podmortem.core.rules`) as *primary* (a failure of its own:
   exception, OOM, crash, preemption, lost node — strong, or weak when it might be an echo, like a bare
   exit code 1), *secondary* (died of another member's failure: peer closed, collective timeout, store
   lost, SIGTERM teardown), *clean* or *unknown* — and estimate when that failure happened on the
   reference clock (sub-second observation and glog times when there are some, clock offsets when
   measured, whole-second timestamps as intervals otherwise).
2. **Decide causally, then by time** (`decide`): the root is the earliest *primary* (weak ones only win
   by a clear margin). With no primary but collective timeouts, the root is the member that did *not*
   time out — still running, silent while its sibling ranks timed out, or torn down by the cleanup:
   a hang. With only echoes left, the member the victims name (the peer address in gloo messages) or the
   first one torn down from outside. Everything else becomes the list of secondary members, each with
   why it is judged a victim.

Linear in the number of members (one pass to assess, one to decide; a second decision when words no rule knows
took a member for an echo, `bench/engine_speed.py --unknown-words`); log tails are scanned once.

Step 1 lives in `podmortem.core.assess`; this module is step 2. It stays one module over ~500 lines on
purpose: its three choosers (own failures, hang, echoes), the confidence table they share and the
verdict they assemble are one decision, and read best side by side.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from podmortem.core.assess import PROGRAM_ERRORS, TIE_SECONDS, Finding, assess, excerpt, log_text
from podmortem.core.captured import capture_notes, find_hang, has_captures
from podmortem.core.categories import ADVICE, RETRYABLE, Category
from podmortem.core.errorfile import exception_type_of
from podmortem.core.logtail import watchdog_position
from podmortem.core.model import LOW_CONFIDENCE, HangFinding, Incident, Member, Secondary, Verdict
from podmortem.core.rules import DEFAULT_RULES, Rule, RuleSet
from podmortem.core.wordmodel import MODEL as WORDS

# A device fault (ECC, Xid, a lost GPU) is reported at the next synchronisation with the device, so its report can
# come this long after the fault made a peer's collective fail; a generic exception (its words unknown to the rules,
# possibly that peer's echo) that far before it does not out-time it.
DEVICE_REPORT_LAG_SECONDS = 30.0
# A weak primary (bare exit code, an NCCL error a dying peer can cause) must be this much earlier than
# a strong one to be preferred.
WEAK_PENALTY_SECONDS = 2.0

# Confidence of a verdict, by how it was reached. These are ordered judgements, not calibrated
# probabilities: a strong own failure with a clear lead is near-certain; attributions made from what
# is *missing* (a hang, an unreported member, an echo) are guesses of decreasing strength.
CONF_PRIMARY = 0.9  # earliest strong own failure (exception, OOM, signal, preemption) with a clear lead
# Calibrated on the corpora (docs/engine.md, "Confidence"): how often each path was right (pod and
# category) on the development corpus and the real-world training split together, smoothed
# ((right + 1) / (n + 2)) and rounded to 0.05; `bench/realworld.py --split both --calibration` prints the counts.
CONF_PRIMARY_WEAK = 0.6  # earliest own failure is a bare exit code (no message)
# ...is weak but says something of its own (an NCCL system error, a stuck watchdog, the raylet's system error);
# kept below CONF_PRIMARY, as a victim can show the same words.
CONF_PRIMARY_WEAK_MESSAGE = 0.8
# ...is the stuck rank's own record of being stuck (a stack dump someone or a timer asked it for, its own watchdog
# thread found stuck), the only failure of its own in the job, and every other member that failed shows a known echo:
# nobody else can be the cause, and a victim waiting for a member that died would show that member's failure (or be
# missing it: then the missing-member penalty applies). Retryable, so it never writes PermanentFailure; calibrated
# like the others (docs/engine.md, "Which verdicts may reach 0.9").
CONF_STUCK_ALONE = 0.9
# ...is any Python exception, its category read from its class: set from how often such verdicts were right at first
# sight, on blind splits scored at the commit each measured (docs/engine.md, "Round 18, part c"), so below
# LOW_CONFIDENCE: "likely", with a runner-up.
CONF_PRIMARY_GENERIC = 0.55
# However many victims name its pod, a carrier class stays below the PermanentFailure threshold.
CONF_GENERIC_NAMED_CEILING = 0.85
# ...is a program error of the worker's own (ValueError, KeyError...: PROGRAM_ERRORS) in its error file, the only
# failure of its own in the job, and every other member that failed shows a known echo: the clear case, at the
# PermanentFailure threshold (0.9). Calibrated like the others (docs/engine.md, "Confidence"); the share of such
# verdicts right about retryability is guarded by tests/unit/test_realworld_accuracy.py.
CONF_CLEAR_OWN_EXCEPTION = 0.9
CONF_CLOSE_CALL = 0.7  # the runner-up failed on its own within the timing uncertainty
# a failure that names its cause chosen over an earlier carrier exception (within the timing uncertainty; a device
# fault up to DEVICE_REPORT_LAG_SECONDS later)
CONF_CAUSE_OVER_CARRIER = 0.7
CONF_NEAR_TIE = 0.55  # ...and less than half a second later
NEAR_TIE_SECONDS = 0.5
CONF_UNORDERED = 0.6  # two own failures, one without a time: the order is a guess
CONF_NAMED_BONUS = 0.05  # victims name the root (its address, host name or a rank it hosts) as the peer they lost
CONF_MAX = 0.99
CONF_HANG_BY_SCORE = {3: 0.8, 2: 0.3, 1: 0.35}  # by how visibly stuck the chosen member is
CONF_HANG_TIE_PENALTY = 0.25  # several members equally likely to be the stuck one
CONF_HANG_UNLOCATED = 0.3  # nobody stands out: the member that waited first
CONF_HANG_BEHIND = 0.5  # nobody stands out, but one member's rank is behind the others' collectives of one group
# An MPI launcher's report that one process died of a signal or an exit code, and no member failed in words of its own:
# the launcher's second-hand word, as much as a bare exit code says (below LOW_CONFIDENCE: "Likely").
CONF_LAUNCHER_REPORT = 0.6
CONF_NAMED_TERMINATED = 0.5  # named by victims, and it was torn down from outside
CONF_NAMED_PEER = 0.4  # named by victims, its own failure not recorded
CONF_FIRST_TORN_DOWN = 0.4  # only echoes; the first member SIGTERMed from outside
CONF_REPORTED_DEATH = 0.4  # only echoes; one reports a process of the job killed, the node's memory named first
CONF_UNREPORTED = 0.2  # only echoes; blame a member that has not reported
CONF_EARLIEST_ECHO = 0.15  # only echoes from everyone: the earliest echo
CONF_NO_FAILURE_PENDING = 0.5  # nothing failed, but some members have not reported
CONF_MISSING_PENALTY = 0.1  # decided while members of the job had not reported
CONF_MIN = 0.05
# Words no rule knows (podmortem.core.wordmodel): a member whose failure only a reading of last resort found is taken
# for a victim when its words are a victim's by this many log odds more than another failed member's; a root whose
# category only such a reading gave takes the category its words are of by this margin over the next. Set on the
# blind splits replayed at the commit that first saw each (docs/engine.md, "Round 19: words no rule knows").
WORDS_ECHO_MARGIN = 4.0
WORDS_CATEGORY_MARGIN = 2.0
# ...and says it at this confidence: how often such verdicts were right (pod and category) at first sight on the
# blind splits, smoothed like the others (docs/engine.md, "fresh17's one scoring").
CONF_WORDS_CATEGORY = 0.4
WORDS_PEER = Rule(
    id="words.peer",
    kind="message",
    secondary="peer",
    why="its words are a victim's (a lost peer, a connection that broke) more than another failed member's",
)


# --------------------------------------------------------------------------------------------------
# Step 2: compare members.


@dataclass(frozen=True)
class _Root:
    finding: Finding
    category: Category | None
    retryable: bool | None
    rule_id: str
    decided_by: str
    confidence: float
    headline: str
    evidence: tuple[str, ...] = ()
    runner_up: Finding | None = None  # the next most likely root, when there is one


def _fmt_time(t: float | None) -> str:
    if t is None:
        return "?"
    try:
        return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S.%f")[:-4]
    except (OverflowError, OSError, ValueError):  # a time no calendar holds (a hostile or broken input)
        return f"t={t:g}"


def _sort_key(f: Finding, named: Counter[str]) -> tuple[float, int, int, float, str]:
    t = f.time if f.time is not None else math.inf
    if f.weak:
        t += WEAK_PENALTY_SECONDS
    rank = f.member.rank if f.member.rank is not None else 1 << 30
    return (t, 0 if not f.weak else 1, -named[f.member.pod], float(rank), f.member.pod)


def _device_fault_first(ordered: list[Finding]) -> list[Finding]:
    """A strong device fault a little after a generic exception goes first: the fault is the device's own, the
    generic exception may be its echo in words no rule knows (see DEVICE_REPORT_LAG_SECONDS)."""
    head = ordered[0]
    if head.rule is None or not head.rule.generic or head.time is None:
        return ordered
    for f in ordered[1:]:
        if (
            f.category == "hardware"
            and not f.weak
            and f.rule is not None
            and not f.rule.generic
            and f.time is not None
            and f.time - head.time <= DEVICE_REPORT_LAG_SECONDS
        ):
            return [f, *(x for x in ordered if x is not f)]
    return ordered


def _only_exited(f: Finding) -> bool:
    """An own failure known only from the container's exit code, with no words of its own: any member that died of
    anything, a victim too, shows that much."""
    return f.weak and f.source == "termination"


# Words by which a log says that something went wrong (a training loop's progress lines, which a rank that hung
# leaves as its tail, say none of them).
_SAYS_SOMETHING_FAILED = re.compile(
    r"(?i)\b(?:error|exception|traceback|fatal|fail(?:ed|ure)?|abort(?:ed)?|assert(?:ion)?|panic(?:ked)?|killed|"
    r"not found|no such|cannot|can't|unable|invalid|denied|refused|unexpected)\b|错误|失败|异常|杀死|エラー|失敗"
)


def _exited_in_words_of_its_own(f: Finding) -> bool:
    """A member known to have failed only by its exit code, whose log says something failed in words that are those
    of a failure of its own: not a victim's (`WordModel.victim_score` below zero), and of a category other than
    `hang` by `WORDS_CATEGORY_MARGIN`."""
    if not _only_exited(f):
        return False
    text = log_text(f.member)
    if not text or not _SAYS_SOMETHING_FAILED.search(text) or WORDS.victim_score(text) >= 0:
        return False
    guess, margin = WORDS.category_guess(text)
    return guess is not None and guess != "hang" and margin > WORDS_CATEGORY_MARGIN


def _explained_by(f: Finding, root: Finding) -> bool:
    """`f` is a weak network failure (NCCL's remote error or its generic system error: a connection to a peer broke, or
    a socket call on it failed) and `root` failed on its own: a process that died is the remote process whose exit
    breaks its peers' connections, a network failure named at it breaks them too, so `f` is its echo, no rival of it
    (no close call). Not beside a root that is itself only such an error (a rival of its kind) or a process that only
    got stuck (a stuck process breaks no connection)."""
    return f.weak and f.category == "network" and not (root.weak and root.category in ("network", "hang"))


def _names_no_cause(f: Finding) -> bool:
    """A generic exception of a carrier class (RuntimeError, OSError, a custom class; not a program error such as
    ValueError): its words name no cause, and a victim's echo in words no rule knows reads the same."""
    return f.rule is not None and f.rule.generic and f.exception_type.rsplit(".", 1)[-1] not in PROGRAM_ERRORS


def _names_its_cause(f: Finding) -> bool:
    """A strong own failure whose words name a cause: a specific rule (also one capped below the threshold: its other
    reading is another cause, or an echo that comes far later, after a collective's timeout), or a program error of the
    worker's own (ValueError, KeyError...: PROGRAM_ERRORS)."""
    return f.rule is not None and not f.weak and not _names_no_cause(f)


def _too_close(first: Finding, then: Finding, named: Counter[str]) -> bool:
    """`then` failed within the timing uncertainty of `first` (whole seconds, unmeasured clocks)."""
    gap = _sort_key(then, named)[0] - _sort_key(first, named)[0]
    return gap < max(TIE_SECONDS, min(first.spread + then.spread, 3.0))


# faulthandler's dump of every thread with no header of its own: what it prints on a signal it was registered for (the
# SIGTERM of a teardown, a SIGUSR1), every rank alike — not a record that this one was stuck (its timer says
# "Timeout (0:30:00)!", py-spy and gdb are run on a process someone found stuck).
_SIGNAL_DUMP = re.compile(r"^\s*(Current thread|Thread) 0x[0-9a-f]{6,16} \(most recent call first\)")


def _stuck_own(f: Finding) -> bool:
    """A weak hang in the rank's own words that says it was stuck: a timer's or a person's stack dump with no exception,
    its own watchdog found stuck."""
    return f.weak and f.source == "log" and f.category == "hang" and not _SIGNAL_DUMP.match(f.text)


def _cause_named_first(ordered: list[Finding], named: Counter[str]) -> list[Finding]:
    """Within the timing uncertainty, a failure that names its cause goes before a carrier exception ahead of it: that
    exception's words name no cause and may be the other's echo in words no rule knows (a victim's is, most often).
    So does the stuck rank's own record (its times as they are, without the weak handicap): the carrier exception of
    a rank that waited for it is a timeout's echo in words no rule knows, raised when the stuck rank is torn down."""
    head = ordered[0]
    if not _names_no_cause(head) or head.time is None:
        return ordered
    for f in ordered[1:]:
        if f.time is None:
            continue
        if _names_its_cause(f) and _too_close(head, f, named):
            return [f, *(x for x in ordered if x is not f)]
        if _stuck_own(f) and abs(f.time - head.time) < max(TIE_SECONDS, min(head.spread + f.spread, 3.0)):
            return [f, *(x for x in ordered if x is not f)]
    return ordered


# A DataLoader re-raises its worker's exception under "Caught <class> in DataLoader worker process N", the worker's own
# traceback after it, whose last line is then the rank's last: an AssertionError there is a check in the data path that
# failed (a reader's length check on a short read of remote data as often as the dataset code's own), not why — the
# reading `dataloader.carried` gives the header, below the PermanentFailure threshold.
_WORKER_FAILED_CHECK = re.compile(r"Caught AssertionError in DataLoader worker process")


def _failed_check_in_worker(root: Finding) -> bool:
    return root.exception_type.rsplit(".", 1)[-1] == "AssertionError" and bool(
        _WORKER_FAILED_CHECK.search(root.text) or _WORKER_FAILED_CHECK.search(log_text(root.member))
    )


# A platform client reporting that the job it launched failed there, as its status check raises it: SageMaker's Python
# SDK ("Error for Training job NAME: Failed. Reason: AlgorithmError: ..."; sagemaker-core's common_utils.py,
# _check_job_status, raising UnexpectedStatusException, a ValueError by class, as older SDKs raised ValueError itself).
# The class is the client's, the failure the remote job's, whatever its reason names: not the program's own logic.
_REMOTE_JOB_FAILED = re.compile(r"\bError for [A-Z][\w ]{0,40} job \S+: \w+\.? Reason: ")


def _reports_remote_job(root: Finding) -> bool:
    return _REMOTE_JOB_FAILED.search(root.text) is not None


def _clear_own_exception(root: Finding, ordered: Sequence[Finding], others_echo: bool) -> bool:
    """The worker raised a program error of its own — in its error file, or as the traceback in its own log (torch's
    summary then shows `exitcode: 1` with no error file) —, nobody else failed on their own in words of their own (a
    peer's NCCL error its death explains is its echo: `_explained_by`), and
    every other member's failure is a known echo: the case a retry cannot fix, said plainly. Not an AssertionError a
    DataLoader re-raised from its worker (`_failed_check_in_worker`), nor a platform client's report of a remote job's
    failure (`_reports_remote_job`)."""
    return (
        others_echo
        and all(_only_exited(f) or _explained_by(f, root) for f in ordered[1:])
        and root.source in ("error file", "log")
        and root.exception_type.rsplit(".", 1)[-1] in PROGRAM_ERRORS
        and not _failed_check_in_worker(root)
        and not _reports_remote_job(root)
    )


def _others_echo(findings: Sequence[Finding]) -> bool:
    """Every member that is not an own failure failed as a known echo (none silent, none still pending)."""
    return all(f.role in ("primary", "secondary", "clean") for f in findings)


def _stuck_alone(root: Finding, ordered: Sequence[Finding], others_echo: bool) -> bool:
    """The rank's own words say it was stuck (`_stuck_own`: not a dump printed on a signal), nobody else failed on their
    own at all (not even with a bare exit code: a member that died without words may be the one it waited for), and
    every other member's failure is a known echo."""
    return others_echo and len(ordered) == 1 and _stuck_own(root)


def _choose_primary(primaries: Sequence[Finding], named: Counter[str], others_echo: bool = False) -> _Root:
    ordered = _cause_named_first(_device_fault_first(sorted(primaries, key=lambda f: _sort_key(f, named))), named)
    root = ordered[0]
    rule = root.rule
    assert rule is not None and rule.category is not None
    if root.weak:
        confidence = CONF_PRIMARY_WEAK if root.source == "termination" else CONF_PRIMARY_WEAK_MESSAGE
        if _stuck_alone(root, ordered, others_echo):
            confidence = CONF_STUCK_ALONE
    elif rule.generic:
        clear = _clear_own_exception(root, ordered, others_echo)
        confidence = CONF_CLEAR_OWN_EXCEPTION if clear else CONF_PRIMARY_GENERIC
    else:
        confidence = CONF_PRIMARY
    evidence = [f"earliest own failure: {root.member.pod} at {_fmt_time(root.time)}"]
    # A member that only exited is no rival of a failure in words of its own (it makes no close call).
    # Nor is a weak network failure a member that died on its own explains (`_explained_by`).
    rivals = (
        list(ordered[1:])
        if _only_exited(root)
        else [f for f in ordered[1:] if not _only_exited(f) and not _explained_by(f, root)]
    )
    cause_first = len(ordered) > 1 and _sort_key(ordered[1], named) < _sort_key(root, named)
    if cause_first:
        nxt = ordered[1]
        confidence = min(confidence, CONF_CAUSE_OVER_CARRIER)
        what = "a device fault of its own" if root.category == "hardware" else "a failure that names its cause"
        evidence.append(
            f"{what}; {nxt.member.pod}'s earlier {nxt.exception_type or 'exception'} is in words no rule knows and may "
            "be its echo"
        )
    elif rivals:
        nxt = rivals[0]
        if root.time is not None and nxt.time is not None:
            gap = _sort_key(nxt, named)[0] - _sort_key(root, named)[0]
            evidence.append(f"next own failure: {nxt.member.pod} {gap:+.1f} s ({nxt.category})")
            if _too_close(root, nxt, named):
                confidence = min(confidence, CONF_NEAR_TIE if gap < NEAR_TIE_SECONDS else CONF_CLOSE_CALL)
        else:
            confidence = min(confidence, CONF_UNORDERED)
    if named[root.member.pod]:
        # Victims naming it confirm the pod, not the category: a carrier class (RuntimeError, a custom one) stays
        # below the PermanentFailure threshold however many victims name it.
        ceiling = CONF_GENERIC_NAMED_CEILING if rule.generic and confidence <= CONF_GENERIC_NAMED_CEILING else CONF_MAX
        confidence = min(ceiling, confidence + CONF_NAMED_BONUS)
        evidence.append(
            f"{named[root.member.pod]} victim(s) name {root.member.pod} as the peer they lost or waited for"
        )
    # A rule whose words a failure of another family prints too says so (its max_confidence): never above it.
    confidence = min(confidence, rule.max_confidence)
    return _Root(
        root,
        rule.category,
        rule.is_retryable,
        rule.id,
        "earliest own failure",
        confidence,
        _headline(root),
        tuple(evidence),
        ordered[1] if len(ordered) > 1 else None,
    )


_NEVER_REPORTED = "not reported"


def _never_reported(incident: Incident, pods: Sequence[str], ranks: Sequence[int]) -> list[Finding]:
    """A stand-in finding for each expected member that never reported, named by its derived pod name (none when
    the names cannot be derived: a hang is not blamed on a pod nobody can name)."""
    if not pods:
        return []
    return [
        Finding(
            Member(pod=name, namespace=incident.members[0].namespace if incident.members else "", rank=rank),
            "unknown",
            source=_NEVER_REPORTED,
            evidence=(f"{name}: node rank {rank}, expected, never reported",),
        )
        for name, rank in zip(pods, ranks, strict=True)
    ]


# A teardown that is no sign of a stuck rank: torch elastic's agent closing its workers ("Sending process N closing
# signal SIGTERM": its default after one of its own workers failed, in a hang most often that worker's timeout), and a
# stop a session sends every process alike (SIGHUP as a terminal or ssh session ends, SIGINT as a user interrupts; the
# agent's "Received 1 death signal", the SIGHUP it forwards, and the SignalException its handler raises for either:
# torch/distributed/elastic/multiprocessing/api.py, _terminate_process_handler: "Process N got signal: 1", the signal's
# number). The stop the kubelet sends a pod is SIGTERM.
# DeepSpeed's launcher (deepspeed/launcher/launch.py, sigkill_handler) logs "Killing subprocess N" for each local rank
# when one of them exited non-zero, as the agent's closing signal; when its own process was sent SIGTERM from outside
# it also logs "Main process received SIGTERM": that stop, which a rank that never timed out gets too, stays a sign.
_SESSION_STOP = re.compile(r"\bSIG(HUP|INT)\b|Received [12] death signal|got signal: ?[12]\b")
_AGENT_OR_SESSION_STOP = re.compile(r"closing signal|Killing subprocess \d|" + _SESSION_STOP.pattern)
_LAUNCHER_STOPPED_FROM_OUTSIDE = re.compile(r"Main process received SIGTERM")
# A SIGTERM that a failure-signal handler reports with its sender (glog's and PaddlePaddle's: "*** SIGTERM (@0x...)
# received by PID 13245 (TID 0x...) from PID 13203 ***", the sender's si_pid as the receiver's PID namespace sees it).
# The kubelet's stop comes from outside the container's namespace, where the kernel reports the sender as PID 0
# (kernel/signal.c fills si_pid with task_tgid_nr_ns(current, the receiver's namespace), 0 for a task it cannot see);
# a sender with a PID of the pod's own other than the receiver is a process of the pod: its launcher stopping its
# workers (PaddlePaddle's terminate_local_procs and spawn's parent, after one of its own workers failed or as it
# passes a stop on) — the agent's closing signal in other words, no sign of a stuck rank.
_SIGTERM_FROM = re.compile(r"\*\*\* SIGTERM \(@0x[0-9a-f]+\) received by PID (\d+) \(TID 0x[0-9a-f]+\) from PID (\d+)")


def _stopped_by_its_own_launcher(text: str) -> bool:
    return any(m[2] != "0" and m[2] != m[1] for m in _SIGTERM_FROM.finditer(text))


def _stop_is_no_sign(f: Finding) -> bool:
    """A teardown that says nothing of a stuck rank: the agent's or a session's stop (unless its launcher says it was
    stopped from outside), or its own launcher's SIGTERM."""
    text = log_text(f.member)
    return (
        bool(_AGENT_OR_SESSION_STOP.search(f.text)) and not _LAUNCHER_STOPPED_FROM_OUTSIDE.search(text)
    ) or _stopped_by_its_own_launcher(text)


_RAY_KILLED_FOR_MEMORY = re.compile(r"The process is killed by SIGKILL by OOM killer due to high memory usage")
# A member whose words say the other end of its connection dropped it (urllib3's "Connection aborted.", http.client's
# "Remote end closed connection", a socket reset by its peer) lost the one it talked to: it did not go silent itself.
_LOST_ITS_REMOTE = re.compile(r"Connection aborted\.|Remote end closed connection|Connection reset by peer")


def _hang_candidates(findings: Sequence[Finding]) -> list[tuple[int, Finding, str]]:
    out: list[tuple[int, Finding, str]] = []
    for f in findings:
        if f.role == "unknown" and f.member.running:
            out.append((3, f, "still running while its peers timed out"))
        elif f.role == "secondary" and f.secondary == "timeout" and f.silent_ranks:
            ranks = ", ".join(str(r) for r in f.silent_ranks)
            out.append((3, f, f"rank(s) {ranks} never raised while sibling ranks timed out"))
        elif f.role == "secondary" and f.secondary == "timeout" and f.desync:
            works = ", ".join(f"rank {r} in {op} #{seq}" for r, seq, op in f.desync[:4])
            out.append((3, f, f"its own ranks timed out in different collectives ({works}): they are out of step"))
        elif f.role == "secondary" and f.secondary == "teardown" and not _stop_is_no_sign(f):
            out.append((2, f, "did not time out: it was still inside the collective when the job was torn down"))
        elif (
            f.role == "primary"
            and f.weak
            and f.source == "termination"
            and not _LOST_ITS_REMOTE.search(log_text(f.member))
        ):
            out.append((2, f, "exited without a message of its own while its peers timed out"))
        elif f.role == "unknown" and f.source == _NEVER_REPORTED:
            out.append((1, f, "never reported (neither its sidecar nor the pod's status) while every peer timed out"))
        elif f.role == "unknown":
            out.append((1, f, "has reported nothing while its peers timed out"))
    return out


def _waited_first(f: Finding) -> tuple[float, int, str]:
    return (
        f.time if f.time is not None else math.inf,
        f.member.rank if f.member.rank is not None else 1 << 30,
        f.member.pod,
    )


def _choose_hang(findings: Sequence[Finding], timeouts: Sequence[Finding], named: Counter[str]) -> _Root:
    cands = _hang_candidates(findings)
    stops = [f.time - f.timeout_s for f in timeouts if f.time is not None and f.timeout_s is not None]
    waited = max((f.timeout_s for f in timeouts if f.timeout_s), default=None)
    ev = [
        f"{len(timeouts)} member(s) timed out in a collective"
        + (f" after {waited:g} s" if waited else "")
        + (f"; the missing peer stopped around {_fmt_time(min(stops))}" if stops else "")
    ]
    if not cands:
        # Everyone who failed waited for someone; nobody is visibly stuck. The one who waited first is
        # the best guess for where the stuck rank lives (e.g. its sibling on the same pod).
        # A rank the waiting ones name (ProcessGroupNCCL's dump signal "from rank N": its collective timed out
        # first) says it better than the kubelet's end times do.
        # Then a rank behind the others in their group's sequence of collectives: it never entered the one they wait in.
        behind = _behind_in_sequence(timeouts)
        first = min(timeouts, key=lambda f: (-named[f.member.pod], f.member.pod != behind, *_waited_first(f)))
        confidence = CONF_HANG_UNLOCATED
        if named[first.member.pod]:
            ev.append(f"no member stands out as stuck; {named[first.member.pod]} victim(s) name {first.member.pod}")
            head = "a rank stopped making progress; the waiting ranks name this pod, which may host it"
        elif first.member.pod == behind:
            confidence = CONF_HANG_BEHIND
            ev.append(f"no member stands out as stuck; {behind} timed out in an earlier collective of the same group")
            head = "a rank stopped making progress; this pod's rank is behind the others' collectives and may be it"
        else:
            ev.append(f"no member stands out as stuck; {first.member.pod} timed out first")
            head = "a rank stopped making progress; this pod timed out first and may host it"
        others = [f for f in timeouts if f is not first]
        runner = min(others, key=_waited_first) if others else None
        return _Root(
            first,
            "hang",
            RETRYABLE["hang"],
            "engine.hang-unlocated",
            "hang attribution",
            confidence,
            head,
            tuple(ev),
            runner,
        )
    cands.sort(
        key=lambda c: (
            -c[0],
            -named[c[1].member.pod],
            c[1].member.rank if c[1].member.rank is not None else 1 << 30,
            c[1].member.pod,
        )
    )
    score, root, why = cands[0]
    ties = [c for c in cands if c[0] == score]
    confidence = CONF_HANG_BY_SCORE[score]
    if len(ties) > 1:
        confidence = max(CONF_MIN, confidence - CONF_HANG_TIE_PENALTY)
        ev.append(f"{len(ties)} members equally likely: {', '.join(c[1].member.pod for c in ties[:5])}")
    ev.append(f"{root.member.pod} {why}")
    head = "stopped making progress; its peers timed out waiting for it" + (f" ({waited:g} s)" if waited else "")
    # The next candidate, else the member that waited first (it may host the stuck rank).
    runner = cands[1][1] if len(cands) > 1 else min(timeouts, key=_waited_first)
    return _Root(
        root, "hang", RETRYABLE["hang"], "engine.hang", "hang attribution", confidence, head, tuple(ev), runner
    )


def _choose_reported(
    reports: Sequence[Finding], findings: Sequence[Finding], placed_only: bool = False
) -> _Root | None:
    """An MPI launcher (mpirun, mpiexec, Hydra) reported one process's death: its own failure, which the process often
    could not print (SIGKILL, SIGSEGV). The member whose own log shows it hosts the reported rank, else the member named
    as the report's host (its name, node or address), else the member whose log carries the report (the launcher runs
    beside it, or it is the one pod); the category the report's signal or exit code names. With `placed_only` (a member
    that carries no report exited non-zero without words: it may be the process the report names), None unless a member
    is named — or the report names no process at all, which no member can be placed as."""
    rep = min(reports, key=_waited_first)
    report = rep.report
    assert report is not None
    hosts = _Hosts.of(findings)
    owner = _rank_owners(findings, assume_node_ranks=False).get(report.rank) if report.rank is not None else None
    host = report.host
    found = hosts.by_name.get(owner or "") or hosts.find(host)
    # A report that names no process (Open MPI's "1 process returned a non-zero exit code") places it on no other
    # member: the launcher's log, which carries every process's output, is where that death shows.
    if found is None and placed_only and (report.rank is not None or host):
        return None
    root = found or rep
    rule = rep.report_rule
    where = f" (its log shows rank {report.rank})" if owner is not None else (f" ({host})" if found else "")
    ev: tuple[str, ...] = (f"{rep.member.pod}'s launcher reports: {excerpt(report.text, 160)}",)
    if root is not rep:
        ev = (*ev, f"the reported process ran on {root.member.pod}{where}")
    finding = dataclasses.replace(root, text=report.text, source="launcher report", global_rank=report.rank)
    if rule is None or rule.category is None:
        return _Root(
            finding,
            None,
            None,
            "engine.launcher-report",
            "launcher's report",
            CONF_NAMED_PEER,
            "its process died, as the MPI launcher reports; how it ended was not recorded",
            ev,
        )
    return _Root(
        finding,
        rule.category,
        rule.is_retryable,
        "engine.launcher-report",
        "launcher's report",
        min(CONF_LAUNCHER_REPORT, rule.max_confidence),
        f"{rule.describe()}, as the MPI launcher reports: {excerpt(report.text, 200)}",
        ev,
    )


def _choose_echo(failed: Sequence[Finding], findings: Sequence[Finding], named: Counter[str]) -> _Root:
    """No member failed on its own and nobody timed out: follow the victims' accusations."""
    if named:
        pod, count = sorted(named.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        f = next(x for x in findings if x.member.pod == pod)
        ev = (f"{count} victim(s) name {pod} as the peer that went away",)
        if f.secondary == "teardown":
            return _Root(
                f,
                "preemption",
                RETRYABLE["preemption"],
                "engine.terminated-first",
                "named by victims",
                CONF_NAMED_TERMINATED,
                "was terminated from outside (SIGTERM, no DisruptionTarget recorded)",
                ev,
            )
        return _Root(
            f,
            f.category,
            None if f.category is None else RETRYABLE[f.category],
            "engine.named-peer",
            "named by victims",
            CONF_NAMED_PEER,
            "went away first (its own failure was not recorded)",
            ev,
        )
    unknown = [f for f in findings if f.role == "unknown"]
    if unknown:
        f = min(unknown, key=lambda x: (x.member.rank if x.member.rank is not None else 1 << 30, x.member.pod))
        return _Root(
            f,
            None,
            None,
            "engine.unreported",
            "only victims reported",
            CONF_UNREPORTED,
            "has not reported; every other failure is an echo of a peer's",
            (f"{len(unknown)} member(s) have not reported",),
        )
    # Ray's caller of an actor or task whose worker process died (ray.get raising ActorDiedError / RayActorError): its
    # exit detail for a worker whose connection ended without an exit of its own lists the OOM killer's SIGKILL first
    # (the raylet's words; Ray's "Detecting Out-of-Memory errors" gives them as what ray.get raises when the kernel's
    # OOM killer ended the worker). The caller only lost that process, but when nobody failed on their own it is the
    # one account of the death that started the job's end, and of what ended it.
    reported = [f for f in failed if f.secondary == "peer" and _RAY_KILLED_FOR_MEMORY.search(log_text(f.member))]
    # (a stop every process of a session gets alike, SIGHUP or SIGINT, is no stop of this pod from outside: the
    # kubelet's is SIGTERM)
    torn = [f for f in failed if f.secondary == "teardown" and not _SESSION_STOP.search(f.text)]
    paths: tuple[tuple[list[Finding], Category, str, str, float, str, str], ...] = (
        (
            reported,
            "host_oom",
            "engine.reported-death",
            "a death it reports",
            CONF_REPORTED_DEATH,
            "reports a process of the job killed by the system, its memory named first (Ray's worker exit detail); "
            "the process itself may run in another pod",
            "reports a worker killed, most likely by the OOM killer",
        ),
        (
            torn,
            "preemption",
            "engine.terminated-first",
            "first torn down",
            CONF_FIRST_TORN_DOWN,
            "was the first member terminated from outside (SIGTERM, no DisruptionTarget recorded)",
            "SIGTERM",
        ),
    )
    for group, category, rule_id, decided_by, confidence, head, said in paths:
        if group:
            f = min(group, key=lambda x: (x.time if x.time is not None else math.inf, x.member.pod))
            ev = (f"first {said} at {_fmt_time(f.time)}",)
            return _Root(f, category, RETRYABLE[category], rule_id, decided_by, confidence, head, ev)
    f = min(failed, key=lambda x: (x.time if x.time is not None else math.inf, x.member.pod))
    return _Root(
        f,
        None,
        None,
        "engine.earliest-echo",
        "earliest echo",
        CONF_EARLIEST_ECHO,
        "failed first, but only with an error caused by a peer; the real cause was not recorded",
        (),
    )


def _headline(f: Finding) -> str:
    cat = f.category
    text = excerpt(f.text, 200)
    if cat == "preemption":
        return f"was preempted/evicted from outside ({text})"
    if cat == "node_lost":
        node = f.member.node or "its node"
        return f"was lost with {node} ({text})"
    if f.exception_type:
        return text
    why = f.rule.describe() if f.rule is not None else ""
    return f"{why}: {text}" if why and why not in text else text


def _secondary_reason(f: Finding, root: Finding, root_ips: frozenset[str]) -> str:
    rule = f.rule
    if f.role == "primary":
        assert rule is not None
        gap = ""
        if f.time is not None and root.time is not None:
            gap = f" {f.time - root.time:+.1f} s after the root"
        return f"also failed on its own{gap} ({rule.category}): {excerpt(f.text, 160)}"
    if f.role == "unknown":
        return "reported no failure of its own"
    assert rule is not None
    why = rule.describe()
    if f.secondary == "teardown":
        return f"{why}" if rule.secondary == "teardown" else why
    named = [ip for ip in f.named_ips if ip in root_ips]
    if named:
        why += f" ({named[0]} is {root.member.pod})"
    if f.timeout_s and f.secondary == "timeout":
        why += f" after {f.timeout_s:g} s"
    return why


def _missing_line(missing: int, ranks: Sequence[int], pods: Sequence[str], root_pod: str) -> str:
    """One line naming the members that have not reported ("" when all have)."""
    if missing <= 0:
        return ""
    if not ranks:
        return f"{missing} member(s) of the job have not reported."
    if pods:  # derived for every missing rank, or for none
        named = [f"{pod} (node rank {rank})" for pod, rank in zip(pods, ranks, strict=True)]
    else:
        named = [f"node rank {rank}" for rank in ranks]
    shown = ", ".join(named[:8]) + (f" and {len(named) - 8} more" if len(named) > 8 else "")
    if root_pod in pods:
        return f"Not reported: {shown}."
    return f"Not reported: {shown}; if the job hung, look there first."


def _summary(root: _Root, confidence: float, missing_line: str = "") -> str:
    m = root.finding.member
    where = ", ".join(p for p in (f"node rank {m.rank}" if m.rank is not None else "", m.node and f"on {m.node}") if p)
    who = f"{m.pod} ({where})" if where else m.pod
    line1 = f"{who} failed first: {root.headline.rstrip('.')}."
    if root.rule_id.startswith("hang."):  # decided from captures: the line names the rank, its pod and where
        state = "is out of step with its peers" if root.rule_id.startswith("hang.mismatch") else "hung"
        line1 = f"{who} {state}: {root.headline.rstrip('.')}."
    if confidence < LOW_CONFIDENCE:
        line1 = f"Likely (confidence {confidence:.2f}): {line1}"
        if root.runner_up is not None:
            other = root.runner_up
            line1 += f" Runner-up: {other.member.pod} ({other.category or other.secondary or 'cause unknown'})."
    advice = ""
    if root.rule_id in ("hang.behind", "hang.behind-stacks") and "; it was at " in root.headline:
        advice = HANG_WHERE_ADVICE
    elif root.finding.rule is not None and root.finding.rule.advice and root.category == root.finding.category:
        advice = root.finding.rule.advice
    elif root.category is not None:
        advice = ADVICE[root.category]
    else:
        advice = "Its own cause was not recorded: read its log (kubectl logs --previous) and the node's events."
    return f"{line1}\n{advice}" + (f"\n{missing_line}" if missing_line else "")


# --------------------------------------------------------------------------------------------------
# A hang decided from captured evidence (stacks, Flight Recorder state): `podmortem.core.captured`.

CONF_CAPTURED = 0.9  # one culprit named by the captures (its rank behind, mismatched, or alone outside a collective)
CONF_CAPTURED_WHERE = 0.95  # ...by the Flight Recorder state, and its own stack says where it stopped
CONF_CAPTURED_SEVERAL = 0.7  # several ranks named together
CONF_WAITED_APART = 0.8  # one rank timed out in another collective than all the others (their tracebacks)
CONF_ALL_IN = 0.6  # every rank inside one collective: the collective is stuck, no rank is to blame
_HANG_CATEGORY: dict[str, Category] = {"behind": "hang", "mismatch": "user_code", "all_in": "network"}
HANG_WHERE_ADVICE = (
    "Its peers waited for it in the collective while it was at that line: fix what blocks there (a lock, a read, "
    "a queue, a data loader); a retry may stop the same way."
)


def _hang_evidence(findings: Sequence[Finding]) -> HangFinding | None:
    if not has_captures(findings):
        return None
    return find_hang(findings, _rank_owners(findings))


def _decided_by_captures(
    hang: HangFinding | None, root: _Root | None, findings: Sequence[Finding], incident: Incident
) -> tuple[_Root, HangFinding | None]:
    """The root as the captures decide it, when they do (callers ask only when no member failed on its own)."""
    if hang is None or (not hang.stuck_ranks and root is None):
        assert root is not None, "a verdict without a failure is decided before"
        return root, None
    if not hang.stuck_ranks:  # all in, none behind: keep the member the timing points at, say what is stuck
        assert root is not None
        return (
            dataclasses.replace(
                root,
                category=_HANG_CATEGORY[hang.finding],
                retryable=RETRYABLE[_HANG_CATEGORY[hang.finding]],
                rule_id="hang.all-in",
                decided_by="captured evidence: all in",
                confidence=min(root.confidence, CONF_ALL_IN),
                headline=hang.detail,
                evidence=(*root.evidence, f"{hang.path}: {hang.detail}"),
            ),
            hang,
        )
    pod = hang.stuck_pods[0] if hang.stuck_pods else ""
    culprit = next((f for f in findings if f.member.pod == pod), None)
    if culprit is None:
        if not pod:  # a rank whose pod nobody can name: the evidence, on the member the timing points at
            assert root is not None, "a stall whose captures name no pod is decided before"
            return dataclasses.replace(root, evidence=(*root.evidence, f"{hang.path}: {hang.detail}")), None
        namespace = incident.members[0].namespace if incident.members else ""
        culprit = Finding(Member(pod=pod, namespace=namespace), "unknown", source=_NEVER_REPORTED)
    category = _HANG_CATEGORY[hang.finding]
    confidence = CONF_CAPTURED if len(hang.stuck_ranks) == 1 else CONF_CAPTURED_SEVERAL
    from_fr = hang.seq is not None  # the Flight Recorder's findings carry the collective's sequence number
    if from_fr and hang.frame is not None and len(hang.stuck_ranks) == 1:
        confidence = CONF_CAPTURED_WHERE
    source, suffix = ("flight recorder", "") if from_fr else ("stacks", "-stacks")
    if hang.path == "log":  # where the ranks that timed out were, from their tracebacks
        source, suffix, confidence = "timeout tracebacks", "-log", min(confidence, CONF_WAITED_APART)
    line = hang_line(hang)
    evidence = [f"{hang.path or 'capture'}: {hang.detail}"]
    if hang.frame is not None:
        evidence.append(
            f"rank {hang.stuck_ranks[0]} was at {hang.frame.file}:{hang.frame.line} in {hang.frame.function}"
        )
    others = [f for f in findings if f.member.pod != culprit.member.pod and f.failed]
    # The verdict's message and first evidence are the hang's, not the culprit pod's own (often a sibling's timeout).
    culprit = dataclasses.replace(culprit, text=line, exception_type="", evidence=(*evidence, *culprit.evidence))
    evidence = list(root.evidence) if root is not None else []
    return (
        _Root(
            culprit,
            category,
            RETRYABLE[category],
            f"hang.{hang.finding}{suffix}",
            f"captured evidence: {source} ({hang.path})"
            if hang.path not in ("", "log")
            else f"captured evidence: {source}",
            confidence,
            line,
            tuple(evidence),
            root.finding if root is not None and root.finding.member.pod != pod else (others[0] if others else None),
        ),
        hang,
    )


def hang_line(hang: HangFinding) -> str:
    """One line for people: "rank 5 (pod llm-worker-1) never entered all_reduce #4812; it was at train.py:211 in
    load_batch"."""
    ranks = hang.stuck_ranks
    who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks[:6])
    if hang.stuck_pods:
        who += (
            f" (pod {hang.stuck_pods[0]})" if len(hang.stuck_pods) == 1 else f" (pods {', '.join(hang.stuck_pods[:4])})"
        )
    op = f"{hang.op or 'a collective'}" + (f" #{hang.seq}" if hang.seq is not None else "")
    if hang.finding == "mismatch" and not hang.process_group:
        text = f"{who} waited in a different collective than its peers"
    elif hang.finding == "mismatch":
        text = f"{who} issued a different collective than its peers at {op} (group {hang.process_group})"
    elif hang.finding == "all_in":
        return (
            f"every rank is inside {op} (group {hang.process_group}) and none is behind: the collective itself is stuck"
        )
    elif hang.seq is not None:
        text = f"{who} never entered {op}"
    else:
        text = f"{who} was not in a collective while its peers waited in one"
    if hang.frame is not None:
        text += f"; it was at {hang.frame.where()}"
    return text


def _read_by_words(f: Finding) -> bool:
    """A failure of its own that only a reading of last resort found: a carrier exception (`_names_no_cause`), or a
    weak reading of a message (NCCL's generic system error, a glog fatal line), not a bare exit code."""
    r = f.rule
    if f.role != "primary" or r is None:
        return False
    if r.generic:
        return _names_no_cause(f)
    return r.weak and f.source != "termination" and r.kind != "exit_code"


def _echoes_in_words(findings: list[Finding]) -> list[Finding]:
    """Members read as failures of their own only by a reading of last resort, whose words are a victim's: each
    becomes an echo (`WORDS_PEER`) when its words are a victim's by `WORDS_ECHO_MARGIN` more than another failed
    member's. A victim in a stack no rule knows otherwise reads as a failure of its own and, a second earlier, out-times
    the member it lost — often one that died without words of its own, or in words no rule knows either."""
    primaries = [f for f in findings if f.role == "primary"]
    if len(primaries) < 2 or not any(_read_by_words(f) for f in primaries):
        return findings
    scores = [WORDS.victim_score(log_text(f.member)) for f in primaries]
    low = sorted(range(len(scores)), key=scores.__getitem__)[:2]
    echoes: dict[int, Finding] = {}
    for i, (f, s) in enumerate(zip(primaries, scores, strict=True)):
        other = low[1] if i == low[0] else low[0]
        if _read_by_words(f) and s > 0 and s - scores[other] > WORDS_ECHO_MARGIN:
            echoes[id(f)] = dataclasses.replace(
                f,
                role="secondary",
                rule=WORDS_PEER,
                evidence=(
                    f"{f.member.pod}: its words are a victim's ({s:+.1f} log odds, {s - scores[other]:.1f} more than "
                    f"{primaries[other].member.pod}'s): an echo [{WORDS_PEER.id}]",
                    *f.evidence,
                ),
            )
    return [echoes.get(id(f), f) for f in findings] if echoes else findings


def _category_in_words(root: _Root) -> _Root:
    """A root whose category only a reading of last resort gave (a bare exit code, a carrier exception), below the
    PermanentFailure threshold, takes the category its words are of, when they say it by `WORDS_CATEGORY_MARGIN`."""
    f = root.finding
    last_resort = root.rule_id == "exit.nonzero" or (f.rule is not None and f.rule.generic and _names_no_cause(f))
    if f.role != "primary" or not last_resort or root.confidence >= CONF_PRIMARY:
        return root
    guess, margin = WORDS.category_guess(log_text(f.member))
    if guess is None or margin <= WORDS_CATEGORY_MARGIN or guess == root.category:
        return root
    return dataclasses.replace(
        root,
        category=guess,
        retryable=RETRYABLE[guess],
        rule_id="words.category",
        confidence=min(root.confidence, CONF_WORDS_CATEGORY),
        evidence=(*root.evidence, f"its words are those of {guess} failures ({margin:.1f} log odds over the next)"),
    )


def _own_failures(failed: Sequence[Finding]) -> tuple[list[Finding], list[Finding]]:
    """The primaries among failed members: (strong, weak). Weak ones are believed only without a strong one."""
    strong = [f for f in failed if f.role == "primary" and not f.weak]
    weak = [f for f in failed if f.role == "primary" and f.weak]
    return strong, weak


def decide(incident: Incident, rules: RuleSet | None = None) -> Verdict:
    """The root cause of an incident (pure; see the module docstring)."""
    ruleset = rules or DEFAULT_RULES
    findings = [assess(m, ruleset) for m in incident.members]
    echoes = _echoes_in_words(findings)
    if echoes is findings:
        return _decide(incident, ruleset, findings)
    # Words no rule knows may say who is an echo, never make a verdict surer than the rules alone would: the verdict
    # says no more than the one decided without them.
    return _decide(incident, ruleset, echoes, ceiling=_decide(incident, ruleset, findings).confidence)


def _decide(incident: Incident, ruleset: RuleSet, findings: list[Finding], ceiling: float = 1.0) -> Verdict:
    failed = [f for f in findings if f.failed]
    stalled = _hang_evidence(findings) if not failed else None
    if not failed and (stalled is None or not stalled.stuck_pods):
        clean = sum(1 for f in findings if f.role == "clean")
        pending = len(findings) - clean
        if findings and pending == 0 and len(findings) >= incident.world_size:
            summary = f"No failure: all {clean} member(s) exited 0."
        else:
            summary = f"No failure observed yet ({clean} exited 0, {pending} without a failure so far)."
        if stalled is not None:  # the captures of a stall name no pod (all in, or a rank nobody places)
            summary += f"\nStalled: {hang_line(stalled)}."
        return Verdict(
            pod=None,
            category=None,
            retryable=None,
            summary=summary,
            confidence=1.0 if not pending else CONF_NO_FAILURE_PENDING,
            evidence=(*tuple(e for f in findings for e in f.evidence)[:20], *capture_notes(incident.members)),
            hang=stalled,
        )

    named = _named(findings, failed)

    timeouts = [f for f in failed if f.secondary == "timeout"]
    stops = [f.time - f.timeout_s for f in timeouts if f.time is not None and f.timeout_s is not None]
    if stops:  # a lost node stopped when its peers started waiting for it, not when it was noticed
        stop, spread = min(stops), 1.0
        findings = [
            f if f.category != "node_lost" or (f.time is not None and f.time < stop) else _with_time(f, stop, spread)
            for f in findings
        ]
        failed = [f for f in findings if f.failed]

    missing_ranks, missing_pods = missing_members(incident)
    strong, weak = _own_failures(failed)
    # An MPI launcher's report of a process's death, in the log of a member that failed as an echo or only exited
    # without words of its own (Hydra's banner is no echo's words: its carrier reads as a bare exit).
    reports = [f for f in failed if f.report is not None and (f.role == "secondary" or _only_exited(f))]
    root: _Root | None = None
    if strong:
        # Every member that is not an own failure failed as a known echo (none silent, none still pending).
        root = _choose_primary(strong + weak, named, _others_echo(findings))
    elif timeouts and any(f.source != "termination" for f in weak):
        # An error of its own (e.g. an NCCL network error) among members that waited: it, not a hang.
        alone = _others_echo(findings) and len(weak) == 1  # nobody else failed on their own, not even by exit code
        root = _choose_primary([f for f in weak if f.source != "termination"], named, alone)
    elif (
        reports
        and not any(f.source != "termination" for f in weak)
        # A member that exited without words may be the process the report names — unless it carries the report.
        and (reported := _choose_reported(reports, findings, placed_only=any(f.report is None for f in weak)))
        is not None
    ):
        # No member failed in words of its own, and an MPI launcher reports a process's death: that process's own
        # failure, not a hang among its peers that waited for it.
        root = reported
    elif timeouts and (spoken := [f for f in weak if _exited_in_words_of_its_own(f)]):
        # A member that exited while its peers waited, in words no rule knows but that are a failure's of its own
        # (not a victim's, not a hang's): a process that died, the classic start of a cascade of timeouts; a rank
        # that hung stays silent, or its words are a stuck collective's.
        root = _choose_primary(spoken, named, _others_echo(findings) and len(weak) == 1)
    elif timeouts:
        # A hung rank may hide in a pod whose other ranks timed out: now read those logs in full.
        findings = [
            assess(f.member, ruleset, full_log=True) if f.secondary == "timeout" and log_text(f.member) else f
            for f in findings
        ]
        timeouts = [f for f in findings if f.secondary == "timeout"]
        if timeouts:
            named = _named(findings, [f for f in findings if f.failed])  # the full logs say who hosts which rank
            # A member that never reported is where a hang is looked for first: it stands with the silent ones.
            ghosts = _never_reported(incident, missing_pods, missing_ranks)
            root = _choose_hang([*findings, *ghosts], timeouts, named)
        else:  # read in full, every log that timed out shows a failure of the pod's own (found by fuzzing)
            failed = [f for f in findings if f.failed]
            strong, weak = _own_failures(failed)
            if strong:
                root = _choose_primary(strong + weak, named)
    if root is None and weak:
        # Only weak own failures: one that says something of its own (an NCCL system error, a stuck watchdog)
        # before a bare exit code, which any member that died of anything shows.
        alone = _others_echo(findings) and len(weak) == 1
        root = _choose_primary([f for f in weak if f.source != "termination"] or weak, named, alone)
    if root is None and failed:
        root = _choose_echo(failed, findings, named)
    hang = stalled if not failed else (_hang_evidence(findings) if root is None or not strong else None)
    root, hang = _decided_by_captures(hang, root, findings, incident)
    root = _category_in_words(root)

    r = root.finding
    if stops and r.role == "primary" and r.time is not None and r.time > min(stops) + TIE_SECONDS:
        root = dataclasses.replace(
            root,
            evidence=(
                *root.evidence,
                f"its peers started waiting for it around {_fmt_time(min(stops))}, before it wrote its error: "
                "it stopped taking part first (e.g. a slow exception handler), its victims only wrote first",
            ),
        )
    root_ips = frozenset({r.member.pod_ip} if r.member.pod_ip else set())
    secondary = tuple(
        Secondary(f.member.pod, _secondary_reason(f, r, root_ips))
        for f in findings
        if f.failed and f.member.pod != r.member.pod
    )
    evidence = tuple(
        dict.fromkeys([*r.evidence, *root.evidence, *(e for f in failed if f is not r for e in f.evidence[:1])])
    )[:40]
    evidence = (*evidence, *capture_notes(incident.members))[:45]  # a refused dump, a capture cut off: said
    exc_type = ""
    if r.role == "primary":
        exc_type = r.exception_type or (exception_type_of(r.text) if r.source in ("error file", "log") else "")
    missing = max(incident.world_size - len(incident.members), 0)
    confidence = min(
        ceiling, root.confidence if missing <= 0 else max(CONF_MIN, root.confidence - CONF_MISSING_PENALTY)
    )
    if confidence < LOW_CONFIDENCE and root.runner_up is None:
        root = dataclasses.replace(root, runner_up=_next_suspect(findings, r, named))
    return Verdict(
        pod=r.member.pod,
        category=root.category,
        retryable=root.retryable,
        summary=_summary(root, confidence, _missing_line(missing, missing_ranks, missing_pods, r.member.pod)),
        rank=r.member.rank,
        node=r.member.node,
        exception_type=exc_type,
        message=excerpt(r.text),
        evidence=evidence,
        secondary=secondary,
        confidence=round(confidence, 2),
        rule=root.rule_id,
        decided_by=root.decided_by,
        source=r.source,
        global_rank=hang.stuck_ranks[0] if hang is not None and hang.stuck_ranks else r.global_rank,
        failed_at=round(r.time, 3) if r.time is not None else None,
        members_missing=missing,
        missing_ranks=missing_ranks,
        missing_pods=missing_pods,
        runner_up_pod=root.runner_up.member.pod if root.runner_up is not None else None,
        runner_up_category=root.runner_up.category if root.runner_up is not None else None,
        hang=hang,
    )


def _next_suspect(findings: Sequence[Finding], root: Finding, named: Counter[str]) -> Finding | None:
    """The runner-up of an uncertain verdict whose decision step named none: another member's own failure first,
    then one that has not reported, then the echo its peers name most, else the earliest echo."""
    order = {"primary": 0, "unknown": 1, "secondary": 2}
    others = [f for f in findings if f.member.pod != root.member.pod and f.role in order]
    if not others:
        return None
    return min(
        others,
        key=lambda f: (order[f.role], -named[f.member.pod], *_waited_first(f)),
    )


def _behind_in_sequence(timeouts: Sequence[Finding]) -> str | None:
    """The one pod whose watchdog timed out in a lower-numbered collective than every other's, when all of them
    report one of the same process group (numbers of different groups do not compare); else None."""
    seen = [(watchdog_position(f.text), f.member.pod) for f in timeouts]
    if len(seen) < 2 or any(pos is None for pos, _ in seen) or len({pos[0] for pos, _ in seen if pos}) != 1:
        return None
    lowest = min(pos[1] for pos, _ in seen if pos)
    pods = {pod for pos, pod in seen if pos and pos[1] == lowest}
    return pods.pop() if len(pods) == 1 and len({pod for _, pod in seen}) > 1 else None


def _named(findings: Sequence[Finding], failed: Sequence[Finding]) -> Counter[str]:
    """How many victims name each pod as the peer they lost or waited for: by its address, its host name (a pod's
    host name is its name), or a global rank it hosts. Each victim counts once per pod it names; itself never."""
    hosts = _Hosts.of(findings)
    by_rank = _rank_owners(findings)
    named: Counter[str] = Counter()
    for f in failed:
        if not (f.named_ips or f.named_hosts or f.named_ranks):
            continue
        pods = {hosts.by_ip[ip].member.pod if ip in hosts.by_ip else None for ip in f.named_ips}
        for host in f.named_hosts:
            found = hosts.find(host)
            pods.add(found.member.pod if found is not None else None)
        pods.update(by_rank.get(rank) for rank in f.named_ranks)
        for pod in pods:
            if pod is not None and pod != f.member.pod:
                named[pod] += 1
    return named


@dataclass(frozen=True)
class _Hosts:
    """The members a host string can name: by its pod's address, its pod's name (a pod's host name is its name, also
    before the first dot of a qualified one), or the node it alone runs on."""

    by_ip: dict[str, Finding]
    by_name: dict[str, Finding]
    by_node: dict[str, Finding]

    @classmethod
    def of(cls, findings: Sequence[Finding]) -> _Hosts:
        pods_on: Counter[str] = Counter(f.member.node for f in findings if f.member.node)
        return cls(
            {f.member.pod_ip: f for f in findings if f.member.pod_ip},
            {f.member.pod: f for f in findings},
            {f.member.node: f for f in findings if f.member.node and pods_on[f.member.node] == 1},
        )

    def find(self, host: str) -> Finding | None:
        """The member `host` names, or None."""
        return (
            self.by_ip.get(host)
            or self.by_name.get(host)
            or self.by_name.get(host.split(".", 1)[0])
            or self.by_node.get(host)
        )


def _rank_owners(findings: Sequence[Finding], assume_node_ranks: bool = True) -> dict[int, str]:
    """Global rank -> the pod that hosts it, from what each pod's own log shows ([rank3]:, [Rank 3], torch's
    summary). A rank claimed by two pods is nobody's. With no claim for a rank, one rank per pod is assumed only
    when every claim so far agrees with the pods' node ranks (rank == node rank), and `assume_node_ranks`."""
    owners: dict[int, str] = {}
    contested: set[int] = set()
    one_per_pod = True
    by_node_rank: dict[int, str] = {}
    for f in findings:
        if f.member.rank is not None:
            by_node_rank.setdefault(f.member.rank, f.member.pod)
        for rank in f.own_ranks:
            if owners.setdefault(rank, f.member.pod) != f.member.pod:
                contested.add(rank)
            one_per_pod = one_per_pod and rank == f.member.rank
    for rank in contested:
        del owners[rank]
    if one_per_pod and owners and assume_node_ranks:
        for rank, pod in by_node_rank.items():
            owners.setdefault(rank, pod)
    return owners


_NAME_INDEX = re.compile(r"^(.+)-(\d{1,6})$")


def missing_members(incident: Incident) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(node ranks, pod names) of the members the job expects that have not reported.

    Ranks are named when every present member has a distinct node rank below the world size. Pod names are
    derived only when every present pod's name follows one pattern of its rank: PyTorchJob's `<job>-master-0` /
    `<job>-worker-<i>` (node rank i + 1 when there is a master, i without), or `<name>-<rank>`; else ().
    """
    present = [m.rank for m in incident.members]
    if (
        not present
        or any(r is None for r in present)
        or len(set(present)) != len(present)
        or any(not 0 <= r < incident.world_size for r in present if r is not None)
    ):
        return (), ()
    ranks = tuple(sorted(set(range(incident.world_size)) - {r for r in present if r is not None}))
    if not ranks:
        return (), ()
    return ranks, _names_for(ranks, incident.members)


def _names_for(ranks: Sequence[int], members: Sequence[Member]) -> tuple[str, ...]:
    prefixes: set[str] = set()
    offsets: set[int] = set()  # node rank - index of a worker: 1 when rank 0 is the master
    typed = True
    for m in members:
        match = _NAME_INDEX.match(m.pod)
        if match is None or m.rank is None:
            return ()
        head, index = match.group(1), int(match.group(2))
        kind = m.replica_type.lower()
        if typed and kind in ("master", "worker") and head.endswith(f"-{kind}"):
            prefixes.add(head[: -len(kind) - 1])
            if kind == "master" and (index, m.rank) != (0, 0):
                return ()
            if kind == "worker":
                offsets.add(m.rank - index)
        else:
            typed = False
            prefixes.add(head)
            offsets.add(m.rank - index)
    if len(prefixes) != 1 or len(offsets) > 1:
        return ()
    prefix, offset = prefixes.pop(), (offsets.pop() if offsets else 1)
    if not typed:
        return tuple(f"{prefix}-{r - offset}" for r in ranks) if offset == 0 else ()
    if offset not in (0, 1):
        return ()
    return tuple(f"{prefix}-master-0" if offset == 1 and r == 0 else f"{prefix}-worker-{r - offset}" for r in ranks)


def _with_time(f: Finding, t: float, spread: float) -> Finding:
    note = f"{f.member.pod}: stopped around {_fmt_time(t)} (when its peers started waiting)"
    return dataclasses.replace(f, time=t, spread=spread, evidence=(*f.evidence, note))
