"""Plain typed data shared by every stage: what we know of an incident, and what we decide.

Data flows one way — error file → sidecar → gRPC → incident → verdict → publishers — and these are
the shapes at the two ends that matter most: `Incident` (everything known about the members of one
failed job attempt) is the only input of the decision engine, and `Verdict` is its only output.
Both are frozen dataclasses with no behaviour beyond (de)serialisation, so that the engine stays a pure
function and `podmortem analyze` (offline bundles) and the aggregator (live gRPC events) feed it the
same thing.

All times are float seconds since the Unix epoch. Times that come from a pod's own clock (error-file
timestamps, container startedAt/finishedAt, log lines) are kept as the pod wrote them; the member's
`clock_offset` (aggregator clock = pod clock + offset), when the sidecar measured it, lets the engine
put them on one clock. Times from the control plane (deletionTimestamp, DisruptionTarget) and sidecar
observation times already converted by the aggregator are on the reference clock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from podmortem.core.categories import Category

if TYPE_CHECKING:  # flightrecorder builds on Frame: imported for the annotation only, never at run time
    from podmortem.core.flightrecorder import FRSummary

# Below this confidence a verdict is worded as "likely" and names its runner-up (report, annotations).
LOW_CONFIDENCE = 0.7


@dataclass(frozen=True)
class JobRef:
    namespace: str
    name: str
    kind: str = ""
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ErrorRecord:
    """A parsed TorchElastic error file (either format torch writes)."""

    message: str  # "ValueError: bad label" — bounded
    exception_type: str = ""  # "ValueError"; "" when the message names none
    traceback: str = ""  # extraInfo.py_callstack — bounded, tail kept
    timestamp: int | None = None  # whole seconds, the writer's (pod) clock
    error_code: int | None = None  # added by the agent when it copied a worker's file
    truncated: bool = False
    size_bytes: int = 0
    parse_error: str = ""  # non-empty: the file exists but could not be parsed


@dataclass(frozen=True)
class Termination:
    """The training container's termination as the kubelet reports it."""

    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""  # Error, OOMKilled, Completed, ContainerStatusUnknown
    message: str = ""
    started_at: float | None = None  # pod clock
    finished_at: float | None = None  # pod clock
    restart_count: int = 0


# A pod's phases once it has stopped (Unknown: its node stopped reporting it).
ENDED_PHASES = frozenset({"Failed", "Succeeded", "Unknown"})


def has_ended(phase: str, termination: Termination | None) -> bool:
    """Has the training container's end (or the pod's) been seen: its termination, or a phase that comes
    after it? The one meaning of a pod's end, whether read from a Pod object or from a member's events."""
    return termination is not None or phase in ENDED_PHASES


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: float | None = None


@dataclass(frozen=True)
class Frame:
    """One frame of a Python stack: where a worker was (file as the stack printed it)."""

    file: str
    line: int | None
    function: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "function": self.function}

    def where(self) -> str:
        """`train.py:211 in load_batch` (the file's base name: what a person greps for)."""
        base = self.file.replace("\\", "/").rsplit("/", 1)[-1]
        at = f"{base}:{self.line}" if self.line is not None else base
        return f"{at} in {self.function}" if self.function else at


@dataclass(frozen=True)
class WorkerCapture:
    """What was captured from one worker process while it hung or as it was torn down.

    `path` says how: `control_plane` (torch's worker socket), `py_spy`, `fr_file` (a Flight Recorder dump
    file), or `sigterm_stack` (a faulthandler dump the engine found in the member's log tail). The stack
    is text as the tool printed it (bounded by whoever captured it); the Flight Recorder state is the
    compact summary of `podmortem.core.flightrecorder`, never the dump itself.
    """

    path: str
    local_rank: int | None = None
    global_rank: int | None = None
    stack: str = ""
    flight_recorder: FRSummary | None = None
    note: str = ""  # e.g. "timed out after 2 s", "cut at 64 KiB", "refused: pickle names os.system"
    trigger: str = ""  # stall | first_timeout | teardown
    captured_at: float | None = None  # reference clock


