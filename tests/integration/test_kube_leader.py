"""Leader election on a Lease against the API emulator: one holder, takeover on expiry or release, loss noticed,
and two real aggregator processes of which only the leader serves."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.common import eventually, free_port
from support.kube_emulator import EmulatorHandle
from support.kube_objects import NS, make_kube

from podmortem.aggregator.kube.client import Kube
from podmortem.aggregator.kube.leader import LeaderElector, LeadershipLost, LeaseTimings
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc

LEASES = "coordination.k8s.io/v1/leases"
FAST = LeaseTimings(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)
SLOW_EXPIRY = LeaseTimings(lease_duration=600.0, renew_deadline=10.0, retry_period=0.1)


@pytest.fixture
def kube(kube_api: EmulatorHandle, tmp_path: Path) -> Iterator[Kube]:
    client = make_kube(kube_api, tmp_path)
    yield client
    client.close()


def holder(api: EmulatorHandle) -> str:
    lease = api.get(LEASES, NS, "podmortem-aggregator") or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


class LeaseCalls:
    """Counts the requests on the Lease from now on: a renewal reads and writes it, a candidate's try
    while another holds it only reads it. What a test waits for instead of sleeping."""

    def __init__(self, api: EmulatorHandle) -> None:
        self.api, self.start = api, len(api.requests())

    def count(self, method: str) -> int:
        return sum(1 for m, p in self.api.requests()[self.start :] if m == method and "/leases/" in p)

    def tries(self) -> int:
        """Reads not followed by a write: the other candidates' tries."""
        return self.count("GET") - self.count("PUT")


