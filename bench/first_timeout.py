"""From a hang's first timeout to its verdict, with the best-effort capture at the first timeout.

A real `podmortem aggregator` process, and W sidecars played by load-generator processes speaking the
sidecar's protocol over real gRPC (64 streams a connection, `bench.load`): each registers saying it
answers capture requests; at a common moment member 0 reports a collective timeout (its error file, the
first timeout event). The aggregator asks every member to capture (`first_timeout`); each answers with a
`Capture` (the culprit, the last rank, with its stack in `load_batch`; the others waiting in the
collective) and then times out too (its error file and termination), as a hang's cascade does. Printed:

* request: seconds from the first timeout event to each member's receipt of the capture request (p50, max);
* verdict: seconds from the first timeout event to the verdict file (its first revision), and whether
  the verdict names the culprit's rank from the captured stack (`verdict.hang`);
* the same job without captures (the members do not offer them): the verdict's time as it was.

    python -m bench.first_timeout [--members 4,256] [--rounds 3] [--json]

How often the capture wins the race against a real teardown is `bench/capture_race.py`'s (real torchrun
in the local harness). Run it alone and report the load (`uptime`) with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from bench.common import T0, aggregator_command, start
from bench.load import STREAMS_PER_CHANNEL
from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import (
    capture_to_pb,
    error_to_pb,
    make_event,
    termination_to_pb,
    worker_capture_to_pb,
)

TIMEOUT = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 6000ms "
    "for recv operation to complete"
)
WAITING = (
    "Thread 0x00007f0000000001 (most recent call first):\n"
    '  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 2806 in all_reduce\n'
    '  File "/workspace/train.py", line 40 in step\n'
    '  File "/workspace/train.py", line 60 in main\n'
)
STUCK = (
    "Thread 0x00007f0000000001 (most recent call first):\n"
    '  File "/workspace/train.py", line 12 in load_batch\n'
    '  File "/workspace/train.py", line 38 in step\n'
    '  File "/workspace/train.py", line 60 in main\n'
)


async def member(stub: Any, job: str, pod: int, world: int, captures: bool, go_at: float) -> dict[str, Any]:
    reg = pb.Register(job=pb.JobRef(namespace="bench", name=job), pod=f"{job}-w-{pod}", world_size_hint=world)
    reg.attempt, reg.rank, reg.captures = "0", pod, captures
    key = f"{job}/{pod}"
    call = stub.Report(wait_for_ready=True)
    await call.write(pb.SidecarMessage(register=reg))
    await call.read()
    await asyncio.sleep(max(go_at - time.time(), 0))
    out: dict[str, Any] = {"pod": pod}
    error = make_event(error_to_pb(ErrorRecord(TIMEOUT, "RuntimeError", timestamp=T0)), f"{key}/e")
    if pod == 0:
        out["first_timeout_at"] = time.time()
        await call.write(pb.SidecarMessage(event=error))
        await call.read()  # its ack
    if captures:
        while True:
            msg = await asyncio.wait_for(call.read(), 30)
            if msg.WhichOneof("body") == "capture_request":
                break
        out["requested_at"] = time.time()
        request = msg.capture_request
        worker = worker_capture_to_pb(
            "control_plane", local_rank=0, global_rank=pod, stack=STUCK if pod == world - 1 else WAITING
        )
        event = make_event(capture_to_pb(request.request_id, request.trigger, [worker]), f"{key}/c")
        await call.write(pb.SidecarMessage(event=event))
        await call.read()
    events = [] if pod == 0 else [error]
    events.append(
        make_event(termination_to_pb(Termination(exit_code=1, reason="Error", finished_at=T0 + 1)), f"{key}/t")
    )
    for event in events:
        await call.write(pb.SidecarMessage(event=event))
        await call.read()
    await call.done_writing()
    while await call.read() is not grpc.aio.EOF:
        pass
    return out


async def generate(target: str, job: str, pods: list[int], world: int, captures: bool, go_at: float) -> list[Any]:
    channels = [grpc.aio.insecure_channel(target) for _ in range(0, len(pods), STREAMS_PER_CHANNEL)]
    stubs = [pb_grpc.CollectorStub(c) for c in channels]  # type: ignore[no-untyped-call]
    done = await asyncio.gather(
        *(member(stubs[i // STREAMS_PER_CHANNEL], job, p, world, captures, go_at) for i, p in enumerate(pods))
    )
    for c in channels:
        await c.close()
    return list(done)


def generator(target: str, job: str, pods: list[int], world: int, captures: bool, go_at: float, out: Any) -> None:
    try:
        out.put(asyncio.run(generate(target, job, pods, world, captures, go_at)))
    except BaseException as exc:
        out.put(f"generator failed: {exc!r}")
        raise


def one_round(world: int, captures: bool, index: int, procs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="podmortem-first-timeout-") as tmp:
        verdicts = Path(tmp) / "verdicts"
        proc, address = start(aggregator_command(Path(tmp) / "ready", verdicts), Path(tmp) / "ready")
        try:
            job = f"hang{index}{'c' if captures else 'n'}"
            go_at = time.time() + 2.0 + world / 200  # every stream registered by then
            queue: Any = multiprocessing.get_context("spawn").Queue()
            share = [list(range(world))[i::procs] for i in range(procs)]
            workers = [
                multiprocessing.get_context("spawn").Process(
                    target=generator, args=(address, job, part, world, captures, go_at, queue)
                )
                for part in share
                if part
            ]
            for w in workers:
                w.start()
            results: list[dict[str, Any]] = []
            for _ in workers:
                got = queue.get(timeout=120)
                if isinstance(got, str):
                    raise SystemExit(got)
                results.extend(got)
            for w in workers:
                w.join(10)
            deadline = time.time() + 30
            files: list[Path] = []
            while time.time() < deadline and not files:
                files = list(verdicts.glob("*.json"))
                time.sleep(0.01)
            if not files:
                raise SystemExit("no verdict")
            decided = files[0].stat().st_mtime
            doc = json.loads(files[0].read_text())
        finally:
            proc.terminate()
            proc.wait(10)
    first = next(r["first_timeout_at"] for r in results if "first_timeout_at" in r)
    requested = sorted(r["requested_at"] - first for r in results if "requested_at" in r)
    hang = (doc.get("verdict") or {}).get("hang") or {}
    return {
        "members": world,
        "captures": captures,
        "request_p50": statistics.median(requested) if requested else None,
        "request_max": requested[-1] if requested else None,
        "verdict_seconds": decided - first,
        "revision": doc.get("revision"),
        "global_rank": (doc.get("verdict") or {}).get("global_rank"),
        "stuck_ranks": hang.get("stuck_ranks"),
        "frame": hang.get("frame"),
        "named_culprit": world - 1 in (hang.get("stuck_ranks") or []),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", default="4,256")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--procs", type=int, default=2, help="load-generator processes")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = []
    for world in (int(w) for w in args.members.split(",")):
        for captures in (True, False):
            for r in range(args.rounds):
                rows.append(one_round(world, captures, r, min(args.procs, world)))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("W     captures  request p50/max (s)   first timeout -> verdict (s)   names the culprit's rank")
    for row in rows:
        req = f"{row['request_p50']:.3f} / {row['request_max']:.3f}" if row["request_p50"] is not None else "-"
        named = "yes" if row["named_culprit"] else f"no (global_rank {row['global_rank']})"
        print(f"{row['members']:<5} {row['captures']!s:<9} {req:<21} {row['verdict_seconds']:<30.3f} {named}")
    ok = all(row["named_culprit"] for row in rows if row["captures"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
