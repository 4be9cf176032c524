"""A small Collector servicer speaking collector.proto, for sidecar tests over real gRPC on 127.0.0.1.

It registers, acks (or holds its acks), answers clock probes on a clock it can skew, rejects bad
registrations with INVALID_ARGUMENT, answers `hold` when asked to (`holds`: else it is an aggregator of
before the hold, which ignores the message), sends `capture_request`s on every open stream
(`request_capture`, with `captures`), and can be stopped and restarted on the same port — the parts of an
aggregator a sidecar test needs, without the aggregator's incident logic.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio

from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc


class FakeCollector(pb_grpc.CollectorServicer):
    """A test aggregator: records what it receives and answers as the contract says."""

    def __init__(
        self,
        *,
        clock_offset_ns: int = 0,
        ack: bool = True,
        reject: str = "",
        holds: bool = False,
        hold_reply: pb.HoldReply | None = None,
        captures: bool = False,
    ) -> None:
        self.captures = captures  # says Registered.captures
        self._streams: list[asyncio.Queue[pb.AggregatorMessage]] = []  # each open stream's extra messages
        self.holds = holds  # says Registered.holds and answers `hold` (with `hold_reply`; None: never)
        self.hold_reply = hold_reply
        self.break_on_hold = 0  # end this many streams (UNAVAILABLE) when a hold arrives on them
        self.hold_requests: list[tuple[pb.Hold, int]] = []  # each hold, with the events received before it
        self.clock_offset_ns = clock_offset_ns
        self.ack = ack
        self.reject = reject
        self.acks_released = asyncio.Event()
        if ack:
            self.acks_released.set()
        self.registers: list[pb.Register] = []
        self.firsts: list[str] = []  # the kind of the first message of every stream
        self.events: list[pb.Event] = []
        self.estimates: list[pb.ClockEstimate] = []
        self.probes = 0
        self.abort_next: list[grpc.StatusCode] = []  # end the next streams with these codes

    @property
    def event_ids(self) -> list[str]:
        return [e.id for e in self.events]

    def request_capture(self, request_id: str, trigger: str = "stall", timeout_seconds: float = 0.0) -> int:
        """Send a `capture_request` on every open stream; how many streams it went to."""
        msg = pb.AggregatorMessage(
            capture_request=pb.CaptureRequest(request_id=request_id, trigger=trigger, timeout_seconds=timeout_seconds)
        )
        for queue in self._streams:
            queue.put_nowait(msg)
        return len(self._streams)

    @property
    def captures_received(self) -> list[pb.Capture]:
        return [e.capture for e in self.events if e.WhichOneof("payload") == "capture"]

    async def Report(
        self, request_iterator: AsyncIterator[pb.SidecarMessage], context: Any
    ) -> AsyncIterator[pb.AggregatorMessage]:
        """The answers to the sidecar's messages, and whatever `request_capture` adds, on one stream."""
        out: asyncio.Queue[pb.AggregatorMessage | BaseException | None] = asyncio.Queue()
        extra: asyncio.Queue[pb.AggregatorMessage] = asyncio.Queue()

        async def answer() -> None:
            try:
                async for reply in self._answers(request_iterator, context):
                    if reply.WhichOneof("body") == "registered" and extra not in self._streams:
                        self._streams.append(extra)
                    out.put_nowait(reply)
                out.put_nowait(None)
            except BaseException as exc:  # an abort: raised again where gRPC sees it
                out.put_nowait(exc)

        async def forward() -> None:
            while True:
                out.put_nowait(await extra.get())

        tasks = [asyncio.create_task(answer()), asyncio.create_task(forward())]
        try:
            while (item := await out.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if extra in self._streams:
                self._streams.remove(extra)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _answers(
        self, request_iterator: AsyncIterator[pb.SidecarMessage], context: Any
    ) -> AsyncIterator[pb.AggregatorMessage]:
        first = True
        held: list[str] = []
        async for msg in request_iterator:
            kind = msg.WhichOneof("body") or ""
            if first:
                self.firsts.append(kind)
                first = False
                if kind != "register":
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "first message must be register")
                if self.abort_next:
                    code = self.abort_next.pop(0)
                    await context.abort(code, "test: ending this stream")
            if kind == "register":
                self.registers.append(msg.register)
                if self.reject or not msg.register.pod:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.reject or "pod is required")
                yield pb.AggregatorMessage(
                    registered=pb.Registered(aggregator_id="fake", holds=self.holds, captures=self.captures)
                )
            elif kind == "hold":
                self.hold_requests.append((msg.hold, len(self.events)))
                if self.break_on_hold > 0:
                    self.break_on_hold -= 1
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "test: the aggregator went away")
                if self.holds and self.hold_reply is not None:
                    answer = pb.HoldReply()
                    answer.CopyFrom(self.hold_reply)
                    answer.seq = msg.hold.seq
                    yield pb.AggregatorMessage(hold_reply=answer)
            elif kind == "event":
                self.events.append(msg.event)
                held.append(msg.event.id)
                if self.acks_released.is_set():
                    yield pb.AggregatorMessage(ack=pb.Ack(event_ids=held))
                    held = []
            elif kind == "clock_probe":
                self.probes += 1
                t2 = time.time_ns() + self.clock_offset_ns
                reply = pb.ClockReply(seq=msg.clock_probe.seq, t1=msg.clock_probe.t1)
                reply.t2.FromNanoseconds(t2)
                reply.t3.FromNanoseconds(time.time_ns() + self.clock_offset_ns)
                yield pb.AggregatorMessage(clock_reply=reply)
            elif kind == "clock_estimate":
                self.estimates.append(msg.clock_estimate)


class Served:
    """A FakeCollector behind a real grpc.aio server that can be stopped and started on the same port."""

    def __init__(self, collector: FakeCollector) -> None:
        self.collector = collector
        self.port = 0
        self.server: Any = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, collector: FakeCollector | None = None) -> None:
        if collector is not None:
            self.collector = collector
        server = grpc.aio.server()
        pb_grpc.add_CollectorServicer_to_server(self.collector, server)  # type: ignore[no-untyped-call]
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        await server.start()
        self.server = server

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)
            self.server = None


@contextlib.asynccontextmanager
async def serving(collector: FakeCollector) -> AsyncIterator[Served]:
    served = Served(collector)
    await served.start()
    try:
        yield served
    finally:
        await served.stop()
