"""Reading a pod's log tail: what torch and its launcher printed about the failure, on the pod's clock.

A log tail says more than an error file when the error file is missing or an echo: torch's agent prints
a failure summary ("Root Cause (first observed failure)": global rank, exit code or signal, whether an
error file exists), the workers' tracebacks carry `[rankN]:` prefixes, and the agent's glog lines
(`E1121 14:00:46.570000 <pid> ... failed (exitcode: ...)`) give sub-second failure times. `parse_log`
turns a tail into `LogFacts` for the engine (`podmortem.core.engine`); the rules (`podmortem.core.rules`)
classify the lines. Pure: text in, facts out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from podmortem.core.errorfile import exception_type_of
from podmortem.core.model import Member
from podmortem.core.rules import DEFAULT_RULES, Rule, RuleSet

_GLOG = re.compile(r"^([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?\s+\d+\s+\S+\]\s?(.*)$")
_RANK_LINE = re.compile(r"^\[rank(\d+)\]:\s?(.*)$")
_RANK_MENTION = re.compile(r"\[rank(\d+)\]|\brank (\d+):|\[Rank (\d+)\]")
_SUMMARY_FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
_SUMMARY_ENTRY = re.compile(r"^\[\d+\]:$")
_SUMMARY_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)_(\d\d):(\d\d):(\d\d)")
_LEADING_INT = re.compile(r"^\s*(-?\d+)")
# A traceback's frame line ('  File "x.py", line 3, in f'): the exception line comes at most a few lines after the
# last frame (its source line, and Python 3.11's caret line, between), so a name alone there is the exception with no
# message.
_FRAME = re.compile(r'^\s*File "[^"\n]{1,500}", line \d+')
FRAME_TO_EXCEPTION = 3
# A frame's source line that raises an exception by its class: 'raise RuntimeError("... twice!")' (the arguments as
# written, up to the call's closing parenthesis at the end of the line, or nothing for a class raised bare).
_RAISE = re.compile(r"^\s*raise ((?:[A-Za-z_]\w*\.)*[A-Z]\w*)(?:\((.*?)\)?)?\s*(?:from \w+\s*)?$")
# An exception's class as str(type(e)) prints it, the way a framework logs one it catches and re-raises: OneFlow's
# nn.Graph logs "build graph got error: " + sys_exc_error_msg(), which is str(exc_info[0]) + " " + str(exc_info[1])
# (python/oneflow/nn/graph/util.py) — "<class 'oneflow._oneflow_internal.exception.CheckFailedException'> ...".
# Python 2 prints a built-in class as a "type" of its module "exceptions" ("<type 'exceptions.UnboundLocalError'>": a
# type's repr is "<%s '%s.%s'>" with "type" for a built-in one, "class" for one defined in Python, as Jython's PyType
# copies CPython 2's): the same class, named as Python 3 names it.
_CLASS_REPR = re.compile(r"<(?:class|type) '(?:exceptions\.)?((?:[A-Za-z_]\w*\.)*[A-Z]\w*)'>")
# ...read as the process's failure where the words before it report an error (TensorFlow's Coordinator: "Error reported
# to Coordinator: %s, %s" with type(ex), tensorflow/python/training/coordinator.py), not where a class is only named
# ("retrying after <class 'ConnectionResetError'>").
_REPORTS_ERROR = re.compile(r"(?i)error|fail|exception")
# torchelastic's error handler printing an error file as JSON: its "message" field is the error file's message, the
# exception line of the process that failed ("RuntimeError: Permission denied"), as a JSON string.
_ERROR_JSON_MESSAGE = re.compile(r'^\s*"message": ("(?:[^"\\]|\\.)*")\s*,?\s*$')
TIMEOUT_MS = re.compile(r"[Tt]imed out waiting (\d+) ?ms|Timeout\(ms\)=(\d+)|[Tt]imed out after (\d+(?:\.\d+)?) ?s")
# A peer's address in gloo/NCCL messages: "[10.0.0.7]:29500", "[2001:db8::7]:29500". At most 45
# characters (the longest IPv6 text form) and possessive, so linear on any input: the unbounded form
# took 9 s on one 60 KB line of "[a:a:a:..." (the engine must survive hostile logs).
PEER_ADDR = re.compile(r"\[([0-9a-fA-F.:]{2,45}+)\]:\d")
# A victim naming the culprit, in its own words: the rank it waited for (torch's monitored barrier "from rank 0" /
# "check rank 0 logs", ProcessGroupNCCL's dump signal "from  rank 3" (two spaces), rank 0's "Rank 3 failed to pass
# monitoredBarrier", mpirun's "process rank 1 with PID", the c10d store's "crash on rank 0", Horovod's stalled tensor
# "[missing ranks: 2]"), or the peer's host
# (NCCL's "Call to recv from 10.0.0.7<4242>" and "Connection closed by remote peer host<port>", MPI's "on node
# worker-1", MPICH's "RANK 1 PID 77 RUNNING AT worker-1"). Bounded repeats: linear on any input.
NAMED_RANK = re.compile(
    r"\b(?:from|check|on) {1,2}rank (\d{1,6})\b|\bRank (\d{1,6}) failed to pass monitoredBarrier"
    r"|\bprocess rank (\d{1,6}) with PID|\bRANK (\d{1,6}) PID \d{1,10} RUNNING AT\b"
    r"|\[missing ranks: (\d{1,6})[\],]"
)
NAMED_HOST = re.compile(
    r"\bremote peer \[?([\w.-]{1,253}?)(?:<\d{1,5}>|\]|\s|$)|\b(?:on node|RUNNING AT) \[?([\w.-]{1,253})"
    r"|\b(?:from|to) ([\w.-]{1,253}?)<\d{1,5}>"
)
# Launchers' and frameworks' wrappers around a worker's failure: never the cause itself.
_AGENT_WRAPPERS = (
    "ChildFailedError",
    "CalledProcessError",
    "RayTaskError",
    "RayActorError",
    "ActorDiedError",
    "WorkerCrashedError",
    "TrainingFailedError",
    # Spark's executor and PySpark around the exception a task's Python worker raised (PythonRunner): the inner
    # exception, when the tail holds it, is the one that names the failure
    "PythonException",
)
# Line prefixes launchers add: torchrun --tee ([default0]:), mpirun ([1,0]<stderr>:), horovodrun's own runners
# ([2]<stderr>:, after time.asctime()'s time with --prefix-output-with-timestamp: horovod/runner/common/util/
# safe_shell_exec.py's prefix_connection), srun --label (10: ),
# Ray ((RayTrainWorker pid=7315, ip=...); a task SkyPilot starts is named by its node and rank, "(head, rank=0,
# pid=4773)", "(worker1, rank=1, pid=88, ip=...)": sky/backends/task_codegen.py, RayCodeGen._add_ray_task), pdsh
# under DeepSpeed's multi-node runner (the host: "gpu004: ", "10.0.0.7: " — lower case with a digit, so that no
# exception type is taken for a host), TorchX
# ("trainer/0 [1]:"), Determined ("[2024-02-27T21:35:32.106313Z] fa88a9df || "), a bare stream tag ("[stderr]"). The
# rank prefix [rankN]: is read separately (it names the rank).
_LAUNCHER_PREFIX = re.compile(
    r"^(?:\[default\d+\]:"
    r"|(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?\[\d+(?:,\d+)?\]<std(?:out|err)>:"
    r"|\[std(?:out|err)\]|\((?:[\w.-]+(?:, rank=\d+,)? )?pid=\d+[^)]{0,80}\)|\d{1,5}:"
    r"|(?=[a-z0-9.-]{0,62}\d)[a-z0-9][a-z0-9.-]{0,62}: (?=\S)|[\w-]{1,40}/\d{1,5} \[\d{1,5}\]:"
    r"|\[\d{4}-\d\d-\d\dT[\d:.]{1,20}Z?\] [0-9a-f]{6,16} \|\| )\s?"
)
# The agent's own word on a worker's end, in its glog line or its failure summary: "exitcode: -9".
# DeepSpeed's launcher says "exits with return code = -9", a subprocess launcher (accelerate, the old
# torch.distributed.launch) "returned non-zero exit status -9" or "died with <Signals.SIGKILL: 9>",
# torch.multiprocessing.spawn "terminated with signal SIGKILL" (and, for a Windows process, "process 0 terminated with
# exit code 3221226505": the NTSTATUS of its crash, read as that signal below; a small code there is the program's
# own exit, the weak torch.spawn-exited rule's), srun "task 0: Exited with exit code 137" (a shell's
# 128 + N), Lightning's launcher "Child process with PID 23026 terminated with code 1" (negative: a signal),
# torchelastic's warning for a worker that left no error file "Child process 48529 (local_rank 0) FAILED (exitcode 1)",
# paddle.distributed.launch's summary of a worker ("Container rank 0 status failed cmd [...] code -9 log ..."; negative:
# a signal, Popen's return code), composer's launcher ("Rank 3 crashed with exit code -9.", "Global rank 3 (PID 77)
# exited with code 1"): the same fact in other words. paddle's older launcher (launch_utils) and MindSpore's msrun name
# no code: "ABORT!!! Out of all 4 trainers, the trainer process with rank=[3] was aborted", "There's worker exits with
# exception, kill all other workers" are printed when a worker they started on this node returned non-zero — read as
# exit 1 (paddle's launcher then exits 1 itself), the same weak word as a bare exit code. So is torchelastic's failure
# summary cut off right after its "Root Cause (first observed failure):" heading (the tail ends there): a worker of
# this pod failed, its exit code or signal not in the tail.
_AGENT_EXIT = re.compile(
    r"exitcode\s*:\s*(-?\d{1,3})\b|exits with return code = (-?\d{1,3})\b|returned non-zero exit status (-?\d{1,10})\b"
    r"|died with <Signals\.SIG[A-Z0-9]+: (\d{1,2})>|terminated with signal (SIG[A-Z0-9]+)"
    r"|: Exited with exit code (\d{1,3})\b|Child process with PID \d{1,10} terminated with code (-?\d{1,3})\b"
    r"|\) FAILED \(exitcode (-?\d{1,3})\)|status failed cmd \[[^\]\n]{0,2000}\] code (-?\d{1,3})\b"
    r"|\bRank \d{1,6} crashed with exit code (-?\d{1,3})\b"
    r"|\bGlobal rank \d{1,6} \(PID \d{1,10}\) exited with code (-?\d{1,3})\b"
    r"|\bprocess \d{1,6} terminated with exit code (-?\d{10})\b"
    r"|\b(trainers, the trainer process with rank=\[[\d, ]{1,200}\] was aborted"
    r"|There's worker exits with exception, kill all other workers"
    r"|Root Cause \(first observed failure\):\s{0,4}(?:\[\d{1,6}\]:\s{0,4})?\Z)"
)
# A rank's collective timeout as ProcessGroupNCCL's watchdog reports it: the process group when it is named (newer
# torch: "[PG ID 0 PG GUID 0(default_pg) Rank 3]"), the rank, the collective's sequence number and its kind. Ranks of
# one pod that time out in *different* collectives (another SeqNum or OpType) are out of step: the desync is visible
# here, and the rank that fell behind is on this pod.
_WATCHDOG_WORK = re.compile(
    r"\[(?:(PG [^\]\n]{1,80}) )?Rank (\d{1,6})\] Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(\d{1,12}), OpType=(\w{1,40})"
)
# The launcher saying the pod was told to stop from outside: torchrun's agent ("Received 15 death signal"), a
# worker's "got signal: 15", DeepSpeed's signal handler ("Killing subprocess"), absl's "SIGTERM received", Slurm's
# "CANCELLED AT". Not a launcher stopping the pod's other workers after one of its own failed (torchrun's "closing
# signal SIGTERM", mp.spawn's "Terminating process ... via signal", srun's "task N: Terminated"): those follow a
# failure of the pod's own.
_TOLD_TO_STOP = re.compile(
    r"death signal|got signal: ?(?:15|SIGTERM)\b|SIGTERM received|Killing subprocess \d|CANCELLED AT"
)
# An MPI launcher's report of one process's death, printed by the launcher (mpirun, mpiexec, Hydra) on behalf of the
# process, which often prints nothing itself (SIGKILL, SIGSEGV): Open MPI's "mpirun noticed that process rank 10 with
# PID 77 on node worker-1 exited on signal 9 (Killed)", its "detected that one or more processes exited with non-zero
# status ... Process name: [[29973,1],0] Exit code: 1", MPICH's and Intel MPI's Hydra banner "BAD TERMINATION OF ONE
# OF YOUR APPLICATION PROCESSES / RANK 0 PID 1234 RUNNING AT node1 / EXIT CODE: 9" (Hydra's exit code of a process
# killed by a signal is the signal's number: "EXIT STRING: Killed (signal 9)"; "KILLED BY SIGNAL: 9"). Bounded
# repeats: linear on any input.
_OMPI_NOTICED = re.compile(
    r"noticed that process rank (\d{1,7}) with PID \S{1,20} on node ([\w.-]{1,253}) exited(?:\s{1,20}on\s{1,20}signal"
    r" (\d{1,2}))?"
)
# ORTE names the process "[[29973,1],0]" (its job family and job, then its rank); PRRTE (Open MPI 5's prterun) by its
# job's namespace, then its rank: "[prterun-node1-4711@1,0]" (src/util/name_fns.c, prte_util_print_name_args), and
# breaks the line after "status," (schizo/prte/help-prun.txt, [prun:non-zero-exit]).
_OMPI_FIRST = re.compile(
    r"processes exited with non-zero status,\s{1,20}thus causing[\s\S]{0,300}?Process name:\s{0,20}"
    r"\[(?:\[\d{1,10},\d{1,10}\]|[\w.@-]{1,200}),(\d{1,7})\]\s{0,20}Exit code:\s{0,20}(\d{1,3})"
)
# Horovod's launcher (horovodrun over gloo, elastic or not) in the same words, naming the process by its host and slot
# ("Process name: worker-1[0]"); a process it ran through a shell and that was killed reports 128 + the signal.
_HOROVOD_FIRST = re.compile(
    r"processes exited with non-zero status, thus causing[\s\S]{0,300}?Process name:\s{0,20}([\w.-]{1,253})\[\d{1,7}\]"
    r"\s{0,20}Exit code:\s{0,20}(-?\d{1,3})\b"
)
# Horovod's gloo launcher as each process it ran ends non-zero, before the summary above: "Process 1 exit with status
# code 137." (gloo_run.py: the process's rank, and its status, 128 + the signal for a process its shell saw killed).
_HOROVOD_EXIT = re.compile(r"\bProcess (\d{1,7}) exit with status code (-?\d{1,3})\.")
_OMPI_NONZERO = re.compile(r"Primary job\s{1,20}terminated normally, but 1 process returned")
_HYDRA_BAD = re.compile(
    r"BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES[\s=]{0,200}(?:RANK (\d{1,7}) )?PID \d{1,10} RUNNING AT "
    r"([\w.-]{1,253})(?:[\s=]{0,200}(?:EXIT CODE|KILLED BY SIGNAL): (\d{1,3}))?"
)
# Open MPI's launcher (ORTE's, and PRRTE's in Open MPI 5) losing the daemon it started on another node, which runs that
# node's processes: "ORTE has lost communication with a remote daemon. / HNP daemon : [[1,0],0] on node launcher /
# Remote daemon: [[1,0],2] on node worker-1 / This is usually due to either a failure of the TCP network connection to
# the node, or possibly an internal failure of the daemon itself". The remote node is named when the banner is whole.
_ORTE_LOST = re.compile(
    r"(?:ORTE|PRTE) has lost communication with a remote daemon\.?(?:[^\n]{0,300}\n){0,4}?[^\n]{0,40}Remote daemon"
    r"\s{0,20}:\s{0,20}\S{1,80} on node ([\w.-]{1,253})|(?:ORTE|PRTE) has lost communication with a remote daemon"
)
# PaddlePaddle's parameter server, its heartbeat monitors (heart_beat_monitor.cc) finding a worker's or a trainer's
# updates stale: "the latest update of worker 0 is 900 secs ago, we doubt the the worker is not alive" (the trainer's
# monitor prints a float). The member that stopped reporting, by its id (its rank), as a lost node's daemon is.
_PADDLE_STALE = re.compile(r"the latest update of (?:worker|trainer) (\d{1,7}) is \d{1,20}(?:\.\d{1,9})? secs ago")
_HYDRA_EXIT_STRING = re.compile(r"TERMINATED WITH THE EXIT STRING: [^\n(]{0,80}\(signal (\d{1,2})\)")
# Exit codes Hydra gives a process killed by a signal: the signal's number.
_HYDRA_SIGNALS = frozenset({4, 6, 7, 8, 9, 11})


@dataclass(frozen=True)
class LauncherReport:
    """An MPI launcher's word that one process died (or a monitor's that a member stopped reporting): its rank and host
    when named, and how it ended (a signal, else an exit code; neither when the report is cut off before it)."""

    text: str
    rank: int | None = None
    host: str = ""
    signal: int | None = None
    exit_code: int | None = None
    # the launcher lost the daemon of the process's node (Open MPI's ORTE/PRRTE), or a parameter server its heartbeats:
    # the member went away, not a death the process reported
    node_lost: bool = False
    # a non-zero exit code the report does not give (Open MPI's "1 process returned a non-zero exit code")
    nonzero: bool = False


def launcher_report(text: str) -> LauncherReport | None:
    """The MPI launcher's report of a process's death in `text` (see _OMPI_NOTICED), or None."""
    if (
        "rank" not in text
        and "RANK" not in text
        and "Primary job" not in text
        and "RUNNING AT" not in text
        and "Process name" not in text
        and "exit with status code" not in text
    ):
        return _lost_node(text)
    if m := _OMPI_NOTICED.search(text):
        died = int(m.group(3)) if m.group(3) else None
        return LauncherReport(_line_at(text, m.start()), int(m.group(1)), m.group(2), died)
    if m := _OMPI_FIRST.search(text):
        return LauncherReport(_line_at(text, m.start()), int(m.group(1)), exit_code=int(m.group(2)))
    if m := _HOROVOD_FIRST.search(text):
        return _horovod_status(_line_at(text, m.start()), None, m.group(1), int(m.group(2)))
    if m := _HOROVOD_EXIT.search(text):
        return _horovod_status(_line_at(text, m.start()), int(m.group(1)), "", int(m.group(2)))
    if m := _HYDRA_BAD.search(text):
        rank = int(m.group(1)) if m.group(1) else None
        code = int(m.group(3)) if m.group(3) else None
        sig: int | None = None
        if s := _HYDRA_EXIT_STRING.search(text):
            sig, code = int(s.group(1)), None
        elif code is not None and (code in _HYDRA_SIGNALS or 128 < code < 160):
            sig, code = (code - 128 if code > 128 else code), None
        return LauncherReport(_line_at(text, m.start()), rank, m.group(2), sig, code)
    if m := _OMPI_NONZERO.search(text):
        return LauncherReport(_line_at(text, m.start()), nonzero=True)
    return _lost_node(text)


def _horovod_status(line: str, rank: int | None, host: str, status: int) -> LauncherReport:
    """Horovod's report of a process's status: a signal's when the shell saw it killed (128 + the signal) or Python's
    subprocess did (the signal, negated), else its exit code."""
    if status < 0 or 128 < status < 160:
        return LauncherReport(line, rank, host, signal=-status if status < 0 else status - 128)
    return LauncherReport(line, rank, host, exit_code=status)


def _lost_node(text: str) -> LauncherReport | None:
    """Open MPI's launcher losing a node's daemon (see _ORTE_LOST), or PaddlePaddle's parameter server losing a worker's
    heartbeats (_PADDLE_STALE): after a process's own death report, which says more."""
    if m := _ORTE_LOST.search(text):
        return LauncherReport(_line_at(text, m.start(), m.end()), host=m.group(1) or "", node_lost=True)
    if m := _PADDLE_STALE.search(text):
        return LauncherReport(_line_at(text, m.start()), rank=int(m.group(1)), node_lost=True)
    return None


