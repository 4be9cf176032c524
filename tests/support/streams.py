"""A sidecar's stream spoken raw, for tests of the aggregator's side: register, send events (each acked),
read the capture requests the aggregator pushes."""

from __future__ import annotations

import asyncio

import grpc

from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import activity_to_pb, capture_to_pb, make_event, worker_capture_to_pb

JOB = pb.JobRef(namespace="ml", name="llm", kind="PyTorchJob")
T0 = 1_800_000_000.0
STACK = 'Thread 0x01 (most recent call first):\n  File "/w/train.py", line 12 in load_batch\n'


class Sidecar:
    """A raw client stream, as the sidecar speaks it: register, events acked, requests read."""

    def __init__(self, port: int, pod: str, rank: int, captures: bool = True) -> None:
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        self.call = pb_grpc.CollectorStub(self.channel).Report()  # type: ignore[no-untyped-call]
        self.reg = pb.Register(job=JOB, pod=pod, rank=rank, world_size_hint=2, attempt="0", captures=captures)
        self.pushed: list[pb.CaptureRequest] = []  # requests read while waiting for an ack

    async def register(self) -> pb.Registered:
        await self.call.write(pb.SidecarMessage(register=self.reg))
        reply: pb.AggregatorMessage = await self.call.read()
        return reply.registered

    async def send(self, event: pb.Event) -> None:
        """Send one event and wait for its ack; a capture request pushed meanwhile is kept for `request`."""
        await self.call.write(pb.SidecarMessage(event=event))
        reply: pb.AggregatorMessage = await self.call.read()
        while reply.WhichOneof("body") == "capture_request":
            self.pushed.append(reply.capture_request)
            reply = await self.call.read()
        assert list(reply.ack.event_ids) == [event.id]

    async def request(self) -> pb.CaptureRequest:
        """The next capture request pushed (waiting up to 10 s)."""
        if self.pushed:
            return self.pushed.pop(0)
        reply: pb.AggregatorMessage = await asyncio.wait_for(self.call.read(), 10)
        assert reply.WhichOneof("body") == "capture_request", reply
        return reply.capture_request

    async def close(self) -> None:
        await self.call.done_writing()
        await self.channel.close()


def quiet(pod: str, n: int = 1, quiet: bool = True) -> pb.Event:
    """Activity `n` of `pod` (sent at T0 + n - 1): quiet for 30 s, or (`quiet` false) moving again."""
    at = T0 + n - 1
    activity = activity_to_pb(True, 30.0, at - 30) if quiet else activity_to_pb(False, 0.0, at)
    return make_event(activity, f"{pod}/activity/{n}", wall=at)


def answer(pod: str, request: pb.CaptureRequest, rank: int, n: int = 1) -> pb.Event:
    """Capture `n` of `pod`: rank 1 answers with STACK (stuck in load_batch), any other with no stack."""
    worker = worker_capture_to_pb("control_plane", local_rank=0, global_rank=rank, stack=STACK if rank == 1 else "")
    return make_event(capture_to_pb(request.request_id, request.trigger, [worker]), f"{pod}/capture/{n}", wall=T0 + n)
