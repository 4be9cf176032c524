"""Between the typed model and the gRPC contract: build events, and fold events into a Member.

Every observation — an error file the sidecar parsed, a container termination, a DisruptionTarget
condition, a deletion, a log tail — travels as a `podmortem.v1.Event`, whether the sidecar saw it, the
aggregator's pod watch saw it, or `podmortem analyze` read it from a bundle. `apply_event` is the one
fold from events to the `Member` the engine judges, so the three paths cannot drift apart.

Event ids: facts read from a Pod get deterministic ids (pod uid + what + generation), so the same
fact seen twice — by a restarted sidecar, or by the sidecar and the aggregator's watch — is one event.
Error-file events are keyed by a hash of their content for the same reason.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import os
import time
from collections.abc import Callable
from typing import Any, Literal, overload

from google.protobuf.timestamp_pb2 import Timestamp

from podmortem.core.finite import finite_or_none, valid_timestamp
from podmortem.core.model import Condition, ErrorRecord, Member, Termination, WorkerCapture, evolve
from podmortem.core.podstatus import PodSnapshot
from podmortem.protocol.v1 import collector_pb2 as pb


def _sha256_constructor() -> Callable[[bytes], Any]:
    """SHA-256 from CPython's own C module, as `random` takes SHA-512 (`from _sha512 import sha512`):
    `import hashlib` loads OpenSSL's digests, ~0.65 MiB of RSS in every sidecar for one hash a failure.
    Same digest; hashlib where the module has another name."""
    for module, name in (("_sha256", "sha256"), ("_sha2", "sha256")):  # CPython 3.11; 3.12 and later
        try:
            return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.sha256


sha256 = _sha256_constructor()

PayloadKind = Literal["error_file", "termination", "condition", "deletion", "log_tail", "activity", "capture"]
Payload = pb.ErrorFile | pb.Termination | pb.PodCondition | pb.Deletion | pb.LogTail | pb.Activity | pb.Capture


@overload
def to_ts(seconds: float) -> Timestamp: ...
@overload
def to_ts(seconds: None) -> None: ...
def to_ts(seconds: float | None) -> Timestamp | None:
    if seconds is None:
        return None
    ts = Timestamp()
    whole = int(seconds // 1)
    ts.seconds = whole
    ts.nanos = round((seconds - whole) * 1e9) % 1_000_000_000
    return ts


def from_ts(ts: Timestamp, present: bool = True) -> float | None:
    if not present:
        return None
    return ts.seconds + ts.nanos / 1e9


# -- numbers from the wire: refused before anything keeps them (`podmortem.core.finite`) -------------------

# The most a clock estimate may say the pod's clock is off by, or a probe's round trip took: beyond, the
# estimate is a bug or a lie, and dropped (the pod's own clock is used as it is).
MAX_CLOCK_OFFSET = 10 * 86400.0
MAX_ROUND_TRIP = 3600.0
# Timestamp fields of each payload (and the Event's own `wall_time`).
_TIMESTAMPS: dict[str, tuple[str, ...]] = {
    "termination": ("started_at", "finished_at"),
    "condition": ("last_transition_time",),
    "deletion": ("deletion_timestamp",),
    "activity": ("last_progress",),
}


def _bad_ts(holder: Any, name: str) -> bool:
    if not holder.HasField(name):
        return False
    ts = getattr(holder, name)
    return not valid_timestamp(ts.seconds, ts.nanos)


def sanitized(event: pb.Event) -> tuple[pb.Event, tuple[str, ...]]:
    """`event` without the times protobuf's `Timestamp` may not hold (nanos outside [0, 1e9), seconds
    outside years 1-9999, an error file's own timestamp likewise): each such field is cleared, as if it had
    not been sent, and named in the second element (the caller counts it). The event itself is kept; it is
    returned as it came (not copied) when every time in it is valid."""
    kind = event.WhichOneof("payload")
    body = getattr(event, kind) if kind else None
    bad: list[str] = []
    if _bad_ts(event, "wall_time"):
        bad.append("wall_time")
    for name in _TIMESTAMPS.get(kind or "", ()):
        if _bad_ts(body, name):
            bad.append(f"{kind}.{name}")
    if kind == "error_file" and event.error_file.HasField("timestamp"):
        if not valid_timestamp(event.error_file.timestamp):
            bad.append("error_file.timestamp")
    if not bad:
        return event, ()
    kept = pb.Event()
    kept.CopyFrom(event)
    for name in bad:
        holder, _, field = name.rpartition(".")
        (getattr(kept, holder) if holder else kept).ClearField(field)
    return kept, tuple(bad)


def hold_seconds(hold: pb.Hold) -> float | None:
    """A hold's timeout in seconds, or None when it is not a finite number >= 0 (NaN, infinite, negative)."""
    seconds = finite_or_none(hold.timeout_seconds)
    return seconds if seconds is not None and seconds >= 0 else None