# The process a report names, by its PID and host (Open MPI's "with PID 77 on node w-1", Hydra's "PID 77 RUNNING AT
# w-1"), and Open MPI's signal handler in that process announcing its own death ("[w-1:77] *** Process received
# signal ***"): the report and the banner, in one log, are one process's crash.
_REPORTED_PID = re.compile(r"\bPID (\d{1,10}) (?:on node|RUNNING AT) ([\w.-]{1,253})")


def _reports_own_crash(text: str, report: LauncherReport | None) -> bool:
    """The launcher's report in `text` names the process whose own crash banner `text` shows: its death is this log's
    own, not a peer's echo."""
    m = _REPORTED_PID.search(report.text) if report is not None else None
    return m is not None and f"[{m.group(2)}:{m.group(1)}] *** Process received signal" in text


def _line_at(text: str, at: int, end: int | None = None) -> str:
    """The line of `text` holding offset `at` (through the line holding `end`, for a match that spans lines)."""
    a = text.rfind("\n", 0, at) + 1
    b = text.find("\n", at if end is None else end)
    return text[a : b if b >= 0 else len(text)].strip()


# A Windows process that crashed exits with the exception's NTSTATUS (Microsoft's ntstatus.h; Python's subprocess shows
# it unsigned, "returned non-zero exit status 3221225477"): the POSIX signal of the same fault.
_NTSTATUS_SIGNALS = {
    0xC0000005: 11,  # STATUS_ACCESS_VIOLATION
    0xC00000FD: 11,  # STATUS_STACK_OVERFLOW
    0xC000001D: 4,  # STATUS_ILLEGAL_INSTRUCTION
    0xC0000094: 8,  # STATUS_INTEGER_DIVIDE_BY_ZERO
    0xC0000409: 6,  # STATUS_STACK_BUFFER_OVERRUN (a fail-fast abort)
    0xC0000374: 6,  # STATUS_HEAP_CORRUPTION
}
SIGNAL_NAMES = {
    1: "SIGHUP",
    2: "SIGINT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    15: "SIGTERM",
}
_SIGNAL_NUMBERS = {name: number for number, name in SIGNAL_NAMES.items()}


