"""A whole job failing at once, black box: W sidecar streams each sending an error file, a 64 KiB log
tail and a termination to a real aggregator process, and the figures an operator sizes by.

    python -m bench.burst [--pods 256,1024] [--tail-kib 64] [--generators 2] [--echo] [--floor] [--smoke]
                          [--rounds N]

The aggregator (`podmortem aggregator`, its own process) and the load generators (processes speaking
the sidecar's protocol over real gRPC on 127.0.0.1; streams share one connection per 64 pods — a real
cluster has one per pod) are separate processes; CPU and peak RSS are read from /proc, not estimated.
Log tails are built from the real torchrun logs of the development corpus (tests/corpus-torchrun/), padded
to the size asked. Printed per W: last event acknowledged -> verdict file written, aggregator CPU
seconds and CPU per event, peak RSS, and with --echo the same load against a bare grpc.aio Collector
that only acknowledges (the floor of Python gRPC on this machine) and the ratio. `--floor` adds the
aggregator's own `CollectorService` over a book that keeps nothing (`bench.load.InertBook`): between
the two floors is the cost of podmortem's protocol handling, above the second the book's and the
engine's.
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
from bench.load import echo_command, generator, service_command


def run_once(pods: int, tail_kib: int, generators: int, server: str, state: bool = False) -> dict[str, float]:
    """One burst against `server`: "aggregator", "echo" (bench.load's bare Collector) or "service" (the
    aggregator's CollectorService over an inert book)."""
    work = Path(tempfile.mkdtemp(prefix="podmortem-burst-"))
    ready, verdicts = work / "ready", work / "verdicts"
    if server == "echo":
        cmd = echo_command(ready)
    elif server == "service":
        cmd = service_command(ready)
    else:
        cmd = aggregator_command(ready, verdicts)
        if state:
            cmd += ["--state-dir", str(work / "state")]  # every event committed to SQLite before its ack
    proc, target = start(cmd, ready)
    try:
        cpu0 = cpu_seconds(proc.pid)
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        go_at = time.time() + 3.0  # generators import and connect first; the burst starts together
        members = [("burst", p) for p in range(pods)]
        shares = [members[i::generators] for i in range(generators)]
        procs = [ctx.Process(target=generator, args=(target, s, pods, tail_kib, go_at, results)) for s in shares]
        for p in procs:
            p.start()
        finished = [results.get(timeout=900) for _ in procs]
        failed = [f for f in finished if isinstance(f, str)]
        if failed:
            raise SystemExit(failed[0])
        last_ack = max(t for t, _, _ in finished)
        acks = sorted(a for _, _, lats in finished for a in lats)
        for p in procs:
            p.join()
        verdict_at = last_ack
        if server == "aggregator":  # the others decide nothing
            deadline = time.time() + 120
            while time.time() < deadline:
                files = list(verdicts.glob("*.json")) if verdicts.exists() else []
                if files:
                    verdict_at = files[0].stat().st_mtime
                    doc = json.loads(files[0].read_text())
                    assert doc["verdict"]["pod"] == "w-0", doc["verdict"]["pod"]
                    break
                time.sleep(0.01)
            else:
                raise SystemExit("no verdict within 120 s")
        cpu = cpu_seconds(proc.pid) - cpu0
        # SQLite does not shrink its file when rows go: its size is what the burst held at once.
        state_bytes = sum(f.stat().st_size for f in (work / "state").glob("*")) if state else 0
        return {
            "pods": pods,
            "burst_s": last_ack - go_at,
            "verdict_after_last_ack_s": max(verdict_at - last_ack, 0.0),
            "cpu_s": cpu,
            "cpu_per_event_ms": cpu / (pods * 4) * 1000,  # register + 3 events
            "peak_rss_mib": peak_rss_mib(proc.pid),
            "ack_p50_s": acks[len(acks) // 2],
            "ack_p99_s": acks[min(len(acks) - 1, round(0.99 * (len(acks) - 1)))],
            "state_mib": state_bytes / (1 << 20),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", default="256,1024", help="comma-separated world sizes")
    ap.add_argument("--tail-kib", type=int, default=64)
    ap.add_argument("--generators", type=int, default=2, help="load-generator processes")
    ap.add_argument("--echo", action="store_true", help="also run the bare echo Collector for the ratio")
    ap.add_argument(
        "--floor", action="store_true", help="also run the aggregator's CollectorService over an inert book"
    )
    ap.add_argument("--smoke", action="store_true", help="a small run that only shows it works (CI)")
    ap.add_argument("--state-dir", action="store_true", help="run the aggregator with durable state (--state-dir)")
    ap.add_argument(
        "--rounds", type=int, default=1, help="bursts per W (a fresh aggregator each): p50/p99 of quorum -> verdict"
    )
    ns = ap.parse_args(argv)
    sizes = [8] if ns.smoke else [int(p) for p in ns.pods.split(",") if p]
    tail = 4 if ns.smoke else ns.tail_kib
    load = os.getloadavg()[0]
    print(
        f"burst: {os.cpu_count()} cores, load {load:.1f}, tails {tail} KiB ({corpus_note()}), "
        f"{ns.generators} generator process(es)" + (", durable state" if ns.state_dir else "")
    )
    for w in sizes:
        runs = [run_once(w, tail, ns.generators, "aggregator", ns.state_dir) for _ in range(max(1, ns.rounds))]
        r = runs[-1]
        line = (
            f"W={w:>5}  burst {r['burst_s']:6.2f} s  last ack -> verdict {r['verdict_after_last_ack_s']:6.3f} s  "
            f"aggregator CPU {r['cpu_s']:6.2f} s ({r['cpu_per_event_ms']:.3f} ms/event)  "
            f"peak RSS {r['peak_rss_mib']:.0f} MiB  "
            f"ack p50/p99 {r['ack_p50_s'] * 1000:.0f}/{r['ack_p99_s'] * 1000:.0f} ms"
            + (f"  state files {r['state_mib']:.0f} MiB" if ns.state_dir else "")
        )
        if ns.echo or ns.floor:
            e = run_once(w, tail, ns.generators, "echo")
            ratio = r["cpu_s"] / max(e["cpu_s"], 1e-9)
            line += (
                f"  | echo CPU {e['cpu_s']:.2f} s ({e['cpu_per_event_ms']:.3f} ms/event), ratio {ratio:.2f}x, "
                f"echo peak RSS {e['peak_rss_mib']:.0f} MiB, echo ack p99 {e['ack_p99_s'] * 1000:.0f} ms"
            )
        if ns.floor:
            svc = run_once(w, tail, ns.generators, "service")
            line += (
                f"  | service over an inert book CPU {svc['cpu_s']:.2f} s, "
                f"ratio to echo {svc['cpu_s'] / max(e['cpu_s'], 1e-9):.2f}x"
            )
        print(line, flush=True)
        if len(runs) > 1:
            # The last member's event acknowledged = quorum reached; the verdict file written = published.
            lags = sorted(x["verdict_after_last_ack_s"] for x in runs)
            p50, p99 = lags[len(lags) // 2], lags[min(len(lags) - 1, round(0.99 * (len(lags) - 1)))]
            print(
                f"W={w:>5}  quorum -> verdict over {len(lags)} bursts: p50 {p50 * 1000:.0f} ms, "
                f"p99 {p99 * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms; peak RSS max "
                f"{max(x['peak_rss_mib'] for x in runs):.0f} MiB",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