def evolve(member: Member, **changes: Any) -> Member:
    """`dataclasses.replace` for a Member, without re-running `__init__` over its ~25 fields.

    The fold applies a few events to every member of a 10,000-pod bundle, so each copy counts
    (`bench/analyze_speed.py --profile` times loading). Member has no `__post_init__` and no slots, so a
    copy of its attributes with `changes` laid over them is the same object `replace` builds; unknown
    field names are refused as there.
    """
    unknown = changes.keys() - _MEMBER_FIELDS
    if unknown:
        raise TypeError(f"Member has no field(s) {sorted(unknown)}")
    new = object.__new__(Member)
    new.__dict__.update(member.__dict__)
    new.__dict__.update(changes)
    return new


@dataclass(frozen=True)
class Member:
    """One pod of the job, with everything observed about it."""

    pod: str
    namespace: str = ""
    node: str = ""
    rank: int | None = None  # torchrun node rank when known
    replica_type: str = ""
    replica_index: int | None = None
    pod_ip: str = ""
    phase: str = ""  # Running, Succeeded, Failed, Unknown
    phase_reason: str = ""  # e.g. NodeLost
    running: bool = False  # the container is still reported running (lost node: never finished)
    error: ErrorRecord | None = None
    termination: Termination | None = None
    conditions: tuple[Condition, ...] = ()
    deleted_at: float | None = None  # deletionTimestamp (control plane clock)
    log_tail: str = ""
    # Reference-clock times at which the sidecar observed things (sub-second).
    error_observed_at: float | None = None
    termination_observed_at: float | None = None
    # aggregator/reference clock = pod clock + clock_offset; None when never measured.
    clock_offset: float | None = None
    clock_round_trip: float | None = None
    # Stacks and Flight Recorder state captured from its workers (stall, first timeout, teardown).
    captures: tuple[WorkerCapture, ...] = ()

    @property
    def ended(self) -> bool:
        """Is this member's end known (`has_ended`)?"""
        return has_ended(self.phase, self.termination)

    @property
    def succeeded(self) -> bool:
        """Did this member end successfully: its training container exited 0, or its pod's phase is
        Succeeded with no other exit code seen?"""
        t = self.termination
        if t is not None and t.exit_code == 0:
            return True
        return self.phase == "Succeeded" and (t is None or t.exit_code in (None, 0))

    def condition(self, type_: str) -> Condition | None:
        for c in self.conditions:
            if c.type == type_:
                return c
        return None


# No training job has more pods than this. A larger size from outside (a sidecar's hint, a job's spec, a
# bundle's incident.json) is capped or refused where it enters: the engine enumerates the ranks of a job.
MAX_WORLD_SIZE = 65_536


@dataclass(frozen=True)
class Incident:
    job: JobRef
    world_size: int
    members: tuple[Member, ...]
    attempt: str = ""
    incident_id: str = ""
    opened_at: float | None = None
    # Decided while the pods still run (a stall): nothing has failed yet, the verdict is provisional.
    provisional: bool = False
    # When the stall of this attempt that a provisional verdict is about was first seen (reference clock);
    # None: none was published, or it was withdrawn (the job moved again). The incident page draws it.
    stalled_at: float | None = None


