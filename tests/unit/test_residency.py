"""The sidecar gives back the library pages only its start needed, and nothing it still has to keep.

`parse_smaps` and `Range.droppable` decide which mappings are dropped: read on a `/proc/PID/smaps` text
shaped like the kernel's. `release()` itself runs in a subprocess of its own (it changes the process it
runs in): grpc's library pages leave the process's resident set, and the process goes on working — a
real gRPC call, TLS, and the relocated data the dynamic loader wrote are all still there.
"""

from __future__ import annotations

import json
import subprocess
import sys

from podmortem.sidecar.residency import parse_smaps

SMAPS = """\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0 [heap]
Size:                132 kB
Rss:                 120 kB
Anonymous:           120 kB
Swap:                  0 kB
7f0000000000-7f0000400000 r--p 00000000 08:01 1234 /venv/grpc/_cython/cygrpc.cpython-311.so
Size:               4096 kB
Rss:                2048 kB
Anonymous:             0 kB
Swap:                  0 kB
7f0000400000-7f0000c00000 r-xp 00400000 08:01 1234 /venv/grpc/_cython/cygrpc.cpython-311.so
Size:               8192 kB
Rss:                6000 kB
Anonymous:             0 kB
Swap:                  0 kB
7f0000c00000-7f0000c40000 r--p 00c00000 08:01 1234 /venv/grpc/_cython/cygrpc.cpython-311.so
Size:                256 kB
Rss:                 256 kB
Anonymous:           256 kB
Swap:                  0 kB
7f0000c40000-7f0000c50000 rw-p 00c40000 08:01 1234 /venv/grpc/_cython/cygrpc.cpython-311.so
Size:                 64 kB
Rss:                  64 kB
Anonymous:            16 kB
Swap:                  0 kB
7f0000c50000-7f0000c60000 r--p 00c50000 08:01 1234 /venv/grpc/_cython/cygrpc.cpython-311.so
Size:                 64 kB
Rss:                  56 kB
Anonymous:             0 kB
Swap:                  8 kB
7f0001000000-7f0001100000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
Size:               1024 kB
Rss:                 900 kB
Anonymous:             4 kB
Swap:                  0 kB
7f0002000000-7f0002020000 r--p 00000000 08:01 77 /usr/lib/locale/C.utf8/LC_CTYPE
Size:                128 kB
Rss:                 128 kB
Anonymous:             0 kB
Swap:                  0 kB
7f0003000000-7f0003100000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                1024 kB
Anonymous:          1024 kB
Swap:                  0 kB
7f0004000000-7f0004001000 ---p 00000000 08:01 1234 /venv/lib/libz.so.1.2.13
Size:                  4 kB
Rss:                   0 kB
Anonymous:             0 kB
Swap:                  0 kB
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
Size:                  8 kB
Rss:                   8 kB
Anonymous:             0 kB
Swap:                  0 kB
"""


def test_only_a_shared_objects_clean_read_only_mappings_are_dropped() -> None:
    ranges = parse_smaps(SMAPS)
    assert [(r.start, r.end) for r in ranges][:2] == [
        (0x55D0C0000000, 0x55D0C0021000),
        (0x7F0000000000, 0x7F0000400000),
    ]
    assert [r.path.rsplit("/", 1)[-1] for r in ranges] == [
        "[heap]",
        "cygrpc.cpython-311.so",
        "cygrpc.cpython-311.so",
        "cygrpc.cpython-311.so",
        "cygrpc.cpython-311.so",
        "cygrpc.cpython-311.so",
        "libc.so.6",
        "LC_CTYPE",
        "",
        "libz.so.1.2.13",
        "[vdso]",
    ]
    assert [(r.perms, r.rss_kib, r.anonymous_kib) for r in ranges][1:4] == [
        ("r--p", 2048, 0),
        ("r-xp", 6000, 0),
        ("r--p", 256, 256),
    ]
    dropped = [(r.perms, r.rss_kib) for r in ranges if r.droppable]
    # The library's read-only data and code go; not its relocated data (read-only but copied on write),
    # its writable data, read-only data with a copied page swapped out, a text with a private page, a
    # locale file, the heap, anonymous memory, the vdso.
    assert dropped == [("r--p", 2048), ("r-xp", 6000)]


def test_an_empty_or_truncated_smaps_reads_as_what_it_has() -> None:
    assert parse_smaps("") == []
    (only,) = parse_smaps("7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /lib/x.so\n")
    # No Anonymous or Swap line: not known to be free of copied-on-write pages, so never dropped.
    assert only.droppable is False
    assert (only.rss_kib, only.anonymous_kib, only.swap_kib, only.path) == (0, None, None, "/lib/x.so")
    (swap_unknown,) = parse_smaps("7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /lib/x.so\nAnonymous: 0 kB\n")
    assert swap_unknown.anonymous_kib == 0 and swap_unknown.droppable is False


RELEASE_IN_A_PROCESS = r"""
import json, sqlite3, ssl, sys
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from podmortem.sidecar import residency

def library_kib(name):
    total = 0
    for r in residency.parse_smaps(open("/proc/self/smaps").read()):
        if name in r.path:
            total += r.rss_kib
    return total

def call():  # a real gRPC round trip on loopback: the library's code and data still work
    server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(1))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
        return reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.stop(None)

def query():  # SQLite's library, which no thread of this process runs in between
    with sqlite3.connect(":memory:") as db:
        db.execute("create table t(a)")
        db.executemany("insert into t values (?)", [(i,) for i in range(1000)])
        return db.execute("select sum(a) from t").fetchone()[0] == 499500

assert call() and query()
before = library_kib("sqlite3")
released = residency.release()
after = library_kib("sqlite3")
ok = call() and query() and ssl.create_default_context().check_hostname and residency.release().library_kib >= 0
print(json.dumps({"before": before, "after": after, "released": released.library_kib, "ok": ok}))
"""


def test_release_drops_library_pages_and_grpc_and_the_library_work_on() -> None:
    result = subprocess.run(
        [sys.executable, "-c", RELEASE_IN_A_PROCESS], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.splitlines()[-1])
    assert figures["ok"] is True
    # Starting and one gRPC call leave megabytes of cygrpc resident, and the release gives them back. Measured
    # on SQLite's library, which nothing runs in between: after the release only its private (relocated,
    # written) pages stay. (gRPC's own threads may still be shutting the call down and fault its pages back.)
    assert figures["released"] >= 1024, figures
    assert figures["after"] < figures["before"] / 2, figures
