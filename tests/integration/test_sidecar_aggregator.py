"""The real sidecar against the real aggregator, over gRPC on 127.0.0.1 (port 0, then the same port).

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

import pytest
from prometheus_client import CollectorRegistry
from support.common import HANG_GUARD, eventually

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.running import Aggregator
from podmortem.core.model import Incident, Member
from podmortem.k8s.backoff import Backoff
from podmortem.sidecar import config, running
from podmortem.sidecar.outbox import Outbox

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
