"""What summarising a Flight Recorder pickle costs in memory and time, by dump size: the streaming reader
the sidecar uses (`summarize_pickle_file`) against building the whole dump first
(`summarize(restricted_loads(...))`); with `--json`, a control-plane answer (`summarize_json`, parsed whole).

Dumps are torch's shape (`bench.capture_cost.fr_dump`: 8 frames an entry, shared) grown to each size by
their number of entries. For each size and reader, a fresh process reads the file once and reports its
tracemalloc peak (Python allocations during the read); another its peak RSS (VmHWM, interpreter and the
file's bytes included) and the CPU seconds the read took.

    .venv/bin/python -m bench.fr_memory [--sizes 0.25,2,8,32] [--whole-max 8] [--json 0.5,2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BYTES_PER_ENTRY = 131  # of `fr_dump`'s entries (pickle protocol 4, frames memoised)


def _vm_hwm() -> int:
    """This process's peak RSS in bytes (VmHWM: ru_maxrss would keep the parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


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
    elif reader == "json":  # a control-plane answer: read into memory whole, then parsed
        summary = fr.summarize_json(path.read_bytes())
    else:
        summary = fr.summarize(fr.restricted_loads(path.read_bytes()), source="pickle")
    took = time.process_time() - t0
    _now, peak = tracemalloc.get_traced_memory() if traced else (0, 0)
    tracemalloc.stop()
    return {
        "peak": peak,
        "rss": _vm_hwm(),
        "cpu": took,
        "entries": len(summary.entries),
    }


def json_dump(mib: float) -> tuple[bytes, int]:
    """An `fr_trace_json` answer of about `mib` MiB: the torch-made fixture's first entry, repeated."""
    doc = json.loads((ROOT / "tests" / "fixtures" / "flightrecorder" / "fr-0.json").read_text())
    one = doc["entries"][0]
    n = max(1, int(mib * 2**20 / len(json.dumps(one, separators=(",", ":")))))
    doc["entries"] = [{**one, "collective_seq_id": i + 1, "record_id": i} for i in range(n)]
    return json.dumps(doc, separators=(",", ":")).encode(), n


def main(sizes: list[float], whole_max: float, json_sizes: list[float]) -> int:
    from bench.capture_cost import fr_dump  # not in the measured child: it imports grpc

    print("| dump | entries | reader | tracemalloc peak | peak RSS | CPU |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="podmortem-frmem-") as tmp:
        cases: list[tuple[float, str]] = [(m, "pickle") for m in sizes] + [(m, "json") for m in json_sizes]
        for mib, kind in cases:
            path = Path(tmp) / "fr-0"
            if kind == "json":
                data, entries = json_dump(mib)
                readers: tuple[str, ...] = ("json",)
            else:
                entries = max(1, int(mib * 2**20 / _BYTES_PER_ENTRY))
                data = fr_dump(0, entries)
                readers = ("whole", "stream") if mib <= whole_max else ("stream",)
            path.write_bytes(data)
            del data
            size = path.stat().st_size
            for reader in readers:
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


def _mibs(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="0.25,2,8,32", help="dump sizes in MiB, comma-separated")
    parser.add_argument(
        "--whole-max", type=float, default=8, help="largest size (MiB) also read whole (32 MiB whole takes ~1 GB)"
    )
    parser.add_argument("--json", default="", help="also JSON answers (summarize_json) of these sizes in MiB")
    parser.add_argument("--one", nargs=3, metavar=("PATH", "READER", "TRACED"), help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.one:
        print(json.dumps(one(Path(ns.one[0]), ns.one[1], ns.one[2] == "traced")))
        sys.exit(0)
    sys.exit(main(_mibs(ns.sizes), ns.whole_max, _mibs(ns.json)))