@dataclass(frozen=True)
class LogFacts:
    """What a pod's log tail says, with times on the pod's clock (None when not in the tail)."""

    first_failure_at: float | None = None  # glog "failed (exitcode: N) local_rank: ..." — sub-second
    teardown_at: float | None = None  # glog "Received 15 death signal" — sub-second
    summary_time: float | None = None  # "Root Cause (first observed failure)" time (whole second)
    summary_rank: int | None = None  # global rank of the first failure
    summary_exitcode: int | None = None  # negative: died of that signal
    summary_has_error_file: bool = False
    summary_exception: str = ""  # the exception line of the summary's traceback
    exceptions: dict[int, str] = field(default_factory=dict)  # global rank -> its last exception line
    exception_order: tuple[int, ...] = ()  # ranks in the order their exceptions appear
    loose_exceptions: tuple[str, ...] = ()  # exception lines with no rank prefix (not the agent's wrapper)
    # The tail ends at a traceback's `raise` statement, its exception line cut off: "Type: arguments as written".
    raised_at_cut: str = ""
    # Exception lines read from Python 2's form of a built-in class ("<type 'exceptions.ValueError'> ...").
    py2_type_form: tuple[str, ...] = ()
    ranks_seen: frozenset[int] = frozenset()
    log_rule: tuple[Rule, str] | None = None  # first line matched by a `log` rule
    agent_exitcode: int | None = None  # the first worker exit code the agent logged (negative: a signal)
    # The summary's other failures of this pod's workers ("Failures:"): (global rank, exit code,
    # exception line). torch picks its "first observed failure" by whole-second timestamps and the order
    # it polled its workers, so the worker that raised may be listed here and its victim as the root.
    other_failures: tuple[tuple[int | None, int | None, str], ...] = ()
    # Ranks of this pod that timed out in different collectives: ((rank, SeqNum, OpType), ...) — empty unless
    # at least two of them disagree.
    desync: tuple[tuple[int, int, str], ...] = ()
    # The launcher said the pod was told to stop (_TOLD_TO_STOP) before the first exception line: what it raised
    # after that is the stop's consequence.
    stopped_first: bool = False
    report: LauncherReport | None = None  # an MPI launcher's report of a process's death

    @property
    def silent_ranks(self) -> tuple[int, ...]:
        """Ranks that logged but never raised — only meaningful when a sibling rank did raise."""
        if not self.exceptions:
            return ()
        return tuple(sorted(self.ranks_seen - set(self.exceptions)))


