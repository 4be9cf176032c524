"""Intake: what the aggregator admits from a stream, and how much of it it keeps.

Everything a sidecar or the pod watch sends passes here before the book holds it. Free text is cut
to what the engine reads (`bounded`), a log tail to its end plus the line a rule names (`retained`),
and a log tail is stored without its text (`without_text`), which the book keeps once as a str. The
limits against a flood (a bug or a hostile client) are here too: beyond each, new things are refused,
with a reason in the log and `podmortem_limit_hits_total{limit}`, and nothing already held is
dropped. `is_failure` says which events open an incident. This module holds no state.
"""

from __future__ import annotations

from podmortem.core.model import MAX_WORLD_SIZE
from podmortem.core.names import DISRUPTION_TARGET
from podmortem.core.rules import DEFAULT_RULES, RuleSet
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import WireError, check_capture_event, tail_text

RETAINED_TAIL_BYTES = 16 << 10  # of each member's log tail (see `retained`)
# Of the line a rule names before the kept end of a tail: a single line can be the whole log.
HEAD_LINE_BYTES = 1 << 10
# Of the kept bytes, what the line a rule names and the note of the bytes cut may take.
HEAD_ROOM = HEAD_LINE_BYTES + 64
# Limits against a flood (a bug or a hostile client): beyond each, new things are refused — with a
# reason in the log and `podmortem_limit_hits_total{limit}` — and nothing already held is dropped.
MAX_MEMBERS_PER_JOB = MAX_WORLD_SIZE
MAX_OPEN_INCIDENTS = 1_000
# Of those, how many one job or one namespace may hold open: aggregator.config's AggregatorConfig
# max_open_per_job and max_open_per_namespace (settings).
MAX_NAMESPACES = 1_000
# Bytes kept per event and events kept per member: a hostile or broken client sending 4 MiB messages
# or endless versions must not grow the book. A sidecar sends a handful per pod run.
MAX_MEMBER_EVENTS = 256
MAX_TEXT_CHARS = 16 << 10  # error messages, tracebacks (their end), termination and condition messages


