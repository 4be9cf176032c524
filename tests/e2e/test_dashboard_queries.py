"""Every query of the Grafana dashboard, evaluated by a real Prometheus scraping a real aggregator and webhook.

Incidents are driven through the aggregator's gRPC Collector the way sidecars report them (one job
decided by quorum, one by timeout, in two namespaces), admission reviews go to the webhook over
HTTPS, and one publisher fails for real (its directory is below a file). Then each panel's
expression, with the dashboard's variables substituted as Grafana would (`$job` and `$namespace` as
multi-value regexes, `$__rate_interval`, `$__range`), must parse and return data through
Prometheus' HTTP API; each variable query must return values.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import trustme
from prometheus_client import CollectorRegistry
from support.common import eventually, free_port

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.running import Aggregator
from podmortem.core.categories import CATEGORIES
from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc
from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb
from podmortem.webhook.config import WebhookConfig
from podmortem.webhook.server import WebhookServer

REPO = Path(__file__).resolve().parent.parent.parent
DASHBOARD = REPO / "charts" / "podmortem" / "dashboards" / "podmortem.json"
FIXTURES = REPO / "tests" / "fixtures" / "admission"
JOBS = ("podmortem-aggregator", "podmortem-webhook")
# Grafana's substitution of a multi-value variable into a regex matcher, and of its interval macros.
VARIABLES = {
    "$job": "(" + "|".join(JOBS) + ")",
    "$namespace": "(team-a|team-b)",
    "$__rate_interval": "1m",
    "$__range": "10m",
}


def substitute(expr: str) -> str:
    for name in sorted(VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, VARIABLES[name])
    assert "$" not in expr, expr
    return expr


def query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as err:  # 400: the expression does not parse
        raise AssertionError(f"{expr}: {err.read().decode()}") from None
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def label_values(port: int, label: str, match: str) -> list[str]:
    url = f"http://127.0.0.1:{port}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": match})
    with urllib.request.urlopen(url, timeout=5) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return list(body["data"])


async def report(port: int, namespace: str, job: str, pod: str, node: str, events: list[pb.Event]) -> None:
    """One sidecar's stream: register, send events (each acknowledged), close."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.CollectorStub(channel).Report()  # type: ignore[no-untyped-call]
        await call.write(
            pb.SidecarMessage(
                register=pb.Register(
                    job=pb.JobRef(namespace=namespace, name=job, kind="PyTorchJob"),
                    pod=pod, node=node, world_size_hint=2, attempt="",
                )
            )
        )  # fmt: skip
        assert (await call.read()).HasField("registered")
        for event in events:
            await call.write(pb.SidecarMessage(event=event))
            assert list((await call.read()).ack.event_ids) == [event.id]
        await call.done_writing()
        await call.code()


def failed(code: int, reason: str = "Error") -> pb.Event:
    return make_event(termination_to_pb(Termination(exit_code=code, reason=reason), "pytorch"))


async def drive_incidents(agg: Aggregator) -> None:
    port = agg.port
    # team-a/llm: rank 0 raises, rank 1 is the victim; both report, so quorum closes it.
    error = make_event(error_to_pb(ErrorRecord(message="ValueError: bad label 7", exception_type="ValueError")))
    await report(port, "team-a", "llm", "llm-worker-0", "node-1", [error, failed(1)])
    await report(port, "team-a", "llm", "llm-worker-1", "node-2", [failed(1)])
    # team-b/ddp: one pod is OOM-killed, the other never reports: decided at the quorum timeout.
    await report(port, "team-b", "ddp", "ddp-0", "node-3", [failed(137, "OOMKilled")])
    # team-a/cuda: a CUDA OOM with a dotted exception class.
    oom = make_event(
        error_to_pb(ErrorRecord(message="torch.cuda.OutOfMemoryError: CUDA out of memory",
                                exception_type="torch.cuda.OutOfMemoryError"))
    )  # fmt: skip
    await report(port, "team-a", "cuda", "cuda-worker-0", "node-1", [oom, failed(1)])
    await report(port, "team-a", "cuda", "cuda-worker-1", "node-2", [failed(1)])


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[tuple[Aggregator, WebhookServer]]:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    agg = Aggregator(
        AggregatorConfig(
            listen="127.0.0.1:0", metrics_listen="127.0.0.1:0", quorum_timeout=2.0,
            verdict_dir=str(blocker / "verdicts"),  # the JSON-file publisher fails: publish errors
        ),
        registry=CollectorRegistry(),
    )  # fmt: skip
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    (tmp_path / "tls.crt").write_bytes(b"".join(b.bytes() for b in cert.cert_chain_pems))
    (tmp_path / "tls.key").write_bytes(cert.private_key_pem.bytes())
    hook = WebhookServer(
        WebhookConfig(tls_cert=tmp_path / "tls.crt", tls_key=tmp_path / "tls.key", listen="127.0.0.1:0",
                      metrics_listen="127.0.0.1:0"),
        registry=CollectorRegistry(),
    )  # fmt: skip
    hook.ca = ca  # type: ignore[attr-defined]
    await agg.start()
    await hook.start()
    try:
        yield agg, hook
    finally:
        await hook.stop()
        await agg.stop(grace=1)


