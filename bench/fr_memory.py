"""What summarising a Flight Recorder pickle costs in memory and time, by dump size: the streaming reader
the sidecar uses (`summarize_pickle_file`) against building the whole dump first
(`summarize(restricted_loads(...))`).

Dumps are torch's shape (`bench.capture_cost.fr_dump`: 8 frames an entry, shared) grown to each size by
their number of entries. For each size and reader, a fresh process reads the file once and reports its
tracemalloc peak (Python allocations during the read), its peak RSS (`ru_maxrss`, interpreter included)
and the CPU seconds the read took.

    .venv/bin/python -m bench.fr_memory [--sizes 0.25,2,8,32]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from bench.capture_cost import fr_dump

_BYTES_PER_ENTRY = 126  # of `fr_dump`'s entries (pickle protocol 4, frames memoised)


def one(path: Path, reader: str, traced: bool) -> dict[str, float]:
    """Read `path` once with `reader` (stream | whole) in this process; the figures (tracemalloc's peak
    with `traced`, else peak RSS and CPU: tracing slows the read and its tables inflate RSS)."""
    from podmortem.core import flightrecorder as fr

    size = path.stat().st_size
    if traced:
        tracemalloc.start()
    t0 = time.process_time()
    if reader == "stream":
        with path.open("rb") as f:
            summary = fr.summarize_pickle_file(f, size)
    else:
        summary = fr.summarize(fr.restricted_loads(path.read_bytes()), source="pickle")
    took = time.process_time() - t0
    _now, peak = tracemalloc.get_traced_memory() if traced else (0, 0)
    tracemalloc.stop()
    return {
        "peak": peak,
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "cpu": took,
        "entries": len(summary.entries),
    }


def main(sizes: list[float]) -> int:
    print("| dump | entries | reader | tracemalloc peak | peak RSS | CPU |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="podmortem-frmem-") as tmp:
        for mib in sizes:
            path = Path(tmp) / "fr-0"
            entries = max(1, int(mib * 2**20 / _BYTES_PER_ENTRY))
            path.write_bytes(fr_dump(0, entries))
            size = path.stat().st_size
            for reader in ("whole", "stream"):
                r: dict[str, float] = {}
                for traced in ("traced", "plain"):
                    out = subprocess.run(
                        [sys.executable, "-m", "bench.fr_memory", "--one", str(path), reader, traced],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    r |= {k: v for k, v in json.loads(out.stdout).items() if v or traced == "traced"}
                print(
                    f"| {size / 2**20:.2f} MiB | {entries:,} | {reader} | {r['peak'] / 2**20:.1f} MiB "
                    f"({r['peak'] / size:.1f}x) | {r['rss'] / 2**20:.1f} MiB | {r['cpu']:.2f} s |"
                )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0.25,2,8,32", help="dump sizes in MiB, comma-separated")
    parser.add_argument("--one", nargs=3, metavar=("PATH", "READER", "TRACED"), help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.one:
        print(json.dumps(one(Path(ns.one[0]), ns.one[1], ns.one[2] == "traced")))
        sys.exit(0)
    sys.exit(main([float(x) for x in ns.sizes.split(",")]))
