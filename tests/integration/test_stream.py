"""The sidecar's Report stream against a real gRPC server on 127.0.0.1.

The aggregator is written by someone else at the same time, so these tests run the client against a
small test servicer (`FakeCollector`, below) that speaks the contract of collector.proto: it
registers, acks (or holds its acks), answers clock probes on a clock it can skew, rejects bad
registrations with INVALID_ARGUMENT, and can be stopped and restarted on the same port. Backoff
sleeps are injected so reconnects cost no waiting; nothing asserts on durations.

The real sidecar against the real aggregator, over gRPC on 127.0.0.1 (port 0, then the same port).

Registration, events and acks, duplicate suppression, resending after the aggregator restarts (what
was unacknowledged, and what the lost incarnation had acknowledged), the SIGTERM flush of a real
sidecar process, and the NTP-style clock offset against a known injected offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from prometheus_client import CollectorRegistry
from support import events
from support.common import HANG_GUARD, eventually
from support.fake_collector import FakeCollector, serving

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.running import Aggregator
from podmortem.core.model import Incident, Member
from podmortem.k8s.backoff import Backoff
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar import config, running
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


JOB_KEY = ("ml", "llm", "0")
FAST = Backoff(initial=0.02, maximum=0.1)


def error_doc(message: str, ts: int = 1_795_000_000) -> str:
    return json.dumps({"message": {"message": message, "extraInfo": {"py_callstack": "tb", "timestamp": str(ts)}}})


def sidecar_env(tmp_path: Path, pod: str, port: int) -> dict[str, str]:
    return {
        "POD_NAME": pod,
        "POD_NAMESPACE": "ml",
        "TORCHELASTIC_ERROR_FILE": str(tmp_path / pod / "error.json"),
        "PODMORTEM_AGGREGATOR": f"127.0.0.1:{port}",
        "PODMORTEM_JOB_NAME": "llm",
        "PODMORTEM_JOB_KIND": "PyTorchJob",
        "PODMORTEM_ATTEMPT": "0",
        "PET_NNODES": "2",
        "PODMORTEM_POD_SOURCE": "none",
    }


@contextlib.asynccontextmanager
async def aggregator_on(port: int = 0, clock: Callable[[], float] = time.time) -> AsyncIterator[Aggregator]:
    """A real aggregator on 127.0.0.1 (port 0: one the system picks, read back as `.port`)."""
    agg = Aggregator(
        AggregatorConfig(listen=f"127.0.0.1:{port}", metrics_listen="", verdict_dir="", quorum_timeout=600),
        registry=CollectorRegistry(),
        clock=clock,
    )
    await agg.start()
    try:
        yield agg
    finally:
        await agg.stop(grace=0.5)


@contextlib.asynccontextmanager
async def sidecar(env: dict[str, str], outbox: Outbox | None = None) -> AsyncIterator[Outbox]:
    outbox = outbox if outbox is not None else Outbox()
    stop = asyncio.Event()
    task = asyncio.create_task(
        running.serve(
            config.from_env_and_args(env), stop=stop, outbox=outbox, backoff=FAST, install_signal_handlers=False
        )
    )
    try:
        yield outbox
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            async with asyncio.timeout(HANG_GUARD):
                await task


def member(agg: Aggregator, pod: str) -> Member | None:
    incident: Incident | None = agg.book.incident(JOB_KEY)
    return next((m for m in incident.members if m.pod == pod), None) if incident else None


def has_error(agg: Aggregator, pod: str, text: str) -> bool:
    m = member(agg, pod)
    return m is not None and m.error is not None and text in m.error.message


async def test_registration_event_and_ack(tmp_path: Path) -> None:
    async with aggregator_on() as agg:
        env = sidecar_env(tmp_path, "llm-worker-0", agg.port)
        async with sidecar(env) as outbox:
            await eventually(lambda: member(agg, "llm-worker-0") is not None)
            assert agg.metrics.connected._value.get() == 1
            Path(env["TORCHELASTIC_ERROR_FILE"]).parent.mkdir(parents=True, exist_ok=True)
            Path(env["TORCHELASTIC_ERROR_FILE"]).write_text(error_doc("ValueError: bad label"))
            await eventually(lambda: has_error(agg, "llm-worker-0", "ValueError: bad label"))
            await eventually(lambda: len(outbox) == 0)  # acknowledged
        incident = agg.book.incident(JOB_KEY)
        assert incident is not None and incident.world_size == 2  # the PET_NNODES hint
        assert agg.book.open_incidents() == [JOB_KEY]


async def test_a_restarted_sidecar_does_not_duplicate_events(tmp_path: Path) -> None:
    async with aggregator_on() as agg:
        env = sidecar_env(tmp_path, "llm-worker-0", agg.port)
        Path(env["TORCHELASTIC_ERROR_FILE"]).parent.mkdir(parents=True)
        Path(env["TORCHELASTIC_ERROR_FILE"]).write_text(error_doc("ValueError: once"))
        for _ in range(2):  # the same file seen by two sidecar lifetimes: one event
            async with sidecar(env) as outbox:
                await eventually(lambda: has_error(agg, "llm-worker-0", "once"))
                await eventually(lambda: len(outbox) == 0)
        assert agg.metrics.registry.get_sample_value("podmortem_events_received_total", {"kind": "error_file"}) == 1
        assert agg.metrics.duplicates._value.get() == 1


async def test_events_survive_an_aggregator_restart(tmp_path: Path) -> None:
    outbox = Outbox()
    first_run = aggregator_on()
    first = await first_run.__aenter__()
    # The sidecar is configured with one address: the restarted aggregator binds the port the first got.
    port = first.port
    env = sidecar_env(tmp_path, "llm-worker-1", port)
    error_file = Path(env["TORCHELASTIC_ERROR_FILE"])
    error_file.parent.mkdir(parents=True)
    async with sidecar(env, outbox):
        try:
            error_file.write_text(error_doc("ValueError: before the restart"))
            await eventually(lambda: has_error(first, "llm-worker-1", "before the restart"))
            await eventually(lambda: len(outbox) == 0)  # acknowledged by the first incarnation
        finally:
            await first_run.__aexit__(None, None, None)
        # Aggregator down: a new failure waits in the outbox.
        error_file.write_text(error_doc("RuntimeError: while it was down"))
        await eventually(lambda: len(outbox) == 1)
        async with aggregator_on(port) as second:
            await eventually(lambda: has_error(second, "llm-worker-1", "while it was down"))
            await eventually(lambda: len(outbox) == 0)
            # The new incarnation also got what only the old one had acknowledged.
            assert (
                second.metrics.registry.get_sample_value("podmortem_events_received_total", {"kind": "error_file"}) == 2
            )


async def test_sigterm_flushes_a_real_sidecar_process(tmp_path: Path) -> None:
    async with aggregator_on() as agg:
        env = sidecar_env(tmp_path, "llm-worker-0", agg.port)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "podmortem.cli",
            "sidecar",
            "--flush-timeout",
            "10",
            env={**os.environ, **env},
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            await eventually(lambda: member(agg, "llm-worker-0") is not None)
            error_file = Path(env["TORCHELASTIC_ERROR_FILE"])
            error_file.parent.mkdir(parents=True, exist_ok=True)
            error_file.write_text(error_doc("ValueError: written just before SIGTERM"))
            proc.send_signal(signal.SIGTERM)  # at once: the last look and the flush must carry it
            async with asyncio.timeout(HANG_GUARD):
                _, stderr = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, stderr.decode()
        assert has_error(agg, "llm-worker-0", "written just before SIGTERM")


@pytest.mark.parametrize("offset", [5.0, -3.25])
async def test_clock_offset_is_estimated_within_half_the_round_trip(tmp_path: Path, offset: float) -> None:
    async with aggregator_on(clock=lambda: time.time() + offset) as agg:
        async with sidecar(sidecar_env(tmp_path, "llm-worker-0", agg.port)):
            await eventually(lambda: (m := member(agg, "llm-worker-0")) is not None and m.clock_offset is not None)
            m = member(agg, "llm-worker-0")
            assert m is not None and m.clock_offset is not None and m.clock_round_trip is not None
            # NTP's bound, whatever the machine's speed: the true offset is within half the probe's round
            # trip of the estimate (1 ms for the rounding of the probe's nanosecond stamps).
            assert abs(m.clock_offset - offset) <= m.clock_round_trip / 2 + 0.001, (m.clock_offset, m.clock_round_trip)
