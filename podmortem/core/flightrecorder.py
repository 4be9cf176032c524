"""PyTorch Flight Recorder dumps, read safely and summarised to what the hang matcher needs.

A Flight Recorder dump (torch's `c10d::FlightRecorder`, format version "2.x") is one process's ring buffer
of its recent collectives, written as a pickle (`_dump_fr_trace`, the files NCCL writes on a timeout to
`TORCH_FR_DUMP_TEMP_FILE<rank>`) or as JSON (`_dump_fr_trace_json`, the worker control plane's
`fr_trace_json`). Both carry the same dict:

- `pg_config`: process group *name* -> {"name", "desc", "ranks": "[0, 1, 2]"} (ranks as a string; gloo
  registers the default group under the empty name);
- `pg_status`: process group *id* (a decimal string) -> {"last_enqueued_collective",
  "last_started_collective", "last_completed_collective"} (ints in the pickle, strings in the JSON; -1 for
  "none", and gloo never tracks "started");
- `entries`, oldest first: `pg_id` (int), `process_group` (name, desc), `collective_seq_id`, `p2p_seq_id`,
  `is_p2p`, `profiling_name` ("nccl:all_reduce", "gloo:broadcast"), `input_sizes`/`output_sizes` (a list
  per tensor), `input_dtypes`/`output_dtypes`, `state` (scheduled | started | completed), `frames` (pickle
  only: {"name", "filename", "line"}, innermost first), `time_created_ns`, `timeout_ms`, ...;
- `version`, `comm_lib_version`, `nccl_comm_state`.

The dump contains no rank: whoever reads it knows it (from the file name or the worker it asked).

**A pickle from a pod is never unpickled.** `podmortem.core.frpickle` is our own interpreter of the pickle
opcode stream (`pickletools.genops`) that builds only dicts, lists, tuples, str, bytes, int, float, bool
and None. Every opcode that would import a name or call anything (GLOBAL, STACK_GLOBAL, REDUCE, BUILD,
INST, OBJ, NEWOBJ, EXT*, PERSID) is refused with a `FlightRecorderError` that names it; no byte of the
input is ever handed to `pickle.loads` or `pickle.Unpickler`. `summarize_pickle_file` streams: each entry
is summarised as soon as the opcode stream finishes it and only its summary kept (`_Entries`: the newest
`max_entries` and each group's last), so reading a dump takes memory bounded by the summary, not by the
dump (`bench/fr_memory.py`).

`FRSummary` is what leaves the pod: the per-group status and config, and the most recent entries (each
group's last one always kept), bounded to fit the wire (`SUMMARY_MAX_BYTES`), versioned, and validated
again on the way in (`FRSummary.from_json`).
"""

from __future__ import annotations

import io
import json
import re
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import IO, Any

from podmortem.core.frpickle import MAX_DUMP_BYTES as MAX_DUMP_BYTES
from podmortem.core.frpickle import FlightRecorderError as FlightRecorderError
from podmortem.core.frpickle import Sink, stream_loads
from podmortem.core.frpickle import restricted_loads as restricted_loads
from podmortem.core.model import Frame

SUMMARY_VERSION = 1
# The wire carries a summary in at most 64 KiB (the sidecar's bound); summaries are cut to fit below it.
SUMMARY_MAX_BYTES = 60 * 1024
# What a summary read from the wire may hold at most (refused beyond: not ours, or hostile).
_MAX_SUMMARY_TEXT = 256 * 1024
_MAX_ENTRIES_IN = 1024
_MAX_FRAMES = 12  # innermost frames kept per entry: the user's call is within a few of the collective
_MAX_STR = 512
_MAX_GROUPS = 1024
_MAX_RANKS = 1 << 20
_MAX_TENSORS = 64


# --------------------------------------------------------------------------------------------------
# The summary.


@dataclass(frozen=True)
class PGStatus:
    """One process group's progress on one rank: the sequence numbers of its last collectives (-1: none)."""

    last_enqueued: int | None = None
    last_started: int | None = None
    last_completed: int | None = None


@dataclass(frozen=True)
class PGConfig:
    name: str = ""
    desc: str = ""
    ranks: tuple[int, ...] = ()  # global ranks of the group's members


