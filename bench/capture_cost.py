"""What a hang capture costs the sidecar: CPU and memory during a capture, bytes sent per worker, and the
idle cost of stall detection.

Starts a Collector on 127.0.0.1 that says `captures`, W real torch workers under `worker_main()` (the
control plane: tests/support/control_plane_worker.py, one gloo group of W ranks, stopped in user code),
Flight Recorder dump files of torch's default ring size (2,000 entries with frames, the plain dicts torch
pickles, written here so that their size is known), and one sidecar process
(`python -m podmortem.sidecar.running`) with that capture dir, stall detection on (control plane sampled)
and py-spy on. Then: idle CPU over `--idle` seconds; one capture request answered (time from request to
the Capture event received, CPU seconds the sidecar spent, its RSS before and its peak after, the bytes of
the event per worker); a second request (what a repeated capture costs once the code is loaded).

    .venv/bin/python -m bench.capture_cost [--workers 4] [--idle 20] [--fr-files 4] [--fr-entries 2000]
        [--stall-after 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from bench.sidecar_rss import cpu_seconds, memory_kib, mib
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "support" / "control_plane_worker.py"


class CapturingCollector(pb_grpc.CollectorServicer):
    """Registers with `captures`, acks, and sends the capture requests put in `requests`."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[pb.CaptureRequest] = asyncio.Queue()
        self.captures: dict[str, tuple[float, pb.Event]] = {}
        self.registered = asyncio.Event()
        self.changed = asyncio.Event()

    async def Report(
        self, request_iterator: AsyncIterator[pb.SidecarMessage], context: Any
    ) -> AsyncIterator[pb.AggregatorMessage]:
        out: asyncio.Queue[pb.AggregatorMessage | None] = asyncio.Queue()

        async def read() -> None:
            async for msg in request_iterator:
                kind = msg.WhichOneof("body")
                if kind == "register":
                    out.put_nowait(pb.AggregatorMessage(registered=pb.Registered(aggregator_id="b", captures=True)))
                    self.registered.set()
                elif kind == "event":
                    if msg.event.WhichOneof("payload") == "capture":
                        self.captures[msg.event.capture.request_id] = (time.monotonic(), msg.event)
                        self.changed.set()
                    out.put_nowait(pb.AggregatorMessage(ack=pb.Ack(event_ids=[msg.event.id])))
            out.put_nowait(None)

        async def forward() -> None:
            while True:
                out.put_nowait(pb.AggregatorMessage(capture_request=await self.requests.get()))

        tasks = [asyncio.create_task(read()), asyncio.create_task(forward())]
        try:
            while (item := await out.get()) is not None:
                yield item
        finally:
            for t in tasks:
                t.cancel()

    async def capture(self, request_id: str) -> tuple[float, pb.Event]:
        sent = time.monotonic()
        self.requests.put_nowait(pb.CaptureRequest(request_id=request_id, trigger="stall", timeout_seconds=10))
        async with asyncio.timeout(60):
            while request_id not in self.captures:
                self.changed.clear()
                await self.changed.wait()
        got, event = self.captures[request_id]
        return got - sent, event


def fr_dump(rank: int, entries: int = 2000) -> bytes:
    """A dump as torch pickles it (`_dump_fr_trace`): plain dicts, `entries` collectives with 8 frames each."""
    frames = [
        {"name": f"f{i}", "filename": f"/opt/venv/lib/python3.11/site-packages/m{i}.py", "line": i} for i in range(8)
    ]
    rows = [
        {
            "frames": frames, "record_id": i, "pg_id": 0, "process_group": ("0", "default_pg"),
            "thread_name": "python", "thread_id": "139637293243264", "collective_seq_id": i + 1, "p2p_seq_id": 0,
            "op_id": i + 1, "profiling_name": "nccl:all_reduce", "time_created_ns": 1_795_760_526_431_808_647 + i,
            "input_sizes": [[4096, 4096]], "input_dtypes": ["BFloat16"], "output_sizes": [[4096, 4096]],
            "output_dtypes": ["BFloat16"], "state": "completed", "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "retired": True, "timeout_ms": 600000, "is_p2p": False,
        }
        for i in range(entries)
    ]  # fmt: skip
    status = {"0": {"last_enqueued_collective": entries, "last_started_collective": entries,
                    "last_completed_collective": entries - 1}}  # fmt: skip
    doc = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
           "comm_lib_version": "2.21.5", "pg_status": status, "entries": rows}  # fmt: skip
    return pickle.dumps(doc)


