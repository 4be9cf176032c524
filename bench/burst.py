"""A whole job failing at once, black box: W sidecar streams each sending an error file, a 64 KiB log
tail and a termination to a real aggregator process, and the figures an operator sizes by.

    python bench/burst.py [--pods 256,1024] [--tail-kib 64] [--generators 2] [--echo] [--smoke] [--rounds N]

The aggregator (`podmortem aggregator`, its own process) and the load generators (processes speaking
the sidecar's protocol over real gRPC on 127.0.0.1; streams share one connection per 64 pods — a real
cluster has one per pod) are separate processes; CPU and peak RSS are read from /proc, not estimated.
Log tails are built from the real torchrun logs of the development corpus (../shared/corpus), padded
to the size asked. Printed per W: last event acknowledged -> verdict file written, aggregator CPU
seconds and CPU per event, peak RSS, and with --echo the same load against a bare grpc.aio Collector
that only acknowledges (the floor of Python gRPC on this machine) and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
GLOO = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.1]:4242"
STREAMS_PER_CHANNEL = 64
T0 = 1_800_000_000


def corpus_note() -> str:
    """Where the tails' lines come from, for the header: without the corpus they are one plain ASCII line,
    far cheaper to ingest, and figures are not comparable with runs that had it."""
    logs = len(sorted(CORPUS.glob("*/pods/*/log.txt"))[:20])
    return f"lines from {logs} corpus logs" if logs else f"NO CORPUS at {CORPUS}: one plain line repeated"


def log_tail(kib: int) -> str:
    """Real torchrun log lines of healthy training (the corpus logs minus their failure lines: a burst
    measures the load, and every pod's tail quoting some other incident's failure would blur the
    verdict check), repeated up to `kib` KiB; the gloo 'GLHF' line keeps its 4-byte emoji."""
    from podmortem.core.rules import DEFAULT_RULES

    lines = []
    for path in sorted(CORPUS.glob("*/pods/*/log.txt"))[:20]:
        for line in path.read_text(errors="replace").splitlines():
            failing = DEFAULT_RULES.classify_log_line(line) or DEFAULT_RULES.classify_message(line, "") is not None
            if not failing or "GLHF" in line:
                lines.append(line)
    base = "\n".join(lines) or "I1121 14:00:00.000000 1 torch/distributed/run.py:1] starting"
    out = base
    while len(out.encode()) < kib * 1024:
        out += base
    return out.encode()[: kib * 1024].decode(errors="ignore")


# -- the bare echo Collector (the floor) -------------------------------------------------------------


class Echo(pb_grpc.CollectorServicer):
    async def Report(self, request_iterator: AsyncIterator[pb.SidecarMessage], context: Any) -> AsyncIterator[Any]:
        async for msg in request_iterator:
            body = msg.WhichOneof("body")
            if body == "register":
                yield pb.AggregatorMessage(registered=pb.Registered(aggregator_id="echo"))
            elif body == "event":
                yield pb.AggregatorMessage(ack=pb.Ack(event_ids=[msg.event.id]))


async def serve_echo(ready: Path) -> None:
    from podmortem.aggregator.server import SERVER_OPTIONS

    server = grpc.aio.server(options=SERVER_OPTIONS)
    pb_grpc.add_CollectorServicer_to_server(Echo(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    ready.write_text(f"127.0.0.1:{port}\n")
    await server.wait_for_termination()


# -- load generators ------------------------------------------------------------------------------


# What a sidecar retries (podmortem/sidecar/stream.py): the stream ended before its work was done.
RETRIED = (
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)  # fmt: skip


async def one_pod(
    stub: Any, pod: int, world: int, tail: str, job: str = "burst", acks: list[float] | None = None
) -> tuple[float, int]:
    """A sidecar's life at failure time: register, error file, log tail, termination; each acked. Like a
    sidecar, it opens the stream again (backoff with jitter) and sends everything again when the stream
    is ended before all is acknowledged; the aggregator deduplicates by event id. Returns when the last
    ack came and how many times it reconnected; each event's write -> ack seconds go to `acks`."""
    name = f"w-{pod}" if job == "burst" else f"{job}-w-{pod}"
    reg = pb.Register(job=pb.JobRef(namespace="bench", name=job), pod=name, world_size_hint=world, attempt="0")
    reg.rank = pod
    message = "ValueError: bad label 7" if pod == 0 else GLOO
    key = f"{job}/{pod}"
    events = [
        make_event(error_to_pb(ErrorRecord(message, message.split(":")[0], timestamp=T0 + (pod > 0))), f"{key}/e"),
        make_event(pb.LogTail(text=tail.encode(), truncated=True), f"{key}/log"),
        make_event(termination_to_pb(Termination(exit_code=1, reason="Error", finished_at=T0 + 2.0)), f"{key}/t"),
    ]
    for attempt in range(20):
        try:
            call = stub.Report(wait_for_ready=True)
            await call.write(pb.SidecarMessage(register=reg))
            await call.read()
            for event in events:
                sent = time.monotonic()
                await call.write(pb.SidecarMessage(event=event))
                await call.read()
                if acks is not None:
                    acks.append(time.monotonic() - sent)
            await call.done_writing()
            while await call.read() is not grpc.aio.EOF:
                pass
            return time.time(), attempt
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in RETRIED:
                raise
            await asyncio.sleep(min(0.5 * 2**attempt, 10.0) * random.uniform(0.5, 1.0))
    raise RuntimeError(f"{name}: not acknowledged after 20 attempts")


