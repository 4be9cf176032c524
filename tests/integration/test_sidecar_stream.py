"""The sidecar's Report stream against a real gRPC server on 127.0.0.1.

The aggregator is written by someone else at the same time, so these tests run the client against a
small test servicer (`FakeCollector`, below) that speaks the contract of collector.proto: it
registers, acks (or holds its acks), answers clock probes on a clock it can skew, rejects bad
registrations with INVALID_ARGUMENT, and can be stopped and restarted on the same port. Backoff
sleeps are injected so reconnects cost no waiting; nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
from support import events
from support.common import HANG_GUARD, eventually
from support.fake_collector import FakeCollector, serving

from podmortem.k8s.backoff import Backoff
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar.outbox import Outbox
from podmortem.sidecar.stream import (
    CHANNEL_OPTIONS,
    ClockFilter,
    ClockSample,
    RegistrationRejected,
    StreamClient,
    clock_sample,
)


class Sleeps:
    """An injected sleep: records the delays asked for and yields to the loop without waiting."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


def error_event(n: int) -> pb.Event:
    return events.error_event(n, "ns/pod")


def run_ended(n: int) -> pb.Event:
    return events.run_ended(n, "ns/pod")


REGISTER = pb.Register(job=pb.JobRef(namespace="ns", name="job"), pod="job-worker-0", session_id="s1")


@contextlib.asynccontextmanager
async def client_running(client: StreamClient) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(client.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def make_client(target: str, outbox: Outbox, **kwargs: Any) -> StreamClient:
    kwargs.setdefault("probe_interval", 3600.0)
    kwargs.setdefault("probe_burst", 0)
    return StreamClient(target, REGISTER, outbox, **kwargs)


async def test_registers_first_then_sends_pending_and_new_events_until_acked() -> None:
    outbox = Outbox()
    outbox.put(error_event(1))  # pending before the stream opens
    async with serving(FakeCollector()) as served, client_running(make_client(served.target, outbox)):
        fake = served.collector
        await eventually(lambda: len(fake.events) == 1)
        outbox.put(run_ended(2))  # new while connected
        await eventually(lambda: len(fake.events) == 2)
        await asyncio.wait_for(outbox.wait_empty(), HANG_GUARD)
        assert fake.firsts == ["register"]
        assert fake.registers[0].pod == "job-worker-0"
        assert fake.event_ids == [error_event(1).id, run_ended(2).id]


async def test_unacked_events_are_resent_after_the_aggregator_restarts() -> None:
    outbox = Outbox()
    sleeps = Sleeps()
    async with serving(FakeCollector(ack=False)) as served:
        client = make_client(served.target, outbox, sleep=sleeps)
        async with client_running(client):
            for n in range(3):
                outbox.put(run_ended(n))
            await eventually(lambda: len(served.collector.events) == 3)
            assert len(outbox) == 3  # nothing acknowledged
            await served.stop()
            await served.start(FakeCollector())  # same port, a fresh aggregator that acks
            await asyncio.wait_for(outbox.wait_empty(), HANG_GUARD)
            fresh = served.collector
            assert fresh.firsts == ["register"]  # Register again, first, on the new stream
            assert fresh.event_ids == [run_ended(n).id for n in range(3)]  # everything resent, in order
            assert client.sessions >= 2
            assert sleeps.delays  # the reconnect went through the backoff


async def test_acknowledged_events_are_not_resent() -> None:
    outbox = Outbox()
    async with serving(FakeCollector()) as served:
        client = make_client(served.target, outbox, sleep=Sleeps())
        async with client_running(client):
            outbox.put(error_event(1))
            await asyncio.wait_for(outbox.wait_empty(), HANG_GUARD)
            await served.stop()
            await served.start(FakeCollector())
            outbox.put(run_ended(2))
            await asyncio.wait_for(outbox.wait_empty(), HANG_GUARD)
            assert served.collector.event_ids == [run_ended(2).id]


async def test_backoff_grows_and_resets_after_a_registered_stream() -> None:
    outbox = Outbox()
    sleeps = Sleeps()
    fake = FakeCollector()
    fake.abort_next = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.RESOURCE_EXHAUSTED]
    backoff = Backoff(initial=1.0, maximum=60.0, factor=2.0, jitter=0.0)
    async with serving(fake) as served:
        client = make_client(served.target, outbox, sleep=sleeps, backoff=backoff)
        async with client_running(client):
            outbox.put(error_event(1))
            await asyncio.wait_for(outbox.wait_empty(), HANG_GUARD)
            assert sleeps.delays == [1.0, 2.0, 4.0]
            assert fake.firsts == ["register"] * 4
            fake.abort_next = [grpc.StatusCode.UNAVAILABLE]
            await served.stop()  # the registered stream ends ...
            await served.start()
            await eventually(lambda: not fake.abort_next)
            await eventually(lambda: len(sleeps.delays) >= 5)
            assert sleeps.delays[3:5] == [1.0, 2.0]  # ... and the backoff started over