@dataclass(frozen=True)
class FREntry:
    pg_id: str
    seq: int  # collective_seq_id (p2p_seq_id for a point-to-point operation)
    op: str  # profiling_name, e.g. "nccl:all_reduce"
    state: str  # scheduled | started | completed
    input_sizes: tuple[tuple[int, ...], ...] = ()
    output_sizes: tuple[tuple[int, ...], ...] = ()
    input_dtypes: tuple[str, ...] = ()
    output_dtypes: tuple[str, ...] = ()
    frames: tuple[Frame, ...] = ()  # innermost first
    time_created_ns: int | None = None
    timeout_ms: int | None = None
    is_p2p: bool = False

    def signature(self) -> tuple[Any, ...]:
        """What must agree across the ranks of one collective: operation, sizes and dtypes."""
        return (self.op, self.input_sizes, self.output_sizes, self.input_dtypes, self.output_dtypes)


@dataclass(frozen=True)
class FRSummary:
    """One rank's Flight Recorder state, compact (see the module docstring). Keys are process group ids."""

    rank: int | None
    source: str  # pickle | json
    # Left out of the hash (a dict has none), so that a Member holding a summary stays hashable like the rest.
    pg_status: Mapping[str, PGStatus] = field(default_factory=dict, hash=False)
    pg_config: Mapping[str, PGConfig] = field(default_factory=dict, hash=False)
    entries: tuple[FREntry, ...] = ()
    truncated: bool = False
    note: str = ""
    version: int = SUMMARY_VERSION

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "rank": self.rank,
            "source": self.source,
            "truncated": self.truncated,
            "note": self.note,
            "pg_status": {
                k: {
                    "last_enqueued": s.last_enqueued,
                    "last_started": s.last_started,
                    "last_completed": s.last_completed,
                }
                for k, s in self.pg_status.items()
            },
            "pg_config": {
                k: {"name": c.name, "desc": c.desc, "ranks": list(c.ranks)} for k, c in self.pg_config.items()
            },
            "entries": [_entry_dict(e) for e in self.entries],
        }

    @classmethod
    def from_json(cls, text: str) -> FRSummary:
        """Read a summary back, validating every field; `FlightRecorderError` for anything else."""
        if len(text) > _MAX_SUMMARY_TEXT:
            raise FlightRecorderError(f"summary is {len(text)} characters, above {_MAX_SUMMARY_TEXT}: refused")
        try:
            doc = json.loads(text, parse_constant=_no_constant)
        except ValueError as e:
            raise FlightRecorderError(f"summary is not JSON: {e}") from None
        return _summary_from_doc(doc)

    @classmethod
    def from_dict(cls, doc: Any) -> FRSummary:
        """A summary from its parsed JSON (a bundle's captures.json holds it as an object); validated."""
        return _summary_from_doc(doc)


def _no_constant(name: str) -> Any:
    raise FlightRecorderError(f"summary holds {name}: not a number JSON allows")


def _entry_dict(e: FREntry) -> dict[str, Any]:
    return {
        "pg_id": e.pg_id,
        "seq": e.seq,
        "op": e.op,
        "state": e.state,
        "input_sizes": [list(s) for s in e.input_sizes],
        "output_sizes": [list(s) for s in e.output_sizes],
        "input_dtypes": list(e.input_dtypes),
        "output_dtypes": list(e.output_dtypes),
        "frames": [f.to_dict() for f in e.frames],
        "time_created_ns": e.time_created_ns,
        "timeout_ms": e.timeout_ms,
        "is_p2p": e.is_p2p,
    }


# Validation of a summary read from the wire.


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise FlightRecorderError(f"invalid summary: {what}")


def _v_int(v: Any, what: str, optional: bool = True) -> int | None:
    if v is None and optional:
        return None
    _need(isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63), f"{what} is not an integer")
    return int(v)


def _v_str(v: Any, what: str) -> str:
    _need(isinstance(v, str) and len(v) <= _MAX_STR * 4, f"{what} is not a string (or too long)")
    return str(v)


def _v_list(v: Any, what: str, limit: int) -> list[Any]:
    _need(isinstance(v, list) and len(v) <= limit, f"{what} is not a list of at most {limit}")
    return list(v)


