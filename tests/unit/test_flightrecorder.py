"""Flight Recorder dumps: read with our own restricted unpickler, summarised, and validated on the way in.

The dumps in tests/fixtures/flightrecorder/ were made by torch 2.13.0 itself (its README says how);
the hostile ones are built here. A pickle that would run code must be refused without running it: the
marker file its `__reduce__` would create must not exist afterwards.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from podmortem.core.flightrecorder import (
    MAX_DUMP_BYTES,
    SUMMARY_MAX_BYTES,
    FlightRecorderError,
    FRSummary,
    restricted_loads,
    summarize,
    summarize_json,
    summarize_pickle,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "flightrecorder"


def _real(rank: int, kind: str) -> bytes:
    return (FIXTURES / f"fr-{rank}.{kind}").read_bytes()


@pytest.mark.parametrize("kind", ["pkl", "json"])
def test_real_gloo_dumps_summarised(kind: str) -> None:
    read = summarize_pickle if kind == "pkl" else summarize_json
    waiting = read(_real(0, kind), rank=0)
    laggard = read(_real(2, kind), rank=2)
    assert waiting.rank == 0 and waiting.source == ("pickle" if kind == "pkl" else "json")
    # pg_status: ints in the pickle, strings in the JSON; both read as ints. gloo never tracks "started".
    assert (waiting.pg_status["0"].last_enqueued, waiting.pg_status["0"].last_completed) == (4, 3)
    assert waiting.pg_status["0"].last_started == -1
    assert (laggard.pg_status["0"].last_enqueued, laggard.pg_status["0"].last_completed) == (3, 3)
    last = [e for e in waiting.entries if e.pg_id == "0"][-1]
    assert (last.seq, last.op, last.input_sizes, last.input_dtypes) == (4, "gloo:all_reduce", ((4,),), ("Float",))
    sub = [e for e in waiting.entries if e.pg_id == "1"]
    assert [(e.seq, e.op, e.input_sizes) for e in sub] == [(1, "gloo:broadcast", ((2,),))]
    assert not waiting.truncated


def test_pickle_carries_frames_innermost_first_json_none() -> None:
    s = summarize_pickle(_real(0, "pkl"), rank=0)
    frames = [e for e in s.entries if e.pg_id == "0"][-1].frames
    assert frames[0].function == "all_reduce" and frames[0].file.endswith("torch/distributed/distributed_c10d.py")
    assert [(f.file.rsplit("/", 1)[-1], f.function) for f in frames[2:]] == [
        ("train.py", "main"),
        ("train.py", "<module>"),
    ]
    assert all(not e.frames for e in summarize_json(_real(0, "json"), rank=0).entries)


def test_gloo_unnamed_group_config_is_mapped_or_dropped() -> None:
    # torchrun's gloo default group registers as {"": {"name": "", "ranks": "[]"}}: nothing to learn from.
    assert summarize_pickle(_real(0, "pkl")).pg_config == {}
    # A plain (non-torchrun) gloo job writes the members under the empty name: it goes to the only group.
    dump = {
        "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_enqueued_collective": "4"}},
        "entries": [{"pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 4}],
    }
    cfg = summarize(dump, source="json").pg_config["0"]
    assert (cfg.name, cfg.desc, cfg.ranks) == ("0", "default_pg", (0, 1))


def test_nccl_style_configs_are_keyed_by_group_id() -> None:
    dump = {
        "pg_config": {
            "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
            "5": {"name": "5", "desc": "tp", "ranks": "[2, 3]"},
        },
        "pg_status": {"0": {"last_enqueued_collective": 9}, "1": {"last_enqueued_collective": 2}},
        "entries": [
            {
                "pg_id": 0,
                "process_group": ("0", "default_pg"),
                "collective_seq_id": 9,
                "profiling_name": "nccl:all_reduce",
            },
            {"pg_id": 1, "process_group": ("5", "tp"), "collective_seq_id": 2, "profiling_name": "nccl:all_gather"},
        ],
    }
    s = summarize_pickle(pickle.dumps(dump, protocol=4), rank=2)
    assert s.pg_config["0"].ranks == (0, 1, 2, 3)
    assert (s.pg_config["1"].name, s.pg_config["1"].ranks) == ("5", (2, 3))


def test_ranks_string_is_parsed_never_evaluated() -> None:
    dump = {"pg_config": {"0": {"name": "0", "ranks": "__import__('os').system('true')"}}, "entries": []}
    assert summarize(dump, source="json").pg_config == {}


class _Boom:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


def test_malicious_pickle_is_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"version": "2.10", "entries": [_Boom(str(marker))]})
    with pytest.raises(FlightRecorderError, match=r"refused: .*(posix|os)\.system"):
        summarize_pickle(payload)
    assert not marker.exists()
    # The same payload in protocol 0 (GLOBAL, REDUCE) and with an object built by BUILD.
    with pytest.raises(FlightRecorderError, match="refused"):
        restricted_loads(pickle.dumps(_Boom(str(marker)), protocol=0))
    with pytest.raises(FlightRecorderError, match=r"refused: .*pathlib"):
        restricted_loads(pickle.dumps({"p": Path("x")}))
    assert not marker.exists()


def test_sets_and_persistent_ids_are_refused() -> None:
    with pytest.raises(FlightRecorderError, match="EMPTY_SET"):
        restricted_loads(pickle.dumps({"s": {1, 2}}, protocol=4))

    class P(pickle.Pickler):
        def persistent_id(self, obj: Any) -> Any:
            return "x" if obj == "secret" else None

    import io

    buf = io.BytesIO()
    P(buf, protocol=2).dump(["secret"])
    with pytest.raises(FlightRecorderError, match="PERSID"):
        restricted_loads(buf.getvalue())


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_plain_values_of_every_protocol(protocol: int) -> None:
    value: dict[Any, Any] = {"a": [1, -2, 3.5, None, True, False, "x" * 300, 1 << 70], "b": (1, 2), (1, "k"): {}}
    assert restricted_loads(pickle.dumps(value, protocol=protocol)) == value
    if protocol >= 3:  # bytes have their own opcodes from protocol 3 on
        assert restricted_loads(pickle.dumps({"c": b"\x00\xff"}, protocol=protocol)) == {"c": b"\x00\xff"}
    else:  # ...before, a call to _codecs.encode: refused like any other
        with pytest.raises(FlightRecorderError, match=r"_codecs\.encode"):
            restricted_loads(pickle.dumps({"c": b"\x00\xff"}, protocol=protocol))


def test_truncated_pickle_and_json_say_so() -> None:
    data = _real(0, "pkl")
    with pytest.raises(FlightRecorderError, match="truncated"):
        summarize_pickle(data[: len(data) // 2])
    text = _real(0, "json")
    with pytest.raises(FlightRecorderError, match="truncated"):
        summarize_json(text[: len(text) // 2])


def test_huge_dump_is_not_read() -> None:
    with pytest.raises(FlightRecorderError, match="bound: not read"):
        restricted_loads(b"\x80\x04" + b"N" * (MAX_DUMP_BYTES + 1))
    with pytest.raises(FlightRecorderError, match="bound: not read"):
        summarize_json(" " * (MAX_DUMP_BYTES + 1))


def _entry(seq: int, pg: int = 0, frames: int = 0) -> dict[str, Any]:
    return {
        "pg_id": pg,
        "process_group": [str(pg), "default_pg"],
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "profiling_name": "nccl:all_reduce",
        "input_sizes": [[1024, 1024]],
        "output_sizes": [[1024, 1024]],
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
        "state": "completed",
        "frames": [
            {"name": f"f{i}", "filename": f"/very/long/path/{'x' * 80}/m{i}.py", "line": i} for i in range(frames)
        ],
        "timeout_ms": 600000,
    }


def test_many_entries_keep_the_last_and_each_groups_last() -> None:
    entries = [_entry(1, pg=1)] + [_entry(i) for i in range(1, 2001)]
    s = summarize({"entries": entries, "pg_status": {}}, source="pickle", max_entries=64)
    assert s.truncated and "kept the last 64 of 2001 entries" in s.note
    assert len(s.entries) == 64 and s.entries[-1].seq == 2000
    assert s.entries[0].pg_id == "1"  # group 1's only entry kept though it is the oldest


def test_summary_fits_the_wire() -> None:
    s = summarize({"entries": [_entry(i, frames=40) for i in range(400)]}, source="pickle", max_entries=400)
    assert len(s.to_json()) <= SUMMARY_MAX_BYTES
    assert s.truncated and "to fit" in s.note
    assert s.entries[-1].seq == 399


def test_summary_json_round_trip() -> None:
    s = summarize_pickle(_real(1, "pkl"), rank=1)
    again = FRSummary.from_json(s.to_json())
    assert again == s
    doc = json.loads(s.to_json())
    assert doc["version"] == 1 and doc["pg_status"]["0"] == {
        "last_enqueued": 4,
        "last_started": -1,
        "last_completed": 3,
    }
    assert set(doc["entries"][0]) >= {"pg_id", "seq", "op", "state", "input_sizes", "frames", "timeout_ms"}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[]", "not an object"),
        ('{"source": "json"}', "no version"),
        ('{"version": 2, "source": "json"}', "newer than this podmortem reads"),
        ('{"version": 1, "source": "exe"}', "source"),
        ('{"version": 1, "source": "json", "rank": "0"}', "rank is not an integer"),
        ('{"version": 1, "source": "json", "rank": true}', "rank is not an integer"),
        ('{"version": 1, "source": "json", "pg_status": {"0": {"last_enqueued": 1.5}}}', "last_enqueued"),
        ('{"version": 1, "source": "json", "entries": [{"pg_id": "0", "seq": NaN}]}', "NaN"),
        ('{"version": 1, "source": "json", "entries": [{"pg_id": "0", "seq": 1, "state": "x"}]}', "state"),
        ('{"version": 1, "source": "json", "entries": {}}', "entries"),
        ("{", "not JSON"),
        # validated once per distinct value and kind: a dtype list seen before is no valid sizes list
        (
            '{"version": 1, "source": "json", "entries": [{"pg_id": "0", "seq": 1, "input_dtypes": ["Float"]},'
            ' {"pg_id": "0", "seq": 2, "input_sizes": ["Float"]}]}',
            "input_sizes",
        ),
    ],
)
def test_invalid_summaries_are_refused(text: str, error: str) -> None:
    with pytest.raises(FlightRecorderError, match=error):
        FRSummary.from_json(text)


def test_oversized_summary_is_refused() -> None:
    with pytest.raises(FlightRecorderError, match="above"):
        FRSummary.from_json('{"version": 1, "note": "' + "x" * 300_000 + '"}')


def test_not_a_dump() -> None:
    with pytest.raises(FlightRecorderError, match="not a Flight Recorder dump"):
        summarize_json("[1, 2]")
    with pytest.raises(FlightRecorderError, match="not a Flight Recorder dump"):
        summarize_pickle(pickle.dumps({"hello": 1}))


def test_a_member_holding_a_summary_stays_hashable() -> None:
    from podmortem.core.model import Member, WorkerCapture

    s = summarize_pickle(_real(0, "pkl"), rank=0)
    m = Member(pod="a", captures=(WorkerCapture("fr_file", global_rank=0, flight_recorder=s),))
    assert hash(m) == hash(Member(pod="a", captures=(WorkerCapture("fr_file", global_rank=0, flight_recorder=s),)))
