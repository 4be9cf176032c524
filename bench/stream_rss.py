"""What an open stream costs the aggregator: N sidecar streams registered and left open, black box.

    python -m bench.stream_rss [--streams 2000] [--smoke]

A real `podmortem aggregator` process (and, for the floor, the bare grpc.aio echo Collector of
`bench/load.py`) is started; a load-generator process opens N streams over real gRPC on 127.0.0.1 (64
to a connection, as burst.py does; a real cluster has one connection per pod), registers each as a
sidecar does (one job, N pods) and keeps them open, idle. The server's RSS (from /proc) is read before
the streams open and once they are all registered and have settled; printed: RSS per open stream, for
the aggregator and the echo server.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from bench.common import aggregator_command, start, status_kib
from bench.load import STREAMS_PER_CHANNEL, echo_command
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc


async def hold(target: str, n: int, opened: Any, release: Any) -> None:
    channels = [grpc.aio.insecure_channel(target) for _ in range(0, n, STREAMS_PER_CHANNEL)]
    stubs = [pb_grpc.CollectorStub(c) for c in channels]  # type: ignore[no-untyped-call]
    calls = []
    for i in range(n):
        call = stubs[i // STREAMS_PER_CHANNEL].Report(wait_for_ready=True)
        reg = pb.Register(job=pb.JobRef(namespace="bench", name="idle"), pod=f"w-{i}", world_size_hint=n, attempt="0")
        reg.rank = i
        await call.write(pb.SidecarMessage(register=reg))
        calls.append(call)
    for call in calls:
        await call.read()  # Registered: the server holds the stream now
    opened.set()
    await asyncio.to_thread(release.wait)  # a multiprocessing Event: wait for it off the loop
    for call in calls:
        call.cancel()
    for c in channels:
        await c.close()


def _holder(target: str, n: int, opened: Any, release: Any) -> None:
    asyncio.run(hold(target, n, opened, release))


def measure(cmd: list[str], ready: Path, n: int) -> tuple[float, float]:
    """(RSS MiB before, KiB per open stream) for the server `cmd`."""
    proc, target = start(cmd, ready)
    try:
        time.sleep(1.0)
        before = status_kib(proc.pid, "VmRSS")
        ctx = multiprocessing.get_context("spawn")
        opened, release = ctx.Event(), ctx.Event()
        holder = ctx.Process(target=_holder, args=(target, n, opened, release))
        holder.start()
        if not opened.wait(300):
            raise SystemExit("the streams did not all register within 300 s")
        time.sleep(2.0)  # settle
        after = status_kib(proc.pid, "VmRSS")
        release.set()
        holder.join(60)
        return before / 1024, (after - before) / n
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--smoke", action="store_true", help="a small run that only shows it works (CI)")
    ns = ap.parse_args(argv)
    n = 32 if ns.smoke else ns.streams
    print(f"stream_rss: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {n} open streams")
    for name in ("aggregator", "echo"):
        work = Path(tempfile.mkdtemp(prefix="podmortem-streams-"))
        ready = work / "ready"
        if name == "echo":
            cmd = echo_command(ready)
        else:
            cmd = aggregator_command(ready, work / "verdicts")
        try:
            base, per_stream = measure(cmd, ready, n)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"{name:<10} RSS {base:6.1f} MiB before, {per_stream:6.1f} KiB per open stream", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