def _v_sizes(v: Any, what: str, seen: dict[str, Any]) -> tuple[tuple[int, ...], ...]:
    key = "s" + repr(v)  # entries of one summary repeat their sizes: each distinct list is validated once
    if key in seen:
        return seen[key]  # type: ignore[no-any-return]
    out = []
    for s in _v_list(v, what, _MAX_TENSORS):
        out.append(tuple(int(_v_int(d, what, optional=False) or 0) for d in _v_list(s, what, 64)))
    seen[key] = result = tuple(out)
    return result


def _v_strs(v: Any, what: str, seen: dict[str, Any]) -> tuple[str, ...]:
    key = "d" + repr(v)
    if key in seen:
        return seen[key]  # type: ignore[no-any-return]
    seen[key] = result = tuple(_v_str(d, what) for d in _v_list(v, what, _MAX_TENSORS))
    return result


def _v_frames(v: Any, seen: dict[str, Any]) -> tuple[Frame, ...]:
    key = "f" + repr(v)
    if key in seen:
        return seen[key]  # type: ignore[no-any-return]
    frames = []
    for f in _v_list(v, "frames", 64):
        _need(isinstance(f, dict), "frame")
        frames.append(
            Frame(
                _v_str(f.get("file", ""), "file"),
                _v_int(f.get("line"), "line"),
                _v_str(f.get("function", ""), "function"),
            )
        )
    seen[key] = result = tuple(frames)
    return result


def _summary_from_doc(doc: Any) -> FRSummary:
    _need(isinstance(doc, dict), "not an object")
    version = doc.get("version")
    _need(isinstance(version, int) and not isinstance(version, bool), "no version")
    if version > SUMMARY_VERSION:
        raise FlightRecorderError(f"summary version {version} is newer than this podmortem reads ({SUMMARY_VERSION})")
    _need(version >= 1, f"unknown version {version}")
    source = _v_str(doc.get("source", ""), "source")
    _need(source in ("pickle", "json"), f"source {source!r}")
    status_doc = doc.get("pg_status", {})
    config_doc = doc.get("pg_config", {})
    _need(isinstance(status_doc, dict) and len(status_doc) <= _MAX_GROUPS, "pg_status")
    _need(isinstance(config_doc, dict) and len(config_doc) <= _MAX_GROUPS, "pg_config")
    status: dict[str, PGStatus] = {}
    for k, s in status_doc.items():
        _need(isinstance(s, dict), f"pg_status[{k!r}]")
        status[_v_str(k, "pg id")] = PGStatus(
            _v_int(s.get("last_enqueued"), "last_enqueued"),
            _v_int(s.get("last_started"), "last_started"),
            _v_int(s.get("last_completed"), "last_completed"),
        )
    config: dict[str, PGConfig] = {}
    for k, c in config_doc.items():
        _need(isinstance(c, dict), f"pg_config[{k!r}]")
        ranks = tuple(
            int(_v_int(r, "rank", optional=False) or 0) for r in _v_list(c.get("ranks", []), "ranks", _MAX_RANKS)
        )
        config[_v_str(k, "pg id")] = PGConfig(
            _v_str(c.get("name", ""), "name"), _v_str(c.get("desc", ""), "desc"), ranks
        )
    entries = []
    seen: dict[str, Any] = {}
    for e in _v_list(doc.get("entries", []), "entries", _MAX_ENTRIES_IN):
        _need(isinstance(e, dict), "entry")
        state = _v_str(e.get("state", ""), "state")
        _need(state in ("scheduled", "started", "completed", ""), f"state {state!r}")
        p2p = e.get("is_p2p", False)
        _need(isinstance(p2p, bool), "is_p2p")
        entries.append(
            FREntry(
                pg_id=_v_str(e.get("pg_id"), "pg_id"),
                seq=int(_v_int(e.get("seq"), "seq", optional=False) or 0),
                op=_v_str(e.get("op", ""), "op"),
                state=state,
                input_sizes=_v_sizes(e.get("input_sizes", []), "input_sizes", seen),
                output_sizes=_v_sizes(e.get("output_sizes", []), "output_sizes", seen),
                input_dtypes=_v_strs(e.get("input_dtypes", []), "dtypes", seen),
                output_dtypes=_v_strs(e.get("output_dtypes", []), "dtypes", seen),
                frames=_v_frames(e.get("frames", []), seen),
                time_created_ns=_v_int(e.get("time_created_ns"), "time_created_ns"),
                timeout_ms=_v_int(e.get("timeout_ms"), "timeout_ms"),
                is_p2p=p2p,
            )
        )
    truncated = doc.get("truncated", False)
    _need(isinstance(truncated, bool), "truncated")
    return FRSummary(
        rank=_v_int(doc.get("rank"), "rank"),
        source=source,
        pg_status=status,
        pg_config=config,
        entries=tuple(entries),
        truncated=truncated,
        note=_v_str(doc.get("note", ""), "note"),
        version=version,
    )