async def generate(
    target: str, members: Sequence[tuple[str, int]], world: int, tail_kib: int, go_at: float
) -> tuple[float, int, list[float]]:
    """Every (job, pod) of `members` as one stream, 64 streams a connection; the last ack's time, the
    reconnects and every event's write -> ack seconds."""
    tail = log_tail(tail_kib)
    channels = [grpc.aio.insecure_channel(target) for _ in range(0, len(members), STREAMS_PER_CHANNEL)]
    stubs = [pb_grpc.CollectorStub(c) for c in channels]  # type: ignore[no-untyped-call]
    await asyncio.sleep(max(go_at - time.time(), 0))
    acks: list[float] = []
    done = await asyncio.gather(
        *(one_pod(stubs[i // STREAMS_PER_CHANNEL], p, world, tail, job, acks) for i, (job, p) in enumerate(members))
    )
    for c in channels:
        await c.close()
    return max(t for t, _ in done), sum(n for _, n in done), acks


def generator(target: str, members: list[tuple[str, int]], world: int, tail_kib: int, go_at: float, out: Any) -> None:
    """A load-generator process: puts (last ack, reconnects, ack latencies), or a message if it failed."""
    try:
        out.put(asyncio.run(generate(target, members, world, tail_kib, go_at)))
    except BaseException as exc:
        out.put(f"generator failed: {exc!r}")
        raise


# -- measuring a server process ---------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid: int, key: str) -> int:
    """A kB figure of /proc/PID/status (VmRSS, VmHWM, ...); 0 when absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def peak_rss_mib(pid: int) -> float:
    return status_kib(pid, "VmHWM") / 1024


def aggregator_command(ready: Path, verdicts: Path) -> list[str]:
    """A real `podmortem aggregator` process on a free loopback port, as the benchmarks run it: no metrics
    port, verdict files in `verdicts`, a quorum timeout long enough that only quorum decides."""
    return [
        sys.executable, "-m", "podmortem.cli", "aggregator", "--listen", "127.0.0.1:0", "--metrics-listen", "",
        "--ready-file", str(ready), "--verdict-dir", str(verdicts), "--quorum-timeout", "600",
        "--log-level", "WARNING",
    ]  # fmt: skip


def start(cmd: list[str], ready: Path) -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not ready.exists() or not ready.read_text().strip():
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit(f"server did not start: {cmd}")
        time.sleep(0.05)
    return proc, ready.read_text().strip()


def run_once(pods: int, tail_kib: int, generators: int, echo: bool, state: bool = False) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="podmortem-burst-"))
    ready, verdicts = work / "ready", work / "verdicts"
    if echo:
        cmd = [sys.executable, __file__, "--serve-echo", str(ready)]
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
        if not echo:
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
        return {
            "pods": pods,
            "burst_s": last_ack - go_at,
            "verdict_after_last_ack_s": max(verdict_at - last_ack, 0.0),
            "cpu_s": cpu,
            "cpu_per_event_ms": cpu / (pods * 4) * 1000,  # register + 3 events
            "peak_rss_mib": peak_rss_mib(proc.pid),
            "ack_p50_s": acks[len(acks) // 2],
            "ack_p99_s": acks[min(len(acks) - 1, round(0.99 * (len(acks) - 1)))],
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", default="256,1024", help="comma-separated world sizes")
    ap.add_argument("--tail-kib", type=int, default=64)
    ap.add_argument("--generators", type=int, default=2, help="load-generator processes")
    ap.add_argument("--echo", action="store_true", help="also run the bare echo Collector for the ratio")
    ap.add_argument("--smoke", action="store_true", help="a small run that only shows it works (CI)")
    ap.add_argument("--state-dir", action="store_true", help="run the aggregator with durable state (--state-dir)")
    ap.add_argument(
        "--rounds", type=int, default=1, help="bursts per W (a fresh aggregator each): p50/p99 of quorum -> verdict"
    )
    ap.add_argument("--serve-echo", metavar="READY_FILE", help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.serve_echo:
        asyncio.run(serve_echo(Path(ns.serve_echo)))
        return 0
    sizes = [8] if ns.smoke else [int(p) for p in ns.pods.split(",") if p]
    tail = 4 if ns.smoke else ns.tail_kib
    load = os.getloadavg()[0]
    print(
        f"burst: {os.cpu_count()} cores, load {load:.1f}, tails {tail} KiB ({corpus_note()}), "
        f"{ns.generators} generator process(es)" + (", durable state" if ns.state_dir else "")
    )
    for w in sizes:
        runs = [run_once(w, tail, ns.generators, echo=False, state=ns.state_dir) for _ in range(max(1, ns.rounds))]
        r = runs[-1]
        line = (
            f"W={w:>5}  burst {r['burst_s']:6.2f} s  last ack -> verdict {r['verdict_after_last_ack_s']:6.3f} s  "
            f"aggregator CPU {r['cpu_s']:6.2f} s ({r['cpu_per_event_ms']:.3f} ms/event)  "
            f"peak RSS {r['peak_rss_mib']:.0f} MiB  "
            f"ack p50/p99 {r['ack_p50_s'] * 1000:.0f}/{r['ack_p99_s'] * 1000:.0f} ms"
        )
        if ns.echo:
            e = run_once(w, tail, ns.generators, echo=True)
            ratio = r["cpu_s"] / max(e["cpu_s"], 1e-9)
            line += (
                f"  | echo CPU {e['cpu_s']:.2f} s ({e['cpu_per_event_ms']:.3f} ms/event), ratio {ratio:.2f}x, "
                f"echo peak RSS {e['peak_rss_mib']:.0f} MiB, echo ack p99 {e['ack_p99_s'] * 1000:.0f} ms"
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