def clock_estimate(estimate: pb.ClockEstimate) -> tuple[float, float] | None:
    """(offset, round trip) in seconds of a sidecar's clock estimate, or None when it is not plausible:
    an offset beyond MAX_CLOCK_OFFSET, a round trip negative or beyond MAX_ROUND_TRIP."""
    offset, round_trip = estimate.offset_ns / 1e9, estimate.round_trip_ns / 1e9
    if abs(offset) > MAX_CLOCK_OFFSET or not 0.0 <= round_trip <= MAX_ROUND_TRIP:
        return None
    return offset, round_trip


def error_to_pb(rec: ErrorRecord) -> pb.ErrorFile:
    msg = pb.ErrorFile(
        message=rec.message,
        exception_type=rec.exception_type,
        traceback=rec.traceback,
        truncated=rec.truncated,
        size_bytes=rec.size_bytes,
        parse_error=rec.parse_error,
    )
    if rec.timestamp is not None:
        msg.timestamp = rec.timestamp
    if rec.error_code is not None:
        msg.error_code = rec.error_code
    return msg


def error_from_pb(msg: pb.ErrorFile) -> ErrorRecord:
    return ErrorRecord(
        message=msg.message,
        exception_type=msg.exception_type,
        traceback=msg.traceback,
        timestamp=msg.timestamp if msg.HasField("timestamp") else None,
        error_code=msg.error_code if msg.HasField("error_code") else None,
        truncated=msg.truncated,
        size_bytes=msg.size_bytes,
        parse_error=msg.parse_error,
    )


def termination_to_pb(t: Termination, container: str = "") -> pb.Termination:
    msg = pb.Termination(reason=t.reason, message=t.message, restart_count=t.restart_count, container=container)
    if t.exit_code is not None:
        msg.exit_code = t.exit_code
    if t.signal is not None:
        msg.signal = t.signal
    if (ts := to_ts(t.started_at)) is not None:
        msg.started_at.CopyFrom(ts)
    if (ts := to_ts(t.finished_at)) is not None:
        msg.finished_at.CopyFrom(ts)
    return msg


def termination_from_pb(msg: pb.Termination) -> Termination:
    return Termination(
        exit_code=msg.exit_code if msg.HasField("exit_code") else None,
        signal=msg.signal if msg.HasField("signal") else None,
        reason=msg.reason,
        message=msg.message,
        started_at=from_ts(msg.started_at, msg.HasField("started_at")),
        finished_at=from_ts(msg.finished_at, msg.HasField("finished_at")),
        restart_count=msg.restart_count,
    )


def condition_to_pb(c: Condition) -> pb.PodCondition:
    msg = pb.PodCondition(type=c.type, status=c.status, reason=c.reason, message=c.message)
    if (ts := to_ts(c.last_transition_time)) is not None:
        msg.last_transition_time.CopyFrom(ts)
    return msg


def condition_from_pb(msg: pb.PodCondition) -> Condition:
    return Condition(
        type=msg.type,
        status=msg.status,
        reason=msg.reason,
        message=msg.message,
        last_transition_time=from_ts(msg.last_transition_time, msg.HasField("last_transition_time")),
    )