async def admit(hook: WebhookServer, ca: trustme.CA) -> None:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    async with aiohttp.ClientSession() as session:
        for name in ("pytorchjob-worker", "indexed-job", "leave-alone"):
            body = (FIXTURES / f"{name}.json").read_text()
            async with session.post(f"https://127.0.0.1:{hook.port}/mutate", data=body, ssl=ctx) as resp:
                assert resp.status == 200


async def scraped(what: str, check: Any, within: float = 60.0) -> Any:
    """`check()` (a query to Prometheus, in a thread) once it returns data; Prometheus scrapes every
    second, so the deadline is for it to start and scrape, not a timing assertion."""

    async def attempt() -> Any:
        try:
            return await asyncio.to_thread(check)
        except (OSError, urllib.error.URLError):
            return None

    return await eventually(attempt, what, within=within, every=0.5)


def dashboard_exprs() -> list[tuple[str, str]]:
    board = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]


async def test_every_dashboard_query_returns_data(stack: tuple[Aggregator, WebhookServer], tmp_path: Path) -> None:
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is not installed: run `make test` (it installs Debian's prometheus)")
    agg, hook = stack
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
        f"  - job_name: {JOBS[0]}\n    static_configs: [{{targets: ['127.0.0.1:{agg.metrics_port}']}}]\n"
        f"  - job_name: {JOBS[1]}\n    static_configs: [{{targets: ['127.0.0.1:{hook.metrics_port}']}}]\n"
    )
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Both targets scraped a few times before anything happens, so increase() sees the change.
        await scraped("both targets up", lambda: len(query(prom_port, "count_over_time(up[1m]) >= 3 and up == 1")) == 2)
        await drive_incidents(agg)
        await admit(hook, hook.ca)  # type: ignore[attr-defined]
        await scraped("3 verdicts published", lambda: agg.queue.published >= 3)
        assert agg.metrics.registry.get_sample_value("podmortem_publish_errors_total", {"publisher": "json-file"}) == 3

        # A counter series first seen at 1 needs a second sample before increase() returns it.
        await scraped(
            "the timeout verdict scraped twice",
            lambda: query(prom_port, 'count_over_time(podmortem_root_causes_total{closed_by="timeout"}[1m]) >= 2'),
        )
        exprs = dashboard_exprs()
        assert len(exprs) >= 10
        results: dict[str, list[dict[str, Any]]] = {}
        for title, expr in exprs:
            concrete = substitute(expr)
            results[title + ": " + expr] = await scraped(
                f"data for {title!r}: {concrete}", lambda e=concrete: query(prom_port, e)
            )

        def values(title: str, label: str) -> dict[str, float]:
            [rows] = [r for key, r in results.items() if key.startswith(title + ":")][:1] or [[]]
            return {r["metric"].get(label, ""): float(r["value"][1]) for r in rows}

        # The data the panels show is the data driven in (increase() extrapolates, so compare loosely).
        assert set(values("Retryable vs not", "retryable")) >= {"false"}
        assert {"ValueError", "OutOfMemoryError", "none"} <= set(values("Top exception types", "exception_type"))
        assert {"node-1", "node-3"} <= set(values("Top nodes by root-cause failures", "node"))
        # Present, not necessarily > 0: increase() misses a counter series' first increment (see the report).
        closed = set(values("Incidents closed by quorum vs timeout", "closed_by"))
        assert closed == {"quorum", "timeout"}
        assert values("Publish errors", "publisher").keys() >= {"json-file"}
        # Created up front: the three condition types are series from the first scrape.
        assert set(values("Pod conditions written", "type")) == {"Victim", "PermanentFailure", "RetryableFailure"}
        assert values("Retry budget saved", "") == {"": 0.0}
        # Created up front too: a series per category from the first scrape.
        assert set(values("Repeated failures stopped", "category")) == set(CATEGORIES)

        board = json.loads(DASHBOARD.read_text())
        for variable in board["templating"]["list"]:
            if variable["type"] != "query":
                continue
            text = variable["query"] if isinstance(variable["query"], str) else variable["query"]["query"]
            metric, label = text.removeprefix("label_values(").removesuffix(")").rsplit(",", 1)
            found = await asyncio.to_thread(label_values, prom_port, label.strip(), substitute(metric.strip()))
            assert found, variable["name"]
            if variable["name"] == "namespace":
                assert set(found) == {"team-a", "team-b"}
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 10)