class LimitExceeded(Exception):
    """A registration that would pass a limit; `limit` names it (the metric's label)."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


def is_end(event: pb.Event) -> bool:
    """Does this event say how a member ended (its container's termination, or its pod's deletion)?"""
    return event.WhichOneof("payload") in ("termination", "deletion")


def is_failure(event: pb.Event) -> bool:
    """Does this event mean something went wrong (and so open an incident)?"""
    kind = event.WhichOneof("payload")
    if kind == "error_file":
        return True
    if kind == "termination":
        t = event.termination
        return (t.HasField("exit_code") and t.exit_code != 0) or t.HasField("signal") or t.reason == "OOMKilled"
    if kind == "condition":
        return event.condition.type == DISRUPTION_TARGET and event.condition.status == "True"
    if kind == "deletion":
        return event.deletion.phase in ("Unknown", "Failed", "Running", "") or event.deletion.reason == "NodeLost"
    return False


def bounded(event: pb.Event) -> pb.Event:
    """The event with every free-text field cut to what the engine reads (a no-op for a sidecar's own
    events, whose error files are already bounded when parsed): at most `MAX_TEXT_CHARS` each."""
    kind = event.WhichOneof("payload")
    if kind == "log_tail":
        return retained(event)
    if kind in ("activity", "capture"):
        return checked(event)
    fields = {
        "error_file": ("message", "traceback", "exception_type", "parse_error"),
        "termination": ("message", "reason", "container"),
        "condition": ("message", "reason", "type", "status"),
        "deletion": ("phase", "reason"),
    }.get(kind or "", ())
    body = getattr(event, kind) if kind else None
    if body is None or all(len(getattr(body, f)) <= MAX_TEXT_CHARS for f in fields):
        return event
    kept = pb.Event()
    kept.CopyFrom(event)
    body = getattr(kept, kind)
    for f in fields:
        text = getattr(body, f)
        if len(text) > MAX_TEXT_CHARS:
            setattr(body, f, text[-MAX_TEXT_CHARS:] if f == "traceback" else text[:MAX_TEXT_CHARS])
    if kind == "error_file":
        kept.error_file.truncated = True
    return kept


def checked(event: pb.Event) -> pb.Event:
    """An `Activity` or `Capture` within the proto's bounds as it is; one outside them (a NaN, an unknown
    path, a text over its bound) kept as what can be trusted of it: an activity that says nothing (not
    quiet), a capture with its request id and trigger and, in `note`, why its workers were refused. The
    event is still acknowledged and stored: a sidecar resending it for ever would gain nothing."""
    try:
        check_capture_event(event)
    except WireError as exc:
        kept = pb.Event(id=event.id, monotonic_ns=event.monotonic_ns)
        if event.HasField("wall_time"):
            kept.wall_time.CopyFrom(event.wall_time)
        if event.WhichOneof("payload") == "activity":
            kept.activity.SetInParent()
        else:
            c = event.capture
            trigger = c.trigger if c.trigger in ("stall", "first_timeout", "teardown") else "teardown"
            kept.capture.request_id = c.request_id.encode()[:128].decode("utf-8", "ignore")
            kept.capture.trigger = trigger
            kept.capture.note = f"refused by the aggregator: {exc}"[:1000]
        return kept
    return event


def retained(event: pb.Event, keep: int = RETAINED_TAIL_BYTES) -> pb.Event:
    """The part of a log tail the book keeps: its last `keep` bytes, plus the line a log rule matched
    when that lies earlier. Thousands of members x 64 KiB tails held until the incident is decided were
    most of the aggregator's memory in a burst; the decision needs the end of the log (torch's failure
    summary, the last tracebacks) and the lines that name a cause, not the training chatter before."""
    data = event.log_tail.text
    text, cut = retained_text(data, keep)
    if not cut:
        return event
    return with_text(event, text, truncated=True)


def retained_text(data: bytes, keep: int = RETAINED_TAIL_BYTES) -> tuple[str, bool]:
    """`retained` on a tail's bytes: (the compact str kept, `wire.tail_text`; whether anything was cut).
    Only the kept part is decoded; the part before it is searched as bytes, in C (`bench/ingest_speed.py`).

    What is kept fits in `keep` bytes, encoded, the line a rule names and the note of what was cut
    included; so it is kept as it is when it comes back (the state file stores it, and a restarted
    aggregator replays it: `kept_event` in the book)."""
    if len(data) <= keep:
        text = tail_text(data)
        # Bytes that are not UTF-8 grow when decoded (each becomes U+FFFD, three bytes).
        if "\ufffd" not in text or len(text.encode()) <= keep:
            return text, False
    start = _line_start(data, max(len(data) - keep + HEAD_ROOM, 0))
    # The line a rule names, looked for only in the part not kept (the rest is in the tail anyway).
    hit = first_log_line(data[:start]) if start else ""
    note = f"{hit}\n" if hit else ""
    note += f"[... {start} bytes of the log not kept ...]\n"
    tail = tail_text(data[start:])
    if not (note.isascii() and tail.isascii()):
        # The same growth: the tail loses lines from its front until the whole fits again.
        excess = len(note.encode()) + len(tail.encode()) - keep
        while excess > 0 and tail:
            cut = tail.find("\n", excess // 3) + 1 or len(tail)
            excess -= len(tail[:cut].encode())
            tail = tail[cut:]
    return note + tail, True


def _line_start(data: bytes, at: int) -> int:
    """The first line start at or after `at` (`at` itself when no line starts after it)."""
    cut = data.find(b"\n", at - 1) if at > 0 else -1
    return cut + 1 if 0 <= cut < len(data) - 1 else at


def first_log_line(data: bytes, rules: RuleSet = DEFAULT_RULES) -> str:
    """`logtail.first_log_line` on UTF-8 bytes: the line the first matching log rule names ("" when none
    does), decoded alone; a line longer than `HEAD_LINE_BYTES` is cut to that much around the match.
    RE2 searches the bytes as they came, without a str to build and encode again."""
    rule = rules.first_log_rule(data)  # one RE2 pass for every rule at once
    hit = rule.fast.search(data) if rule is not None and rule.fast is not None else None  # a log rule's RE2
    if hit is None:
        return ""
    a = data.rfind(b"\n", 0, hit.start()) + 1
    b = data.find(b"\n", hit.end())
    b = b if b >= 0 else len(data)
    if b - a > HEAD_LINE_BYTES:
        a = max(a, min(hit.start() - HEAD_LINE_BYTES // 4, b - HEAD_LINE_BYTES))
        b = a + HEAD_LINE_BYTES
    return tail_text(data[a:b]).strip()


def with_text(event: pb.Event, text: str, truncated: bool) -> pb.Event:
    """A log-tail event with `text` (what the book keeps of it) in place of the text it came with."""
    kept = without_text(event, truncated)
    kept.log_tail.text = text.encode()
    return kept


def without_text(event: pb.Event, truncated: bool) -> pb.Event:
    """A log-tail event as the book stores it: every field but the text. Built field by field, not copied
    and cleared: a copy's protobuf arena keeps the 64 KiB message it copied (the aggregator's peak RSS
    under a burst: `bench/burst.py`)."""
    stripped = pb.Event(id=event.id, monotonic_ns=event.monotonic_ns, log_tail=pb.LogTail(truncated=truncated))
    if event.HasField("wall_time"):
        stripped.wall_time.CopyFrom(event.wall_time)
    return stripped
