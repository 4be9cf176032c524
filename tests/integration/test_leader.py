"""Leader election on a Lease against the API emulator: one holder, takeover on expiry or release, loss noticed,
and two real aggregator processes of which only the leader serves.

A leader change mid-incident loses nothing: two real aggregator processes under leader election, real
sidecar processes, the Kubernetes API emulator, gRPC on 127.0.0.1.

The sidecars reach the aggregators through a Service, as in a cluster: `ServiceProxy` sends each new
TCP connection to the replica whose Collector health is SERVING (the Ready endpoint, which is what
kube-proxy does with the Service's endpoints) and breaks the connections of a replica that dies. The
leader is SIGKILLed (or SIGTERMed) after it has acknowledged the root's failure and a victim's; the
standby takes the Lease, the sidecars reconnect through the Service, see a new aggregator id and give
it every event again (acknowledged ones included), the remaining members report, and the new leader
publishes the one verdict, naming the root.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.common import GLOO_PEER, eventually, free_port
from support.kube_emulator import EVENTS, PODS, PYTORCHJOBS, EmulatorHandle
from support.kube_objects import JOB as KUBE_JOB
from support.kube_objects import NS, make_kube, seed_pytorchjob, terminated

from podmortem.aggregator.kube.client import Kube
from podmortem.aggregator.kube.leader import LeaderElector, LeadershipLost, LeaseTimings
from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol import wire
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


JOB = "llm"
WORKERS = [f"{JOB}-worker-{i}" for i in range(3)]
ROOT = WORKERS[1]
TAKEOVER = 60.0  # bound for the 15 s lease to expire, the standby to take it and the sidecars to reconnect


async def collector_serving(port: int) -> bool:
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="podmortem.v1.Collector"), timeout=1
            )
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
    except grpc.aio.AioRpcError:
        return False


class ServiceProxy:
    """The aggregators' Service: a new connection goes to the Ready replica; none Ready, it is closed."""

    def __init__(self, backends: list[int]) -> None:
        self.backends = backends
        self.port = 0
        self.routed: list[int] = []  # the backend of each connection, in order
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            for port in self.backends:
                if await collector_serving(port):
                    break
            else:
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return
            self.routed.append(port)
            try:
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
            finally:
                up_writer.close()
        finally:
            writer.close()
            self._pipes.discard(task)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()  # one side gone: the other goes too (a dead replica's connections break)