def time_hint(member: Member) -> float | None:
    """Any pod-clock time of this member: glog lines carry no year, this places them."""
    for t in (
        member.error.timestamp if member.error else None,
        member.termination.finished_at if member.termination else None,
        member.termination.started_at if member.termination else None,
        member.error_observed_at,
        member.termination_observed_at,
    ):
        if t is not None:
            return float(t)
    return None


def _glog_time(m: re.Match[str], near: float) -> float | None:
    month, day, hh, mm, ss = (int(m.group(i)) for i in range(2, 7))
    frac = float("0." + m.group(7)) if m.group(7) else 0.0
    try:
        year = datetime.fromtimestamp(near, UTC).year
    except (OverflowError, OSError, ValueError):
        return None
    best: float | None = None
    for y in (year, year - 1, year + 1):  # a tail that crosses New Year
        try:
            t = datetime(y, month, day, hh, mm, ss, tzinfo=UTC).timestamp() + frac
        except ValueError:
            continue
        if best is None or abs(t - near) < abs(best - near):
            best = t
    return best


# An HTTP client's warning that a request failed and will be retried: urllib3's "Retrying (Retry(total=4, ...)) after
# connection broken by ...", huggingface_hub's "'...' thrown while requesting HEAD https://...". It quotes the
# endpoint's or the network's words (a name that does not resolve, a host unreachable) in runs that go on — the hub's
# client falls back to its cache — so it is no failure of the pod; a request that finally fails raises, and the
# exception says so. TensorFlow's and TSL's object store clients say the same of each retry (retrying_utils.cc: "The
# operation failed and will be automatically retried in 1.2 seconds (attempt 1 out of 10), caused by: ..."), and "All
# 10 retry attempts failed" once they give up.
_RETRIED_REQUEST = re.compile(
    r"^[^\n]*?(?:\bRetrying \(Retry\(total=|' thrown while requesting [A-Z]+ |\bwill be automatically retried in )"
    r"[^\n]*\n?",
    re.M,
)


