"""A leader change mid-incident loses nothing: two real aggregator processes under leader election, real
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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.common import GLOO_PEER, eventually, free_port
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import JOB as KUBE_JOB
from support.kube_objects import NS, seed_pytorchjob, terminated

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
    def __init__(self, name: str, config: Path, tmp_path: Path) -> None:
        self.name, self.port = name, free_port()
        self.verdicts = tmp_path / f"{name}-verdicts"
        self.ready = tmp_path / f"{name}.ready"
        self.log = tmp_path / f"{name}.log"
        env = dict(os.environ, POD_NAME=name, POD_NAMESPACE=NS)
        args = [
            sys.executable, "-m", "podmortem.cli", "aggregator", "--kube", "--leader-elect", "--auth", "none",
            "--kubeconfig", str(config), "--namespaces", NS, "--listen", f"127.0.0.1:{self.port}",
            "--metrics-listen", "", "--verdict-dir", str(self.verdicts), "--quorum-timeout", "600",
            "--state-dir", str(tmp_path / f"{name}-state"), "--ready-file", str(self.ready),
            "--kube-publish", "none",
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
