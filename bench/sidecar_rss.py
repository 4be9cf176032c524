"""Measure a real sidecar process: its memory (RSS) and the latency from an error-file write to the
aggregator receiving the event.

The sidecar runs in every training pod, so its budget is small (<= 40 MiB RSS) and it must report a
failure fast (it orders pods that failed within the same second). This starts a minimal acking
Collector on 127.0.0.1, runs `python -m podmortem.sidecar.running` against it, rewrites the error file
N times (and once with a 50 MB file), and prints RSS, latencies and the CPU it uses while idle (user +
system time from /proc over `--idle` seconds: the sidecar waits for something to happen nearly all its
life, in every pod). The idle window starts once the sidecar has settled (`running.SETTLED` after its
registration, when it gives back what starting needed) and the idle RSS is read at its end.

    .venv/bin/python -m bench.sidecar_rss [--writes 100] [--idle 20] [--api]

`--api`: the pod source a sidecar has in a pod (`api`: it reads and watches its own Pod), against the
Kubernetes emulator of tests/support (plain HTTP through a kubeconfig: no TLS) in this process; without
it the sidecar has no pod source (`none`), the error file is all it watches.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.sidecar.running import SETTLED


class AckingCollector(pb_grpc.CollectorServicer):
    def __init__(self) -> None:
        self.received: dict[str, float] = {}  # error message -> wall time received
        self.registered = asyncio.Event()
        self.changed = asyncio.Event()

    async def Report(
        self, request_iterator: AsyncIterator[pb.SidecarMessage], context: Any
    ) -> AsyncIterator[pb.AggregatorMessage]:
        async for msg in request_iterator:
            kind = msg.WhichOneof("body")
            if kind == "register":
                self.registered.set()
                yield pb.AggregatorMessage(registered=pb.Registered(aggregator_id="bench"))
            elif kind == "event":
                now = time.time()
                ef = msg.event.error_file
                self.received.setdefault(ef.message or ef.parse_error, now)
                self.changed.set()
                yield pb.AggregatorMessage(ack=pb.Ack(event_ids=[msg.event.id]))
            elif kind == "clock_probe":
                reply = pb.ClockReply(seq=msg.clock_probe.seq, t1=msg.clock_probe.t1)
                reply.t2.GetCurrentTime()
                reply.t3.GetCurrentTime()
                yield pb.AggregatorMessage(clock_reply=reply)

    async def wait_for(self, key: str, limit: float = 10.0) -> float:
        async with asyncio.timeout(limit):
            while key not in self.received:
                self.changed.clear()
                await self.changed.wait()
        return self.received[key]


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (peak RSS), RssAnon, RssFile (mapped libraries) from /proc/PID/status, and Pss."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
            out[key] = int(value.split()[0])
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            out["Pss"] = int(line.split()[1])
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def record(message: str) -> str:
    return json.dumps({"message": {"message": message, "extraInfo": {"py_callstack": "tb", "timestamp": "1"}}})


def pod(name: str, namespace: str) -> dict[str, Any]:
    """A running training pod, as the API server has it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": "bench-uid", "labels": {"job-name": "bench"}},
        "spec": {"nodeName": "node-0", "containers": [{"name": "pytorch"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "pytorch", "state": {"running": {}}}]},
    }


async def main(writes: int, idle_seconds: float, api: bool = False) -> int:
    if api:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from support.kube_emulator import PODS, running_emulator

        with running_emulator() as kube, tempfile.TemporaryDirectory() as tmp:
            kube.put(PODS, pod("bench-worker-0", "bench"))
            kubeconfig = kube.kubeconfig(Path(tmp) / "kubeconfig", "bench")
            return await measure(writes, idle_seconds, {"PODMORTEM_POD_SOURCE": "api", "KUBECONFIG": str(kubeconfig)})
    return await measure(writes, idle_seconds, {"PODMORTEM_POD_SOURCE": "none"})


async def measure(writes: int, idle_seconds: float, pod_source: dict[str, str]) -> int:
    collector = AckingCollector()
    server = grpc.aio.server()
    pb_grpc.add_CollectorServicer_to_server(collector, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    with tempfile.TemporaryDirectory() as tmp:
        error_file = Path(tmp) / "error.json"
        env = {
            **os.environ,
            "POD_NAME": "bench-worker-0",
            "POD_NAMESPACE": "bench",
            "TORCHELASTIC_ERROR_FILE": str(error_file),
            "PODMORTEM_AGGREGATOR": f"127.0.0.1:{port}",
            "PODMORTEM_LOG_LEVEL": "WARNING",
            **pod_source,
        }
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "podmortem.sidecar.running", env=env)
        try:
            await asyncio.wait_for(collector.registered.wait(), 30)
            await asyncio.sleep(SETTLED + 1.0)  # past the clock-probe burst and the release after it
            cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
            await asyncio.sleep(idle_seconds)
            idle_cpu = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
            idle = memory_kib(proc.pid)  # at rest: after the idle window
            latencies = []
            for i in range(writes):
                message = f"ValueError: write {i}"
                t0 = time.time()
                error_file.write_text(record(message))
                latencies.append((await collector.wait_for(message)) - t0)
                await asyncio.sleep(0.05)
            # A 50 MB error file: read in bounded memory (head and tail only).
            big = f"ValueError: huge {time.time()}"
            with error_file.open("w") as f:
                f.write(record(big)[:-3])  # open the traceback string again ...
                f.write("x" * (50 << 20))  # ... fill it ...
                f.write('"}}}')  # ... and close the document
            await collector.wait_for(big, limit=30)
            after = memory_kib(proc.pid)
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    await server.stop(None)
    ms = sorted(x * 1000 for x in latencies)
    print(
        f"sidecar idle (registered, {idle_seconds:g} s at rest): RSS {mib(idle['VmRSS'])} = "
        f"anon {mib(idle['RssAnon'])} + mapped files {mib(idle['RssFile'])}; PSS {mib(idle['Pss'])}; "
        f"{idle['Threads']} threads"
    )
    print(
        f"after {writes} writes and a 50 MB error file: RSS {mib(after['VmRSS'])} (anon {mib(after['RssAnon'])}), "
        f"peak {mib(after['VmHWM'])} "
        f"(target <= 40 MiB: {'met' if after['VmHWM'] <= 40 * 1024 else 'NOT met'})"
    )
    print(
        f"error-file write -> aggregator receipt over {writes} writes: median {statistics.median(ms):.1f} ms, "
        f"min {ms[0]:.1f} ms, max {ms[-1]:.1f} ms"
    )
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(f"  p99 {p99:.1f} ms (target <= 50 ms: {'met' if p99 <= 50 else 'NOT met'})")
    print(
        f"idle CPU over {idle_seconds:g} s: {idle_cpu * 100:.2f}% of a core "
        f"(target <= 0.5%: {'met' if idle_cpu <= 0.005 else 'NOT met'})"
    )
    print(f"exit code after SIGTERM: {code}")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=100)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle CPU measurement")
    parser.add_argument("--api", action="store_true", help="the api pod source, against the Kubernetes emulator")
    ns = parser.parse_args()
    sys.exit(asyncio.run(main(ns.writes, ns.idle, ns.api)))
