"""Give back the memory the sidecar needed only to start: its mappings of shared-library pages it has
stopped touching, and the free space of the C heap.

The sidecar runs in every training pod, so its resident memory is multiplied by the cluster (<= 40 MiB,
`bench/sidecar_rss.py`). About half of what it has resident after start-up is pages of shared
libraries: grpc's `cygrpc` (17 MB), libpython, OpenSSL's libcrypto, libstdc++. Imports, the libraries'
initialisers and the channel's set-up run through most of them once; the kernel also maps the cached
pages around each one touched (fault-around), so how much is resident depends on the node's page cache
as much as on the code. At rest the sidecar touches a few MiB of them.

`release()` drops the process's mappings of the clean pages of its shared objects
(`madvise(MADV_DONTNEED)`) and hands the C heap's free pages back (`malloc_trim`). What holds:

* Only clean pages go: a range is dropped only when it is a shared object's read-only mapping with no
  private (copy-on-write) page in it, resident or swapped out (`Anonymous: 0` and `Swap: 0` in
  `/proc/self/smaps`; a mapping whose smaps lacks either is kept), and being read-only it can get none
  later. Such a page is the file's own bytes, so the next touch maps the same page again from
  the page cache (a minor fault, no I/O while the page is cached). Relocated data (RELRO, also
  read-only, but copied on write) and every writable mapping are left alone: dropping those would lose
  what was written there.
* Only shared objects (`.so` in the name): the interpreter never unloads one, so no other mapping can
  take a range between reading `/proc/self/smaps` and the `madvise`.
* The page cache itself, shared by every sidecar of the node's image, is not touched.

Linux with glibc; elsewhere (no `/proc/self/smaps`, no `madvise` or `malloc_trim` symbol) the part
that cannot be done is skipped. libc's symbols come from `ctypes.CDLL(None)`, as in
`podmortem.sidecar.inotify` (not `ctypes.util`, which imports tempfile, shutil, bz2 and lzma).
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

MADV_DONTNEED = 4  # <sys/mman.h>
SMAPS = Path("/proc/self/smaps")


@dataclass(frozen=True)
class Range:
    """One mapping of `/proc/PID/smaps`, with what `release` needs to know of it."""

    start: int
    end: int
    perms: str  # "r-xp"
    path: str  # "" for an anonymous mapping
    rss_kib: int = 0
    anonymous_kib: int | None = None  # None: not reported, so not known to be clean
    swap_kib: int | None = None  # private pages swapped out (None: not reported)

    @property
    def droppable(self) -> bool:
        """A shared object's read-only mapping known to have no private page: its pages are the file's own."""
        return (
            self.perms.startswith("r")
            and "w" not in self.perms
            and self.path.startswith("/")
            and ".so" in self.path.rsplit("/", 1)[-1]
            and self.anonymous_kib == 0
            and self.swap_kib == 0
        )


def parse_smaps(text: str) -> list[Range]:
    """The mappings of a `/proc/PID/smaps` text, with their `Rss`, `Anonymous` and `Swap` sizes (KiB)."""
    ranges: list[Range] = []
    start = end = rss = 0
    anon: int | None = None
    swap: int | None = None
    perms = path = ""
    header = False
    for line in text.splitlines():
        first, _, rest = line.partition(" ")
        if "-" in first and not first.endswith(":"):
            if header:
                ranges.append(Range(start, end, perms, path, rss, anon, swap))
            low, _, high = first.partition("-")
            fields = rest.split(None, 4)  # perms, offset, device, inode, path
            start, end, rss, anon, swap = int(low, 16), int(high, 16), 0, None, None
            perms = fields[0] if fields else ""
            path = fields[4].strip() if len(fields) > 4 else ""
            header = True
        elif first == "Rss:":
            rss = int(rest.split()[0])
        elif first == "Anonymous:":
            anon = int(rest.split()[0])
        elif first == "Swap:":
            swap = int(rest.split()[0])
    if header:
        ranges.append(Range(start, end, perms, path, rss, anon, swap))
    return ranges


@dataclass(frozen=True)
class Released:
    """What one `release` gave back: KiB of library pages unmapped (resident before), heap trimmed or not."""

    library_kib: int
    heap_trimmed: bool


_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        if hasattr(lib, "madvise"):
            lib.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            lib.madvise.restype = ctypes.c_int
        if hasattr(lib, "malloc_trim"):
            lib.malloc_trim.argtypes = (ctypes.c_size_t,)
            lib.malloc_trim.restype = ctypes.c_int
        _libc = lib
    return _libc


def release() -> Released:
    """Drop this process's mappings of clean shared-library pages, and trim the C heap (module docstring).

    Never raises for want of the means: what this system lacks is skipped, and the sidecar goes on."""
    try:
        lib = _lib()
    except OSError as exc:  # no dynamic loader to ask
        logger.debug("cannot release memory: %s", exc)
        return Released(0, False)
    dropped = 0
    madvise = getattr(lib, "madvise", None)
    if madvise is not None:
        try:
            ranges = parse_smaps(SMAPS.read_text())
        except OSError as exc:  # not Linux, or /proc not mounted
            logger.debug("cannot read %s: %s", SMAPS, exc)
            ranges = []
        for r in ranges:
            if r.droppable and r.rss_kib and madvise(r.start, r.end - r.start, MADV_DONTNEED) == 0:
                dropped += r.rss_kib
    trim = getattr(lib, "malloc_trim", None)
    trimmed = bool(trim(0)) if trim is not None else False
    logger.debug("released %d KiB of library pages%s", dropped, "; heap trimmed" if trimmed else "")
    return Released(dropped, trimmed)