def start_workers(cap: Path, count: int, logs: Path) -> list[subprocess.Popen[bytes]]:
    port = 29500 + os.getpid() % 1000
    procs = []
    for rank in range(count):
        env = {
            **os.environ,
            "TORCH_WORKER_SERVER_SOCKET": str(cap / f"worker-{rank}.sock"),
            "TORCH_FR_BUFFER_SIZE": "2000",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(count),
            "PODMORTEM_CAPTURE_DIR": str(cap),
            "CP_COLLECTIVES": "50",
        }
        out = (logs / f"worker-{rank}.log").open("wb")
        procs.append(subprocess.Popen([sys.executable, str(WORKER)], env=env, stdout=out, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 120
    while not all("ready" in (logs / f"worker-{r}.log").read_text(errors="replace") for r in range(count)):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit("the workers did not start: see " + str(logs))
        time.sleep(0.2)
    return procs


def describe(event: pb.Event) -> str:
    c = event.capture
    paths: dict[str, int] = {}
    for w in c.workers:
        paths[w.path] = paths.get(w.path, 0) + 1
    return ", ".join(f"{n} {p}" for p, n in sorted(paths.items())) + (f"; note {c.note!r}" if c.note else "")


async def main(workers: int, idle_seconds: float, fr_files: int, stall_after: float, fr_entries: int = 2000) -> int:
    collector = CapturingCollector()
    server = grpc.aio.server()
    pb_grpc.add_CollectorServicer_to_server(collector, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    with tempfile.TemporaryDirectory(prefix="podmortem-capture-") as tmp:
        base = Path(tmp)
        cap = base / "capture"
        cap.mkdir()
        procs = start_workers(cap, workers, base)
        fr_bytes = 0
        for rank in range(fr_files):
            data = fr_dump(workers + rank, fr_entries)
            fr_bytes = len(data)
            (cap / f"fr-{workers + rank}").write_bytes(data)
        log = base / "train.log"
        log.write_text("step 1\n")
        env = {
            **os.environ,
            "POD_NAME": "bench-0",
            "POD_NAMESPACE": "bench",
            "TORCHELASTIC_ERROR_FILE": str(base / "error.json"),
            "PODMORTEM_AGGREGATOR": f"127.0.0.1:{port}",
            "PODMORTEM_POD_SOURCE": "none",
            "PODMORTEM_CAPTURE_DIR": str(cap),
            "PODMORTEM_STALL_AFTER": f"{stall_after:g}",  # short: the control plane is sampled while idle
            "PODMORTEM_LOG_FILE": str(log),
            "PODMORTEM_PYSPY": "1",
            "PODMORTEM_HOLD_TIMEOUT": "0",
            "PODMORTEM_LOG_LEVEL": "WARNING",
        }
        proc = subprocess.Popen([sys.executable, "-m", "podmortem.sidecar.running"], env=env)
        try:
            async with asyncio.timeout(30):
                await collector.registered.wait()
            await asyncio.sleep(3)  # start-up over, stall detection has sampled the control plane
            cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
            await asyncio.sleep(idle_seconds)
            idle_cpu = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
            before = memory_kib(proc.pid)
            results = []
            for request in ("first", "second"):
                (cap / f"fr-{workers}").touch()  # a new version of one dump each time: it is read again
                c0 = cpu_seconds(proc.pid)
                took, event = await collector.capture(request)
                results.append((request, took, cpu_seconds(proc.pid) - c0, event))
            await asyncio.sleep(0.5)  # the last ack reaches the sidecar
            after = memory_kib(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            for p in procs:
                p.kill()
                p.wait()
    await server.stop(None)
    print(f"W = {workers} workers (control plane + py-spy), {fr_files} Flight Recorder dump files of {fr_bytes} bytes")
    print(
        f"sidecar idle with stall detection at {stall_after:g} s: {idle_cpu * 100:.2f}% of a core over "
        f"{idle_seconds:g} s (target <= 0.5%: {'met' if idle_cpu <= 0.005 else 'NOT met'})"
    )
    print(
        f"RSS before the first capture {mib(before['VmRSS'])} (anon {mib(before['RssAnon'])}); after "
        f"{mib(after['VmRSS'])} (anon {mib(after['RssAnon'])}), peak {mib(after['VmHWM'])}"
    )
    for request, took, cpu, event in results:
        n = max(len(event.capture.workers), 1)
        print(
            f"{request} capture: {took * 1000:.0f} ms request -> event, {cpu * 1000:.0f} ms sidecar CPU, "
            f"{event.ByteSize()} bytes = {event.ByteSize() // n} per worker capture ({describe(event)})"
        )
        for w in event.capture.workers:
            print(f"  {w.path:13} rank {w.global_rank}: stack {len(w.stack)} B, flight recorder "
                  f"{len(w.flight_recorder)} B{f', note {w.note!r}' if w.note else ''}")  # fmt: skip
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=4, help="torch workers (one gloo group)")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle CPU measurement")
    parser.add_argument("--fr-files", type=int, default=4, help="Flight Recorder dump files in the capture dir")
    parser.add_argument("--fr-entries", type=int, default=2000, help="entries per dump file (2,000: 0.24 MiB)")
    parser.add_argument("--stall-after", type=float, default=2.0, help="the sidecar's PODMORTEM_STALL_AFTER")
    ns = parser.parse_args()
    sys.exit(asyncio.run(main(ns.workers, ns.idle, ns.fr_files, ns.stall_after, ns.fr_entries)))
