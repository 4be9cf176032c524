"""The sidecar's side of the protocol as load, and the floor it is measured against.

* `generator` (a process) runs sidecar streams over real gRPC: each registers, sends an error file, a log
  tail and a termination, waits for every ack, and opens the stream again when it is cut, as a sidecar
  does (`bench/burst.py`, `bench/ceiling.py`).
* `python -m bench.load READY_FILE` serves a bare grpc.aio Collector that only acknowledges: the floor of
  Python gRPC on this machine (`echo_command`; `bench/burst.py --echo`, `bench/stream_rss.py`).
* `python -m bench.load --service READY_FILE` serves the aggregator's own `CollectorService` (admission,
  per-stream rate limit, acknowledgements) over an inert book that keeps nothing: the floor of the
  aggregator's protocol handling, book and engine aside (`service_command`; `bench/burst.py --floor`).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from bench.common import GLOO, T0, log_tail
from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb

STREAMS_PER_CHANNEL = 64


def echo_command(ready: Path) -> list[str]:
    """The bare echo Collector as a process (for `bench.common.start`): it writes its address to `ready`."""
    return [sys.executable, "-m", "bench.load", str(ready)]


def service_command(ready: Path) -> list[str]:
    """The aggregator's CollectorService over an inert book, as a process (see `serve_service`)."""
    return [sys.executable, "-m", "bench.load", "--service", str(ready)]


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


class InertBook:
    """What `CollectorService` asks of the book, keeping nothing: every stream is admitted, every event
    acknowledged and dropped. With it the server's cost is gRPC's plus the service's own code."""

    def register(self, reg: pb.Register, verified: bool = False) -> Any:
        from podmortem.aggregator.incidents import MemberKey

        return MemberKey((reg.job.namespace, reg.job.name, reg.attempt), reg.pod)

    def ingest(self, key: Any, event: pb.Event, from_sidecar: bool = False) -> bool:
        return True

    def disconnected(self, key: Any) -> None:
        return None

    def set_clock(self, key: Any, offset: float, round_trip: float) -> None:
        return None


async def serve_service(ready: Path) -> None:
    from podmortem.aggregator.running import settle_gc
    from podmortem.aggregator.server import CollectorService, create_server

    settle_gc()  # as the aggregator process does
    service = CollectorService(InertBook())  # type: ignore[arg-type]
    server, port, _ = create_server("127.0.0.1:0", service)
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


if __name__ == "__main__":
    if sys.argv[1] == "--service":
        asyncio.run(serve_service(Path(sys.argv[2])))
    else:
        asyncio.run(serve_echo(Path(sys.argv[1])))
