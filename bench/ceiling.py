"""One aggregator's ceiling: many jobs failing at once (concurrent incidents x world size), black box.

    python -m bench.ceiling [--shapes 1x4096,16x256,64x64,256x16,2x4096,4x4096] [--tail-kib 64] [--smoke]

Each shape KxW is K jobs of W pods that all fail in the same burst: every pod's stream registers and
sends an error file (the root of each job a ValueError, the others gloo's "Connection closed by peer"),
a log tail of real torchrun lines and a termination, as `bench/burst.py` does for one job; the
aggregator (`podmortem aggregator`, its own process) decides K incidents. Load generators are separate
processes speaking the sidecar's protocol over real gRPC on 127.0.0.1. Printed per shape: the burst's
length, last event acknowledged -> last of the K verdict files written, aggregator CPU (and events per
CPU-second), peak RSS from /proc, whether every job's verdict named its own root, and how many streams
had to be opened again (as a sidecar does, with backoff: past the ceiling, gRPC cancels streams the
server's event loop has not taken up within 30 s). The figures say
when one aggregator is enough and when to shard (docs/benchmarks.md, "When to shard").
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import aggregator_command, corpus_note, cpu_seconds, peak_rss_mib, start
from bench.load import generator


def run_shape(jobs: int, world: int, tail_kib: int, generators: int) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="podmortem-ceiling-"))
    ready, verdicts = work / "ready", work / "verdicts"
    proc, target = start(aggregator_command(ready, verdicts), ready)
    try:
        cpu0 = cpu_seconds(proc.pid)
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        go_at = time.time() + 3.0 + jobs * world / 4000  # generators import and open their channels first
        # Pod-major order: every job's pods arrive interleaved, as when a whole cluster's jobs fail together.
        members = [(f"job-{j}", p) for p in range(world) for j in range(jobs)]
        shares = [members[i::generators] for i in range(generators)]
        procs = [ctx.Process(target=generator, args=(target, s, world, tail_kib, go_at, results)) for s in shares]
        for p in procs:
            p.start()
        finished = [results.get(timeout=1800) for _ in procs]
        failed = [f for f in finished if isinstance(f, str)]
        if failed:
            raise SystemExit(failed[0])
        last_ack = max(t for t, _, _ in finished)
        reconnects = sum(n for _, n, _ in finished)
        for p in procs:
            p.join()
        deadline = time.time() + 300
        files: list[Path] = []
        while time.time() < deadline:
            files = list(verdicts.glob("*.json")) if verdicts.exists() else []
            if len(files) >= jobs:
                break
            time.sleep(0.02)
        else:
            raise SystemExit(f"{len(files)} of {jobs} verdicts within 300 s")
        last_verdict = max(f.stat().st_mtime for f in files)
        right = 0
        for f in files:
            doc = json.loads(f.read_text())
            right += doc["verdict"]["pod"] == f"{doc['incident']['job']['name']}-w-0"
        cpu = cpu_seconds(proc.pid) - cpu0
        events = jobs * world * 4  # register + 3 events per pod
        return {
            "burst_s": last_ack - go_at,
            "verdict_after_last_ack_s": max(last_verdict - last_ack, 0.0),
            "cpu_s": cpu,
            "events_per_cpu_s": events / max(cpu, 1e-9),
            "peak_rss_mib": peak_rss_mib(proc.pid),
            "right": right,
            "reconnects": reconnects,
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1x4096,16x256,64x64,256x16,2x4096,4x4096", help="JOBSxPODS, comma-separated")
    ap.add_argument("--tail-kib", type=int, default=64)
    ap.add_argument("--generators", type=int, default=2, help="load-generator processes")
    ap.add_argument("--smoke", action="store_true", help="a small run that only shows it works (CI)")
    ns = ap.parse_args(argv)
    shapes = [(3, 4)] if ns.smoke else [tuple(int(x) for x in s.split("x")) for s in ns.shapes.split(",") if s]
    tail = 4 if ns.smoke else ns.tail_kib
    print(f"ceiling: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, tails {tail} KiB ({corpus_note()})")
    wrong = 0
    for jobs, world in shapes:
        r = run_shape(jobs, world, tail, ns.generators)
        wrong += jobs - int(r["right"])
        print(
            f"{jobs:>4} jobs x {world:>5} pods = {jobs * world:>6}  burst {r['burst_s']:6.2f} s  "
            f"last ack -> last verdict {r['verdict_after_last_ack_s']:6.3f} s  aggregator CPU {r['cpu_s']:6.2f} s "
            f"({r['events_per_cpu_s']:.0f} events/CPU-s)  peak RSS {r['peak_rss_mib']:.0f} MiB  "
            f"verdicts right {int(r['right'])}/{jobs}  reconnects {int(r['reconnects'])}",
            flush=True,
        )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