# c10d's debug-level lines ("[c10d - debug]", C10D_DEBUG): what the store and its clients trace as they go, never a
# failure — the store server's "Read callback failed. code:-4095 name:EOF" is a client closing its connection, as every
# client does when its worker exits, whoever failed. c10d reports a failure at its warning and error levels.
_C10D_DEBUG = re.compile(r"^[^\n]*\[c10d - debug\][^\n]*\n?", re.M)


# srun's report of tasks that ended by SIGKILL (src/srun/launch.c, _task_finish: "<hosts>: task(s) <ids>: " and
# strsignal's "Killed"; a cgroup's OOM kill has words of its own there, "Out Of Memory"). A SIGKILL no one explains is
# the host's OOM killer (log.host-oom) — unless the step was stopped before it: slurmstepd's "*** STEP <id> ON <node>
# CANCELLED AT <time> ***" (src/slurmd/slurmstepd/req.c, as it signals the step's processes; "DUE TO TIME LIMIT",
# "PREEMPTION", "NODE FAILURE" after it when those are why) or srun terminating the step after a task's bad exit
# (launch.c, _step_signal: "Terminating StepId=..."). Then the kills are the stop's, and the log is read without them.
_SRUN_KILLED = re.compile(r"\btasks? [\d,\[\]-]{1,200}: Killed\b")
_SRUN_KILLED_LINE = re.compile(r"^[^\n]*" + _SRUN_KILLED.pattern + r"[^\n]*\n?", re.M)
_STEP_STOPPED = re.compile(r"CANCELLED AT \S{1,40}( DUE TO [A-Z ,]{1,80})? \*\*\*|_step_signal: Terminating StepId")


