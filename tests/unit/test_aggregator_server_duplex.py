"""A stream the aggregator also writes to unprompted: the sidecar's messages in order, pushed ones between
them as soon as they are queued, the end and a broken stream as a plain `async for` would see them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from podmortem.aggregator.server import MAX_PUSHED, _Duplex
from podmortem.protocol.v1 import collector_pb2 as pb


def probe(seq: int) -> pb.SidecarMessage:
    return pb.SidecarMessage(clock_probe=pb.ClockProbe(seq=seq))


def request(n: int) -> pb.AggregatorMessage:
    return pb.AggregatorMessage(capture_request=pb.CaptureRequest(request_id=f"r{n}", trigger="stall"))


async def sidecar(gate: asyncio.Event, error: Exception | None = None) -> AsyncIterator[pb.SidecarMessage]:
    yield probe(1)
    await gate.wait()  # silent until the test lets it go on
    yield probe(2)
    if error is not None:
        raise error


def names(items: list[pb.SidecarMessage | pb.AggregatorMessage]) -> list[str]:
    out = []
    for m in items:
        if isinstance(m, pb.AggregatorMessage):
            out.append(m.capture_request.request_id)
        else:
            out.append(f"p{m.clock_probe.seq}")
    return out


async def test_a_push_reaches_a_silent_stream_at_once_and_order_is_kept() -> None:
    gate = asyncio.Event()
    duplex = _Duplex(sidecar(gate))
    seen: list[pb.SidecarMessage | pb.AggregatorMessage] = []

    async def read() -> None:
        async for m in duplex.messages():
            seen.append(m)

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.01)
    assert names(seen) == ["p1"]
    duplex.push(request(1))  # the sidecar says nothing: the push must not wait for it
    await asyncio.sleep(0.01)
    assert names(seen) == ["p1", "r1"]
    gate.set()
    await asyncio.wait_for(reader, 1)
    assert names(seen) == ["p1", "r1", "p2"]


async def test_a_broken_stream_raises_as_it_would_without_pushes() -> None:
    gate = asyncio.Event()
    gate.set()
    duplex = _Duplex(sidecar(gate, RuntimeError("stream reset")))
    seen = []
    with pytest.raises(RuntimeError, match="stream reset"):
        async for m in duplex.messages():
            seen.append(m)
    assert names(seen) == ["p1", "p2"]


async def test_pushes_to_a_stream_that_reads_nothing_are_bounded() -> None:
    gate = asyncio.Event()
    duplex = _Duplex(sidecar(gate))
    for n in range(MAX_PUSHED + 5):
        duplex.push(request(n))
    gate.set()
    seen = [m async for m in duplex.messages()]
    pushed = [m for m in names(seen) if m.startswith("r")]
    assert pushed == [f"r{n}" for n in range(5, MAX_PUSHED + 5)]  # the oldest dropped
    assert [m for m in names(seen) if m.startswith("p")] == ["p1", "p2"]
