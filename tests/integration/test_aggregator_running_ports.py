"""The aggregator's ports and files as an operator meets them: a taken port is refused with the setting
and address named, the metrics of known label values exist before anything happens, and verdict files
get the mode the operator chose (0600 unless told)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.metrics import LIMITS, REJECT_REASONS
from podmortem.aggregator.running import Aggregator, BindError
from podmortem.core.model import ErrorRecord
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import error_to_pb, make_event


def _config(tmp_path: Path, **changes: object) -> AggregatorConfig:
    base = AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir=str(tmp_path / "verdicts"))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


async def test_a_second_aggregator_on_a_taken_grpc_port_is_refused(tmp_path: Path) -> None:
    first = Aggregator(_config(tmp_path), registry=CollectorRegistry())
    await first.start()
    try:
        address = f"127.0.0.1:{first.port}"
        second = Aggregator(_config(tmp_path, listen=address), registry=CollectorRegistry())
        try:
            with pytest.raises(BindError) as caught:
                await second.start()  # with SO_REUSEPORT it would serve beside the first
        finally:
            await second.stop(grace=0.1)
        assert "--listen" in str(caught.value) and address in str(caught.value)
    finally:
        await first.stop(grace=0.1)


async def test_a_taken_metrics_port_names_its_setting_and_address(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        address = f"127.0.0.1:{held.getsockname()[1]}"
        agg = Aggregator(_config(tmp_path, metrics_listen=address), registry=CollectorRegistry())
        with pytest.raises(BindError) as caught:
            await agg.start()
        await agg.stop(grace=0.1)
    assert "--metrics-listen" in str(caught.value) and address in str(caught.value)


def test_the_command_exits_2_and_says_which_flag_and_address(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        address = f"127.0.0.1:{held.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "podmortem.cli", "aggregator", "--listen", address, "--metrics-listen", ""],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
    assert done.returncode == 2, done.stderr
    assert f"PODMORTEM_LISTEN (or --listen) = {address}: cannot listen" in done.stderr
    assert "Traceback" not in done.stderr


def test_limit_series_exist_before_any_limit_is_hit() -> None:
    from podmortem.aggregator.metrics import Metrics

    metrics = Metrics(CollectorRegistry())
    for limit in LIMITS:
        assert metrics.registry.get_sample_value("podmortem_limit_hits_total", {"limit": limit}) == 0.0
    for reason in REJECT_REASONS:
        assert metrics.registry.get_sample_value("podmortem_streams_rejected_total", {"reason": reason}) == 0.0


def test_every_limit_the_code_counts_is_a_known_label() -> None:
    """A limit counted under a name not in LIMITS would appear only when hit: the case this guards."""
    import re

    root = Path(__file__).resolve().parent.parent.parent / "podmortem" / "aggregator"
    counted = set()
    for path in root.rglob("*.py"):
        text = path.read_text()
        counted |= set(re.findall(r'_limit_hit\("([a-z_]+)"\)', text))
        counted |= set(re.findall(r'limit_hits\.labels\(limit="([a-z_]+)"\)', text))
        counted |= set(re.findall(r'LimitExceeded\("([a-z_]+)"', text))
    assert counted and counted <= set(LIMITS), counted - set(LIMITS)


def test_every_refusal_reason_the_code_gives_is_a_known_label() -> None:
    """A refusal is made with (gRPC code, reason): each reason must be created up front."""
    import re

    root = Path(__file__).resolve().parent.parent.parent / "podmortem" / "aggregator"
    given = set()
    for path in root.rglob("*.py"):
        # StreamRefused and its kinds take the reason first (aggregator.refusals); a few helpers wrap them.
        given |= set(
            re.findall(
                r'\b(?:StreamRefused|AuthRefused|Unavailable|Exhausted|TooSlow|_refuse|_unauthenticated)\(\s*"([a-z_]+)"',
                path.read_text(),
            )
        )
    assert given and given <= set(REJECT_REASONS), given - set(REJECT_REASONS)


@pytest.mark.parametrize(("mode", "expected"), [(None, 0o600), (0o640, 0o640), (0o644, 0o644)])
async def test_verdict_files_get_the_chosen_mode(tmp_path: Path, mode: int | None, expected: int) -> None:
    config = _config(tmp_path, quorum_timeout=3600)
    if mode is not None:
        config = dataclasses.replace(config, verdict_file_mode=mode)
    agg = Aggregator(config, registry=CollectorRegistry())
    await agg.start()
    try:
        event = make_event(error_to_pb(ErrorRecord(message="ValueError: bad label", timestamp=5)), "e-1")
        reg = pb.Register(job=pb.JobRef(namespace="ml", name="j"), pod="j-worker-0", world_size_hint=1)
        agg.book.ingest(agg.book.register(reg), event)
        await asyncio.wait_for(agg.queue.drain(10), 15)
    finally:
        await agg.stop(grace=1)
    [path] = (tmp_path / "verdicts").glob("*.json")
    assert stat.S_IMODE(path.stat().st_mode) == expected
    assert json.loads(path.read_text())["verdict"]["pod"] == "j-worker-0"