async def test_invalid_argument_stops_the_client() -> None:
    outbox = Outbox()
    outbox.put(error_event(1))
    async with serving(FakeCollector(reject="job namespace is required")) as served:
        client = make_client(served.target, outbox, sleep=Sleeps())
        with pytest.raises(RegistrationRejected, match="job namespace is required"):
            await asyncio.wait_for(client.run(), HANG_GUARD)
        assert len(outbox) == 1


async def test_clock_offset_is_measured_and_reported() -> None:
    offset = 5_000_000_000  # the aggregator's clock is 5 s ahead of this pod's
    outbox = Outbox()
    async with serving(FakeCollector(clock_offset_ns=offset)) as served:
        client = make_client(served.target, outbox, probe_burst=4, probe_burst_interval=0.01, sleep=Sleeps())
        async with client_running(client):
            fake = served.collector
            await eventually(lambda: fake.probes >= 4 and bool(fake.estimates))
            await eventually(lambda: client.clock.samples >= 4)
            best = client.clock.best
            assert best is not None
            # NTP bound: the true offset lies within half a round trip of the estimate.
            assert abs(best.offset_ns - offset) <= best.round_trip_ns // 2 + 1
            assert fake.estimates[-1].offset_ns <= offset + best.round_trip_ns
            rtts = [e.round_trip_ns for e in fake.estimates]
            assert rtts == sorted(rtts, reverse=True)  # sent only when the estimate improves


async def test_skewed_pod_clock_is_measured_with_an_injected_clock() -> None:
    outbox = Outbox()
    async with serving(FakeCollector()) as served:
        behind = 3_000_000_000  # this pod's clock is 3 s behind
        client = make_client(
            served.target,
            outbox,
            probe_burst=2,
            probe_burst_interval=0.01,
            sleep=Sleeps(),
            wall_ns=lambda: time.time_ns() - behind,
        )
        async with client_running(client):
            await eventually(lambda: client.clock.samples >= 2)
            best = client.clock.best
            assert best is not None and abs(best.offset_ns - behind) <= best.round_trip_ns // 2 + 1


def test_clock_sample_is_ntp() -> None:
    # Client sends at 100 (its clock); the server, 1000 ahead, receives at 1110 and replies at 1120;
    # the client receives at 140. One-way delays: 10 and 20.
    s = clock_sample(t1=100, t2=1110, t3=1120, t4=140)
    assert s == ClockSample(offset_ns=995, round_trip_ns=30)


def test_clock_filter_keeps_the_smallest_round_trip() -> None:
    f = ClockFilter()
    assert f.estimate() is None
    assert f.add(ClockSample(10, 500))
    assert not f.add(ClockSample(99, 800))
    assert f.add(ClockSample(12, 100))
    assert not f.add(ClockSample(0, -5))  # a clock step during a probe: ignored
    assert f.estimate() == pb.ClockEstimate(offset_ns=12, round_trip_ns=100, samples=4)


def test_backoff_is_exponential_capped_and_jittered() -> None:
    b = Backoff(initial=0.5, maximum=8.0, factor=2.0, jitter=0.2)
    assert [b.delay(n, lambda: 0.5) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert b.delay(2, lambda: 0.0) == pytest.approx(1.6)
    assert b.delay(2, lambda: 1.0) == pytest.approx(2.4)


def test_channel_options_carry_keepalive_and_reconnect_backoff() -> None:
    options = dict(CHANNEL_OPTIONS)
    assert options["grpc.keepalive_time_ms"] == 20_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.http2.max_pings_without_data"] == 0
    assert options["grpc.max_reconnect_backoff_ms"] > options["grpc.initial_reconnect_backoff_ms"]
