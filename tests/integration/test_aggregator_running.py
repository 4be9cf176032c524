"""The aggregator's supervision: `serve` ends on the first of {stop signal, a root task ending}, and
every ending goes through the one stop path (health NOT_SERVING, open incidents decided, verdicts
published) before a root task's failure is re-raised."""

from __future__ import annotations

import asyncio
import json
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
from podmortem.protocol.wire import error_to_pb, make_event

KEY = ("ml", "j", "0")


def _config(tmp_path: Path) -> AggregatorConfig:
    return AggregatorConfig(
        listen="127.0.0.1:0", metrics_listen="", verdict_dir=str(tmp_path / "verdicts"), quorum_timeout=3600
    )


def _open_incident(agg: Aggregator) -> None:
    event = make_event(error_to_pb(ErrorRecord(message="ValueError: bad label", timestamp=5)), "e-1")
    reg = pb.Register(job=pb.JobRef(namespace="ml", name="j"), pod="j-worker-1", world_size_hint=2, attempt="0")
    agg.book.ingest(agg.book.register(reg), event)
    assert agg.book.open_incidents() == [KEY]


async def _health(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
        return int(reply.status)


async def test_a_crashing_root_task_stops_the_aggregator_through_the_stop_path(tmp_path: Path) -> None:
    crashed = asyncio.Event()

    async def pod_watch_that_dies() -> None:
        await crashed.wait()
        raise RuntimeError("pod watch crashed")

    agg = Aggregator(_config(tmp_path), registry=CollectorRegistry(), tasks=[pod_watch_that_dies])
    await agg.start()
    try:
        assert await _health(agg.port) == health_pb2.HealthCheckResponse.SERVING
        _open_incident(agg)
        crashed.set()
        ended = await asyncio.wait_for(agg.run_until(asyncio.Event()), 30)  # no stop signal: the crash ends it
        assert ended is not None and ended.get_name() == "task-0"
    finally:
        with pytest.raises(RuntimeError, match="pod watch crashed"):
            await agg.stop(grace=2)
    # The stop path ran before the failure was raised: the open incident got its verdict, published.
    assert agg.book.open_incidents() == []
    files = list((tmp_path / "verdicts").glob("*.json"))
    assert len(files) == 1
    assert json.loads(files[0].read_text())["verdict"]["pod"] == "j-worker-1"


async def test_a_root_task_that_returns_on_its_own_is_a_failure(tmp_path: Path) -> None:
    async def quits() -> None:
        return None

    agg = Aggregator(_config(tmp_path), registry=CollectorRegistry(), tasks=[quits])
    await agg.start()
    assert await asyncio.wait_for(agg.run_until(asyncio.Event()), 30) is not None
    with pytest.raises(RuntimeError, match="ended on its own"):
        await agg.stop(grace=1)


async def test_the_stop_signal_ends_serving_cleanly_and_health_goes_not_serving(tmp_path: Path) -> None:
    agg = Aggregator(_config(tmp_path), registry=CollectorRegistry())
    await agg.start()
    stop = asyncio.Event()
    stop.set()
    assert await agg.run_until(stop) is None
    assert agg._health is not None
    await agg._health.enter_graceful_shutdown()  # what stop() does first; the server still answers
    assert await _health(agg.port) == health_pb2.HealthCheckResponse.NOT_SERVING
    await agg.stop(grace=1)  # no failure: returns normally


async def test_a_verdict_that_cannot_be_written_is_written_when_the_disk_is_back(tmp_path: Path) -> None:
    # The verdict directory's place is taken by a file (as good as a full or read-only disk): writes fail.
    blocked = tmp_path / "verdicts"
    blocked.write_text("not a directory")
    agg = Aggregator(_config(tmp_path), registry=CollectorRegistry())
    files_publisher = agg.verdict_files
    assert files_publisher is not None
    files_publisher.retry_interval = 0.05
    await agg.start()
    try:
        _open_incident(agg)
        agg.book.close_all()
        await asyncio.wait_for(agg.queue.drain(30), 30)
        assert list(files_publisher.unwritten) == ["ml:j:0"]  # kept, not lost
        errors = agg.metrics.registry.get_sample_value("podmortem_publish_errors_total", {"publisher": "json-file"})
        assert errors is not None and errors >= 1
        blocked.unlink()  # space is back
        await eventually(lambda: not files_publisher.unwritten, "the kept verdict written")
        files = list(blocked.glob("*.json"))
        assert [f.name for f in files] == ["ml_j_0.json"]
        assert json.loads(files[0].read_text())["verdict"]["pod"] == "j-worker-1"
    finally:
        await agg.stop(grace=1)


async def test_verdict_files_are_named_by_namespace_job_and_attempt_when_known(tmp_path: Path) -> None:
    # README: `<namespace>_<job>_<attempt>.json`; no attempt known: `<namespace>_<job>.json`.
    agg = Aggregator(_config(tmp_path), registry=CollectorRegistry())
    await agg.start()
    try:
        for attempt in ("", "3"):
            reg = pb.Register(job=pb.JobRef(namespace="ml", name="j"), pod="j-worker-1", attempt=attempt)
            event = make_event(error_to_pb(ErrorRecord(message="ValueError: bad label", timestamp=5)), f"e{attempt}")
            agg.book.ingest(agg.book.register(reg), event)
        agg.book.close_all()
        await asyncio.wait_for(agg.queue.drain(30), 30)
        assert sorted(f.name for f in (tmp_path / "verdicts").glob("*.json")) == ["ml_j.json", "ml_j_3.json"]
    finally:
        await agg.stop(grace=1)