def _log_rule(text: str, rules: RuleSet) -> tuple[Rule, str] | None:
    """The first log rule (rule order is precedence) matching the tail, and the line it matched."""
    if "Retrying (Retry(" in text or "thrown while requesting" in text or "automatically retried in" in text:
        text = _RETRIED_REQUEST.sub("", text)
    if "[c10d - debug]" in text:
        text = _C10D_DEBUG.sub("", text)
    lr = rules.first_log_rule(text)  # one RE2 pass for every rule at once
    hit = lr.search(text) if lr is not None else None
    if lr is None or hit is None:
        return None
    line = _line_at(text, hit.start(), hit.end())
    if lr.category == "host_oom" and _SRUN_KILLED.search(line) and _STEP_STOPPED.search(text, 0, hit.start()):
        # Every task srun saw SIGKILLed was killed after the step was stopped: the step's teardown, read without them.
        return _log_rule(_SRUN_KILLED_LINE.sub("", text), rules)
    if (lr.category == "crash" or (lr.category == "hang" and lr.weak)) and (
        _ABORT.search(line) or _EXIT_ABORT.search(line)
    ):
        carried = _carried_reading(text, rules)
        if carried is not None:
            return carried
    return lr, line


# glog's fatal line (LOG(FATAL), before its "*** Check failure stack trace ***"): its header's date and time to the
# microsecond, after a line's start or a launcher's prefix
_GLOG_FATAL_HEAD = r"(?:^|[\s:>])F\d{4} \d\d:\d\d:\d\d\.\d{6} "

# An abort that carries a message: a C++ exception's what() as std::terminate prints it ("terminate called after
# throwing an instance of 'X'" then "what():  TEXT", Ray's "Unhandled exception: X. what(): TEXT"), glog's and absl's
# "Check failed: TEXT" and fatal (F) lines, and an error line saying the process is aborting (Horovod's store's
# "E ...] HTTP GET request failed too many times, aborting"). What it carries says why the process aborted.
_CARRIED = re.compile(
    r"what\(\):\s+(\S[^\n]*)|Check failed: ([^\n]+)|^(?:\[rank\d+\]:\s?)?F\d{4} [^\]\n]{1,200}\] ([^\n]+)"
    r"|^[^\n]{0,120}\bE[\d ][^\]\n]{0,200}\] ([^\n]*\baborting\b[^\n]*)"
    # TensorFlow's own log format for a fatal line: "2023-05-25 11:10:57.934547: F tensorflow/...cc:103] TEXT"
    r"|^[^\n]{0,40}\d\d:\d\d:\d\d\.\d{1,9}: F [^\]\n]{1,200}\] ([^\n]+)"
    # glog's fatal line behind a launcher's prefix (mpirun's --tag-output "[1,3]<stderr>:", its timestamp before it):
    # the whole glog header (date, time to the microsecond, thread id, file:line) says what the line is
    r"|" + _GLOG_FATAL_HEAD + r" *\d{1,10} [^\]\n]{1,200}\] ([^\n]+)",
    re.M,
)
# An abort a process raises on its way out, once it has failed or been told to stop: TensorFlow's gRPC server, which
# cannot be stopped cleanly, aborting as the process exits (grpc_server_lib.cc: "Stop() status: UNIMPLEMENTED: Clean
# shutdown is not currently implemented"), Python's fatal error on a lock a daemon thread held "at interpreter
# shutdown". It says only that the process was exiting; why it exited is what it printed before.
_EXIT_ABORT = re.compile(r"Clean shutdown is not currently implemented|\bat interpreter shutdown\b")
# A fault of the process's own that is not an abort (a segfault, an illegal instruction, a bus error, a divide): the
# crash is that fault, whatever an exception said before it.
_OWN_FAULT = re.compile(r"SIG(SEGV|ILL|FPE|BUS)\b|Segmentation fault|Illegal instruction|Floating point exception")
ECHOES = ("timeout", "peer", "store", "teardown")
# a glog fatal line anywhere in a tail (_GLOG_FATAL_HEAD)
_GLOG_FATAL = re.compile(_GLOG_FATAL_HEAD, re.M)
# The line a crash rule read is the abort itself (not a fault named in words of its own, as a misaligned address is).
_ABORT = re.compile(r"terminate|what\(\)|Check fail|abort|SIGABRT|signal:? ?6\b|Signal 6\b", re.I)


