"""Parse the TorchElastic error file (`TORCHELASTIC_ERROR_FILE`) — both formats torch writes.

torch's `@record` (torch/distributed/elastic/multiprocessing/errors) writes, per failing process::

    {"message": {"message": "ValueError: ...",
                 "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1795271119"},
                 "errorCode": 1}}          # errorCode added when the agent copies a worker's file

and torch also accepts files written by non-Python code::

    {"message": "<text>", "timestamp": 1795271119}

The file is user-controlled and may be read while it is being written, so parsing never raises: a
file that is not (yet) valid comes back with `parse_error` set. Memory is bounded: a file larger than
`max_bytes` is not loaded whole; its head and tail are read and the fields salvaged from them, with
`truncated` set. Messages and tracebacks are cut to fixed sizes (the traceback keeps its tail, where
the exception is).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from podmortem.core.model import ErrorRecord

MAX_FILE_BYTES = 1 << 20  # parse whole files up to 1 MiB
SALVAGE_BYTES = 64 << 10  # head and tail read from larger files
SALVAGE_FIELDS = 16  # fields decoded at each end of the head and of the tail
MAX_MESSAGE_CHARS = 4096
MAX_TRACEBACK_CHARS = 16384

# Python prints "Type: message", never a space before the colon ("Net : Connection closed" is NCCL's).
_EXC_TYPE = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*):")
_BARE_TYPE = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Z]\w*[a-z]\w*)\s*$")
# A word followed by a number or a progress bar is a training metric ("Epoch: 3", "Steps:  0%|"), not an exception,
# unless the word is named like one (KeyError: 0).
_METRIC_VALUE = re.compile(r"\s*[-+]?\d")
# A word followed by one quoted name and nothing else is a label (TensorFlow's "Node: 'HorovodAllreduce_grads_0'",
# the op an error happened in, printed after the traceback), not an exception, unless the word is named like one
# (KeyError: 'x').
_LABEL_VALUE = re.compile(r"\s*'[^'\s]{1,200}'\s*$")
# A word whose value is set in a column after it ("Name:           w-0", "Status:         Pending") is a field of a
# report laid out for reading (kubectl describe, a key-value dump), not an exception: Python prints one space after the
# type's colon, unless the word is named like one (TensorFlow's "InternalError:  Blas GEMM launch failed").
_ALIGNED_FIELD = re.compile(r"[ \t]{2,}\S")
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Exit", "Interrupt", "Warning", "Failure", "Fault", "Abort", "Timeout")
MAX_TIMESTAMP = 253_402_300_799  # 9999-12-31T23:59:59Z, the last second datetime can hold
_FIELD = re.compile(rb'"(message|py_callstack|timestamp|errorCode)"\s*:\s*')


def exception_type_of(message: str) -> str:
    """'ValueError: x' -> 'ValueError'; 'torch.OutOfMemoryError: ...' -> 'torch.OutOfMemoryError'; a name alone,
    named like an exception ('AssertionError', 'pkg.EmptySplitError'), is Python's line for an exception with no
    message (traceback.format_exception_only prints the name only when str(exc) is empty)."""
    m = _EXC_TYPE.match(message)
    if not m:
        bare = _BARE_TYPE.match(message)
        if bare and bare.group(1).rsplit(".", 1)[-1].endswith(_EXCEPTION_SUFFIXES):
            return bare.group(1)
        return ""
    name = m.group(1)
    # A bare word before ':' that is not exception-like ("Process 12 got signal: 15") is no type.
    last = name.rsplit(".", 1)[-1]
    if name == last and not (last[:1].isupper() and any(c.islower() for c in last)):
        return ""
    if not last.endswith(_EXCEPTION_SUFFIXES) and (
        _METRIC_VALUE.match(message, m.end())
        or _LABEL_VALUE.match(message, m.end())
        or _ALIGNED_FIELD.match(message, m.end())
    ):
        return ""
    return name


def _cut_message(text: str) -> tuple[str, bool]:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text, False
    return text[:MAX_MESSAGE_CHARS] + " …[truncated]", True


def _cut_traceback(text: str) -> tuple[str, bool]:
    if len(text) <= MAX_TRACEBACK_CHARS:
        return text, False
    return "…[truncated]\n" + text[-MAX_TRACEBACK_CHARS:], True


def _as_int(value: Any, low: int = -(2**31), high: int = 2**31 - 1) -> int | None:
    """An integer field of the file, or None when it is absent, not a number, infinite, NaN or outside
    [low, high]: a user-controlled file must not be able to crash a reader downstream (int(1e999) raises,
    protobuf's int64 refuses 2**63, datetime refuses year 10000)."""
    if isinstance(value, bool):
        return None
    number: int | None = None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float | str):
        try:
            f = float(value.strip()) if isinstance(value, str) else value
            number = int(f) if math.isfinite(f) else None
        except (ValueError, OverflowError):
            number = None
    if number is None or not low <= number <= high:
        return None
    return number