def make_event(
    payload: Payload,
    event_id: str | None = None,
    wall: float | None = None,
    monotonic_ns: int | None = None,
) -> pb.Event:
    """Wrap a payload in an Event stamped with this process's wall and monotonic clocks."""
    wall = time.time() if wall is None else wall
    event = pb.Event(
        id=event_id or os.urandom(16).hex(),
        monotonic_ns=time.monotonic_ns() if monotonic_ns is None else monotonic_ns,
    )
    whole = int(wall // 1)  # as to_ts, written in place (no Timestamp to build and copy)
    event.wall_time.seconds = whole
    event.wall_time.nanos = round((wall - whole) * 1e9) % 1_000_000_000
    getattr(event, _PAYLOAD_FIELD[type(payload)]).CopyFrom(payload)
    return event


_PAYLOAD_FIELD: dict[type, str] = {
    pb.ErrorFile: "error_file",
    pb.Termination: "termination",
    pb.PodCondition: "condition",
    pb.Deletion: "deletion",
    pb.LogTail: "log_tail",
    pb.Activity: "activity",
    pb.Capture: "capture",
}


def error_event_id(pod_key: str, rec: ErrorRecord) -> str:
    digest = sha256(
        f"{rec.message}\0{rec.timestamp}\0{rec.error_code}\0{rec.parse_error}\0{rec.size_bytes}".encode()
    ).hexdigest()[:20]
    return f"{pod_key}/error/{digest}"


LATEST_RUN = 1 << 30


def run_of(event: pb.Event) -> int:
    """The container run a termination event ends (the last part of its id, `events_from_snapshot`: an
    earlier run's end is seen after a restart); LATEST_RUN for every other event."""
    if event.WhichOneof("payload") != "termination":
        return LATEST_RUN
    run = event.id.rsplit("/", 1)[-1]
    return int(run) if run.isdigit() else LATEST_RUN


def events_from_snapshot(snap: PodSnapshot, previous: PodSnapshot | None = None) -> list[pb.Event]:
    """The failure facts a pod observation adds to the previous one (all of them when None)."""
    key = snap.uid or f"{snap.namespace}/{snap.name}"
    out: list[pb.Event] = []
    seen = previous
    if snap.last_termination is not None and (seen is None or seen.last_termination != snap.last_termination):
        # A restart happened: the earlier run's end is a fact too (generation restart_count - 1).
        gen = max(snap.restart_count - 1, 0)
        out.append(make_event(termination_to_pb(snap.last_termination, snap.container), f"{key}/termination/{gen}"))
    if snap.termination is not None and (seen is None or seen.termination != snap.termination):
        out.append(
            make_event(termination_to_pb(snap.termination, snap.container), f"{key}/termination/{snap.restart_count}")
        )
    old_conditions = set(seen.conditions) if seen is not None else set()
    for c in snap.conditions:
        if c not in old_conditions and c.status == "True":
            out.append(make_event(condition_to_pb(c), f"{key}/condition/{c.type}/{c.reason}"))
    if (snap.deleted_at is not None or snap.marked_lost) and (
        seen is None
        or (seen.deleted_at, seen.phase, seen.phase_reason) != (snap.deleted_at, snap.phase, snap.phase_reason)
    ):
        deletion = pb.Deletion(phase=snap.phase, reason=snap.phase_reason)
        if (ts := to_ts(snap.deleted_at)) is not None:
            deletion.deletion_timestamp.CopyFrom(ts)
        out.append(make_event(deletion, f"{key}/deletion/{snap.phase}/{snap.phase_reason}/{snap.deleted_at}"))
    return out


# In UTF-8 a character outside the BMP is 4 bytes whose first is F0-F4 (no other character's bytes are):
# each is replaced by splitting at that byte, in C, instead of a regular expression over every character.
_ASTRAL_LEADS = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")
_DROPPED = ("\ufe0f", "\ufe0e", "\u200d")  # variation selectors, zero-width joiner
_DROPPED_UTF8 = frozenset(c.encode() for c in _DROPPED)


def compact_text(text: str) -> str:
    """A log tail as a compact str: one character outside the Basic Multilingual Plane (gloo's "GLHF! 🏖️")
    makes CPython store the whole string at 4 bytes per character — 256 KiB for a 64 KiB tail, a GiB for a
    4,096-pod burst — and the variation selector that follows an emoji (U+FE0F) still 2 bytes. Such
    characters become "?" and the selectors and the zero-width joiner go: an ASCII tail stays 1 byte a
    character (no rule reads emoji). Other text (non-Latin scripts, box drawing) is kept as it is."""
    if text.isascii():
        return text
    return _compact_utf8(text.encode("utf-8", "surrogatepass"), "surrogatepass")  # a lone surrogate stays one


def tail_text(data: bytes) -> str:
    """A log tail's UTF-8 bytes (`LogTail.text`) as the compact str the engine reads (`compact_text`'s
    rule), built from the bytes, never from a wide str first. Bytes that are not UTF-8 become U+FFFD (the
    three after a stray lead byte of a 4-byte character go with it): garbage in, no error."""
    if data.isascii():
        return data.decode("ascii")
    return _compact_utf8(data, "replace")


def _compact_utf8(data: bytes, errors: str) -> str:
    """`compact_text` on UTF-8 bytes. The astral characters are replaced in the bytes (split at their first
    byte and joined, in C) and the selectors removed from the narrower str that gives, rather than a
    regular expression over every character (`bench/ingest_speed.py`)."""
    for lead in _ASTRAL_LEADS:
        if lead in data:
            parts = data.split(lead)
            # An emoji's selector or joiner right after it goes with it (the rest below): the str decoded
            # is then usually ASCII again, and the search below free.
            data = b"?".join([parts[0], *(p[6:] if p[3:6] in _DROPPED_UTF8 else p[3:] for p in parts[1:])])
    text = data.decode("utf-8", errors)
    for dropped in _DROPPED:
        if not text.isascii() and dropped in text:
            text = text.replace(dropped, "")
    return text


def utf8(data: bytes) -> bytes:
    """`data` as valid UTF-8 (invalid bytes replaced by U+FFFD), for `LogTail.text`: unchanged, and not
    copied, when it is valid already."""
    if data.isascii():
        return data
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")
    return data


def member_from_snapshot(snap: PodSnapshot) -> Member:
    """A Member with the identity a pod observation carries (facts come through `apply_event`)."""
    return Member(
        pod=snap.name,
        namespace=snap.namespace,
        node=snap.node,
        rank=snap.rank,
        replica_type=snap.replica_type,
        replica_index=snap.replica_index,
        pod_ip=snap.pod_ip,
        phase=snap.phase,
        phase_reason=snap.phase_reason,
        running=snap.running,
    )


def member_from_copies(
    snap: PodSnapshot, error: ErrorRecord | None = None, log: tuple[bytes, bool] | None = None
) -> Member:
    """A member from what was copied of its pod — the pod object, its error file, its log tail (bytes, and
    whether it was cut) — through the same fold as live events (an incident bundle, `kubectl podmortem`).
    No sidecar observed it: the observation stamps the fold sets (the time of reading) are cleared, and
    only the times the copies themselves carry are evidence."""
    key = snap.uid or f"{snap.namespace}/{snap.name}"
    member = member_from_snapshot(snap)
    events: list[pb.Event] = list(events_from_snapshot(snap))
    if error is not None:
        events.append(make_event(error_to_pb(error), error_event_id(key, error)))
    if log is not None:
        events.append(make_event(pb.LogTail(text=log[0], truncated=log[1]), f"{key}/log"))
    for event in events:
        member = apply_event(member, event)
    return evolve(member, error_observed_at=None, termination_observed_at=None)


def apply_event(member: Member, event: pb.Event, clock_offset: float | None = None) -> Member:
    """Fold one event into what is known of a member.

    `clock_offset` (reference = pod clock + offset) converts the event's pod-clock wall time into the
    reference-clock observation time; without it the pod clock is taken as is.
    """
    observed = from_ts(event.wall_time, event.HasField("wall_time"))
    if observed is not None and clock_offset is not None:
        observed += clock_offset
    kind = event.WhichOneof("payload")
    if kind == "error_file":
        rec = error_from_pb(event.error_file)
        if rec.parse_error and member.error is not None and not member.error.parse_error:
            return member  # a garbage rewrite does not erase a good record
        first_seen = member.error_observed_at
        if observed is not None and (first_seen is None or observed < first_seen):
            first_seen = observed
        return evolve(member, error=rec, error_observed_at=first_seen)
    if kind == "termination":
        term = termination_from_pb(event.termination)
        if member.termination is not None and member.termination.restart_count > term.restart_count:
            return member  # an older run's end arriving late
        seen_at = member.termination_observed_at if member.termination == term else observed
        return evolve(member, termination=term, running=False, termination_observed_at=seen_at)
    if kind == "condition":
        cond = condition_from_pb(event.condition)
        others = tuple(c for c in member.conditions if c.type != cond.type)
        return evolve(member, conditions=(*others, cond))
    if kind == "deletion":
        d = event.deletion
        return dataclasses.replace(
            member,
            deleted_at=from_ts(d.deletion_timestamp, d.HasField("deletion_timestamp")) or member.deleted_at,
            phase=d.phase or member.phase,
            phase_reason=d.reason or member.phase_reason,
        )
    if kind == "log_tail":
        return evolve(member, log_tail=tail_text(event.log_tail.text))
    if kind == "capture":
        return evolve(member, captures=(*member.captures, *captures_from_pb(event.capture, observed)))
    return member


def captures_from_pb(msg: pb.Capture, observed: float | None = None) -> tuple[WorkerCapture, ...]:
    """A `Capture`'s workers as the engine reads them. A Flight Recorder summary that does not read back
    (`FRSummary.from_json`: not JSON, a newer version, a field out of bounds) is left out and its worker's
    note says why; the worker's stack and the other workers are kept."""
    # Here, not at the top: the sidecar never reads a capture back, and flightrecorder (with pickletools)
    # would be resident in every training pod (tests/unit/test_sidecar_imports.py).
    from podmortem.core.flightrecorder import FlightRecorderError, FRSummary

    out = []
    for w in msg.workers:
        summary, note = None, w.note
        if w.flight_recorder:
            try:
                summary = FRSummary.from_json(w.flight_recorder)
            except FlightRecorderError as exc:
                why = f"flight recorder summary unreadable: {exc}"
                note = f"{note}; {why}" if note else why
        out.append(
            WorkerCapture(
                path=w.path,
                local_rank=w.local_rank if w.HasField("local_rank") else None,
                global_rank=w.global_rank if w.HasField("global_rank") else None,
                stack=w.stack,
                flight_recorder=summary,
                note=note,
                trigger=msg.trigger,
                captured_at=observed,
            )
        )
    return tuple(out)


# Captures and activity (proto `Activity`, `Capture`, `CaptureRequest`). The bounds are the proto's: a
# sender cuts text to them (`bounded_tail`), a receiver refuses a message over them (`check_*`), and no
# float on these messages may be NaN or infinite.
CAPTURE_PATHS = frozenset({"control_plane", "py_spy", "fr_file"})
CAPTURE_TRIGGERS = frozenset({"stall", "first_timeout", "teardown"})
REQUEST_TRIGGERS = frozenset({"stall", "first_timeout"})
STACK_LIMIT = 32 * 1024  # bytes of UTF-8, tail kept
FLIGHT_RECORDER_LIMIT = 64 * 1024  # bytes of a summary's JSON: never cut (it would not parse), refused
NOTE_LIMIT = 1024
MAX_WORKERS = 64  # WorkerCaptures in one Capture
REQUEST_ID_LIMIT = 128


class WireError(ValueError):
    """A capture or activity message outside its proto's bounds (a NaN, an unknown path, an oversized text)."""


def bounded_tail(text: str, limit: int) -> tuple[str, bool]:
    """`text` cut to its last `limit` bytes of UTF-8, never inside a character; True when it was cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text, False
    return data[len(data) - limit :].decode("utf-8", "ignore"), True


def _finite(name: str, value: float, *, minimum: float = 0.0) -> float:
    if not math.isfinite(value) or value < minimum:
        raise WireError(f"{name} = {value!r}: must be a finite number >= {minimum:g}")
    return value


def _text(name: str, value: str, limit: int) -> None:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise WireError(f"{name} is {size} bytes, over its bound of {limit}")


def activity_to_pb(quiet: bool, quiet_seconds: float, last_progress: float | None = None) -> pb.Activity:
    """An `Activity` (sent on change only): quiet for `quiet_seconds` since `last_progress` (pod clock)."""
    msg = pb.Activity(quiet=quiet, quiet_seconds=_finite("Activity.quiet_seconds", quiet_seconds))
    if last_progress is not None:
        msg.last_progress.CopyFrom(to_ts(_finite("Activity.last_progress", last_progress)))
    return msg


def check_activity(msg: pb.Activity) -> None:
    """Refuse an `Activity` whose floats are not finite and >= 0."""
    _finite("Activity.quiet_seconds", msg.quiet_seconds)
    if msg.HasField("last_progress"):
        _finite("Activity.last_progress", from_ts(msg.last_progress) or 0.0)


def capture_request_to_pb(request_id: str, trigger: str, timeout_seconds: float = 0.0) -> pb.CaptureRequest:
    msg = pb.CaptureRequest(request_id=request_id, trigger=trigger, timeout_seconds=timeout_seconds)
    check_capture_request(msg)
    return msg


def check_capture_request(msg: pb.CaptureRequest) -> None:
    """Refuse a `CaptureRequest` without an id, with an unknown trigger, or a timeout not finite and >= 0."""
    if not msg.request_id:
        raise WireError("CaptureRequest.request_id is empty")
    _text("CaptureRequest.request_id", msg.request_id, REQUEST_ID_LIMIT)
    if msg.trigger not in REQUEST_TRIGGERS:
        raise WireError(f"CaptureRequest.trigger = {msg.trigger!r}: one of {sorted(REQUEST_TRIGGERS)}")
    _finite("CaptureRequest.timeout_seconds", msg.timeout_seconds)


def worker_capture_to_pb(
    path: str,
    *,
    local_rank: int | None = None,
    global_rank: int | None = None,
    stack: str = "",
    flight_recorder: str = "",
    note: str = "",
    pid: int = 0,
) -> pb.WorkerCapture:
    """One worker's capture: the stack cut to its bound (tail kept, said in `note`); a Flight Recorder
    summary's JSON over its bound is refused (`WireError`): the caller summarises fewer entries."""
    if path not in CAPTURE_PATHS:
        raise WireError(f"WorkerCapture.path = {path!r}: one of {sorted(CAPTURE_PATHS)}")
    _text("WorkerCapture.flight_recorder", flight_recorder, FLIGHT_RECORDER_LIMIT)
    stack, cut = bounded_tail(stack, STACK_LIMIT)
    if cut:
        note = (
            f"{note}; stack cut at {STACK_LIMIT // 1024} KiB (tail kept)"
            if note
            else (f"stack cut at {STACK_LIMIT // 1024} KiB (tail kept)")
        )
    msg = pb.WorkerCapture(path=path, stack=stack, flight_recorder=flight_recorder, pid=pid)
    msg.note = bounded_tail(note, NOTE_LIMIT)[0]
    if local_rank is not None:
        msg.local_rank = local_rank
    if global_rank is not None:
        msg.global_rank = global_rank
    return msg


def capture_to_pb(request_id: str, trigger: str, workers: list[pb.WorkerCapture], note: str = "") -> pb.Capture:
    """A `Capture`: at most MAX_WORKERS workers (the rest left out, said in `note`)."""
    if trigger not in CAPTURE_TRIGGERS:
        raise WireError(f"Capture.trigger = {trigger!r}: one of {sorted(CAPTURE_TRIGGERS)}")
    if len(workers) > MAX_WORKERS:
        left = len(workers) - MAX_WORKERS
        note = f"{note}; {left} more worker capture(s) left out" if note else f"{left} worker capture(s) left out"
        workers = workers[:MAX_WORKERS]
    msg = pb.Capture(request_id=request_id, trigger=trigger, note=bounded_tail(note, NOTE_LIMIT)[0])
    msg.workers.extend(workers)
    check_capture(msg)
    return msg


def check_capture(msg: pb.Capture) -> None:
    """Refuse a `Capture` over the proto's bounds: unknown trigger or path, too many workers, a text over
    its bound."""
    if msg.trigger not in CAPTURE_TRIGGERS:
        raise WireError(f"Capture.trigger = {msg.trigger!r}: one of {sorted(CAPTURE_TRIGGERS)}")
    _text("Capture.request_id", msg.request_id, REQUEST_ID_LIMIT)
    _text("Capture.note", msg.note, NOTE_LIMIT)
    if len(msg.workers) > MAX_WORKERS:
        raise WireError(f"Capture has {len(msg.workers)} workers, over its bound of {MAX_WORKERS}")
    for w in msg.workers:
        if w.path not in CAPTURE_PATHS:
            raise WireError(f"WorkerCapture.path = {w.path!r}: one of {sorted(CAPTURE_PATHS)}")
        _text("WorkerCapture.stack", w.stack, STACK_LIMIT)
        _text("WorkerCapture.flight_recorder", w.flight_recorder, FLIGHT_RECORDER_LIMIT)
        _text("WorkerCapture.note", w.note, NOTE_LIMIT)


def check_capture_event(event: pb.Event) -> None:
    """`check_activity` / `check_capture` for an event carrying either; other events pass."""
    kind = event.WhichOneof("payload")
    if kind == "activity":
        check_activity(event.activity)
    elif kind == "capture":
        check_capture(event.capture)