def _carried_reading(text: str, rules: RuleSet) -> tuple[Rule, str] | None:
    """An abort read by what it carries (see _CARRIED), as a plain message is read: when that is an echo (a store, a
    peer, a timeout, a teardown), the abort is that echo; when it is a failure of a family of its own (an accelerator's
    or the host's memory, a CUDA error), it is that family. An abort on the process's way out (_EXIT_ABORT) is read by
    what the process printed before it. None when it carries nothing the rules read so, or the process faulted besides
    (_OWN_FAULT): then the abort stays the crash the log rules read."""
    if _OWN_FAULT.search(text):
        return None
    out = _EXIT_ABORT.search(text)
    if out is not None:
        # read what the process printed before it began to exit, as the log is read
        before = _log_rule(text[: text.rfind("\n", 0, out.start()) + 1], rules)
        if before is not None and (before[0].secondary in ECHOES or before[0].category not in (None, "crash")):
            return before
    if (
        "what()" not in text
        and "Check failed" not in text
        and "aborting" not in text
        and ": F " not in text
        and _GLOG_FATAL.search(text) is None
    ):
        return None
    for m in _CARRIED.finditer(text):
        said = next(g for g in m.groups() if g is not None).strip()
        r = rules.first_log_rule(said)
        if r is not None and r.category == "crash":  # a crash in words of its own (an assert, a CUDA kernel's fault)
            return None
        if r is None or (r.category == "hang" and r.weak):
            r = rules.classify_message(said, exception_type_of(said))
        if r is None or r.weak or r.generic:
            continue
        if r.secondary in ECHOES or (r.is_primary and r.category not in (None, "crash")):
            return r, _line_at(text, m.start(), m.end())
    return None


def first_log_line(text: str, rules: RuleSet = DEFAULT_RULES) -> str:
    """The line of `text` the first matching log rule names ("" when none does)."""
    found = _log_rule(text, rules)
    return found[1] if found is not None else ""


def _agent_exit(text: str) -> int | None:
    """The first worker exit the launcher logged, as torchrun writes it (negative: died of that signal)."""
    m = _AGENT_EXIT.search(text)
    if m is None:
        return None
    code, ds, sub, died, spawn, srun, lightning, no_file, paddle, composer, composer_global, nt, no_code = m.groups()
    if no_code is not None:  # a worker returned non-zero, its code not said
        return 1
    if died is not None:
        return -int(died)
    if spawn is not None:
        number = _SIGNAL_NUMBERS.get(spawn)
        return -number if number is not None else None
    value = int(code or ds or sub or srun or lightning or no_file or paddle or composer or composer_global or nt)
    if not -256 < value < 256:  # a Windows process's status (NTSTATUS, unsigned or signed 32 bits)
        number = _NTSTATUS_SIGNALS.get(value & 0xFFFFFFFF)
        return -number if number is not None else None
    # A worker run through a shell reports a signal death as 128 + N (137: SIGKILL, 139: SIGSEGV).
    return -(value - 128) if 128 < value < 160 else value


def collective_desync(text: str) -> tuple[tuple[int, int, str], ...]:
    """The ranks' timed-out collectives when this log's ranks timed out in different ones (else ())."""
    if "OpType=" not in text:
        return ()
    works: dict[int, tuple[int, str]] = {}
    for m in _WATCHDOG_WORK.finditer(text):
        works.setdefault(int(m.group(2)), (int(m.group(3)), m.group(4)))
    if len(set(works.values())) < 2:
        return ()
    return tuple(sorted((rank, seq, op) for rank, (seq, op) in works.items()))


def watchdog_position(text: str) -> tuple[str, int] | None:
    """The process group ("" when the line names none) and the sequence number of the first collective this text's
    watchdog reports timed out in; None without such a report. Numbers count one group's collectives, in the order
    every member of the group issues them: they compare only within a group."""
    m = _WATCHDOG_WORK.search(text) if "OpType=" in text else None
    return (m.group(1) or "", int(m.group(3))) if m else None


def several_workers_failed(text: str) -> bool:
    """Torch's failure summary lists more than one failed worker of this pod (a cheap test)."""
    return "Failures:" in text and "<NO_OTHER_FAILURES>" not in text


def _entry(fields: dict[str, list[str]]) -> tuple[int | None, int | None, str]:
    """(global rank, exit code, exception line) of one entry of torch's failure summary."""
    rank = code = None
    if fields.get("rank") and (im := _LEADING_INT.match(fields["rank"][0])):
        rank = int(im.group(1))
    if fields.get("exitcode") and (im := _LEADING_INT.match(fields["exitcode"][0])):
        code = int(im.group(1))
    exc_line = ""
    for tb_line in fields.get("traceback", []):
        stripped = tb_line.strip()
        if stripped and not stripped.startswith(("Traceback", "File ")) and exception_type_of(stripped):
            exc_line = stripped
    return rank, code, exc_line


def _class_said(line: str) -> str:
    """An exception named by its class in `line` ("... got error: <class 'pkg.CheckFailedException'> detail"), in
    Python's own form "pkg.CheckFailedException: detail" (the words around it when nothing follows); "" when the class
    named is not named like an exception."""
    m = _CLASS_REPR.search(line)
    if (
        m is None
        or not exception_type_of(m.group(1))
        or m.group(1).endswith(_AGENT_WRAPPERS)
        or not _REPORTS_ERROR.search(line, 0, m.start())
    ):
        return ""
    return f"{m.group(1)}: {line[m.end() :].strip() or line[: m.start()].strip()}"