def _as_timestamp(value: Any) -> int | None:
    """Seconds since the epoch, only when it is a real moment (1970 .. 9999); else None."""
    return _as_int(value, 0, MAX_TIMESTAMP)


def _record(
    message: str,
    traceback: str,
    timestamp: int | None,
    error_code: int | None,
    size: int,
    truncated: bool = False,
) -> ErrorRecord:
    message, cut_m = _cut_message(message)
    traceback, cut_t = _cut_traceback(traceback)
    return ErrorRecord(
        message=message,
        exception_type=exception_type_of(message),
        traceback=traceback,
        timestamp=timestamp,
        error_code=error_code,
        truncated=truncated or cut_m or cut_t,
        size_bytes=size,
    )


def _invalid(reason: str, size: int) -> ErrorRecord:
    return ErrorRecord(message="", parse_error=reason, size_bytes=size)


def parse_document(doc: Any, size: int) -> ErrorRecord:
    """Build a record from an already decoded error file."""
    if not isinstance(doc, dict) or "message" not in doc:
        return _invalid("not a TorchElastic error file: no top-level 'message'", size)
    inner = doc["message"]
    if isinstance(inner, dict):
        message = inner.get("message")
        extra = inner.get("extraInfo")
        extra = extra if isinstance(extra, dict) else {}
        callstack = extra.get("py_callstack")
        return _record(
            message=str(message) if message is not None else "",
            traceback=str(callstack) if callstack is not None else "",
            timestamp=_as_timestamp(extra.get("timestamp", inner.get("timestamp", doc.get("timestamp")))),
            error_code=_as_int(inner.get("errorCode", doc.get("errorCode"))),
            size=size,
        )
    if isinstance(inner, str):
        return _record(
            message=inner,
            traceback="",
            timestamp=_as_timestamp(doc.get("timestamp")),
            error_code=_as_int(doc.get("errorCode")),
            size=size,
        )
    return _invalid(f"'message' is a {type(inner).__name__}, expected an object or a string", size)


