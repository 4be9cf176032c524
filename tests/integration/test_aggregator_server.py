"""The Collector service over a real gRPC socket on 127.0.0.1, driven by a raw client stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry
from support.common import eventually

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.running import Aggregator
from podmortem.core.model import ErrorRecord
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import error_to_pb, from_ts, make_event, to_ts


@pytest.fixture
async def aggregator(tmp_path: Path) -> AsyncIterator[Aggregator]:
    config = AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir=str(tmp_path / "verdicts"))
    agg = Aggregator(config, registry=CollectorRegistry(), clock=lambda: 1_000.0)
    await agg.start()
    try:
        yield agg
    finally:
        await agg.stop(grace=1)


def register_msg(pod: str = "p-0") -> pb.SidecarMessage:
    return pb.SidecarMessage(
        register=pb.Register(job=pb.JobRef(namespace="ml", name="j"), pod=pod, world_size_hint=2, attempt="0")
    )


async def exchange(port: int, messages: list[pb.SidecarMessage]) -> list[pb.AggregatorMessage]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.CollectorStub(channel)  # type: ignore[no-untyped-call]
        call = stub.Report()
        replies = []
        for msg in messages:
            await call.write(msg)
            if msg.WhichOneof("body") != "clock_estimate":
                replies.append(await call.read())
        await call.done_writing()
        return replies


async def test_register_event_ack_and_duplicate(aggregator: Aggregator) -> None:
    event = make_event(error_to_pb(ErrorRecord(message="ValueError: x", timestamp=5)), "id-1")
    replies = await exchange(
        aggregator.port,
        [register_msg(), pb.SidecarMessage(event=event), pb.SidecarMessage(event=event)],
    )
    assert replies[0].registered.aggregator_id == aggregator.service.aggregator_id
    assert list(replies[1].ack.event_ids) == ["id-1"]
    assert list(replies[2].ack.event_ids) == ["id-1"]  # a duplicate is acked too...
    assert aggregator.metrics.duplicates._value.get() == 1  # ...but counted once as received
    incident = aggregator.book.incident(("ml", "j", "0"))
    assert incident is not None and incident.members[0].error is not None
    assert aggregator.book.open_incidents() == [("ml", "j", "0")]


async def test_clock_probe_is_answered_with_server_times(aggregator: Aggregator) -> None:
    probe = pb.ClockProbe(seq=7)
    probe.t1.CopyFrom(to_ts(12.5))
    replies = await exchange(aggregator.port, [register_msg(), pb.SidecarMessage(clock_probe=probe)])
    reply = replies[1].clock_reply
    assert reply.seq == 7 and from_ts(reply.t1) == 12.5
    assert from_ts(reply.t2) == 1_000.0 and from_ts(reply.t3) == 1_000.0


async def test_first_message_must_be_register(aggregator: Aggregator) -> None:
    event = make_event(error_to_pb(ErrorRecord(message="ValueError: x")), "id-1")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await exchange(aggregator.port, [pb.SidecarMessage(event=event)])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_register_without_pod_is_refused(aggregator: Aggregator) -> None:
    msg = pb.SidecarMessage(register=pb.Register(job=pb.JobRef(namespace="ml", name="j")))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await exchange(aggregator.port, [msg])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "pod" in (err.value.details() or "")


async def test_health_and_connected_gauge(aggregator: Aggregator) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{aggregator.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        resp = await health.Check(health_pb2.HealthCheckRequest(service="podmortem.v1.Collector"))
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
        call = pb_grpc.CollectorStub(channel).Report()  # type: ignore[no-untyped-call]
        await call.write(register_msg())
        await call.read()
        assert aggregator.metrics.connected._value.get() == 1
        await call.done_writing()
        assert await call.code() == grpc.StatusCode.OK
    # The server notices the closed stream on its own schedule.
    await eventually(lambda: aggregator.metrics.connected._value.get() == 0, "the stream counted as closed")


async def test_a_stream_that_never_registers_is_ended_at_the_deadline(aggregator: Aggregator) -> None:
    aggregator.service.register_deadline = 0.2
    async with grpc.aio.insecure_channel(f"127.0.0.1:{aggregator.port}") as channel:
        call = pb_grpc.CollectorStub(channel).Report()  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await asyncio.wait_for(call.read(), 30)  # says nothing: no register
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    value = aggregator.metrics.registry.get_sample_value(
        "podmortem_streams_rejected_total", {"reason": "register_deadline"}
    )
    assert value == 1