@dataclass(frozen=True)
class HangFinding:
    """What the cross-rank matcher (`podmortem.core.hangs`) found in the captured evidence of a hang.

    `finding` is `behind` (ranks never entered the collective the others wait in), `mismatch` (ranks in the
    same collective with different operations, sizes or dtypes) or `all_in` (every rank inside the same
    collective, none behind: the collective itself is stuck). Ranks are global ranks.
    """

    finding: str
    stuck_ranks: tuple[int, ...]
    stuck_pods: tuple[str, ...]
    process_group: str
    seq: int | None
    op: str
    frame: Frame | None
    path: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "finding": self.finding,
            "stuck_ranks": list(self.stuck_ranks),
            "stuck_pods": list(self.stuck_pods),
            "process_group": self.process_group,
            "seq": self.seq,
            "op": self.op,
            "frame": self.frame.to_dict() if self.frame is not None else None,
            "path": self.path,
            "detail": self.detail,
        }

    @classmethod
    def from_dict(cls, doc: Any) -> HangFinding | None:
        """A finding from `to_dict`'s document (a verdict file's or annotation's `hang`, read back as untrusted
        data); None when it is not one. Fields of the wrong type are read as absent."""
        if not isinstance(doc, dict) or not isinstance(doc.get("finding"), str):
            return None

        def integer(v: Any) -> int | None:
            return v if isinstance(v, int) and not isinstance(v, bool) else None

        raw = doc.get("frame")
        frame = None
        if isinstance(raw, dict):
            frame = Frame(str(raw.get("file") or ""), integer(raw.get("line")), str(raw.get("function") or ""))
        ranks, pods = doc.get("stuck_ranks"), doc.get("stuck_pods")
        return cls(
            finding=doc["finding"],
            stuck_ranks=tuple(r for r in ranks if integer(r) is not None) if isinstance(ranks, list) else (),
            stuck_pods=tuple(p for p in pods if isinstance(p, str)) if isinstance(pods, list) else (),
            process_group=str(doc.get("process_group") or ""),
            seq=integer(doc.get("seq")),
            op=str(doc.get("op") or ""),
            frame=frame,
            path=str(doc.get("path") or ""),
            detail=str(doc.get("detail") or ""),
        )


@dataclass(frozen=True)
class Secondary:
    pod: str
    reason: str  # why it is judged a victim, e.g. "gloo: connection closed by peer"


@dataclass(frozen=True)
class Verdict:
    """The engine's decision. `pod` is None for an incident with no failure (clean exit)."""

    pod: str | None
    category: Category | None
    retryable: bool | None
    summary: str  # one or two lines a person can act on
    rank: int | None = None
    node: str = ""
    exception_type: str = ""
    message: str = ""  # excerpt of the root failure's own message
    evidence: tuple[str, ...] = ()
    secondary: tuple[Secondary, ...] = ()
    confidence: float = 0.0
    rule: str = ""  # id of the rule that classified the root failure
    decided_by: str = ""  # which step decided: "earliest own failure", "hang attribution", "named by victims", ...
    source: str = ""  # where the root's failure was read: "error file", "log", "termination", "condition", ...
    global_rank: int | None = None  # the worker rank that failed first, when a log or error file says
    failed_at: float | None = None  # when the root failed, on the reference clock
    members_missing: int = 0  # members of the job that had not reported when this was decided
    # Which ones, when the present members' node ranks say: their node ranks, and their pod names when the present
    # pods' names follow one pattern of rank (PyTorchJob's master-0/worker-N, or name-N).
    missing_ranks: tuple[int, ...] = ()
    missing_pods: tuple[str, ...] = ()
    # The next most likely root, named when the verdict is not certain (confidence below LOW_CONFIDENCE).
    runner_up_pod: str | None = None
    runner_up_category: Category | None = None
    # What the captured stacks and Flight Recorder state of a hang say (None without such evidence).
    hang: HangFinding | None = None

    @property
    def uncertain(self) -> bool:
        """A verdict to be read as "likely", with its runner-up, rather than as an assertion."""
        return self.pod is not None and self.confidence < LOW_CONFIDENCE

    def to_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict: it deep-copies every field, and did the victims twice (0.06-0.1 s for
        # 10,000 of them). The other fields are str, numbers, None or a Category (a str).
        d = {name: getattr(self, name) for name in _VERDICT_FIELDS}
        d["evidence"] = list(self.evidence)
        d["secondary"] = [{"pod": s.pod, "reason": s.reason} for s in self.secondary]
        d["hang"] = self.hang.to_dict() if self.hang is not None else None
        return d

    def root_cause(self) -> dict[str, Any]:
        """The scorer's shape: {"pod", "category", "retryable"}."""
        return {"pod": self.pod, "category": self.category, "retryable": self.retryable}


_MEMBER_FIELDS = frozenset(f.name for f in dataclasses.fields(Member))
_VERDICT_FIELDS = tuple(f.name for f in dataclasses.fields(Verdict))