# Summarising a dump (a plain dict, from the pickle or the JSON).

_RANKS = re.compile(r"^\[\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*,?\s*\]$")


def _text(v: Any, limit: int = _MAX_STR) -> str:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    s = v if isinstance(v, str) else ("" if v is None else str(v))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _int(v: Any) -> int | None:
    """An int from the dump: ints in the pickle, decimal strings in the JSON; None for anything else."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -(1 << 63) <= v < (1 << 63) else None
    if isinstance(v, (str, bytes)) and re.fullmatch(r"-?\d{1,19}", _text(v)):
        return int(_text(v))
    return None


def _ranks(v: Any) -> tuple[int, ...]:
    """A group's members: "[0, 1, 2]" as torch writes it (never evaluated), or a list."""
    if isinstance(v, (list, tuple)):
        vals = [_int(x) for x in v[:_MAX_RANKS]]
        return tuple(x for x in vals if x is not None)
    m = _RANKS.match(_text(v, 16 * 1024 * 1024).strip())
    if m is None or not m.group(1):
        return ()
    return tuple(int(x) for x in m.group(1).split(","))[:_MAX_RANKS]


def _sizes(v: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(v, (list, tuple)):
        return ()
    out = []
    for s in v[:_MAX_TENSORS]:
        if isinstance(s, (list, tuple)):
            out.append(tuple(d for d in (_int(x) for x in s[:64]) if d is not None))
    return tuple(out)


def _dtypes(v: Any) -> tuple[str, ...]:
    return tuple(_text(x, 32) for x in v[:_MAX_TENSORS]) if isinstance(v, (list, tuple)) else ()


def _frames(v: Any) -> tuple[Frame, ...]:
    if not isinstance(v, (list, tuple)):
        return ()
    return tuple(
        Frame(_text(f.get("filename")), _int(f.get("line")), _text(f.get("name"), 128))
        for f in v[:_MAX_FRAMES]
        if isinstance(f, dict)
    )


def _entry(e: Any) -> FREntry | None:
    if not isinstance(e, dict):
        return None
    pg_id = _int(e.get("pg_id"))
    p2p = e.get("is_p2p") is True
    seq = _int(e.get("p2p_seq_id") if p2p else e.get("collective_seq_id"))
    if pg_id is None or seq is None:
        return None
    state = _text(e.get("state"), 16)
    return FREntry(
        pg_id=str(pg_id),
        seq=seq,
        op=_text(e.get("profiling_name"), 128),
        state=state if state in ("scheduled", "started", "completed") else "",
        input_sizes=_sizes(e.get("input_sizes")),
        output_sizes=_sizes(e.get("output_sizes")),
        input_dtypes=_dtypes(e.get("input_dtypes")),
        output_dtypes=_dtypes(e.get("output_dtypes")),
        frames=_frames(e.get("frames")),
        time_created_ns=_int(e.get("time_created_ns")),
        timeout_ms=_int(e.get("timeout_ms")),
        is_p2p=p2p,
    )


# What the summary keeps of a dump's root, and what it reads of one entry (the rest is dropped as read).
_ROOT_KEYS = frozenset({"entries", "pg_status", "pg_config", "version"})


@dataclass(frozen=True, eq=False)
class _Read:
    """What is kept of one raw entry: its summary (None: unreadable) and its group's (id, (name, desc))."""

    entry: FREntry | None
    names: tuple[str, tuple[str, str]] | None = None
    __hash__ = None  # type: ignore[assignment]  # stands for a dict: unhashable like one


class _Entries:
    """The entries of one dump, read one at a time: the newest `limit` kept, and each group's last one.

    Holds at most 2 x `limit` entries and `_MAX_GROUPS` group names whatever the dump's size, and keeps what
    a choice over the whole list would (the last-of-group entries whose index is below `limit` newer groups'
    can never be kept: those indices only grow)."""

    def __init__(self, limit: int = 64) -> None:
        self.limit = max(1, limit)
        self.count = 0  # entries seen
        self.parsed = 0  # of them readable
        self.recent: deque[tuple[int, FREntry]] = deque(maxlen=self.limit)
        self.last_of: OrderedDict[str, tuple[int, FREntry]] = OrderedDict()
        self.names: dict[str, tuple[str, str]] = {}

    @staticmethod
    def compact(raw: Any) -> _Read:
        if type(raw) is _Read:
            return raw
        if not isinstance(raw, dict):
            return _Read(None)
        names = None
        pg_id = _int(raw.get("pg_id"))
        pg = raw.get("process_group")
        if pg_id is not None and isinstance(pg, (list, tuple)) and len(pg) == 2:
            names = (str(pg_id), (_text(pg[0]), _text(pg[1])))
        return _Read(_entry(raw), names)

    def add(self, read: _Read) -> None:
        self.count += 1
        if read.names is not None and len(self.names) < _MAX_GROUPS:
            self.names.setdefault(*read.names)
        e = read.entry
        if e is None:
            return
        self.recent.append((self.parsed, e))
        self.last_of[e.pg_id] = (self.parsed, e)
        self.last_of.move_to_end(e.pg_id)
        if len(self.last_of) > self.limit:
            self.last_of.popitem(last=False)
        self.parsed += 1

    @classmethod
    def of(cls, entries: Sequence[FREntry], limit: int) -> list[FREntry]:
        """What `kept` gives of entries already summarised."""
        chosen = cls(limit)
        for e in entries:
            chosen.add(_Read(e))
        return chosen.kept()

    def kept(self) -> list[FREntry]:
        """The most recent `limit` entries, each group's last one always among them; in recorded order."""
        if self.parsed <= self.limit:
            return [e for _i, e in self.recent]
        by_index = dict(self.recent) | dict(self.last_of.values())
        keep = {i for i, _e in self.last_of.values()}
        i = self.parsed - 1
        while len(keep) < self.limit:
            keep.add(i)
            i -= 1
        return [by_index[i] for i in sorted(keep)]


def summarize(dump: Any, *, source: str, rank: int | None = None, max_entries: int = 64) -> FRSummary:
    """The summary of a dump already read into plain values (a dict); `FlightRecorderError` if it is none."""
    if not isinstance(dump, dict):
        raise FlightRecorderError(f"not a Flight Recorder dump: a {type(dump).__name__}, not a dict")
    if not any(k in dump for k in ("entries", "pg_status", "pg_config")):
        raise FlightRecorderError("not a Flight Recorder dump: no entries, pg_status or pg_config")
    raw_entries = dump.get("entries")
    if type(raw_entries) is Sink:  # read while streaming (`summarize_pickle`)
        entries = raw_entries.consumer
        assert isinstance(entries, _Entries)
    else:
        raw_entries = raw_entries or []
        if not isinstance(raw_entries, (list, tuple)):
            raise FlightRecorderError("not a Flight Recorder dump: entries is not a list")
        entries = _Entries(max_entries)
        for raw in raw_entries:
            entries.add(entries.compact(raw))
    notes: list[str] = []
    if entries.parsed < entries.count:
        notes.append(f"{entries.count - entries.parsed} unreadable entr(ies) skipped")
    kept = entries.kept()
    truncated = len(kept) < entries.parsed
    if truncated:
        notes.append(f"kept the last {len(kept)} of {entries.parsed} entries")
    status: dict[str, PGStatus] = {}
    raw_status = dump.get("pg_status")
    if isinstance(raw_status, dict):
        for k, s in list(raw_status.items())[:_MAX_GROUPS]:
            if isinstance(s, dict) and _int(k) is not None:
                status[str(_int(k))] = PGStatus(
                    _int(s.get("last_enqueued_collective")),
                    _int(s.get("last_started_collective")),
                    _int(s.get("last_completed_collective")),
                )
    config = _configs(dump.get("pg_config"), entries.names, status, notes)
    version = _text(dump.get("version"), 16)
    if version and not version.startswith("2."):
        notes.append(f"dump format {version}, read as 2.x")
    summary = FRSummary(
        rank=rank,
        source=source,
        pg_status=status,
        pg_config=config,
        entries=tuple(kept),
        truncated=truncated,
        note="; ".join(notes),
    )
    return _fit(summary)


def _configs(
    raw: Any, names: Mapping[str, tuple[str, str]], status: Mapping[str, PGStatus], notes: list[str]
) -> dict[str, PGConfig]:
    """Group configs keyed by group id. The dump keys them by name; the entries say which id has which name.
    One config whose name no entry uses (gloo's default group registers as "") goes to the one group id with
    no config of its own, when there is exactly one."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, PGConfig] = {}
    unmatched: list[PGConfig] = []
    id_by_name = {name: pg for pg, (name, _desc) in names.items()}
    for key, c in list(raw.items())[:_MAX_GROUPS]:
        if not isinstance(c, dict):
            continue
        cfg = PGConfig(_text(c.get("name", key)), _text(c.get("desc")), _ranks(c.get("ranks")))
        if not cfg.name and not cfg.ranks:
            continue  # gloo under torchrun registers an unnamed group without members: nothing to learn
        pg = id_by_name.get(cfg.name)
        if pg is not None and pg not in out:
            out[pg] = cfg
        else:
            unmatched.append(cfg)
    orphans = sorted({*status, *names} - set(out), key=lambda k: int(k) if k.isdigit() else 0)
    if len(unmatched) == 1 and len(orphans) == 1:
        name, desc = names.get(orphans[0], ("", ""))
        cfg = unmatched[0]
        out[orphans[0]] = PGConfig(cfg.name or name, cfg.desc or desc, cfg.ranks)
    elif unmatched:
        notes.append(f"{len(unmatched)} group config(s) not matched to a group id")
    return out


def _fit(summary: FRSummary) -> FRSummary:
    """Cut a summary until its JSON fits SUMMARY_MAX_BYTES: fewer frames first, then fewer entries."""
    size = len(summary.to_json())
    if size <= SUMMARY_MAX_BYTES:
        return summary
    entries = list(summary.entries)
    note = summary.note
    for frames in (4, 1, 0):
        entries = [replace(e, frames=e.frames[:frames]) for e in entries]
        cut = replace(summary, entries=tuple(entries), truncated=True)
        if len(cut.to_json()) <= SUMMARY_MAX_BYTES:
            return replace(cut, note="; ".join(p for p in (note, f"frames cut to {frames} per entry to fit") if p))
    while len(entries) > 1:
        entries = _Entries.of(entries, len(entries) // 2)
        cut = replace(summary, entries=tuple(entries), truncated=True)
        if len(cut.to_json()) <= SUMMARY_MAX_BYTES:
            break
    return replace(
        summary,
        entries=tuple(entries),
        truncated=True,
        note="; ".join(p for p in (note, f"cut to {len(entries)} entries without frames to fit") if p),
    )


def summarize_pickle(data: bytes, *, rank: int | None = None, max_entries: int = 64) -> FRSummary:
    """The summary of a pickled dump (`_dump_fr_trace`, NCCL's dump files), read by `summarize_pickle_file`."""
    return summarize_pickle_file(io.BytesIO(data), len(data), rank=rank, max_entries=max_entries)


def summarize_pickle_file(f: IO[bytes], size: int, *, rank: int | None = None, max_entries: int = 64) -> FRSummary:
    """The summary of the pickled dump in the first `size` bytes of the seekable `f`, read twice in chunks by
    `frpickle.stream_loads`: the memory it takes is bounded by the summary (`max_entries`), not by the dump
    (`bench/fr_memory.py` measures it); the same as `summarize(restricted_loads(data))` for every dump a
    pickler writes (`tests/unit/test_frpickle.py`)."""

    def consumer() -> _Entries:
        return _Entries(max_entries)

    root = stream_loads(f, size, consumer, _ROOT_KEYS)
    return summarize(root, source="pickle", rank=rank, max_entries=max_entries)


def summarize_json(text: str | bytes, *, rank: int | None = None, max_entries: int = 64) -> FRSummary:
    """The summary of a JSON dump (`_dump_fr_trace_json`, the worker control plane's `fr_trace_json`)."""
    if len(text) > MAX_DUMP_BYTES:
        raise FlightRecorderError(f"dump is {len(text)} bytes, above the {MAX_DUMP_BYTES}-byte bound: not read")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise FlightRecorderError(f"not a complete JSON dump ({e}): truncated or corrupt") from None
    return summarize(doc, source="json", rank=rank, max_entries=max_entries)
