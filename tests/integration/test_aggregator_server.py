"""The Collector service over a real gRPC socket on 127.0.0.1, driven by a raw client stream.

Limits, over real gRPC: past each, the new thing is refused with a clear status and counted in
podmortem_limit_hits_total{limit}; nothing already held is dropped.
"""

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
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import MemberKey
from podmortem.aggregator.running import Aggregator
from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol import wire
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


class Collecting:
    name = "collecting"

    def __init__(self) -> None:
        self.jobs: list[str] = []

    async def publish(self, decision: Decision) -> None:
        self.jobs.append(decision.incident.job.name)


@pytest.fixture
def decided() -> Collecting:
    return Collecting()


@pytest.fixture
async def agg(tmp_path: Path, decided: Collecting) -> AsyncIterator[Aggregator]:
    config = AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir="", quorum_timeout=600)
    aggregator = Aggregator(config, registry=CollectorRegistry(), publishers=[decided])
    await aggregator.start()
    try:
        yield aggregator
    finally:
        await aggregator.stop(grace=1)


def hits(agg: Aggregator, limit: str) -> float:
    value = agg.metrics.registry.get_sample_value("podmortem_limit_hits_total", {"limit": limit})
    return value or 0.0


def reg(pod: str, job: str = "j", namespace: str = "ml", world: int = 0) -> pb.Register:
    return pb.Register(job=pb.JobRef(namespace=namespace, name=job), pod=pod, world_size_hint=world)


def failed(pod: str, n: int = 0) -> list[pb.Event]:
    rec = ErrorRecord(message=f"ValueError: {pod} {n}", exception_type="ValueError", timestamp=1_800_000_000 + n)
    term = Termination(exit_code=1, reason="Error", finished_at=1_800_000_000.0 + n)
    return [
        wire.make_event(wire.error_to_pb(rec), wire.error_event_id(pod, rec)),
        wire.make_event(wire.termination_to_pb(term), f"{pod}/termination/0"),
    ]


async def stream(port: int, register: pb.Register, events: list[pb.Event]) -> list[str]:
    """Register and send; the ids acknowledged. Raises AioRpcError when the aggregator ends the stream."""
    acked: list[str] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.CollectorStub(channel).Report()  # type: ignore[no-untyped-call]
        await call.write(pb.SidecarMessage(register=register))
        await call.read()
        for event in events:
            await call.write(pb.SidecarMessage(event=event))
            reply = await call.read()
            if reply is grpc.aio.EOF:
                await call  # raises the status
            acked.extend(reply.ack.event_ids)
        await call.done_writing()
    return acked


async def test_a_stream_over_its_event_rate_is_ended(agg: Aggregator) -> None:
    agg.service.event_rate, agg.service.event_burst = 1.0, 3
    events = [wire.make_event(wire.error_to_pb(ErrorRecord(message=f"E: {i}", timestamp=i)), f"e{i}") for i in range(8)]
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await stream(agg.port, reg("p0"), events)
    assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "events/s" in (ended.value.details() or "")
    assert hits(agg, "event_rate") == 1
    # The burst (3) was taken and acknowledged before the limit; they stay in the book.
    incident = agg.book.incident(("ml", "j", ""))
    assert incident is not None and [m.error.message for m in incident.members if m.error] == ["E: 2"]


async def test_a_job_past_its_member_limit_refuses_the_next_pod(agg: Aggregator) -> None:
    agg.book.max_members = 2
    await stream(agg.port, reg("p0"), [])
    await stream(agg.port, reg("p1"), [])
    await stream(agg.port, reg("p1"), [])  # a known member may always come back
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stream(agg.port, reg("p2"), [])
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert hits(agg, "members_per_job") == 1


async def test_namespaces_past_the_limit_are_refused(agg: Aggregator) -> None:
    agg.book.max_namespaces = 2
    await stream(agg.port, reg("p0", namespace="a"), [])
    await stream(agg.port, reg("p0", job="other", namespace="b"), [])
    await stream(agg.port, reg("p1", job="j2", namespace="a"), [])  # a namespace already tracked
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stream(agg.port, reg("p0", namespace="c"), [])
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "namespaces" in (
        refused.value.details() or ""
    )
    assert hits(agg, "namespaces") == 1