def parse_bytes(data: bytes, size: int | None = None) -> ErrorRecord:
    """Parse a whole error file held in memory."""
    size = len(data) if size is None else size
    if not data.strip():
        return _invalid("empty file", size)
    try:
        doc = json.loads(data.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as exc:
        return _invalid(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", size)
    except RecursionError:  # [[[[... : json's decoder recurses once per level
        return _invalid("JSON nested too deeply to be an error file", size)
    return parse_document(doc, size)


def _decode_json_value(text: str, at_end: bool = True) -> Any:
    """Decode the JSON string/number `text` starts with; a string cut off at its end is closed when that
    end is where the chunk was cut (`at_end`): one that does not decode before the next field is invalid."""
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
        return value
    except json.JSONDecodeError:
        pass
    except RecursionError:
        return None
    if not text.startswith('"'):
        m = re.match(r"-?\d+", text)
        return int(m.group(0)) if m else None
    if not at_end:
        return None
    body = text[1:]
    # Drop a dangling escape and close the string.
    while body.endswith("\\") and not body.endswith("\\\\"):
        body = body[:-1]
    for cut in range(0, 8):  # a \uXXXX cut in half
        try:
            return json.loads('"' + body[: len(body) - cut] + '"')
        except json.JSONDecodeError:
            continue
    return None


_STRING_END = re.compile(rb'(?<!\\)((?:\\\\)*)"\s*[,}]')


def _string_is_cut(head: bytes, key: bytes) -> bool:
    """Whether the string value of the last `key` in `head` runs past the end of `head`."""
    matches = list(_FIELD.finditer(head))
    m = matches[-1] if matches else None
    if m is None or m.group(0)[: len(key)] != key:
        return False
    text = head[m.end() :].decode("utf-8", errors="replace")
    if not text.startswith('"'):
        return False
    try:
        json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        return True
    return False


def _string_continuation(tail: bytes) -> str | None:
    """The end of a JSON string that began before `tail` (a huge callstack whose key is in the head)."""
    m = _STRING_END.search(tail)
    if m is None:
        return None
    body = tail[: m.end(1)].decode("utf-8", errors="replace")
    for cut in range(0, 6):  # the chunk may start inside an escape sequence
        try:
            value = json.loads('"' + body[cut:] + '"')
        except json.JSONDecodeError:
            continue
        return value if isinstance(value, str) else None
    return None


def _salvage(head: bytes, tail: bytes, size: int) -> ErrorRecord:
    fields: dict[str, list[Any]] = {}
    for chunk in (head, tail):
        # Each value is decoded from its field up to the next field only (a string value cannot run past
        # the next `"key":`, whose quotes would have ended it): decoding from each field to the end of the
        # chunk would cost O(fields x chunk) on a file of '"message":"\x01' repeated
        # (tests/unit/test_errorfile.py::test_salvaging_a_huge_hostile_file_is_linear).
        # A real file has a handful of these fields; thousands are hostile: only the first and the last
        # ones of a chunk (those the record takes) are decoded.
        matches = list(_FIELD.finditer(chunk))
        for i, m in enumerate(matches):
            if SALVAGE_FIELDS <= i < len(matches) - SALVAGE_FIELDS:
                continue
            last = i + 1 == len(matches)
            window = chunk[m.end() : len(chunk) if last else matches[i + 1].start()]
            value = _decode_json_value(window.decode("utf-8", errors="replace"), at_end=last)
            if value is not None and not isinstance(value, dict):
                fields.setdefault(m.group(1).decode(), []).append(value)
    messages = [v for v in fields.get("message", []) if isinstance(v, str)]
    callstacks = [v for v in fields.get("py_callstack", []) if isinstance(v, str)]
    if len(callstacks) == 1 and b'"py_callstack"' not in tail and _string_is_cut(head, b'"py_callstack"'):
        # The callstack began in the head and runs into the tail: its end (the exception) is there.
        end = _string_continuation(tail)
        if end:
            callstacks.append(end)
    if not messages and not callstacks:
        return _invalid(
            f"file is {size} bytes (over the {MAX_FILE_BYTES}-byte limit) and no error message "
            "was found in its head or tail",
            size,
        )
    timestamps = [t for t in (_as_timestamp(v) for v in fields.get("timestamp", [])) if t is not None]
    codes = [c for c in (_as_int(v) for v in fields.get("errorCode", [])) if c is not None]
    traceback = callstacks[-1] if callstacks else ""
    if len(callstacks) > 1:  # head and tail pieces of one huge callstack
        traceback = callstacks[0][:2048] + "\n…[truncated]…\n" + callstacks[-1]
    return _record(
        message=messages[0] if messages else "",
        traceback=traceback,
        timestamp=timestamps[-1] if timestamps else None,
        error_code=codes[-1] if codes else None,
        size=size,
        truncated=True,
    )


def _pread_all(fd: int, limit: int, offset: int) -> bytes:
    """Up to `limit` bytes from `offset` (fewer only at the end of the file)."""
    chunks = []
    while limit > 0:
        chunk = os.pread(fd, limit, offset)
        if not chunk:
            break
        chunks.append(chunk)
        limit -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _outside(p: Path, within: str | os.PathLike[str]) -> ErrorRecord | None:
    """The refusal of a path that resolves outside `within` (None when it stays inside)."""
    real, root = os.path.realpath(p), os.path.realpath(within)
    if os.path.commonpath([real, root]) != root:
        return _invalid(f"{p} resolves to {real}, outside {root}: not read", 0)
    return None


def read_error_file(
    path: str | os.PathLike[str], max_bytes: int = MAX_FILE_BYTES, within: str | os.PathLike[str] | None = None
) -> ErrorRecord | None:
    """Read and parse an error file; None when it does not exist. Never loads more than ~max_bytes.

    Read as the training container would see it: only a regular file (a FIFO or a device is reported,
    never opened for a blocking read: the open is O_NONBLOCK), and with `within` (the shared volume the
    sidecar watches) a symlink resolving outside that directory is refused rather than followed — the
    sidecar may be able to read files the training container cannot, and must not publish them.
    """
    p = os.fspath(path)  # a str (pathlib costs more than the read itself, over 10,000 small files)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    # A file directly in `within` that is not a symlink is inside it, whatever `within` resolves to:
    # opened with O_NOFOLLOW, no path is resolved (realpath stats every component: most of the cost of
    # reading 10,000 small files). A symlink there fails the open (ELOOP) and is resolved and checked.
    direct = within is not None and (
        os.path.dirname(p) == os.fspath(within) or os.path.dirname(os.path.abspath(p)) == os.path.abspath(within)
    )
    if within is not None and not direct:
        refused = _outside(Path(p), within)
        if refused is not None:
            return refused if os.path.lexists(p) else None
    try:
        fd = os.open(p, flags | (os.O_NOFOLLOW if direct else 0))
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return _invalid(f"{Path(p)} is a directory", 0)
    except OSError as exc:
        if direct and exc.errno == errno.ELOOP:  # a symlink: followed only where it stays inside
            assert within is not None
            return _outside(Path(p), within) or read_error_file(os.path.realpath(p), max_bytes)
        return _invalid(f"cannot read {Path(p)}: {exc.strerror or exc}", 0)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            return _invalid(f"{Path(p)} is a directory", 0)
        return _invalid(f"{Path(p)} is not a regular file (a FIFO, socket or device): not read", 0)
    size = st.st_size
    try:  # os.pread on the descriptor: no file object (a bundle of 10,000 pods reads 10,000 of these)
        if size <= max_bytes:
            return parse_bytes(_pread_all(fd, max_bytes + 1, 0), size)
        head = _pread_all(fd, SALVAGE_BYTES, 0)
        tail = _pread_all(fd, SALVAGE_BYTES, max(size - SALVAGE_BYTES, SALVAGE_BYTES))
    except OSError as exc:
        return _invalid(f"cannot read {Path(p)}: {exc.strerror or exc}", 0)
    finally:
        os.close(fd)
    return _salvage(head, tail, size)
