"""The streaming Flight Recorder reader (`summarize_pickle`, `summarize_pickle_file`): the same summary as
building the whole dump first (`summarize(restricted_loads(...))`, the reference), in memory bounded by the
summary, with the same refusals.

Dumps are the torch-made fixtures (tests/fixtures/flightrecorder/) and dumps generated here with the plain
dicts torch pickles, in every pickle protocol, frames shared between entries (the pickler memoises a dict
it meets again, and the reader must resolve each GET).
"""

from __future__ import annotations

import io
import pickle
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.properties import examples

from podmortem.core import frpickle
from podmortem.core.flightrecorder import (
    FlightRecorderError,
    FRSummary,
    restricted_loads,
    summarize,
    summarize_pickle,
    summarize_pickle_file,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "flightrecorder"


def _whole(data: bytes, max_entries: int = 64) -> FRSummary:
    return summarize(restricted_loads(data), source="pickle", rank=3, max_entries=max_entries)


def _stream(data: bytes, max_entries: int = 64) -> FRSummary:
    return summarize_pickle_file(io.BytesIO(data), len(data), rank=3, max_entries=max_entries)


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_fixtures_summarise_as_the_whole_dump_does(rank: int) -> None:
    data = (FIXTURES / f"fr-{rank}.pkl").read_bytes()
    assert _stream(data) == _whole(data)
    assert _stream(data, max_entries=1) == _whole(data, max_entries=1)
    # and through the file API, from an offset, with bytes after the dump left unread
    f = io.BytesIO(b"xx" + data + b"garbage")
    f.seek(2)
    assert summarize_pickle_file(f, len(data), rank=3) == _whole(data)


_FRAMES = [{"name": f"f{i}", "filename": f"/src/m{i % 5}.py", "line": i} for i in range(30)]


@st.composite
def _dumps(draw: st.DrawFn) -> tuple[bytes, int]:
    """A dump as torch writes it (random groups, states, sizes, frames shared between entries), pickled."""
    n = draw(st.integers(0, 90))
    entries: list[Any] = []
    for i in range(n):
        pg = draw(st.integers(0, 5))
        p2p = draw(st.booleans())
        depth = draw(st.integers(0, 16))
        first = draw(st.integers(0, len(_FRAMES) - 1))
        entry: dict[str, Any] = {
            "frames": [_FRAMES[(first + k) % len(_FRAMES)] for k in range(depth)],  # shared dicts: GETs
            "pg_id": pg,
            "process_group": (str(pg), draw(st.sampled_from(["default_pg", "tp", "dp"]))),
            "collective_seq_id": i + 1,
            "p2p_seq_id": draw(st.integers(0, 3)),
            "profiling_name": draw(st.sampled_from(["nccl:all_reduce", "gloo:broadcast", "nccl:send"])),
            "input_sizes": [[draw(st.integers(0, 4096)), 8]],
            "output_sizes": [[4, 4]] * draw(st.integers(0, 3)),
            "input_dtypes": ["Float"],
            "output_dtypes": draw(st.sampled_from([["Float"], ["BFloat16", "Float"], []])),
            "state": draw(st.sampled_from(["scheduled", "started", "completed", "odd"])),
            "time_created_ns": draw(st.one_of(st.none(), st.integers(0, 1 << 62))),
            "timeout_ms": 600000,
            "is_p2p": p2p,
            "thread_name": "x" * draw(st.integers(0, 700)),
        }
        if draw(st.integers(0, 9)) == 0:
            entry = draw(st.sampled_from([{"junk": 1}, {"pg_id": "x"}, {}]))  # unreadable: skipped, counted
        if entries and draw(st.integers(0, 14)) == 0:
            entry = entries[-1]  # the same dict twice: a GET of a whole entry
        entries.append(entry)
    groups = sorted({e.get("pg_id") for e in entries if isinstance(e.get("pg_id"), int)})
    dump: dict[str, Any] = {
        "version": draw(st.sampled_from(["2.10", "3.0"])),
        "comm_lib_version": "2.21.5",
        "pg_config": {str(g): {"name": str(g), "desc": "default_pg", "ranks": "[0, 1, 2, 3]"} for g in groups},
        "pg_status": {str(g): {"last_enqueued_collective": n, "last_completed_collective": n - 1} for g in groups},
        "entries": entries,
        "nccl_comm_state": {"big": list(range(draw(st.integers(0, 300))))},
    }
    if draw(st.booleans()):  # keys in another order: entries before the groups
        dump = {"entries": dump.pop("entries"), **dump}
    return pickle.dumps(dump, protocol=draw(st.integers(0, 5))), draw(st.sampled_from([1, 8, 64]))


@settings(max_examples=examples(80), deadline=None)
@given(_dumps())
def test_generated_dumps_summarise_as_the_whole_dump_does(case: tuple[bytes, int]) -> None:
    data, limit = case
    assert _stream(data, limit) == _whole(data, limit)


@settings(max_examples=examples(20), deadline=None)
@given(_dumps(), st.data())
def test_a_dump_cut_anywhere_is_refused_as_truncated(case: tuple[bytes, int], data: st.DataObject) -> None:
    dump, _limit = case
    for cut in {0, 1, len(dump) - 1, *data.draw(st.lists(st.integers(0, len(dump) - 1), max_size=20))}:
        with pytest.raises(FlightRecorderError, match="truncated"):
            _stream(dump[:cut])


def test_the_fixture_cut_at_every_byte_is_refused_as_truncated() -> None:
    data = (FIXTURES / "fr-0.pkl").read_bytes()
    for cut in range(len(data)):
        with pytest.raises(FlightRecorderError, match="truncated"):
            summarize_pickle(data[:cut])


def test_memo_references_across_entries_are_resolved() -> None:
    frame = {"name": "all_reduce", "filename": "/torch/distributed/distributed_c10d.py", "line": 3245}
    sizes = [[1024, 1024]]
    entries = [
        {"pg_id": 0, "collective_seq_id": i, "frames": [frame, frame], "input_sizes": sizes} for i in range(1, 301)
    ]
    for protocol in range(6):
        data = pickle.dumps({"entries": entries, "pg_status": {}}, protocol=protocol)
        s = _stream(data)
        assert s == _whole(data)
        assert [e.seq for e in s.entries] == list(range(237, 301))
        assert all(e.frames[1].function == "all_reduce" and e.input_sizes == ((1024, 1024),) for e in s.entries)


def test_an_entry_changed_after_it_was_finished_is_refused() -> None:
    # Hand-made (no pickler writes it): entry 1 is memoised, entry 2 begins above it, then entry 1 is read
    # back and changed. The streaming reader kept only entry 1's summary, and refuses rather than guess.
    ops = (
        b"\x80\x04}\x94(\x8c\x07entries\x94]\x94("  # root, MARK, "entries", [ MARK
        b"}\x94\x8c\x05pg_id\x94K\x00s"  # entry 1 = {"pg_id": 0}, memo 4
        b"}\x94"  # entry 2 begins: entry 1 is finished
        b"h\x03\x8c\x11collective_seq_id\x94K\x07s0"  # GET entry 1, set a key, POP
        b"eu."  # APPENDS, SETITEMS, STOP
    )
    assert restricted_loads(ops)["entries"][0] == {"pg_id": 0, "collective_seq_id": 7}
    with pytest.raises(FlightRecorderError, match="malformed pickle: expected a dict"):
        summarize_pickle(ops)


def test_entries_closed_by_anything_but_appends_are_refused() -> None:
    # Hand-made: the entries' frame ends in TUPLE (a tuple of entries appended as one): the whole-dump reader
    # skips it as unreadable, the streaming one has handed the first entry over already, and refuses.
    ops = b"\x80\x04}\x94(\x8c\x07entries\x94]\x94(}}tau."
    assert restricted_loads(ops)["entries"] == [({}, {})]
    with pytest.raises(FlightRecorderError, match="entries closed by TUPLE"):
        summarize_pickle(ops)


def _op(name: str) -> bytes:
    import pickletools

    return next(o for o in pickletools.opcodes if o.name == name).code.encode("latin-1")


# One pickle per opcode that imports or calls: each refused by the streaming reader, naming what it can.
_UNSAFE = {
    "GLOBAL": _op("GLOBAL") + b"os\nsystem\n",
    "STACK_GLOBAL": b"\x8c\x02os\x8c\x06system" + _op("STACK_GLOBAL"),
    "REDUCE": b"N)" + _op("REDUCE"),
    "BUILD": b"N}" + _op("BUILD"),
    "INST": b"(" + _op("INST") + b"os\nsystem\n",
    "OBJ": b"(N" + _op("OBJ"),
    "NEWOBJ": b"N)" + _op("NEWOBJ"),
    "NEWOBJ_EX": b"N)}" + _op("NEWOBJ_EX"),
    "EXT1": _op("EXT1") + b"\x01",
    "EXT2": _op("EXT2") + b"\x01\x00",
    "EXT4": _op("EXT4") + b"\x01\x00\x00\x00",
    "PERSID": _op("PERSID") + b"x\n",
    "BINPERSID": b"N" + _op("BINPERSID"),
    "NEXT_BUFFER": _op("NEXT_BUFFER"),
    "READONLY_BUFFER": b"N" + _op("READONLY_BUFFER"),
}


def test_every_unsafe_opcode_is_covered() -> None:
    assert set(_UNSAFE) == frpickle._UNSAFE


@pytest.mark.parametrize("name", sorted(_UNSAFE))
def test_every_opcode_that_imports_or_calls_is_refused(name: str) -> None:
    data = b"\x80\x05}\x94(\x8c\x07entries\x94]\x94(}\x94" + _UNSAFE[name] + b"eu."
    expected = r"refused: .*os\.system" if name in ("GLOBAL", "STACK_GLOBAL", "INST") else f"refused: .*{name}"
    with pytest.raises(FlightRecorderError, match=expected):
        summarize_pickle(data)
    with pytest.raises(FlightRecorderError, match=expected):
        restricted_loads(data)


def test_sets_are_refused_and_mixed_memo_opcodes_too() -> None:
    with pytest.raises(FlightRecorderError, match="EMPTY_SET"):
        summarize_pickle(pickle.dumps({"entries": [{"s": {1, 2}}]}, protocol=4))
    mixed = b"\x80\x04}\x94\x8c\x01a\x94q\x05N\x8c\x01b\x94s."  # MEMOIZE, then BINPUT
    with pytest.raises(FlightRecorderError, match="both PUT and MEMOIZE"):
        summarize_pickle(mixed)


def test_memo_read_back_beyond_its_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frpickle, "MAX_MEMO_REFS", 4)
    shared = [{"name": f"f{i}"} for i in range(5)]
    data = pickle.dumps({"entries": [{"pg_id": 0, "frames": shared}, {"pg_id": 1, "frames": shared[::-1]}]})
    with pytest.raises(FlightRecorderError, match="more than 4 memo slots"):
        summarize_pickle(data)


def _big_dump(entries: int) -> bytes:
    """A dump of distinct entries, each carrying a 1 KiB string the summary drops (a thread name here)."""
    rows = [
        {"pg_id": i % 3, "collective_seq_id": i, "profiling_name": "nccl:all_reduce", "thread_name": f"{i:08}" * 128}
        for i in range(entries)
    ]
    return pickle.dumps({"version": "2.10", "pg_status": {}, "entries": rows}, protocol=2)


def test_a_dump_above_the_old_read_bound_is_summarised_in_memory_bounded_by_its_summary() -> None:
    data = _big_dump(3000)
    assert len(data) > 3 << 20
    tracemalloc.start()
    try:
        summary = summarize_pickle(data)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [e.seq for e in summary.entries][-1] == 2999 and "kept the last 64 of 3000 entries" in summary.note
    # Building the whole dump holds every entry (more than the dump's own size); streaming holds the summary.
    assert peak < 1 << 20, f"tracemalloc peak {peak} bytes for a {len(data)}-byte dump"
