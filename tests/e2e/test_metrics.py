"""Aggregator metrics: exact samples on a fresh registry, then scraped and queried by a real Prometheus."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.common import eventually, free_port
from support.kube_objects import decision as shared_decision

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.metrics import Metrics, MetricsPublisher
from podmortem.aggregator.running import Aggregator
from podmortem.core.categories import CATEGORIES
from podmortem.core.model import JobRef


def ml_decision(category: str | None, revision: int = 1, namespace: str = "ml") -> Decision:
    """The shared decision in job `namespace`/j of two pods, decided 3.5 s after its incident opened."""
    return shared_decision(
        "a" if category else None,
        revision,
        category,
        job=JobRef(namespace, "j"),
        members=("a", "b"),
        incident_id="ml.j.0",
        retryable=None,
        opened_at=100.0,
        decided_at=103.5,
        closed_by="quorum" if revision == 1 else "revision",  # as the book closes and revises
    )


async def test_first_verdicts_and_revisions_are_counted_apart() -> None:
    metrics = Metrics(CollectorRegistry())
    publisher = MetricsPublisher(metrics)
    await publisher.publish(ml_decision("user_code"))
    await publisher.publish(ml_decision("hang", revision=2))
    sample = metrics.registry.get_sample_value
    assert sample("podmortem_incidents_total", {"namespace": "ml", "category": "user_code"}) == 1
    assert sample("podmortem_incidents_total", {"namespace": "ml", "category": "hang"}) is None
    assert sample("podmortem_verdicts_total", {"category": "hang"}) == 1
    assert sample("podmortem_verdict_revisions_total") == 1
    assert sample("podmortem_verdict_latency_seconds_count") == 1
    assert sample("podmortem_verdict_latency_seconds_bucket", {"le": "5.0"}) == 1
    assert sample("podmortem_verdict_latency_seconds_bucket", {"le": "3.0"}) == 0


def test_every_category_series_exists_before_any_incident() -> None:
    metrics = Metrics(CollectorRegistry())
    for category in (*CATEGORIES, "none"):
        assert metrics.registry.get_sample_value("podmortem_verdicts_total", {"category": category}) == 0


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: run `make test` (it installs Debian's prometheus)")
    config = tmp_path / "prometheus.yml"
    port = free_port()
    yield config, port


def _query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


async def test_real_prometheus_scrapes_the_aggregator(prometheus: tuple[Path, int], tmp_path: Path) -> None:
    config_path, prom_port = prometheus
    agg = Aggregator(
        AggregatorConfig(listen="127.0.0.1:0", metrics_listen="127.0.0.1:0", verdict_dir=""),
        registry=CollectorRegistry(),
    )
    await agg.start()
    proc = None
    try:
        await MetricsPublisher(agg.metrics).publish(ml_decision("gpu_oom", namespace="team-a"))
        config_path.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"  - job_name: podmortem\n    static_configs: [{{targets: ['127.0.0.1:{agg.metrics_port}']}}]\n"
        )
        proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config_path}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        async def incidents() -> list[dict[str, Any]]:
            try:
                expr = 'sum by (category) (podmortem_incidents_total{namespace="team-a"})'
                return await asyncio.to_thread(_query, prom_port, expr)
            except OSError:
                return []

        # A deadline, not a timing assertion: Prometheus needs a few scrapes after start.
        result = await eventually(incidents, "the incident scraped", within=60, every=0.5)
        assert [(r["metric"]["category"], r["value"][1]) for r in result] == [("gpu_oom", "1")]
        zeros = await asyncio.to_thread(_query, prom_port, "podmortem_verdicts_total == 0")
        assert {r["metric"]["category"] for r in zeros} == {*CATEGORIES, "none"} - {"gpu_oom"}
        # The hang series exist before any stall: an alert on a provisional verdict has a series to match.
        provisional = await asyncio.to_thread(_query, prom_port, "podmortem_provisional_verdicts_total == 0")
        assert {r["metric"]["category"] for r in provisional} == {*CATEGORIES, "none"}
        requests = await asyncio.to_thread(_query, prom_port, "podmortem_capture_requests_total == 0")
        assert {r["metric"]["trigger"] for r in requests} == {"stall", "first_timeout"}
        alarms = await asyncio.to_thread(_query, prom_port, "podmortem_stall_false_alarms_total")
        assert [r["value"][1] for r in alarms] == ["0"]
        # A repeated failure stopped (the hold desk counts it when its condition is written): one series per
        # category from the first scrape, at 0, so an alert has one to match.
        repeated = await asyncio.to_thread(_query, prom_port, "podmortem_repeated_failures_total == 0")
        assert {r["metric"]["category"] for r in repeated} == set(CATEGORIES)
    finally:
        if proc is not None:
            proc.terminate()
            await asyncio.to_thread(proc.wait, 10)
        await agg.stop(grace=1)
