"""The three inotify calls the error-file watch needs, on the process's own libc through ctypes.

Not `inotify_simple` (a good small library doing the same): it finds libc with
`ctypes.util.find_library`, whose import pulls `tempfile`, `shutil`, `bz2`, `lzma` and `random`
into every sidecar (RSS out of its 40 MiB budget, `bench/sidecar_rss.py`; kept out by
`tests/unit/test_sidecar_imports.py`), for a lookup of a library the interpreter has already
loaded. Here `ctypes.CDLL(None)` resolves `inotify_init1`, `inotify_add_watch` and
`inotify_rm_watch` from the symbols the process already has (CPython links libc); the events are
read with `os.read` and unpacked with `struct` (`struct inotify_event`: wd, mask, cookie, len, then
`len` bytes of NUL-padded name). Linux only; elsewhere `INotify()` raises OSError and the caller polls.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import NamedTuple

# <sys/inotify.h>
MODIFY = 0x00000002
CLOSE_WRITE = 0x00000008
MOVED_FROM = 0x00000040
MOVED_TO = 0x00000080
CREATE = 0x00000100
DELETE = 0x00000200
DELETE_SELF = 0x00000400
MOVE_SELF = 0x00000800
Q_OVERFLOW = 0x00004000
IGNORED = 0x00008000

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
_READ_BYTES = 64 * 1024  # a few hundred events a read()

_libc: ctypes.CDLL | None = None


class Event(NamedTuple):
    wd: int
    mask: int
    cookie: int
    name: str


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(None, use_errno=True)
            for fn in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch"):
                getattr(lib, fn).restype = ctypes.c_int
        except (OSError, AttributeError) as exc:  # not Linux (no such symbols), or no dynamic loader
            raise OSError(errno.ENOSYS, f"inotify is not available: {exc}") from None
        lib.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        lib.inotify_rm_watch.argtypes = (ctypes.c_int, ctypes.c_int)
        lib.inotify_init1.argtypes = (ctypes.c_int,)
        _libc = lib
    return _libc


def _check(rc: int) -> int:
    if rc == -1:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return rc


def parse_events(data: bytes) -> list[Event]:
    """`struct inotify_event` records, back to back, as the kernel writes them to the descriptor."""
    out = []
    offset, size = 0, _HEADER.size
    while offset + size <= len(data):
        wd, mask, cookie, length = _HEADER.unpack_from(data, offset)
        offset += size
        name = data[offset : offset + length].rstrip(b"\0")
        offset += length
        out.append(Event(wd, mask, cookie, os.fsdecode(name)))
    return out


class INotify:
    """One inotify instance (close-on-exec, non-blocking): watch directories, read what happened."""

    def __init__(self) -> None:
        lib = _lib()
        self._fd = _check(lib.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK))

    def fileno(self) -> int:
        return self._fd

    def add_watch(self, path: str | os.PathLike[str], mask: int) -> int:
        """The watch descriptor (the same one again for a path already watched); OSError on failure."""
        while True:
            try:
                return _check(_lib().inotify_add_watch(self._fd, os.fsencode(path), mask))
            except InterruptedError:
                continue

    def rm_watch(self, wd: int) -> None:
        _check(_lib().inotify_rm_watch(self._fd, wd))

    def read(self) -> list[Event]:
        """Every event queued now (none when there are none: the descriptor does not block)."""
        chunks = []
        while True:
            try:
                chunk = os.read(self._fd, _READ_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return parse_events(b"".join(chunks))

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