@contextlib.asynccontextmanager
async def holding(elector: LeaderElector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(elector.hold())
    try:
        yield task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def elector(kube: Kube, who: str, timings: LeaseTimings = FAST) -> LeaderElector:
    return LeaderElector(kube, NS, "podmortem-aggregator", who, timings)


async def test_one_holder_and_a_takeover_when_the_holder_dies(kube_api: EmulatorHandle, kube: Kube) -> None:
    a, b = elector(kube, "a"), elector(kube, "b")
    assert await a.acquire()
    assert holder(kube_api) == "a"
    async with holding(a):
        stop_b = asyncio.Event()
        calls = LeaseCalls(kube_api)
        b_wins = asyncio.create_task(b.acquire(stop_b))
        # Several of b's tries, all while a renews (every 0.1 s; the lease lasts 1 s, 10 renewals).
        await eventually(lambda: calls.tries() >= 3 and calls.count("PUT") >= 3, "b trying while a renews")
        assert not b_wins.done() and holder(kube_api) == "a"
    # a is gone without a word (its renewals stop): b takes over once the lease has not moved for 1 s.
    assert await asyncio.wait_for(b_wins, 10)
    lease = kube_api.get(LEASES, NS, "podmortem-aggregator")
    assert lease is not None and lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1


async def test_a_released_lease_is_taken_at_once(kube_api: EmulatorHandle, kube: Kube) -> None:
    # A 600 s lease: had a not released it, b could not get it within this test's bound.
    a, b = elector(kube, "a", SLOW_EXPIRY), elector(kube, "b", SLOW_EXPIRY)
    assert await a.acquire()
    stop_b = asyncio.Event()
    calls = LeaseCalls(kube_api)
    b_wins = asyncio.create_task(b.acquire(stop_b))
    await eventually(lambda: calls.tries() >= 2, "b trying")
    assert not b_wins.done()
    await a.release()
    assert await asyncio.wait_for(b_wins, 10)
    assert holder(kube_api) == "b"


async def test_a_lease_released_while_renewing_is_not_taken_back(kube_api: EmulatorHandle, kube: Kube) -> None:
    # The holder's renewals (every 0.1 s) still run when it releases (a leader handing over on SIGTERM
    # before its root tasks stop): they must not take the released Lease back, or the standby waits
    # for the whole lease (600 s here) instead of taking it at once.
    timings = LeaseTimings(lease_duration=600.0, renew_deadline=10.0, retry_period=0.1)
    a, b = elector(kube, "a", timings), elector(kube, "b", timings)
    assert await a.acquire()
    async with holding(a) as renewing:
        calls = LeaseCalls(kube_api)
        await eventually(lambda: calls.count("PUT") >= 3, "a few renewals")
        await a.release()
        # The renewal loop has ended: nothing of a's is left that could take the Lease back.
        await eventually(renewing.done, "a's renewals stopped")
        assert holder(kube_api) == ""
        stop_b = asyncio.Event()
        assert await asyncio.wait_for(b.acquire(stop_b), 10)
        assert await a.taken_over(5)
        assert holder(kube_api) == "b"
        assert renewing.done() and renewing.exception() is None  # released: it stopped renewing


async def test_nobody_taking_a_released_lease_over_is_told(kube_api: EmulatorHandle, kube: Kube) -> None:
    a = elector(kube, "a", SLOW_EXPIRY)
    assert await a.acquire()
    await a.release()
    assert not await a.taken_over(0.3)


async def test_of_two_racing_candidates_exactly_one_leads(kube_api: EmulatorHandle, kube: Kube) -> None:
    candidates = [elector(kube, f"c{i}", SLOW_EXPIRY) for i in range(4)]
    stop = asyncio.Event()
    tries = [asyncio.create_task(c.acquire(stop)) for c in candidates]
    await eventually(lambda: any(t.done() for t in tries), "a leader")
    calls = LeaseCalls(kube_api)
    await eventually(lambda: calls.tries() >= 2 * (len(candidates) - 1), "every other candidate tried again")
    stop.set()
    results = await asyncio.gather(*tries)
    assert sum(results) == 1
    assert holder(kube_api) == next(c.identity for c, won in zip(candidates, results, strict=True) if won)


async def test_the_holder_notices_when_another_took_the_lease(kube_api: EmulatorHandle, kube: Kube) -> None:
    a = elector(kube, "a")
    assert await a.acquire()
    async with holding(a) as task:
        lease = kube_api.get(LEASES, NS, "podmortem-aggregator")
        assert lease is not None
        lease["spec"] = {**lease["spec"], "holderIdentity": "intruder", "leaseDurationSeconds": 600}
        kube_api.put(LEASES, lease)
        with pytest.raises(LeadershipLost, match="intruder"):
            await asyncio.wait_for(task, 10)
    assert not a.is_leader


async def test_an_unreachable_api_server_ends_the_leadership(kube_api: EmulatorHandle, kube: Kube) -> None:
    a = elector(kube, "a")
    assert await a.acquire()
    kube_api.fail(503, 10_000, methods=("GET", "PUT"), plural="leases")
    async with holding(a) as task:
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(task, 10)


def test_timings_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseTimings(lease_duration=10, renew_deadline=15, retry_period=2)


# -- two real aggregator processes ------------------------------------------------------------------


async def health(port: int, service: str) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        return int(reply.status)


def start_aggregator(config: Path, tmp_path: Path, name: str, port: int = 0) -> subprocess.Popen[bytes]:
    env = dict(os.environ, POD_NAME=name, POD_NAMESPACE=NS)
    args = [
        sys.executable, "-m", "podmortem.cli", "aggregator", "--kube", "--leader-elect", "--auth", "none",
        "--kubeconfig", str(config), "--namespaces", NS, "--listen", f"127.0.0.1:{port}", "--metrics-listen", "",
        "--verdict-dir", "", "--ready-file", str(tmp_path / f"{name}.ready"),
    ]  # fmt: skip
    log = (tmp_path / f"{name}.log").open("wb")
    return subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)


async def test_only_the_leader_serves_and_the_standby_takes_over_on_sigterm(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    config = kube_api.kubeconfig(tmp_path / "kubeconfig", NS)
    first = start_aggregator(config, tmp_path, "agg-1")
    second: subprocess.Popen[bytes] | None = None
    try:
        await eventually(lambda: (tmp_path / "agg-1.ready").exists(), "the first aggregator serving", within=60)
        port = free_port()  # a standby writes no ready file: its port is chosen here
        second = start_aggregator(config, tmp_path, "agg-2", port)
        await eventually(lambda: "standing by" in (tmp_path / "agg-2.log").read_text(), "a standby", within=60)
        assert not (tmp_path / "agg-2.ready").exists()
        # The standby is alive (liveness and startup probes pass) but not Ready, and refuses streams.
        serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
        assert await health(port, "") == serving
        assert await health(port, "podmortem.v1.Collector") == not_serving
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stream = pb_grpc.CollectorStub(channel).Report(timeout=10)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                # As a sidecar does: `register` first (a refused stream is ended once its first message is in).
                await stream.write(
                    pb.SidecarMessage(register=pb.Register(job=pb.JobRef(namespace=NS, name="j"), pod="p"))
                )
                await stream.read()
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        first.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(first.wait, 30) == 0
        await eventually(lambda: (tmp_path / "agg-2.ready").exists(), "the standby serving", within=30)
        assert holder(kube_api).startswith("agg-2_")
        assert await health(port, "podmortem.v1.Collector") == serving
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