async def test_an_incident_past_the_open_limit_waits_for_a_place(agg: Aggregator, decided: Collecting) -> None:
    agg.book.max_open = 1
    await stream(agg.port, reg("a0", job="a", world=2), failed("a0"))
    await stream(agg.port, reg("b0", job="b", world=1), failed("b0"))  # b is complete, but may not open
    assert agg.book.open_incidents() == [("ml", "a", "")] and hits(agg, "open_incidents") == 1
    await stream(agg.port, reg("a1", job="a", world=2), failed("a1"))  # a closes; b takes its place
    await eventually(lambda: decided.jobs == ["a", "b"], "both decided, b after a")


async def test_bytes_and_events_kept_per_member_are_bounded(agg: Aggregator) -> None:
    # 40 error-file versions of 3.9 MB each (the defect: all were kept, +209 MB), then a flood of ends.
    big = [
        wire.make_event(
            wire.error_to_pb(ErrorRecord(message=f"ValueError: {i} " + "x" * 3_900_000, timestamp=i)), f"v{i}"
        )
        for i in range(40)
    ]
    assert len(await stream(agg.port, reg("p0"), big)) == 40  # all acknowledged: the sidecar may forget them
    incident = agg.book.incident(("ml", "j", ""))
    assert incident is not None
    [member] = incident.members
    assert member.error is not None and member.error.message.startswith("ValueError: 39 ")  # the newest wins
    assert len(member.error.message) <= 16 << 10 and member.error.truncated
    ends = [
        wire.make_event(wire.termination_to_pb(Termination(exit_code=1, restart_count=i)), f"t{i}") for i in range(300)
    ]
    agg.service.event_burst, agg.service.event_rate = 1_000, 1_000.0
    assert len(await stream(agg.port, reg("p0"), ends)) == 300  # acked, but not all kept
    assert hits(agg, "member_events") == 1
    kept = agg.book._member(MemberKey(("ml", "j", ""), "p0"))
    assert kept is not None and len(kept.events) == 256


async def test_invented_attempts_open_at_most_the_jobs_bound(agg: Aggregator, decided: Collecting) -> None:
    # One pod registers attempts n0 ... n29 (an unauthenticated stream's say-so), each with a failure: each
    # would be an incident of its own. At most the job's bound open; the rest wait, counted. Another job's
    # failure opens and is decided at once, before any of them.
    for n in range(30):
        invented = reg("p0", world=2)
        invented.attempt = f"n{n}"
        await stream(agg.port, invented, failed("p0", n))
    assert len(agg.book.open_incidents()) == 4  # the default --max-open-incidents-per-job
    assert hits(agg, "open_incidents_per_job") == 26
    await stream(agg.port, reg("q0", job="other", world=1), failed("q0"))
    await eventually(lambda: decided.jobs == ["other"], "the other job decided")
    assert len(agg.book.open_incidents()) == 4


async def test_a_namespace_past_its_bound_waits_and_others_do_not(agg: Aggregator, decided: Collecting) -> None:
    agg.book.max_open_per_namespace = 2
    for job in ("a", "b", "c"):
        await stream(agg.port, reg(f"{job}0", job=job, world=2), failed(f"{job}0"))
    assert sorted(agg.book.open_incidents()) == [("ml", "a", ""), ("ml", "b", "")]
    assert hits(agg, "open_incidents_per_namespace") == 1
    await stream(agg.port, reg("x0", job="x", namespace="other", world=1), failed("x0"))  # another namespace
    await eventually(lambda: decided.jobs == ["x"], "the other namespace's job decided")
    await stream(agg.port, reg("a1", job="a", world=2), failed("a1"))  # a closes; c takes its place
    await eventually(lambda: ("ml", "c", "") in agg.book.open_incidents(), "c opened")
    assert decided.jobs[:2] == ["x", "a"]