def parse_log(text: str, near: float | None, rules: RuleSet = DEFAULT_RULES, full: bool = True) -> LogFacts:
    """Facts from a log tail. `near` (any time of the pod) places glog lines, which carry no year, in
    time; None skips them. `full=False` only applies the `log` rules (the cheap part)."""
    log_rule = _log_rule(text, rules)
    if not full:
        return LogFacts(log_rule=log_rule)
    first_failure: float | None = None
    teardown: float | None = None
    exceptions: dict[int, str] = {}
    order: list[int] = []
    loose: list[str] = []
    py2: list[str] = []
    ranks: set[int] = {int(next(g for g in m.groups() if g is not None)) for m in _RANK_MENTION.finditer(text)}
    summary: dict[str, list[str]] | None = None
    others: list[dict[str, list[str]]] = []  # entries of the summary's "Failures:" section
    in_summary = in_failures = False
    current = ""
    n = 0
    frame_at = -FRAME_TO_EXCEPTION - 1  # the line number of the last traceback frame
    raised: tuple[int, str] | None = None  # the last frame's `raise` statement: its line number and the exception
    for raw in text.splitlines():
        line = _LAUNCHER_PREFIX.sub("", raw.rstrip(), count=1)
        if not line:
            continue
        if in_failures:
            if line.startswith(("=====", "-----", "Root Cause")):
                in_failures = False  # the section ends at its delimiter; read the line on
            else:
                if _SUMMARY_ENTRY.match(line):
                    others.append({})
                    current = ""
                    continue
                fm = _SUMMARY_FIELD.match(line)
                if others and fm:
                    current = fm.group(1)
                    others[-1].setdefault(current, []).append(fm.group(2))
                elif others and current == "traceback":
                    others[-1]["traceback"].append(line)
                continue
        if in_summary and summary is not None:
            if line.startswith("====="):
                in_summary = False
                continue
            fm = _SUMMARY_FIELD.match(line)
            if fm:
                current = fm.group(1)
                summary.setdefault(current, []).append(fm.group(2))
            elif current == "traceback":
                summary["traceback"].append(line)
            continue
        head = line[:1]
        rm = _RANK_LINE.match(line) if head == "[" else None
        body = rm.group(2) if rm else line
        n += 1
        after_frame = n - frame_at <= FRAME_TO_EXCEPTION
        if _FRAME.match(body):
            frame_at = n
        elif after_frame and "raise " in body and (rs := _RAISE.match(body)) and exception_type_of(rs.group(1)):
            cls, args = rs.group(1), rs.group(2) or ""
            raised = None if cls.endswith(_AGENT_WRAPPERS) else (n, f"{cls}: {args}".rstrip(": "))
        if ("<class '" in body or "<type '" in body) and (said := _class_said(body)):
            if "<type '" in body:
                py2.append(said)
            if rm:
                r = int(rm.group(1))
                if r not in exceptions:
                    order.append(r)
                exceptions[r] = said
            else:
                loose.append(said)
            continue
        if head == "[":
            if rm:
                content = rm.group(2)
                if (
                    content[:1] not in (" ", "\t", "[")
                    and (": " in content or (after_frame and ":" not in content))
                    and not content.startswith("Traceback")
                    and exception_type_of(content)
                ):
                    r = int(rm.group(1))
                    if r not in exceptions:
                        order.append(r)
                    exceptions[r] = content
            continue
        if head in ("E", "W", "I", "F") and line[1:2].isdigit():
            gm = _GLOG.match(line)
            if gm:
                body = gm.group(8)
                if near is not None:
                    if first_failure is None and gm.group(1) == "E" and "failed (exitcode" in body:
                        first_failure = _glog_time(gm, near)
                    elif teardown is None and ("death signal" in body or "Received SIG" in body):
                        teardown = _glog_time(gm, near)
                continue
        if head in (" ", "\t"):
            jm = _ERROR_JSON_MESSAGE.match(line) if '"message": "' in line else None
            if jm:
                message = json.loads(jm.group(1)).strip()
                etype = exception_type_of(message) if ": " in message else ""
                if etype and not etype.endswith(_AGENT_WRAPPERS):
                    loose.append(message)
            continue
        if line.startswith("Failures:") and not others:
            in_failures, current = True, ""
            continue
        if "Root Cause (first observed failure)" in line:
            summary, in_summary, current = {}, True, ""
            continue
        if (": " in line or (after_frame and ":" not in line)) and not line.startswith("Traceback"):
            etype = exception_type_of(line)
            if etype and not etype.endswith(_AGENT_WRAPPERS):
                loose.append(line)
    raised_at_cut = raised[1] if raised is not None and raised[0] == n else ""
    other_failures = tuple(_entry(o) for o in others)
    agent_code = _agent_exit(text)
    desync = collective_desync(text)
    first_exception = exceptions[order[0]] if order else (loose[0] if loose else "")
    report = launcher_report(text)
    if report is not None and log_rule is not None and log_rule[1] == report.text and _reports_own_crash(text, report):
        # The echo read from the report is this log's own crash: read the log without it.
        log_rule = _log_rule(text.replace(report.text, ""), rules)
    stop = _TOLD_TO_STOP.search(text) if first_exception else None
    stopped_first = stop is not None and stop.start() < text.find(first_exception)
    facts = LogFacts(
        report=report,
        stopped_first=stopped_first,
        desync=desync,
        agent_exitcode=agent_code,
        first_failure_at=first_failure,
        teardown_at=teardown,
        exceptions=exceptions,
        exception_order=tuple(order),
        loose_exceptions=tuple(loose),
        raised_at_cut=raised_at_cut,
        py2_type_form=tuple(py2),
        ranks_seen=frozenset(ranks),
        log_rule=log_rule,
        other_failures=other_failures,
    )
    if summary is None:
        return facts
    s_time = None
    if summary.get("time") and (tm := _SUMMARY_TIME.search(summary["time"][0])):
        y, mo, d, hh, mi, ss = (int(g) for g in tm.groups())
        try:
            s_time = datetime(y, mo, d, hh, mi, ss, tzinfo=UTC).timestamp()
        except ValueError:
            s_time = None
    s_rank, s_code, exc_line = _entry(summary)
    err_file = (summary.get("error_file") or [""])[0].strip()
    return replace(
        facts,
        summary_time=s_time,
        summary_rank=s_rank,
        summary_exitcode=s_code,
        summary_has_error_file=bool(err_file) and err_file != "<N/A>",
        summary_exception=exc_line,
        ranks_seen=facts.ranks_seen if s_rank is None else facts.ranks_seen | {s_rank},
    )
