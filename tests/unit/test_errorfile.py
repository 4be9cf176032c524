"""podmortem.core.errorfile: both formats torch writes, and every way a user-controlled file can be bad."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.properties import examples

from podmortem.core import errorfile
from podmortem.core.errorfile import (
    MAX_FILE_BYTES,
    MAX_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    SALVAGE_BYTES,
    read_error_file,
)
from podmortem.core.model import ErrorRecord

TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 10, in <module>\nValueError: bad label\n'
RECORD = {
    "message": {
        "message": "ValueError: bad label",
        "extraInfo": {"py_callstack": TRACEBACK, "timestamp": "1795271119"},
        "errorCode": 1,
    }
}


def write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_record_format_with_error_code(tmp_path: Path) -> None:
    rec = read_error_file(write(tmp_path / "error.json", RECORD))
    assert rec is not None
    assert rec.message == "ValueError: bad label"
    assert rec.exception_type == "ValueError"
    assert rec.traceback == TRACEBACK
    assert rec.timestamp == 1795271119
    assert rec.error_code == 1
    assert rec.parse_error == ""
    assert not rec.truncated
    assert rec.size_bytes == (tmp_path / "error.json").stat().st_size


def test_record_format_without_error_code(tmp_path: Path) -> None:
    doc = {"message": {"message": "RuntimeError: x", "extraInfo": {"py_callstack": "tb", "timestamp": "17"}}}
    rec = read_error_file(write(tmp_path / "e.json", doc))
    assert rec is not None
    assert (rec.exception_type, rec.timestamp, rec.error_code) == ("RuntimeError", 17, None)


def test_plain_format_from_non_python_writers(tmp_path: Path) -> None:
    rec = read_error_file(write(tmp_path / "e.json", {"message": "segfault in kernel", "timestamp": 1795271119}))
    assert rec is not None
    assert rec.message == "segfault in kernel"
    assert rec.exception_type == ""
    assert rec.timestamp == 1795271119
    assert rec.traceback == ""
    assert rec.parse_error == ""


def test_signal_exception_message_has_its_type(tmp_path: Path) -> None:
    doc = {"message": {"message": "SignalException: Process 41 got signal: 15", "extraInfo": {"timestamp": "5"}}}
    rec = read_error_file(write(tmp_path / "e.json", doc))
    assert rec is not None and rec.exception_type == "SignalException"


def test_exception_type_of() -> None:
    assert errorfile.exception_type_of("torch.OutOfMemoryError: CUDA out of memory") == "torch.OutOfMemoryError"
    assert errorfile.exception_type_of("Process 12 got signal: 15") == ""
    assert errorfile.exception_type_of("no colon here") == ""


def test_missing_file_is_none(tmp_path: Path) -> None:
    assert read_error_file(tmp_path / "absent.json") is None


def test_directory_is_a_parse_error(tmp_path: Path) -> None:
    rec = read_error_file(tmp_path)
    assert rec is not None and "directory" in rec.parse_error


def test_empty_and_blank_files(tmp_path: Path) -> None:
    for content in ("", "  \n\t"):
        path = tmp_path / "e.json"
        path.write_text(content)
        rec = read_error_file(path)
        assert rec is not None
        assert rec.parse_error == "empty file"
        assert rec.message == ""


def test_every_partial_write_is_a_clear_parse_error(tmp_path: Path) -> None:
    data = json.dumps(RECORD).encode()
    path = tmp_path / "e.json"
    for cut in range(1, len(data)):
        path.write_bytes(data[:cut])
        rec = read_error_file(path)
        assert rec is not None
        assert rec.parse_error, f"prefix of {cut} bytes parsed"
        assert rec.size_bytes == cut
    path.write_bytes(data)
    rec = read_error_file(path)
    assert rec is not None and rec.parse_error == "" and rec.message == "ValueError: bad label"


def test_partial_write_parse_error_says_where(tmp_path: Path) -> None:
    path = tmp_path / "e.json"
    path.write_text('{"message": {"message": "ValueError: bad')
    rec = read_error_file(path)
    assert rec is not None
    assert rec.parse_error.startswith("not valid JSON (")
    assert "line 1 column" in rec.parse_error


def test_rewrite_is_read_anew(tmp_path: Path) -> None:
    path = write(tmp_path / "e.json", RECORD)
    first = read_error_file(path)
    write(path, {"message": {"message": "SignalException: Process 9 got signal: 15", "extraInfo": {"timestamp": "9"}}})
    second = read_error_file(path)
    assert first is not None and second is not None
    assert second.message.startswith("SignalException") and second.timestamp == 9
    assert first != second


def test_garbage(tmp_path: Path) -> None:
    path = tmp_path / "e.json"
    path.write_bytes(bytes(range(256)) * 4)
    rec = read_error_file(path)
    assert rec is not None and rec.parse_error.startswith("not valid JSON")


def test_json_that_is_not_an_error_file(tmp_path: Path) -> None:
    for doc, expected in (
        ([1, 2], "no top-level 'message'"),
        ({"msg": "x"}, "no top-level 'message'"),
        ({"message": 42}, "'message' is a int"),
    ):
        rec = read_error_file(write(tmp_path / "e.json", doc))
        assert rec is not None
        assert expected in rec.parse_error


def test_long_message_and_traceback_are_cut(tmp_path: Path) -> None:
    tb = "Traceback (most recent call last):\n" + "  frame\n" * 10_000 + "ValueError: the end\n"
    doc = {"message": {"message": "ValueError: " + "m" * 10_000, "extraInfo": {"py_callstack": tb, "timestamp": "1"}}}
    rec = read_error_file(write(tmp_path / "e.json", doc))
    assert rec is not None
    assert rec.truncated
    assert len(rec.message) <= MAX_MESSAGE_CHARS + 20
    assert len(rec.traceback) <= MAX_TRACEBACK_CHARS + 20
    assert rec.traceback.endswith("ValueError: the end\n")  # the tail, where the exception is, is kept
    assert rec.traceback.startswith("…[truncated]")


def _write_huge(path: Path, size: int, head: str, filler: bytes, tail: str) -> None:
    with path.open("wb") as f:
        f.write(head.encode())
        remaining = size - len(head) - len(tail)
        chunk = filler * ((1 << 20) // len(filler))
        while remaining > 0:
            piece = chunk[:remaining]
            f.write(piece)
            remaining -= len(piece)
        f.write(tail.encode())


def _peak_while(fn: object) -> tuple[object, int]:
    assert callable(fn)
    tracemalloc.start()
    try:
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def test_50_mb_error_file_is_read_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    size = 50 << 20
    head = '{"message": {"message": "ValueError: bad label", "extraInfo": {"py_callstack": "Traceback (most recent\\n'
    tail = 'ValueError: bad label\\n", "timestamp": "1795271119"}, "errorCode": 1}}'
    _write_huge(path, size, head, b"  frame line\\n", tail)
    assert path.stat().st_size == size
    rec, peak = _peak_while(lambda: read_error_file(path))
    assert peak < 4 << 20, f"peak {peak} bytes"
    assert rec is not None and isinstance(rec, ErrorRecord)
    assert rec.parse_error == ""
    assert rec.message == "ValueError: bad label"
    assert rec.timestamp == 1795271119
    assert rec.error_code == 1
    assert rec.truncated
    assert rec.size_bytes == size
    assert rec.traceback.endswith("ValueError: bad label\n")


def test_50_mb_garbage_is_a_parse_error_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "garbage.json"
    _write_huge(path, 50 << 20, "", b"\x00\xffgarbage", "")
    rec, peak = _peak_while(lambda: read_error_file(path))
    assert peak < 4 << 20, f"peak {peak} bytes"
    assert rec is not None and isinstance(rec, ErrorRecord)
    assert f"over the {MAX_FILE_BYTES}-byte limit" in rec.parse_error
    assert rec.size_bytes == 50 << 20


def test_file_just_over_the_limit_with_valid_json_is_salvaged(tmp_path: Path) -> None:
    tb = "x" * (MAX_FILE_BYTES + 10)
    doc = {"message": {"message": "RuntimeError: big", "extraInfo": {"py_callstack": tb, "timestamp": "3"}}}
    rec = read_error_file(write(tmp_path / "e.json", doc))
    assert rec is not None
    assert rec.message == "RuntimeError: big"
    assert rec.timestamp == 3
    assert rec.truncated


@settings(max_examples=examples(200), deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_parse_without_raising(data: bytes) -> None:
    rec = errorfile.parse_bytes(data)
    assert rec.parse_error or rec.message is not None


def _write(path: Path, timestamp: object, error_code: object = 1) -> Path:
    extra: dict[str, object] = {"py_callstack": "tb", "timestamp": timestamp}
    doc = {"message": {"message": "ValueError: x", "extraInfo": extra, "errorCode": error_code}}
    # json.dumps writes inf as Infinity; a huge literal goes in as text (Python's json reads both).
    text = json.dumps(doc).replace('"@HUGE@"', "1e999").replace('"@BIG@"', str(2**70))
    path.write_text(text)
    return path


def test_hostile_numbers_become_unknown_instead_of_raising(tmp_path: Path) -> None:
    for bad in ["@HUGE@", "@BIG@", float("nan"), -99999999999, "-1e400", 1e300, "9" * 400]:
        record = read_error_file(_write(tmp_path / "e.json", bad, error_code=bad))
        assert record is not None and record.parse_error == ""
        assert record.message == "ValueError: x"
        assert record.timestamp is None and record.error_code is None
    # Real values are kept.
    record = read_error_file(_write(tmp_path / "e.json", "1795271119", error_code=-11))
    assert record is not None and record.timestamp == 1795271119 and record.error_code == -11


def test_a_fifo_is_reported_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "error.json"
    os.mkfifo(fifo)
    record = read_error_file(fifo)  # would block forever on a plain open()
    assert record is not None and "not a regular file" in record.parse_error


def test_a_symlink_leaving_the_shared_volume_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "sidecar-only" / "token.json"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"message": "SECRET", "timestamp": 1}))
    volume = tmp_path / "shared"
    volume.mkdir()
    (volume / "error.json").symlink_to(secret)
    record = read_error_file(volume / "error.json", within=volume)
    assert record is not None and "outside" in record.parse_error and "SECRET" not in record.message
    # A link that stays inside the volume is read as usual.
    (volume / "real.json").write_text(json.dumps({"message": "ValueError: inside", "timestamp": 1}))
    (volume / "link.json").symlink_to(volume / "real.json")
    inside = read_error_file(volume / "link.json", within=volume)
    assert inside is not None and inside.message == "ValueError: inside"
    assert read_error_file(volume / "missing.json", within=volume) is None


def test_json_nested_too_deeply_is_a_parse_error_not_a_crash(tmp_path: Path) -> None:
    # json's decoder recurses once per level: 3,000 levels raised RecursionError out of the parser, which
    # ended the sidecar's watcher (and its process) on one hostile file — in the whole file (under 1 MiB)
    # and in the head or tail salvaged from a larger one.
    for text in ("[" * 5000, '{"message":' * 3000, '{"message":' * 3000 + "1" + "}" * 3000):
        record = read_error_file(write_text(tmp_path / "small.json", text))
        assert record is not None and "nested too deeply" in record.parse_error
    record = read_error_file(write_text(tmp_path / "big.json", "{" + '"message":{' * ((2 << 20) // 11)))
    assert record is not None and f"over the {MAX_FILE_BYTES}-byte limit" in record.parse_error


def test_salvaging_a_huge_hostile_file_is_linear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every '"message":' in the 64 KiB head and tail was decoded up to the end of its chunk: O(fields x
    # chunk). Now up to the next field, and only the first and last fields of a chunk. The work is
    # counted, not timed (the figure: `python -m bench.errorfile_speed`): the characters handed to the
    # JSON decoder stay within the head and tail read, whatever the number of fields in them.
    decoded: list[int] = []
    decode = errorfile._decode_json_value

    def counted(text: str, at_end: bool = True) -> object:
        decoded.append(len(text))
        return decode(text, at_end=at_end)

    monkeypatch.setattr(errorfile, "_decode_json_value", counted)
    for unit in ('"message":"\x01', '"timestamp":"\x01', '"message":[1,', '"message":'):
        path = write_text(tmp_path / "e.json", "{" + unit * ((2 << 20) // len(unit)))
        decoded.clear()
        record = read_error_file(path)
        assert record is not None and (record.truncated or bool(record.parse_error))
        assert 0 < sum(decoded) <= 2 * SALVAGE_BYTES, (unit, len(decoded), sum(decoded))


def test_salvage_still_reads_fields_around_hostile_ones(tmp_path: Path) -> None:
    head = '{"message": {"message": "ValueError: bad label", "junk": "\x01", "extraInfo": {"py_callstack": "tb'
    tail = 'ValueError: bad label\\n", "timestamp": "1795271119"}, "errorCode": 7}}'
    path = write_text(tmp_path / "e.json", head + "x" * (MAX_FILE_BYTES + 10) + tail)
    record = read_error_file(path)
    assert record is not None and record.message == "ValueError: bad label"
    assert (record.timestamp, record.error_code, record.truncated) == (1795271119, 7, True)


def write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