class Replica:
    def __init__(
        self, name: str, config: Path, tmp_path: Path, quorum_timeout: float = 600, publish: str = "none"
    ) -> None:
        self.name, self.port = name, free_port()
        self.verdicts = tmp_path / f"{name}-verdicts"
        self.ready = tmp_path / f"{name}.ready"
        self.log = tmp_path / f"{name}.log"
        env = dict(os.environ, POD_NAME=name, POD_NAMESPACE=NS)
        args = [
            sys.executable, "-m", "podmortem.cli", "aggregator", "--kube", "--leader-elect", "--auth", "none",
            "--kubeconfig", str(config), "--namespaces", NS, "--listen", f"127.0.0.1:{self.port}",
            "--metrics-listen", "", "--verdict-dir", str(self.verdicts), "--quorum-timeout", str(quorum_timeout),
            "--state-dir", str(tmp_path / f"{name}-state"), "--ready-file", str(self.ready),
            "--kube-publish", publish,
        ]  # fmt: skip
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)

    def verdict_docs(self) -> list[dict[str, Any]]:
        return [json.loads(f.read_text()) for f in sorted(self.verdicts.glob("*.json"))]

    async def shut_down(self) -> int:
        """SIGTERM, and its exit code. Its stop path decides every pending revision and publishes it
        before it exits: after this, no revision of an earlier verdict can still be on its way."""
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(self.proc.wait, 60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Sidecar:
    """A real `podmortem sidecar` process for one pod; the test writes its error file and pod status."""

    def __init__(
        self, pod: str, rank: int, target: int, tmp_path: Path, job: str = JOB, attempt: str = "0", uid: str = ""
    ) -> None:
        self.pod, self.uid = pod, uid or f"uid-{pod}"
        self.dir = tmp_path / pod
        self.dir.mkdir()
        self.error_file = self.dir / "error.json"
        self.pod_file = self.dir / "pod.json"
        self.log = tmp_path / f"{pod}.log"
        self.write_pod({"phase": "Running", "containerStatuses": [{"name": "pytorch", "state": {"running": {}}}]})
        env = dict(
            os.environ,
            POD_NAME=pod,
            POD_NAMESPACE=NS,
            POD_UID=self.uid,
            TORCHELASTIC_ERROR_FILE=str(self.error_file),
            PODMORTEM_AGGREGATOR=f"127.0.0.1:{target}",
            PODMORTEM_JOB_NAME=job,
            PODMORTEM_JOB_KIND="PyTorchJob",
            PODMORTEM_ATTEMPT=attempt,
            PET_NNODES=str(len(WORKERS)),
            PET_NODE_RANK=str(rank),
            PODMORTEM_POD_SOURCE="file",
            PODMORTEM_POD_STATUS_FILE=str(self.pod_file),
            PODMORTEM_FLUSH_TIMEOUT="60",
        )
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "podmortem.cli", "sidecar"], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def write_pod(self, status: dict[str, Any]) -> None:
        doc = {"metadata": {"name": self.pod, "namespace": NS, "uid": self.uid}, "status": status}
        tmp = self.pod_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.replace(self.pod_file)

    def fail(self, message: str, at: int) -> None:
        """The training container fails: torchrun's error file, then the kubelet's status."""
        doc = {"message": {"message": message, "extraInfo": {"py_callstack": "Traceback ...", "timestamp": str(at)}}}
        self.error_file.write_text(json.dumps(doc))
        self.write_pod(
            {
                "phase": "Failed",
                "containerStatuses": [
                    {"name": "pytorch", "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
                ],
            }
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def acked(self, what: str) -> int:
        return sum(1 for line in self.text().splitlines() if "acked" in line and what in line)

    def failure_acked(self) -> bool:
        return self.acked("error file") >= 1 and self.acked("termination") >= 1

    def failure_acked_again(self) -> bool:
        """By a new aggregator, after "aggregator changed ...: re-sending N acknowledged event(s)"."""
        return "re-sending" in self.text() and self.acked("error file") >= 2 and self.acked("termination") >= 2

    def registered(self) -> bool:
        return "registered with aggregator" in self.text()

    async def exit(self) -> int:
        """SIGTERM (its pod is done): it flushes and exits; the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return await asyncio.to_thread(self.proc.wait, 90)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@contextlib.asynccontextmanager
async def cluster(
    kube_api: EmulatorHandle, tmp_path: Path, job: str = JOB, attempt: str = "0", uids: dict[str, str] | None = None
) -> AsyncIterator[tuple[list[Replica], list[Sidecar]]]:
    config = kube_api.kubeconfig(tmp_path / "kubeconfig", NS)
    replicas: list[Replica] = []
    sidecars: list[Sidecar] = []
    proxy: ServiceProxy | None = None
    try:
        replicas.append(Replica("agg-1", config, tmp_path))
        await eventually(lambda: replicas[0].ready.exists(), "the first replica leading", within=60)
        replicas.append(Replica("agg-2", config, tmp_path))
        await eventually(lambda: "standing by" in replicas[1].log.read_text(), "a standby", within=60)
        proxy = ServiceProxy([r.port for r in replicas])
        await proxy.start()
        pods = [f"{job}-worker-{i}" for i in range(len(WORKERS))]
        uids = uids or {}
        sidecars.extend(
            Sidecar(pod, rank, proxy.port, tmp_path, job, attempt, uids.get(pod, "")) for rank, pod in enumerate(pods)
        )
        for s in sidecars:
            await eventually(s.registered, f"{s.pod} registered", within=60)
        yield replicas, sidecars
    finally:
        for s in sidecars:
            s.stop()
        for r in replicas:
            r.stop()
        if proxy is not None:
            await proxy.close()


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
async def test_a_failover_mid_incident_loses_nothing(
    kube_api: EmulatorHandle, tmp_path: Path, how: signal.Signals
) -> None:
    async with cluster(kube_api, tmp_path) as (replicas, sidecars):
        leader, standby = replicas
        by_pod = {s.pod: s for s in sidecars}
        root, victims = by_pod[ROOT], [s for s in sidecars if s.pod != ROOT]
        # The root fails and a victim follows; the leader acknowledges both (and has not decided: 2/3).
        root.fail("ValueError: bad label 7 in batch 1234", 1_800_000_010)
        victims[0].fail(GLOO_PEER, 1_800_000_011)
        for s in (root, victims[0]):
            await eventually(s.failure_acked, f"{s.pod} acked")
        assert leader.verdict_docs() == []

        leader.proc.send_signal(how)
        await asyncio.to_thread(leader.proc.wait, 60)
        await eventually(lambda: standby.ready.exists(), "the standby leading", within=TAKEOVER)
        # Every live sidecar gives the new leader what the old one had acknowledged.
        for s in (root, victims[0]):
            await eventually(s.failure_acked_again, f"{s.pod} re-sent and acked", within=TAKEOVER)

        # The last member fails; the pods' sidecars exit in the normal order, the root's first.
        victims[1].fail(GLOO_PEER, 1_800_000_012)
        for s in (root, *victims):
            assert await s.exit() == 0, s.text()[-3000:]

        await eventually(lambda: any(d.get("final") for d in standby.verdict_docs()), "a final verdict", within=30)
        assert await standby.shut_down() == 0  # a revision, if one were coming, is published by now
        [doc] = standby.verdict_docs()
        assert doc["root_cause"] == {"pod": ROOT, "category": "user_code", "retryable": False}
        assert (doc["closed_by"], doc["final"], doc["revision"]) == ("quorum", True, 1)
        assert doc["incident"]["reported"] == len(WORKERS)
        # The old leader published nothing of its own about this incident: exactly one verdict.
        assert leader.verdict_docs() == [], leader.verdict_docs()


async def test_a_root_whose_sidecar_had_exited_is_still_named_after_a_failover(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # The normal order: the root's sidecar flushed and exited before the leader died, so no live sidecar
    # holds its error file, and each replica keeps its own state file. The new leader learns of the
    # root from the Kubernetes API instead: its pod watch sees the failed pod and reads its log.
    seed_pytorchjob(kube_api, workers=3)
    uids = {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in kube_api.list(PODS, NS)}
    root_pod = f"{KUBE_JOB}-worker-1"
    async with cluster(kube_api, tmp_path, KUBE_JOB, "", uids) as (replicas, sidecars):
        leader, standby = replicas
        root = next(s for s in sidecars if s.pod == root_pod)
        victims = [s for s in sidecars if s is not root]
        kube_api.set_log(
            NS, root_pod, "pytorch", "Traceback (most recent call last):\nValueError: bad label 7 in batch 1234\n"
        )
        kube_api.change(PODS, NS, root_pod, terminated(1, finished="2026-11-21T15:06:10Z"))
        root.fail("ValueError: bad label 7 in batch 1234", 1_795_273_570)
        await eventually(root.failure_acked, "the root's failure acked")
        assert await root.exit() == 0
        leader.proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(leader.proc.wait, 60)
        await eventually(lambda: standby.ready.exists(), "the standby leading", within=TAKEOVER)
        for n, s in enumerate(victims):
            kube_api.change(PODS, NS, s.pod, terminated(1, finished=f"2026-11-21T15:06:1{2 + n}Z"))
            s.fail(GLOO_PEER, 1_795_273_572 + n)
            await eventually(s.failure_acked, f"{s.pod} acked", within=TAKEOVER)
            assert await s.exit() == 0
        await eventually(lambda: any(d.get("final") for d in standby.verdict_docs()), "a final verdict", within=30)
        assert await standby.shut_down() == 0  # a revision, if one were coming, is published by now
        docs = standby.verdict_docs()
        assert [d["root_cause"]["pod"] for d in docs] == [root_pod], docs
        assert docs[0]["root_cause"]["category"] == "user_code", docs[0]["verdict"]


# -- fencing: a leader paused past its Lease publishes nothing when it wakes ------------------------------


async def report_failure(port: int, pod: str, rank: int) -> None:
    """The root's sidecar: register, send its error file and termination, wait for both acks, close."""
    rec = ErrorRecord(message="ValueError: bad label 7 in batch 1234", exception_type="ValueError", timestamp=1)
    events = [
        wire.make_event(wire.error_to_pb(rec), wire.error_event_id(pod, rec)),
        wire.make_event(wire.termination_to_pb(Termination(exit_code=1, reason="Error")), f"{pod}/termination/0"),
    ]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.CollectorStub(channel).Report()  # type: ignore[no-untyped-call]
        reg = pb.Register(job=pb.JobRef(namespace=NS, name=KUBE_JOB), pod=pod, rank=rank)
        await call.write(pb.SidecarMessage(register=reg))
        assert (await call.read()).WhichOneof("body") == "registered"
        for event in events:
            await call.write(pb.SidecarMessage(event=event))
            assert list((await call.read()).ack.event_ids) == [event.id]
        await call.done_writing()


async def test_a_leader_paused_past_its_lease_publishes_nothing_when_it_wakes(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    seed_pytorchjob(kube_api, workers=3)
    root = f"{KUBE_JOB}-worker-1"
    config = kube_api.kubeconfig(tmp_path / "kubeconfig", NS)
    replicas = []
    try:
        # Quorum is never reached (the other members never report): each replica decides at its timeout.
        leader = Replica("agg-1", config, tmp_path, quorum_timeout=3, publish="annotations,events")
        replicas.append(leader)
        await eventually(lambda: leader.ready.exists(), "the first replica leading", within=60)
        standby = Replica("agg-2", config, tmp_path, quorum_timeout=3, publish="annotations,events")
        replicas.append(standby)
        await eventually(lambda: "standing by" in standby.log.read_text(), "a standby", within=60)

        await report_failure(leader.port, root, 1)  # the leader opens the incident, its timer armed
        leader.proc.send_signal(signal.SIGSTOP)  # paused before its timer fires, past its 15 s Lease
        await eventually(lambda: standby.ready.exists(), "the standby leading", within=TAKEOVER)
        await report_failure(standby.port, root, 1)  # the sidecar gives the new leader everything again
        await eventually(lambda: len(standby.verdict_docs()) == 1, "the new leader's verdict", within=30)

        def annotated() -> bool:
            job = kube_api.get(PYTORCHJOBS, NS, KUBE_JOB) or {}
            return "podmortem.io/verdict" in (job.get("metadata") or {}).get("annotations", {})

        await eventually(annotated, "the new leader's annotation on the job", within=30)

        # The old leader wakes with its quorum timer overdue: it decides, and must publish nothing.
        leader.proc.send_signal(signal.SIGCONT)
        await asyncio.to_thread(leader.proc.wait, 60)  # it then finds its Lease lost and exits
        text = leader.log.read_text()
        assert f"incident {NS}:{KUBE_JOB} revision 1 not published by this replica" in text, text[-3000:]
        assert "verdict for" not in text  # no log line, no verdict file, no Event, no metric
        assert leader.verdict_docs() == []
        lease = kube_api.get("coordination.k8s.io/v1/leases", NS, "podmortem-aggregator") or {}
        job = kube_api.get(PYTORCHJOBS, NS, KUBE_JOB) or {}
        doc = json.loads(job["metadata"]["annotations"]["podmortem.io/verdict"])
        assert (doc["leaseHolder"], doc["leaseTransitions"]) == (
            lease["spec"]["holderIdentity"],
            lease["spec"]["leaseTransitions"],
        )
        assert doc["leaseHolder"].startswith("agg-2_")
        events = [e for e in kube_api.list(EVENTS, NS) if e.get("reason") == "PodmortemRootCause"]
        assert events and {e["reportingInstance"] for e in events} == {"agg-2"}
        [published] = standby.verdict_docs()
        assert published["lease"]["holderIdentity"] == doc["leaseHolder"]
    finally:
        for r in replicas:
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGCONT)
            r.stop()
