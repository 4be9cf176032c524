"""Classification rules: what a message, an exit code, a signal or a pod condition says about a failure.

The engine (`podmortem.core.engine`) decides *who* failed first; this module says *what kind* of failure each
observation is, and whether it is a failure of its own (a *primary*: a Python exception, CUDA out of
memory, an ECC error, SIGSEGV, an OOM kill, a preemption, a lost node) or the echo of someone else's
(a *secondary*: gloo "Connection closed by peer", a collective timeout, a lost rendezvous store, the
SIGTERM of the job's cleanup). Keeping the knowledge here, as data, lets an operator teach podmortem a
new message without a release: a rules file (JSON, see `load_rules` and docs/engine.md) is put in front
of the built-in `DEFAULT_RULES`, and the first matching rule wins.

A rule has exactly one matcher and one outcome:

* matchers — ``message`` / ``log`` (regular expressions searched in an error message, resp. in each
  line of a log tail), ``exception_type`` (a regular expression that must match the whole exception
  type name, qualified or not), ``exit_code`` / ``signal`` (numbers), ``reason`` (container
  termination reason), ``disruption`` (DisruptionTarget condition reason), ``phase`` (pod phase or
  status reason);
* outcomes — ``category`` (one of `categories.CATEGORIES`, with ``retryable`` defaulting to the category's)
  for a primary failure, or ``secondary`` (``peer``, ``timeout``, ``store`` or ``teardown``) for a
  failure caused by another member. ``weak: true`` marks a primary that is only believed when no
  stronger primary competes (an unexplained exit code 1, an NCCL error that a dying peer can cause).

Pure: compiling and matching only; `load_rules` is the one function that reads a file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import re2  # google-re2: linear-time matching for log tails

from podmortem.core.categories import CATEGORIES, RETRYABLE, Category

MatcherKind = Literal["message", "log", "exception_type", "exit_code", "signal", "reason", "disruption", "phase"]
SecondaryKind = Literal["peer", "timeout", "store", "teardown"]

MATCHERS: tuple[MatcherKind, ...] = (
    "message",
    "log",
    "exception_type",
    "exit_code",
    "signal",
    "reason",
    "disruption",
    "phase",
)
SECONDARY_KINDS: tuple[SecondaryKind, ...] = ("peer", "timeout", "store", "teardown")
_REGEX_KINDS = frozenset({"message", "log", "exception_type"})
_NUMBER_KINDS = frozenset({"exit_code", "signal"})
_RULE_KEYS = frozenset(
    {*MATCHERS, "id", "category", "retryable", "secondary", "weak", "generic", "why", "advice", "ignore_case"}
)

# What a person should do, per category; a rule's own `advice` replaces it.
SECONDARY_WHY: dict[SecondaryKind, str] = {
    "peer": "lost its connection to a peer that had died",
    "timeout": "timed out waiting for a peer in a collective",
    "store": "lost the rendezvous/c10d store",
    "teardown": "was torn down (SIGTERM) after the job had failed",
}


# Parts of a message that differ between the victims of one failure and that no rule keys on.
_VOLATILE = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b|\d{4,}")
_MEMO_SIZE = 4096
_MISS = object()


class RulesError(ValueError):
    """A rules file that cannot be used; the message names the file and the offending rule."""


@dataclass(frozen=True)
class Rule:
    id: str
    kind: MatcherKind
    pattern: re.Pattern[str] | None = None  # message, log, exception_type
    # log rules also run on RE2 (google-re2): linear time on any input (bench/engine_speed.py times them).
    fast: Any = field(default=None, compare=False, repr=False)
    fast_source: str = field(default="", compare=False, repr=False)
    values: frozenset[str] = frozenset()  # reason, disruption, phase (lower case)
    numbers: frozenset[int] = frozenset()  # exit_code, signal
    category: Category | None = None
    retryable: bool | None = None
    secondary: SecondaryKind | None = None
    weak: bool = False
    # A catch-all (any Python exception): believed, but a specific rule's finding on the same member
    # (storage full, Xid, an OOM kill in its log) says more about why it failed.
    generic: bool = False
    why: str = ""
    advice: str = ""
    operator: bool = False  # from a rules file, not built in

    @property
    def is_primary(self) -> bool:
        return self.category is not None

    @property
    def is_retryable(self) -> bool | None:
        if self.retryable is not None:
            return self.retryable
        return RETRYABLE[self.category] if self.category is not None else None

    def describe(self) -> str:
        if self.why:
            return self.why
        if self.secondary is not None:
            return SECONDARY_WHY[self.secondary]
        return self.category or ""

    def matches_text(self, text: str) -> bool:
        if self.fast is not None:
            return self.fast.search(text) is not None
        return self.pattern is not None and self.pattern.search(text) is not None

    def search(self, text: str) -> Any:
        """The first match in `text` (RE2 for log rules), or None."""
        if self.fast is not None:
            return self.fast.search(text)
        return self.pattern.search(text) if self.pattern is not None else None

    def matches_type(self, exception_type: str) -> bool:
        if self.pattern is None or not exception_type:
            return False
        short = exception_type.rsplit(".", 1)[-1]
        return self.pattern.fullmatch(exception_type) is not None or self.pattern.fullmatch(short) is not None


@dataclass(frozen=True)
class RuleSet:
    """An ordered list of rules; the first rule that matches wins (operator rules come first)."""

    rules: tuple[Rule, ...]
    source: str = "built-in"
    _by_kind: dict[str, tuple[Rule, ...]] = field(default_factory=dict, compare=False, repr=False)
    _memo: dict[tuple[str, str], object] = field(default_factory=dict, compare=False, repr=False)
    _log_set: list[Any] = field(default_factory=list, compare=False, repr=False)  # [re2.Set of the log rules]

    def __post_init__(self) -> None:
        grouped: dict[str, list[Rule]] = {}
        for r in self.rules:
            grouped.setdefault(r.kind, []).append(r)
            if r.kind in ("message", "exception_type"):
                grouped.setdefault("text", []).append(r)
        self._by_kind.update({k: tuple(v) for k, v in grouped.items()})
        # Every log rule in one RE2 set: one pass over a tail says which rules match anywhere in it.
        logs = self._by_kind.get("log", ())
        matcher = re2.Set.SearchSet(re2.Options())
        for r in logs:
            matcher.Add(r.fast_source)
        matcher.Compile()
        self._log_set.append(matcher)

    def first_log_rule(self, text: str | bytes) -> Rule | None:
        """The first log rule, in rule order, that matches anywhere in `text` (one RE2 pass; UTF-8 bytes
        are searched as they are, a str is encoded first)."""
        logs = self._by_kind.get("log", ())
        if not logs:
            return None
        hits = self._log_set[0].Match(text)
        return logs[min(hits)] if hits else None

    def of_kind(self, kind: MatcherKind) -> tuple[Rule, ...]:
        return self._by_kind.get(kind, ())

    def classify_message(self, message: str, exception_type: str = "") -> Rule | None:
        """The first message or exception-type rule, in rule order, that matches an error message.

        Memoised: the victims of one failure write near-identical messages that differ only in peer
        addresses, ports, pids and durations, so messages equal up to IPv4 addresses and numbers of four
        or more digits share one classification (rules must not key on such numbers; see docs/engine.md).
        """
        text = message or ""
        key = (_VOLATILE.sub("#", text), exception_type)
        hit = self._memo.get(key, _MISS)
        if hit is not _MISS:
            return cast(Rule | None, hit)
        found: Rule | None = None
        for r in self._by_kind.get("text", ()):
            if r.matches_text(text) if r.kind == "message" else r.matches_type(exception_type):
                found = r
                break
        if len(self._memo) >= _MEMO_SIZE:
            self._memo.clear()
        self._memo[key] = found
        return found

    def classify_log_line(self, line: str) -> Rule | None:
        return self.first_log_rule(line)

    def classify_exit_code(self, code: int) -> Rule | None:
        for r in self.of_kind("exit_code"):
            if code in r.numbers:
                return r
        return None

    def classify_signal(self, signal: int) -> Rule | None:
        for r in self.of_kind("signal"):
            if signal in r.numbers:
                return r
        return None

    def _by_value(self, kind: MatcherKind, *values: str) -> Rule | None:
        wanted = {v.lower() for v in values if v}
        if not wanted:
            return None
        for r in self.of_kind(kind):
            if r.values & wanted:
                return r
        return None

    def classify_reason(self, reason: str) -> Rule | None:
        return self._by_value("reason", reason)

    def classify_disruption(self, reason: str) -> Rule | None:
        return self._by_value("disruption", reason)

    def classify_phase(self, phase: str, reason: str = "") -> Rule | None:
        return self._by_value("phase", phase, reason)

    def extended_by(self, operator: RuleSet) -> RuleSet:
        """Operator rules in front of these; the result keeps both sources in its name."""
        return RuleSet(operator.rules + self.rules, source=f"{operator.source} + {self.source}")


# --------------------------------------------------------------------------------------------------
# Building rules from plain data (the built-in table below and rules files share this path).


def _fail(source: str, where: str, problem: str) -> RulesError:
    return RulesError(f"{source}: {where}: {problem}")


def _as_numbers(value: Any, source: str, where: str, kind: str) -> frozenset[int]:
    items = value if isinstance(value, list) else [value]
    out: set[int] = set()
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise _fail(source, where, f"'{kind}' must be an integer or a list of integers, got {item!r}")
        out.add(item)
    if not out:
        raise _fail(source, where, f"'{kind}' is an empty list")
    return frozenset(out)


def _as_strings(value: Any, source: str, where: str, kind: str) -> frozenset[str]:
    items = value if isinstance(value, list) else [value]
    out: set[str] = set()
    for item in items:
        if not isinstance(item, str) or not item:
            raise _fail(source, where, f"'{kind}' must be a non-empty string or a list of them, got {item!r}")
        out.add(item.lower())
    if not out:
        raise _fail(source, where, f"'{kind}' is an empty list")
    return frozenset(out)


def rule_from_dict(doc: Mapping[str, Any], source: str = "built-in", index: int = 0, operator: bool = False) -> Rule:
    """One rule from its JSON form; raises RulesError naming `source` and the rule on any problem."""
    where = f"rule #{index + 1}"
    if not isinstance(doc, Mapping):
        raise _fail(source, where, f"must be an object, got {type(doc).__name__}")
    rid = doc.get("id")
    if not isinstance(rid, str) or not rid.strip():
        raise _fail(source, where, "needs a non-empty string 'id'")
    where = f"rule #{index + 1} ({rid!r})"
    unknown = sorted(set(doc) - _RULE_KEYS)
    if unknown:
        raise _fail(source, where, f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_RULE_KEYS))}")
    kinds = [k for k in MATCHERS if k in doc]
    if len(kinds) != 1:
        raise _fail(source, where, f"needs exactly one matcher of {', '.join(MATCHERS)}; found {kinds or 'none'}")
    kind = kinds[0]
    raw = doc[kind]
    pattern: re.Pattern[str] | None = None
    fast: Any = None
    fast_source = ""
    numbers: frozenset[int] = frozenset()
    values: frozenset[str] = frozenset()
    if kind in _REGEX_KINDS:
        if not isinstance(raw, str) or not raw:
            raise _fail(source, where, f"'{kind}' must be a non-empty regular expression string")
        ignore_case = doc.get("ignore_case", kind != "exception_type")
        if not isinstance(ignore_case, bool):
            raise _fail(source, where, "'ignore_case' must be true or false")
        try:
            flags = (re.IGNORECASE if ignore_case else 0) | (re.MULTILINE if kind == "log" else 0)
            pattern = re.compile(raw, flags)
        except re.error as exc:
            raise _fail(source, where, f"'{kind}' is not a valid regular expression: {exc}") from None
        if kind == "log":
            fast_source = ("(?i)" if ignore_case else "") + "(?m)" + raw
            try:
                fast = re2.compile(fast_source)
            except re2.error as exc:
                raise _fail(
                    source, where, f"'log' must be RE2 syntax (no backreferences or lookaround: linear time): {exc}"
                ) from None
    elif kind in _NUMBER_KINDS:
        numbers = _as_numbers(raw, source, where, kind)
    else:
        values = _as_strings(raw, source, where, kind)
    category = doc.get("category")
    secondary = doc.get("secondary")
    if (category is None) == (secondary is None):
        raise _fail(source, where, "needs exactly one outcome: 'category' (a primary failure) or 'secondary'")
    if category is not None and category not in CATEGORIES:
        raise _fail(source, where, f"unknown category {category!r}; one of {', '.join(CATEGORIES)}")
    if secondary is not None and secondary not in SECONDARY_KINDS:
        raise _fail(source, where, f"unknown secondary kind {secondary!r}; one of {', '.join(SECONDARY_KINDS)}")
    retryable = doc.get("retryable")
    if retryable is not None and not isinstance(retryable, bool):
        raise _fail(source, where, "'retryable' must be true or false")
    if retryable is not None and secondary is not None:
        raise _fail(source, where, "'retryable' only applies to a rule with a 'category'")
    weak = doc.get("weak", False)
    if not isinstance(weak, bool):
        raise _fail(source, where, "'weak' must be true or false")
    generic = doc.get("generic", False)
    if not isinstance(generic, bool):
        raise _fail(source, where, "'generic' must be true or false")
    for key in ("why", "advice"):
        if key in doc and not isinstance(doc[key], str):
            raise _fail(source, where, f"'{key}' must be a string")
    return Rule(
        id=rid,
        kind=kind,
        pattern=pattern,
        fast=fast,
        fast_source=fast_source,
        values=values,
        numbers=numbers,
        category=cast(Category | None, category),
        retryable=retryable,
        secondary=cast(SecondaryKind | None, secondary),
        weak=weak,
        generic=generic,
        why=str(doc.get("why", "")),
        advice=str(doc.get("advice", "")),
        operator=operator,
    )


def ruleset_from_dict(doc: Any, source: str = "built-in", operator: bool = False) -> tuple[RuleSet, bool]:
    """(rules, replace_defaults) from a decoded rules document."""
    if not isinstance(doc, dict):
        raise RulesError(f"{source}: the top level must be a JSON object with a 'rules' list")
    unknown = sorted(set(doc) - {"rules", "replace_defaults", "comment", "version"})
    if unknown:
        raise RulesError(f"{source}: unknown top-level key(s) {', '.join(unknown)}; allowed: rules, replace_defaults")
    version = doc.get("version", 1)
    if version != 1:
        raise RulesError(f"{source}: unsupported 'version' {version!r} (this podmortem reads version 1)")
    items = doc.get("rules")
    if not isinstance(items, list):
        raise RulesError(f"{source}: 'rules' must be a list of rule objects")
    replace = doc.get("replace_defaults", False)
    if not isinstance(replace, bool):
        raise RulesError(f"{source}: 'replace_defaults' must be true or false")
    rules = tuple(rule_from_dict(item, source, i, operator) for i, item in enumerate(items))
    seen: set[str] = set()
    for r in rules:
        if r.id in seen:
            raise RulesError(f"{source}: rule id {r.id!r} is used twice")
        seen.add(r.id)
    return RuleSet(rules, source=source), replace


def load_rules(path: str | Path, defaults: RuleSet | None = None) -> RuleSet:
    """Read an operator rules file (JSON) and put its rules in front of the defaults.

    Raises RulesError with a one-line message naming the file (and rule) for a missing, unreadable or
    invalid file. With ``"replace_defaults": true`` the built-in rules are dropped entirely.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RulesError(f"{p}: rules file not found") from None
    except IsADirectoryError:
        raise RulesError(f"{p}: is a directory, expected a JSON rules file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RulesError(f"{p}: cannot read rules file: {exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RulesError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:  # json's decoder recurses once per level of nesting
        raise RulesError(f"{p}: not valid JSON (nested too deeply)") from None
    operator, replace = ruleset_from_dict(doc, source=str(p), operator=True)
    if replace:
        return operator
    return (defaults or DEFAULT_RULES).extended_by(operator)


# --------------------------------------------------------------------------------------------------
# The built-in rules. Messages are those torch, CUDA, NCCL, gloo and the kernel really print; the order
# matters (specific before generic: a device-side assert is a CUDA error but a bug in the program).

# The node's driver stack and container runtime, in errors and in logs alike: NVML unable to start or at
# another version than the kernel module, the CUDA runtime refusing the driver (system mismatch, forward
# compatibility, a PTX newer than the driver), torch's "incorrectly set up environment", the NVIDIA container
# hook, a C library older than a binary needs.
_DRIVER_STACK = (
    r"|Failed to initialize NVML|Driver/library version mismatch|nvidia-container-cli"
    r"|OCI runtime (create|exec) failed|error running hook"
    r"|cudaErrorSystemDriverMismatch|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"
    r"|unsupported display driver / cuda driver combination|forward compatibility was attempted on non supported HW"
    r"|cudaErrorCompatNotSupportedOnDevice|PTX was compiled with an unsupported toolchain"
    r"|cudaErrorUnsupportedPtxVersion"
    r"|incorrectly set up environment|version `GLIBC(XX)?_[\d.]{1,12}' not found"
)

_B: list[dict[str, Any]] = [
    # --- GPU memory ------------------------------------------------------------------------------
    {
        "id": "cuda.device-assert",
        "message": r"device-side assert(ion)? triggered",
        "category": "user_code",
        "why": "CUDA device-side assert (an index or value out of range in the program)",
    },
    {
        "id": "host.low-memory",
        "message": r"running low on memory|memory usage threshold|low on resource: memory|Out of memory: Kill"
        r"|oom-kill",
        "category": "host_oom",
        "why": "the node ran out of host memory (its memory monitor or the kernel killed the task)",
    },
    {
        "id": "cuda.oom",
        "message": r"CUDA out of memory|CUDA error: out of memory|HIP out of memory"
        r"|^(torch\.)?(cuda\.)?OutOfMemoryError\b|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation"
        r"|NCCL error.*\bout of memory|Cuda failure (\d+ )?'out of memory'",
        "category": "gpu_oom",
        "why": "GPU memory exhausted",
    },
    {
        "id": "torch.oom-type",
        "exception_type": r"(torch\.)?(cuda\.)?OutOfMemoryError",
        "category": "gpu_oom",
        "why": "GPU memory exhausted",
    },
    # --- Hardware: GPU, driver, NVLink ----------------------------------------------------------------
    {
        "id": "cuda.ecc",
        "message": r"\bECC error|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE"
        r"|uncorrectable ECC",
        "category": "hardware",
        "why": "uncorrectable GPU memory (ECC) error",
    },
    {"id": "gpu.xid", "message": r"\bXid\b|NVRM:", "category": "hardware", "why": "NVIDIA driver Xid error"},
    {
        "id": "cuda.fault",
        "message": r"illegal memory access|illegal address"
        r"|unspecified launch failure|cudaErrorLaunchFailure|hardware stack error"
        r"|GPU (has )?fallen off the bus|GPU is lost|uncorrectable NVLink|NVLink (error|fatal)"
        r"|CUDA error: unknown error|CUDA_ERROR_ILLEGAL_ADDRESS|CUDA error: an illegal memory",
        "category": "hardware",
        "why": "GPU fault (illegal address / launch failure / lost device)",
    },
    {
        "id": "nccl.cuda",
        "message": r"NCCL error.*unhandled cuda error",
        "category": "hardware",
        "why": "NCCL hit a CUDA error on the device",
    },
    {
        "id": "cuda.no-device",
        "message": r"no CUDA-capable device|CUDA driver version is insufficient|NVIDIA driver on your system is too old"
        r"|Found no NVIDIA driver|CUDA error: initialization error|cudaErrorNoDevice"
        r"|CUDA-capable device\(s\) is/are busy or unavailable|NVIDIA-SMI has failed|No CUDA GPUs are available"
        r"|cudaErrorInsufficientDriver|CUDA_ERROR_NO_DEVICE" + _DRIVER_STACK,
        "category": "infra",
        "why": "no usable GPU or driver in the container",
    },
    # --- Host memory --------------------------------------------------------------------------------
    {
        "id": "dataloader.killed",
        "message": r"DataLoader worker \(pid[^)]*\) is killed by signal: Killed",
        "category": "host_oom",
        "why": "a DataLoader worker was SIGKILLed (the kernel OOM killer)",
    },
    {
        "id": "dataloader.bus-error",
        "message": r"DataLoader worker \(pid[^)]*\) is killed by signal: Bus error"
        r"|insufficient shared memory",
        "category": "infra",
        "why": "a DataLoader worker hit a bus error (shared memory /dev/shm too small)",
    },
    {
        "id": "dataloader.segfault",
        "message": r"DataLoader worker \(pid[^)]*\) is killed by signal: "
        r"(Segmentation fault|Aborted)",
        "category": "crash",
        "why": "a DataLoader worker crashed natively",
    },
    {
        "id": "dataloader.exited",
        "message": r"DataLoader worker \(pid\(?s\)?[^)]*\) exited unexpectedly",
        "category": "host_oom",
        "weak": True,
        "why": "a DataLoader worker exited unexpectedly (often an OOM kill)",
    },
    {
        "id": "host.enomem",
        "message": r"Cannot allocate memory|std::bad_alloc|\[Errno 12\]|DefaultCPUAllocator: "
        r"(can't|not enough memory)|Unable to allocate [\d.]+ ?[KMGT]i?B|ray\.exceptions\.OutOfMemoryError"
        r"|died with <Signals\.SIGKILL: 9>",
        "category": "host_oom",
        "why": "host memory allocation failed",
    },
    {
        "id": "python.memory-error",
        "exception_type": r"MemoryError",
        "category": "host_oom",
        "why": "Python MemoryError (host memory exhausted)",
    },
    # --- Environment: files, mounts, permissions, storage ---------------------------------------------
    {
        "id": "infra.storage",
        "message": r"No space left on device|Disk quota exceeded|Read-only file system"
        r"|Stale file handle|Input/output error|Transport endpoint is not connected|\[Errno (5|24|28|30|116|122)\]"
        r"|Too many open files|unable to (open|write to|mmap)[^\n]{0,40}(shared memory|</torch_|/dev/shm)"
        r"|can't start new thread"
        # A network filesystem failing (EREMOTEIO, a corrupted one), Rust's io::ErrorKind for a full, read-only or
        # over-quota disk (safetensors, tokenizers), errno by name.
        r"|Remote I/O error|Structure needs cleaning|\[Errno (117|121)\]"
        r"|kind: (StorageFull|QuotaExceeded|ReadOnlyFilesystem)"
        r"|\bE(NOSPC|DQUOT|ROFS|STALE|REMOTEIO)\b",
        "category": "infra",
        "why": "storage failure (full, read-only, stale or broken mount)",
    },
    {
        # The device met an instruction it cannot execute: a kernel built wrong or miscompiled, the same on
        # every retry (a native crash of the program, not a failing GPU).
        "id": "cuda.illegal-instruction",
        # A misaligned address is the same kind of fault: a kernel's load or store the hardware cannot do as
        # written.
        "message": r"an illegal instruction was encountered|cudaErrorIllegalInstruction|CUDA_ERROR_ILLEGAL_INSTRUCTION"
        r"|misaligned address|cudaErrorMisalignedAddress|CUDA_ERROR_MISALIGNED_ADDRESS",
        "category": "crash",
        "why": "a CUDA kernel hit an illegal instruction (a broken or miscompiled kernel)",
    },
    {
        # SIGBUS is a mapped page with no backing: a full tmpfs (/dev/shm, where DataLoader workers and NCCL put
        # their shared memory) or a memory-mapped file that shrank or whose mount went away — the environment,
        # not a fault of the program (x86 does not fault on alignment). Before the native-crash signals.
        "id": "launcher.sigbus",
        "message": r"died with <Signals\.SIGBUS: 7>|Signal 7 \(SIGBUS\) received|returned non-zero exit status -7\b"
        r"|\bSIGBUS\b|\bBus error\b",
        "category": "infra",
        "why": "a worker died of SIGBUS: shared memory (/dev/shm) or a memory-mapped file without backing storage",
    },
    {
        "id": "launcher.native-crash",
        "message": r"died with <Signals\.SIG(SEGV|ABRT|ILL|FPE): \d+>|Signal (4|6|8|11) \(SIG\w+\) received"
        r"|returned non-zero exit status -(4|6|8|11)\b",
        "category": "crash",
        "why": "a worker process died of a native crash signal (the launcher's summary of it)",
    },
    {
        "id": "infra.hub",
        "message": r"HTTPSConnectionPool|Max retries exceeded with url|LocalEntryNotFoundError"
        r"|(401|403|429) Client Error|Too Many Requests|GatedRepoError"
        # The HTTP client's own failures reaching an endpoint (requests, urllib3): the endpoint or the way to it.
        r"|requests\.exceptions\.(ConnectionError|ConnectTimeout|ReadTimeout|SSLError|ProxyError)"
        r"|urllib3\.exceptions\.\w+Error|ReadTimeoutError|CERTIFICATE_VERIFY_FAILED",
        "category": "infra",
        "why": "a model hub or remote storage endpoint refused or could not be reached",
    },
    {
        "id": "infra.missing-file",
        "message": r"No such file or directory|\[Errno 2\]|\bENOENT\b|kind: NotFound",
        "category": "infra",
        "why": "a file or mount the job needs is missing",
    },
    {
        "id": "infra.permission",
        "message": r"Permission denied|\[Errno 13\]|Operation not permitted|\bEACCES\b|kind: PermissionDenied",
        "category": "infra",
        "why": "permission denied on a file, mount or device",
    },
    {
        "id": "infra.file-types",
        "exception_type": r"FileNotFoundError|PermissionError|NotADirectoryError"
        r"|IsADirectoryError",
        "category": "infra",
        "why": "a file or mount the job needs is missing or unreadable",
    },
    {
        "id": "infra.object-store",
        "message": r"NoCredentialsError|EndpointConnectionError|botocore\.exceptions"
        r"|google\.api_core\.exceptions\.(ServiceUnavailable|Forbidden)|We couldn't connect to 'https://huggingface\.co'",
        "category": "infra",
        "why": "object storage / model hub unreachable or access denied",
    },
    # --- Secondary: the echo of another member's failure ----------------------------------------------
    {
        "id": "torch.sigterm",
        "message": r"SignalException: Process \d+ got signal|got signal: SIGTERM",
        "secondary": "teardown",
    },
    # The rendezvous server unable to bind its port (EADDRINUSE): another process on the node (a leftover of an
    # earlier run, another job on a shared host) holds it — the node's state, and a retry once it is free, or on
    # another port, succeeds. Not the store lost: before the store echo, whose "server socket has failed" it also
    # prints.
    {
        "id": "c10d.address-in-use",
        "message": r"Address already in use|\bEADDRINUSE\b|errno: 98\b",
        "category": "infra",
        "why": "the rendezvous port is already taken on the node (a leftover process or another job)",
    },
    # A message that names the c10d store ("store->get('0') got error: Connection reset by peer") is the store's
    # echo, before the peer rules that would match its socket error.
    {
        "id": "c10d.store",
        "message": r"DistNetworkError|DistStoreError|Failed to recv, got 0 bytes|TCPStore"
        r"|RendezvousConnectionError|RendezvousClosedError|RendezvousTimeoutError|Connection was likely closed"
        r"|client socket has timed out|in store based barrier"
        r"|The server socket has failed|c10d key-value store|store->get\(|wait timeout after \d+ ?ms|waitForInput"
        # The TCPStore client's older words for a store that stopped answering, and the elastic agent leaving a
        # rendezvous that others closed.
        r"|\bSocket Timeout\b|Stop_waiting response is expected|RendezvousGracefulExitError",
        "secondary": "store",
        "why": "lost the c10d rendezvous store",
    },
    {
        "id": "gloo.peer-closed",
        "message": r"Connection closed by peer",
        "secondary": "peer",
        "why": "gloo: connection closed by peer",
    },
    {
        "id": "gloo.peer-reset",
        "message": r"Connection reset by peer|Broken pipe|Read error \[|Write error \["
        r"|Socket closed|ECONNRESET|EPIPE|Connection refused",
        "secondary": "peer",
        "why": "connection to a peer reset/broken",
    },
    {
        # Horovod shutting down every rank after one rank's exception (it says so), Open MPI's daemon losing a
        # remote node's daemon: the echo of another member's failure.
        "id": "mpi.peer-gone",
        "message": r"HorovodInternalError|Horovod has been shut down|lost communication with a remote daemon",
        "secondary": "peer",
        "why": "Horovod/MPI stopped because another rank or node failed",
    },
    {
        "id": "gloo.timeout",
        "message": r"Timed out waiting \d+ ?ms for (recv|send) operation|"
        r"gloo.*Timed out waiting",
        "secondary": "timeout",
        "why": "gloo: timed out waiting for a peer",
    },
    {
        "id": "nccl.watchdog-timeout",
        "message": r"Watchdog caught collective operation timeout"
        r"|ran for \d+ milliseconds before timing out|Some NCCL operations have failed or timed out"
        # torch's monitored barrier naming the ranks that never arrived; gloo closing a pair on a timeout
        r"|failed to pass monitoredBarrier|Application timeout caused pair closure",
        "secondary": "timeout",
        "why": "NCCL watchdog: collective timed out waiting for a peer",
    },
    {
        # After the timeouts: ProcessGroupNCCL's heartbeat monitor finding the process's own watchdog thread stuck
        # (a CUDA/NCCL call that never returns) is this process stopping, not a peer it waited for. Weak: a
        # victim's abort can block the same way, so any failure of its own elsewhere says more.
        "id": "nccl.watchdog-stuck",
        "message": r"watchdog (thread )?(got )?stuck|Heartbeat monitor timed out",
        "category": "hang",
        "weak": True,
        "why": "its own NCCL watchdog got stuck: the process stopped making progress",
    },
    {
        "id": "nccl.aborted",
        "message": r"NCCL communicator was aborted|communicator (was|has been) aborted"
        r"|ProcessGroupNCCL is aborted",
        "secondary": "peer",
        "why": "NCCL communicator aborted after a peer failed",
    },
    # --- Network (interconnect) -----------------------------------------------------------------------
    {
        "id": "nccl.system-error",
        "message": r"NET/IB|ibv_\w+ failed"
        r"|IBV_WC_\w+|transport retry counter exceeded|Got completion (from peer .*)?with error"
        # The network named by the system: no usable interface for NCCL's bootstrap, its socket transport failing,
        # UCX or a Mellanox NIC reporting an error, a NIC link down, errno's unreachable host/network.
        r"|no socket interface found|No usable (network )?interface|NET/Socket[^\n]{0,80}\b(failed|error)\b"
        r"|UCX +ERROR|\bmlx5\w*:[^\n]{0,80}\b(error|failed)\b|NIC Link is Down|\bE(HOST|NET)UNREACH\b"
        r"|\[Errno (101|113)\]|No route to host|Network is unreachable|Software caused connection abort"
        r"|NET/OFI[^\n]{0,160}\b(failed|error)\b",
        "category": "network",
        "why": "NCCL/IB system error on the interconnect",
    },
    {
        # NCCL's generic system error, after the peer rules: a socket call failing on a peer that died reads the
        # same, so it is believed only without a stronger failure elsewhere.
        "id": "nccl.system-error-generic",
        "message": r"unhandled system error|ncclSystemError",
        "category": "network",
        "weak": True,
        "why": "NCCL system error (a socket or system call failed; a dying peer causes it too)",
    },
    {
        # NCCL refusing the job's own set-up (two ranks on one GPU, wrong arguments): the configuration, the
        # same on every retry — before the generic "NCCL error" a dying peer can cause.
        "id": "nccl.invalid-usage",
        "message": r"ncclInvalidUsage|ncclInvalidArgument|invalid (usage|argument) \(run with NCCL_DEBUG"
        r"|Duplicate GPU detected",
        "category": "user_code",
        "why": "NCCL refused the job's configuration (invalid usage or argument, e.g. two ranks on one GPU)",
    },
    {
        "id": "nccl.remote-error",
        "message": r"ncclRemoteError|remote process exited or there was a network error"
        r"|ncclInternalError|NCCL error",
        "category": "network",
        "weak": True,
        "why": "NCCL remote/internal error (a network fault, or a peer that died)",
    },
    # --- The program itself -----------------------------------------------------------------------------
    {
        # The job's own set-up, the same on every retry: torch's collective checker naming ranks that issued
        # different collectives (TORCH_DISTRIBUTED_DEBUG=DETAIL), a rank asking for a GPU the node does not have
        # (more ranks per node than GPUs). Specific, so a token of another family in the same log does not win.
        "id": "torch.job-setup",
        "message": r"Detected mismatch between collectives|CollectiveFingerPrint|invalid device ordinal"
        r"|cudaErrorInvalidDevice\b"
        r"|CUDA_ERROR_INVALID_DEVICE\b",
        "category": "user_code",
        "why": "the job's set-up: ranks issued different collectives, or a rank asked for a GPU that does not exist",
    },
    {
        "id": "train.non-finite",
        "message": r"\bnan\b.*\bloss\b|\bloss\b.*\b(nan|inf|non-finite)\b|non-finite loss"
        r"|FloatingPointError|detect(ed)? (a )?NaN|contains? (NaN|inf)",
        "category": "user_code",
        "why": "loss became NaN/inf",
    },
    {
        "id": "dataloader.exception",
        "message": r"Caught \w+ in DataLoader worker process",
        "category": "user_code",
        "why": "an exception in a DataLoader worker",
    },
    {
        "id": "python.keyboard-interrupt",
        "exception_type": r"KeyboardInterrupt",
        "secondary": "teardown",
        "why": "interrupted (SIGINT)",
    },
    {
        "id": "python.exception",
        "exception_type": r"[A-Za-z_][\w.]*",
        "category": "user_code",
        "generic": True,
        "why": "an exception raised by the training program",
    },
    {
        "id": "message.unclassified",
        "message": r"\S",
        "category": "user_code",
        "weak": True,
        "why": "an unclassified error message",
    },
    # --- Log tails: lines worth a verdict even without an error file -----------------------------------
    # Stable tokens only (error names, kernel/driver/launcher/scheduler phrases), never a whole sentence
    # of one program. Order is precedence within a log: a specific cause of its own first, then the
    # echoes of a peer's failure, then native-crash signs (the NCCL watchdog aborts a victim with SIGABRT
    # after a timeout, so an abort next to a timeout is the timeout's echo).
    {
        "id": "log.xid",
        "log": r"NVRM: Xid|\bXid \(PCI|\bXid\b.{0,40}\b(4[38]|6[1-9]|7[49]|9[245]|1[12]\d)\b",
        "ignore_case": False,
        "category": "hardware",
        "why": "NVIDIA driver Xid error",
    },
    {
        "id": "log.ecc",
        "log": r"uncorrectable ECC|ECC error|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE",
        "category": "hardware",
        "why": "uncorrectable GPU memory (ECC) error",
    },
    {
        "id": "log.gpu-lost",
        "log": r"GPU is lost|fallen off the bus|Unable to determine the device handle|unspecified launch failure"
        r"|illegal memory access|CUDA error: an illegal memory|cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS"
        r"|uncorrectable NVLink|NVLink (error|fatal|failure)|fabric ?manager|NVSwitch (fatal|error)"
        r"|CUDA error: unknown error|hardware stack error"
        # The GPU System Processor not answering the driver (Xid 119/120), or its memory subsystem failing.
        r"|\bGSP (RPC )?timeout|Timeout waiting for RPC from GSP|Memory Subsystem Error"
        # A GPU that needs a reset, failing row remapping, an uncorrected PCIe error, NCCL's word for a device
        # error, the launch-failure error by its code name.
        r"|GPU requires reset|row remap(ping)? failure|PCIe Bus Error: severity=(Uncorrected|Fatal)"
        r"|Cuda failure (\d+ )?'unknown error'|cudaErrorLaunchFailure|CUDA_ERROR_LAUNCH_FAILED"
        # NCCL's NVLS transport (NVSwitch multicast) failing to set up: the node's fabric manager/NVSwitches.
        r"|transport/nvls\.cc[^\n]{0,60}Cuda failure|NVLink SHARP"
        # The CPU's machine-check: a memory or bus fault of the host (it may deliver SIGBUS to the process).
        r"|\bmachine check\b|\[Hardware Error\]|Memory failure: 0x|hardware memory error",
        "category": "hardware",
        "why": "GPU fault (lost device, illegal address, launch failure, NVLink/NVSwitch/fabric error)",
    },
    {
        "id": "log.cuda-oom",
        "log": r"CUDA out of memory|OutOfMemoryError: CUDA|CUDA error: out of memory|HIP out of memory"
        r"|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|NCCL error.{0,80}\bout of memory"
        r"|Cuda failure (\d+ )?'out of memory'|CUDNN_STATUS_ALLOC_FAILED|Tried to allocate [\d.]+ ?[KMGT]iB",
        "category": "gpu_oom",
        "why": "GPU memory exhausted",
    },
    {
        "id": "log.device-assert",
        "log": r"device-side assert(ion)? triggered|(block|thread): \[[\d, ]{1,40}\].{0,80}Assertion .{0,200} failed",
        "category": "user_code",
        "why": "CUDA device-side assert (an index or value out of range in the program)",
    },
    {
        # Before host memory: torch's shared-memory file failing says "Cannot allocate memory" too.
        "id": "log.torch-shm",
        "log": r"unable to (open|write to|mmap)[^\n]{0,40}(shared memory|</torch_|/dev/shm)",
        "category": "infra",
        "why": "shared memory (/dev/shm) too small for DataLoader workers' tensors",
    },
    {
        "id": "log.host-oom",
        "log": r"Out of memory: Kill(ed)? process|\boom-kill\b|invoked oom-killer|oom_reaper|Killed process \d+"
        r"|out-of-memory handler|\bline \d+: +\d+ Killed\b"
        r"|\bOOMKilled\b|low on resource: memory|running low on memory|memory usage threshold"
        r"|exceeded (its |the )?(request(ed)? |limit(ed)? )?memory|memory cgroup out of memory"
        r"|DataLoader worker \(pid[^)]{0,40}\) is killed by signal: Killed|std::bad_alloc"
        r"|Cannot allocate memory|task \d+: Killed|(?:^|[\s\]|])Killed\s*$|oom_kill_process"
        r"|Unable to allocate [\d.]+ ?[KMGT]i?B"
        r"|<Signals\.SIGKILL: 9>|Signal 9 \(SIGKILL\) received|returned non-zero exit status -9\b"
        r"|killed due to memory pressure|ray\.exceptions\.OutOfMemoryError|RayOutOfMemoryError"
        r"|DefaultCPUAllocator: (can't allocate memory|not enough memory)"
        # A node condition the kubelet reports when it evicts for memory.
        r"|\bMemoryPressure\b",
        "category": "host_oom",
        "why": "host memory exhausted: the kernel OOM killer or the container memory limit",
    },
    {
        "id": "log.shm",
        "log": r"insufficient shared memory|/dev/shm|is killed by signal: Bus error|No space left on device"
        r"|Disk quota exceeded|Read-only file system|Stale file handle|PytorchStreamWriter failed writing"
        r"|PyTorchFileWriter\("
        r"|Transport endpoint is not connected|\[Errno (5|24|28|30|116|122)\]|Input/output error|Too many open files"
        r"|can't start new thread"
        # The kubelet's node-pressure eviction for disk (its DisruptionTarget message names the resource).
        r"|low on resource: (ephemeral-storage|nodefs|imagefs)|ephemeral local storage usage exceeds"
        r"|exceeded its local ephemeral storage limit|\b(DiskPressure|PIDPressure)\b"
        # A network filesystem failing (EREMOTEIO, a corrupted one), Rust's io::ErrorKind for a full, read-only or
        # over-quota disk (safetensors, tokenizers), errno by name.
        r"|Remote I/O error|Structure needs cleaning|\[Errno (117|121)\]"
        r"|kind: (StorageFull|QuotaExceeded|ReadOnlyFilesystem)"
        r"|\b(errno|os error)[ =:]{0,3}(28|30|116|122)\b|\bE(NOSPC|DQUOT|ROFS|STALE|REMOTEIO)\b",
        "category": "infra",
        "why": "storage or shared memory exhausted or broken (disk full, /dev/shm too small, stale mount)",
    },
    {
        "id": "log.environment",
        "log": r"cannot open shared object file|libcuda\.so|CUDA driver version is insufficient"
        r"|driver on your system is too old"
        r"|no CUDA-capable device|Found no NVIDIA driver|NVIDIA-SMI has failed|ErrImagePull|ImagePullBackOff"
        r"|No CUDA GPUs are available|cudaErrorInsufficientDriver|CUDA_ERROR_NO_DEVICE"
        r"|CUDA error: initialization error|cudaErrorNoDevice|busy or unavailable|Failed to pull image"
        r"|pull access denied|manifest unknown|CreateContainerConfigError|FailedMount|MountVolume\.SetUp failed"
        r"|Unable to attach or mount volumes|HTTPSConnectionPool|Max retries exceeded with url|LocalEntryNotFoundError"
        r"|(401|403|429) Client Error|Too Many Requests|error while loading shared libraries"
        r"|requests\.exceptions\.(ConnectionError|ConnectTimeout|ReadTimeout|SSLError|ProxyError)"
        r"|urllib3\.exceptions\.\w+Error|ReadTimeoutError|CERTIFICATE_VERIFY_FAILED"
        # Kubernetes could not place, start or give storage to the pod.
        r"|FailedScheduling|Insufficient nvidia\.com/gpu|FailedAttachVolume|Multi-Attach error|FailedCreatePodSandBox"
        r"|\b(StartError|ContainerCannotRun|RunContainerError)\b" + _DRIVER_STACK,
        "category": "infra",
        "why": "no usable GPU, driver or library in the container",
    },
    {
        # A scheduler's own statement that it ended the job: before a lost node (a preempted node is
        # lost too, and the preemption is the cause).
        "id": "log.scheduler",
        "log": r"DUE TO (TIME LIMIT|PREEMPTION)|preemption notice"
        r"|spot (instance )?(interruption|termination)|PreemptionByScheduler|EvictionByEvictionAPI"
        r"|TerminationByKubelet|maintenance event|termination is imminent|imminent node shutdown"
        # Clouds' and clusters' words for reclaiming a healthy machine: AWS's spot interruption and rebalance
        # notices (instance-action), Azure's scheduled Preempt event, the kubelet's graceful node shutdown, a
        # node drained by an operator or the autoscaler, Slurm/Lightning requeueing the job.
        r"|instance-action|rebalance recommendation|SpotInterruption|\"EventType\": ?\"Preempt\""
        r"|graceful node shutdown|\bNodeShutdown\b|Evicting pod|evicted by (the )?(scheduler|cluster-autoscaler|kueue)"
        r"|\bdrain(ing|ed)? (the )?node\b|auto-requeue|requeu(e|ing) (the )?job|JOB REQUEUE",
        "category": "preemption",
        "why": "the scheduler preempted the job or its time limit ran out",
    },
    {
        "id": "log.node-lost",
        "log": r"missed too many heartbeats|has been marked dead|node it was running on is dead|RAY_NODE_REMOVED"
        r"|\bNodeLost\b|\bNotReady\b|\bNODE_FAIL\b|node .{0,60} (is|was) dead|heartbeat.{0,40}(timed out|missed|lost)"
        r"|lost contact with the node|node (was )?removed|\bnode has died|\bnode died\b"
        # Slurm ending a job because one of its nodes failed.
        r"|DUE TO NODE FAIL",
        "category": "node_lost",
        "why": "a node stopped reporting (heartbeats missed, NotReady, node removed)",
    },
    {
        # The bare word, after the node-lost facts: Ray lists "preempted node" among the possible causes
        # of a node it marked dead, which is no statement that it was.
        "id": "log.preempted",
        "log": r"\bpreempt(ed|ion)\b",
        "category": "preemption",
        "why": "the job or its node was preempted",
    },
    {
        "id": "log.nccl-invalid-usage",
        "log": r"ncclInvalidUsage|ncclInvalidArgument|invalid (usage|argument) \(run with NCCL_DEBUG"
        r"|Duplicate GPU detected",
        "category": "user_code",
        "why": "NCCL refused the job's configuration (invalid usage or argument, e.g. two ranks on one GPU)",
    },
    {
        "id": "log.job-setup",
        "log": r"Detected mismatch between collectives|CollectiveFingerPrint|invalid device ordinal"
        r"|cudaErrorInvalidDevice\b"
        r"|CUDA_ERROR_INVALID_DEVICE\b",
        "category": "user_code",
        "why": "the job's set-up: ranks issued different collectives, or a rank asked for a GPU that does not exist",
    },
    {
        "id": "log.name-resolution",
        "log": r"Temporary failure in name resolution|Name or service not known|nodename nor servname"
        r"|getaddrinfo failed|No address associated with hostname|Could not resolve host|Name does not resolve"
        r"|nslookup: can't resolve|socket\.gaierror",
        "category": "network",
        "why": "the master's or a peer's host name does not resolve (DNS)",
    },
    {
        "id": "log.ib",
        "log": r"NCCL WARN NET/IB|transport retry counter exceeded|ibv_\w+ failed|IBV_WC_\w+"
        # The network named by the system: no usable interface for NCCL's bootstrap, its socket transport failing,
        # UCX or a Mellanox NIC reporting an error, a NIC link down, errno's unreachable host/network.
        r"|no socket interface found|No usable (network )?interface|NET/Socket[^\n]{0,80}\b(failed|error)\b"
        r"|UCX +ERROR|\bmlx5\w*:[^\n]{0,80}\b(error|failed)\b|NIC Link is Down|\bE(HOST|NET)UNREACH\b"
        r"|\[Errno (101|113)\]|No route to host|Network is unreachable|Software caused connection abort"
        # NCCL's bootstrap cannot open a socket to a peer's address (not a peer that went away), a work completion
        # with an error on the NIC, gloo finding no address on the interface it was told to use.
        r"|socketStartConnect: Connect to [^\n]{0,120} failed"
        r"|got completion (from peer [^\n]{0,80})?with error|Unable to find address for:? ?\w+"
        # AWS's EFA plugin (aws-ofi-nccl / libfabric) failing on the interconnect.
        r"|NET/OFI[^\n]{0,160}\b(failed|error)\b",
        "category": "network",
        "why": "interconnect failure (InfiniBand/RoCE/socket system error)",
    },
    {
        "id": "log.watchdog-timeout",
        "log": r"Watchdog caught collective operation timeout|ran for \d+ milliseconds before timing out"
        r"|Timed out waiting \d+ ?ms|Some NCCL operations have failed or timed out"
        r"|failed to pass monitoredBarrier|Application timeout caused pair closure",
        "secondary": "timeout",
        "why": "timed out waiting for a peer in a collective",
    },
    {
        # After the collective timeouts (see nccl.watchdog-stuck): the process's own watchdog stuck.
        "id": "log.watchdog-stuck",
        "log": r"watchdog (thread )?(got )?stuck|Heartbeat monitor timed out",
        "category": "hang",
        "weak": True,
        "why": "its own NCCL watchdog got stuck: the process stopped making progress",
    },
    {
        "id": "log.peer-gone",
        "log": r"Connection closed by (peer|remote peer|localRank)|Connection reset by peer"
        r"|communicator (was|has been) aborted"
        r"|ProcessGroupNCCL is aborted|remote process exited or there was a network error|ncclRemoteError"
        r"|peer .{0,40}closed (the )?connection|Call to (send|recv)[^\n]{0,160}failed ?: ?Broken pipe"
        r"|HorovodInternalError|Horovod has been shut down|lost communication with a remote daemon",
        "secondary": "peer",
        "why": "lost its connection to a peer that had died",
    },
    {
        # NCCL's generic system error, after the echoes: with the peer's socket closing as its "Last error" it is
        # that echo (above); with an interconnect token, log.ib; alone, a weak network failure.
        "id": "log.nccl-system-error",
        "log": r"unhandled system error|ncclSystemError",
        "category": "network",
        "weak": True,
        "why": "NCCL system error (a socket or system call failed; a dying peer causes it too)",
    },
    {
        "id": "log.ray-actor-died",
        "log": r"The actor is dead because its worker process has died|ActorDiedError|actor died unexpectedly",
        "secondary": "peer",
        "why": "Ray: an actor it called has died (the death of another process)",
    },
    {
        # After the actor's death as its caller sees it: the raylet's own report of a worker on this node dying
        # of a system error (no Python exception: SIGKILL, most often the OOM killer, which Ray lists first).
        # Weak, as a bare SIGKILL is.
        "id": "log.ray-worker-system-error",
        "log": r"Worker exit type: SYSTEM_ERROR|Worker unexpectedly exits with a connection error code",
        "category": "host_oom",
        "weak": True,
        "why": "Ray: a worker on this node was killed by the system (most often the OOM killer)",
    },
    {
        "id": "log.address-in-use",
        "log": r"Address already in use|\bEADDRINUSE\b|errno: 98\b",
        "category": "infra",
        "why": "the rendezvous port is already taken on the node (a leftover process or another job)",
    },
    {
        "id": "log.store-gone",
        "log": r"DistNetworkError|DistStoreError|RendezvousConnectionError|RendezvousClosedError"
        r"|Failed to recv, got 0 bytes|TCPStore.{0,80}(failed|error|timeout)|The server socket has failed"
        r"|c10d key-value store|store->get\(|waitForInput|RendezvousTimeoutError|in store based barrier"
        r"|\bSocket Timeout\b|Stop_waiting response is expected|RendezvousGracefulExitError",
        "secondary": "store",
        "why": "lost the c10d rendezvous store",
    },
    {
        # SIGBUS (see launcher.sigbus): shared memory or a mapped file without backing storage, before the
        # native-crash signs.
        "id": "log.sigbus",
        "log": r"\bSIGBUS\b|\bBus error\b|Signal 7 \(SIG|signal 7\b|returned non-zero exit status -7\b",
        "category": "infra",
        "why": "SIGBUS: shared memory (/dev/shm) or a memory-mapped file without backing storage",
    },
    {
        "id": "log.native-crash",
        "log": r"Segmentation fault|(received|got|caught|by) signal:? ?(SIG)?(SEGV|ABRT|ILL|FPE)\b"
        r"|\bSIG(SEGV|ABRT|ILL|FPE) received|signal \d+ \(SIG(SEGV|ABRT|ILL|FPE)\)|core dumped"
        r"|\*\*\* SIG(SEGV|ABRT|ILL|FPE) \(@"
        r"|Fatal Python error|terminate called after throwing|Illegal instruction|\*\*\* Process received signal"
        r"|Assertion `.{0,200}' failed|<Signals\.SIG(SEGV|ABRT|ILL|FPE): \d+>"
        r"|Signal (4|6|8|11) \(SIG\w+\) received|returned non-zero exit status -(4|6|8|11)\b|double free"
        r"|free\(\): invalid|corrupted (size|double-linked)|malloc\(\): |stack smashing detected"
        r"|an illegal instruction was encountered|cudaErrorIllegalInstruction|misaligned address"
        r"|cudaErrorMisalignedAddress",
        "category": "crash",
        "why": "a native crash (segfault, abort, bus error, illegal instruction)",
    },
    {
        # Last of the log rules: the launcher stopping this pod's workers because the job is being torn
        # down (torchrun's agent, DeepSpeed's launcher, mp.spawn, srun). The root's own log says so too,
        # after its own failure, which an earlier rule or the launcher's failure summary then names.
        "id": "log.teardown",
        "log": r"closing signal SIGTERM|Closing process \d+ via signal|Received \d+ death signal|via signal SIGTERM"
        r"|Killing subprocess \d+|: Terminated\s*$|CANCELLED AT \S+ \*\*\*|Force Terminated"
        r"|got signal: ?(15|SIGTERM)\b",
        "secondary": "teardown",
        "why": "its workers were stopped because the job was being torn down",
    },
    # --- Exit codes (Kubeflow ExitCode policy) and signals --------------------------------------------
    {"id": "exit.teardown", "exit_code": [130, 143], "secondary": "teardown", "why": "terminated by SIGTERM/SIGINT"},
    {"id": "exit.sigkill", "exit_code": [137], "secondary": "teardown", "why": "killed (SIGKILL) from outside"},
    {
        "id": "exit.crash",
        "exit_code": [132, 134, 136, 139],
        "category": "crash",
        "why": "native crash (SIGILL/SIGABRT/SIGFPE/SIGSEGV)",
    },
    {
        "id": "exit.sigbus",
        "exit_code": [135],
        "category": "infra",
        "why": "SIGBUS: shared memory (/dev/shm) or a memory-mapped file without backing storage",
    },
    {
        # The kubelet reports 128 for a container the runtime could not start (StartError, ContainerCannotRun:
        # a missing mount, the NVIDIA prestart hook failing): the node's runtime, not the program.
        "id": "exit.start-failed",
        "exit_code": [128],
        "category": "infra",
        "why": "the container runtime could not start the container (exit code 128)",
    },
    {
        "id": "exit.code-2",
        "exit_code": [2],
        "category": "user_code",
        "why": "the program exited with code 2 (sys.exit(2) or a command-line usage error)",
    },
    {
        "id": "exit.command",
        "exit_code": [126, 127],
        "category": "user_code",
        "why": "the container command is missing or not executable",
    },
    {
        "id": "exit.user-retryable",
        "exit_code": [138],
        "category": "user_code",
        "retryable": True,
        "why": "exited with the user-retryable code 138 (SIGUSR1)",
    },
    {
        "id": "exit.nonzero",
        "exit_code": list(range(1, 256)),
        "category": "user_code",
        "weak": True,
        "why": "exited non-zero without an error file",
    },
    {
        "id": "signal.crash",
        "signal": [4, 5, 6, 8, 11, 31],
        "category": "crash",
        "why": "native crash (SIGSEGV/SIGABRT/SIGFPE/SIGILL)",
    },
    {
        "id": "signal.sigbus",
        "signal": [7],
        "category": "infra",
        "why": "a worker died of SIGBUS: shared memory (/dev/shm) or a memory-mapped file without backing storage",
    },
    {
        "id": "signal.sigkill",
        "signal": [9],
        "category": "host_oom",
        "why": "a worker was SIGKILLed (the kernel OOM killer)",
    },
    {"id": "signal.teardown", "signal": [1, 2, 15], "secondary": "teardown", "why": "terminated by a signal"},
    # --- Kubernetes -----------------------------------------------------------------------------------
    {
        "id": "k8s.oomkilled",
        "reason": "OOMKilled",
        "category": "host_oom",
        "why": "container memory limit hit: OOMKilled",
    },
    {
        "id": "k8s.container-unknown",
        "reason": "ContainerStatusUnknown",
        "category": "node_lost",
        "why": "container status unknown: its node was lost",
    },
    {"id": "k8s.evicted", "reason": "Evicted", "category": "preemption", "why": "evicted by the kubelet"},
    {
        "id": "k8s.start-error",
        "reason": ["StartError", "ContainerCannotRun", "CreateContainerError"],
        "category": "infra",
        "why": "the container could not start",
    },
    {
        "id": "k8s.preempted",
        "disruption": [
            "PreemptionByScheduler",
            "PreemptionByKubeScheduler",
            "EvictionByEvictionAPI",
            "TerminationByKubelet",
        ],
        "category": "preemption",
        "why": "preempted/evicted from outside (DisruptionTarget)",
    },
    {
        "id": "k8s.taint-deleted",
        "disruption": ["DeletionByTaintManager", "DeletionByPodGC"],
        "category": "node_lost",
        "why": "deleted because its node was lost (DisruptionTarget)",
    },
    {
        "id": "k8s.node-lost",
        "phase": ["Unknown", "NodeLost"],
        "category": "node_lost",
        "why": "pod phase Unknown / NodeLost: its node stopped reporting",
    },
]


def _defaults(items: Sequence[Mapping[str, Any]]) -> RuleSet:
    return RuleSet(tuple(rule_from_dict(d, "built-in", i) for i, d in enumerate(items)), source="built-in")


DEFAULT_RULES: RuleSet = _defaults(_B)


def rule_ids(rules: Iterable[Rule]) -> list[str]:
    return [r.id for r in rules]
