"""The aggregator's pod watch and job resolution, against the API emulator with the official client.

A pod-watch-only job (no sidecars): the root's error is only in its container's termination message
(terminationMessagePolicy: FallbackToLogsOnError), and the kubelets report the victims first, a second
*earlier*. The engine reads termination messages as it reads log tails, so the root is still named.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from support.common import eventually
from support.kube_emulator import JOBS, PODS, PYTORCHJOBS, TRAINJOBS, EmulatorHandle
from support.kube_objects import (
    NS,
    indexed_job,
    indexed_pod,
    make_kube,
    pytorchjob,
    seed_jobset,
    seed_pytorchjob,
    terminated,
    trainjob,
)

from podmortem.aggregator.config import KubeSettings
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import IncidentBook, job_key
from podmortem.aggregator.kube import jobs
from podmortem.aggregator.kube.client import Kube
from podmortem.aggregator.kube.membership import JobResolver
from podmortem.aggregator.kube.podwatch import PodWatch, run_kubernetes
from podmortem.aggregator.running import make_decide
from podmortem.core.model import Incident, JobRef, Member, Verdict
from podmortem.k8s import workloads
from podmortem.k8s.backoff import Backoff


def first_failed(incident: Incident) -> Verdict:
    """A simple real verdict: a member that vanished, else the first (by name) with a non-zero exit."""
    members = sorted(incident.members, key=lambda m: m.pod)
    for m in members:
        if m.phase_reason in ("Deleted", "NodeLost"):
            return Verdict(pod=m.pod, category="node_lost", retryable=True, summary=f"{m.pod} vanished")
    for m in members:
        if m.termination and m.termination.exit_code:
            return Verdict(pod=m.pod, category="user_code", retryable=False, summary=f"{m.pod} exited")
    return Verdict(pod=None, category=None, retryable=None, summary="no failure")


class Book:
    def __init__(self, decide: Callable[[Incident], Verdict] = first_failed) -> None:
        self.decisions: list[Decision] = []
        self.book = IncidentBook(decide, self.decisions.append, quorum_timeout=600)

    def members(self, job: str, attempt: str = "") -> dict[str, Member]:
        inc = self.book.incident((NS, job, attempt))
        return {m.pod: m for m in inc.members} if inc else {}

    def world_size(self, job: str, attempt: str = "") -> int | None:
        inc = self.book.incident((NS, job, attempt))
        return inc.world_size if inc else None


@pytest.fixture
def kube(kube_api: EmulatorHandle, tmp_path: Path) -> Any:
    client = make_kube(kube_api, tmp_path)
    yield client
    client.close()


@contextlib.asynccontextmanager
async def _watch(kube: Kube, book: Book) -> AsyncIterator[tuple[Book, PodWatch]]:
    """A running pod watch of the training pods in NS, feeding `book`."""
    settings = KubeSettings(namespaces=(NS,), pod_selectors=("training.kubeflow.org/job-name",))
    watch = PodWatch(kube, book.book, settings, backoff=Backoff(0.001, 0.01, jitter=0))
    task = asyncio.create_task(watch.run())
    yield book, watch
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.fixture
async def watching(kube: Kube) -> AsyncIterator[tuple[Book, PodWatch]]:
    async with _watch(kube, Book()) as watched:
        yield watched


@pytest.fixture
async def deciding(kube: Kube) -> AsyncIterator[tuple[Book, PodWatch]]:
    """The pod watch feeding a book that the engine decides for (the aggregator's own `make_decide`)."""
    async with _watch(kube, Book(make_decide())) as watched:
        yield watched


async def test_every_training_pod_is_a_member_and_the_job_size_is_expected(
    kube_api: EmulatorHandle, watching: tuple[Book, PodWatch]
) -> None:
    book, _ = watching
    seed_pytorchjob(kube_api, workers=4)
    kube_api.put(PODS, {"metadata": {"name": "unrelated", "namespace": NS}, "status": {"phase": "Running"}})
    await eventually(lambda: len(book.members("mixtral-cpt")) == 4, "4 members")
    assert book.world_size("mixtral-cpt") == 4
    members = book.members("mixtral-cpt")
    assert members["mixtral-cpt-worker-2"].rank == 2  # no Master replica: worker-i is rank i
    assert members["mixtral-cpt-worker-2"].node == "node-2"
    assert book.decisions == []  # running pods are not failures


async def test_a_pod_deleted_without_any_report_counts(
    kube_api: EmulatorHandle, watching: tuple[Book, PodWatch]
) -> None:
    book, _ = watching
    seed_pytorchjob(kube_api, workers=3)
    await eventually(lambda: len(book.members("mixtral-cpt")) == 3, "3 members")
    kube_api.remove(PODS, NS, "mixtral-cpt-worker-1")
    await eventually(lambda: book.members("mixtral-cpt")["mixtral-cpt-worker-1"].phase_reason == "Deleted", "deleted")
    gone = book.members("mixtral-cpt")["mixtral-cpt-worker-1"]
    assert gone.phase == "Running" and gone.deleted_at is not None
    assert book.book.open_incidents() == [job_key(JobRef(NS, "mixtral-cpt"), "")]  # a vanished pod is a failure
    # The others end too (the operator tears the job down): quorum, and a verdict naming the vanished one.
    for name in ("mixtral-cpt-worker-0", "mixtral-cpt-worker-2"):
        kube_api.change(PODS, NS, name, terminated(143))
    await eventually(lambda: len(book.decisions) == 1, "a decision")
    # What the watch hands the engine: quorum reached, with the vanished member as deleted.
    decided = book.decisions[0]
    assert decided.closed_by == "quorum"
    members = {m.pod: m for m in decided.incident.members}
    assert members["mixtral-cpt-worker-1"].phase_reason == "Deleted"
    assert members["mixtral-cpt-worker-1"].deleted_at is not None
    assert {m.termination.exit_code for p, m in members.items() if p != "mixtral-cpt-worker-1" if m.termination} == {
        143
    }


async def test_a_lost_node_is_seen(kube_api: EmulatorHandle, watching: tuple[Book, PodWatch]) -> None:
    book, _ = watching
    seed_pytorchjob(kube_api, workers=2)
    await eventually(lambda: len(book.members("mixtral-cpt")) == 2, "2 members")
    kube_api.change(PODS, NS, "mixtral-cpt-worker-0", {"status": {"phase": "Unknown", "reason": "NodeLost"}})
    await eventually(lambda: book.members("mixtral-cpt")["mixtral-cpt-worker-0"].phase == "Unknown", "lost node")
    assert book.members("mixtral-cpt")["mixtral-cpt-worker-0"].phase_reason == "NodeLost"


async def test_a_broken_watch_resumes_where_it_was(kube_api: EmulatorHandle, watching: tuple[Book, PodWatch]) -> None:
    book, watch = watching
    seed_pytorchjob(kube_api, workers=2)
    await eventually(lambda: len(book.members("mixtral-cpt")) == 2, "2 members")
    await eventually(lambda: kube_api.emulator.open_watches == 1, "watching")
    kube_api.break_watches()  # the connection drops mid-stream
    kube_api.change(PODS, NS, "mixtral-cpt-worker-1", terminated(1))
    await eventually(lambda: book.members("mixtral-cpt")["mixtral-cpt-worker-1"].termination is not None, "exit seen")
    assert watch.relists == 1  # resumed from its resourceVersion: no second list
    watches = [p for m, p in kube_api.requests() if m == "GET" and "watch=true" in p]
    assert len(watches) >= 2 and "resourceVersion=" in watches[-1]


async def test_after_410_it_relists_and_sees_what_vanished_meanwhile(
    kube_api: EmulatorHandle, watching: tuple[Book, PodWatch]
) -> None:
    book, watch = watching
    seed_pytorchjob(kube_api, workers=3)
    await eventually(lambda: len(book.members("mixtral-cpt")) == 3, "3 members")
    await eventually(lambda: kube_api.emulator.open_watches == 1, "watching")
    away = kube_api.fail(503, 1_000_000, methods=("GET",), plural="pods")  # the apiserver is away...
    kube_api.break_watches()
    kube_api.remove(PODS, NS, "mixtral-cpt-worker-2")  # ...while a pod goes...
    kube_api.compact()  # ...and the versions we knew expire: the next watch gets 410 Gone
    await eventually(lambda: away.served >= 2, "retrying while the apiserver is away")
    away.times = 0  # back
    await eventually(lambda: book.members("mixtral-cpt")["mixtral-cpt-worker-2"].phase_reason == "Deleted", "gone")
    assert watch.relists == 2


async def test_run_kubernetes_stops_on_the_event(kube_api: EmulatorHandle, kube: Kube) -> None:
    seed_pytorchjob(kube_api, workers=2)
    book = Book()
    stop = asyncio.Event()
    settings = KubeSettings(namespaces=(NS,))
    task = asyncio.create_task(run_kubernetes(book.book, settings, stop, kube=kube))
    await eventually(lambda: len(book.members("mixtral-cpt")) == 2, "2 members")
    stop.set()
    await asyncio.wait_for(task, 10)
    assert task.exception() is None


# -- job resolution ----------------------------------------------------------------------------


async def test_an_indexed_batch_job_is_resolved_with_its_size(kube_api: EmulatorHandle, kube: Kube) -> None:
    job = kube_api.put(JOBS, indexed_job("ddp", 4))
    pod = kube_api.put(PODS, indexed_pod(job, 3))
    resolved = await JobResolver(kube).resolve(pod)
    assert resolved is not None
    assert (resolved.job.kind, resolved.job.name, resolved.job.uid) == ("Job", "ddp", job["metadata"]["uid"])
    assert resolved.world_size == 4
    assert jobs.node_rank(resolved.spec_object, pod) == 3


async def test_a_jobset_is_resolved_with_its_size_and_ranks(kube_api: EmulatorHandle, kube: Kube) -> None:
    _, pods = seed_jobset(kube_api, "llm", [("driver", 1, 1), ("workers", 2, 3)])
    resolver = JobResolver(kube)
    resolved = [await resolver.resolve(p) for p in pods]
    assert {(r.job.kind, r.job.name) for r in resolved if r} == {("JobSet", "llm")}
    assert {r.world_size for r in resolved if r} == {7}  # 1x1 + 2x3
    ranks = [jobs.node_rank(r.spec_object if r else None, p) for r, p in zip(resolved, pods, strict=True)]
    assert ranks == list(range(7))
    assert {workloads.attempt_of(p) for p in pods} == {"0"}
    gets = [p for m, p in kube_api.requests() if m == "GET" and "/jobsets/" in p]
    assert len(gets) == 1  # cached: one read of the JobSet for its seven pods


async def test_a_trainjob_over_its_jobset(kube_api: EmulatorHandle, kube: Kube) -> None:
    tj = kube_api.put(TRAINJOBS, trainjob("ft", num_nodes=None))
    _, pods = seed_jobset(kube_api, "ft", [("node", 1, 2)], owner=tj)
    resolved = await JobResolver(kube).resolve(pods[0])
    assert resolved is not None and (resolved.job.kind, resolved.job.name) == ("TrainJob", "ft")
    assert resolved.world_size == 2  # numNodes unset: the JobSet's size
    kube_api.put(TRAINJOBS, trainjob("ft", num_nodes=2) | {"metadata": {"name": "ft", "namespace": NS}})
    assert (await JobResolver(kube).resolve(pods[1])).world_size == 2  # type: ignore[union-attr]


async def test_the_world_size_annotation_wins(kube_api: EmulatorHandle, kube: Kube) -> None:
    job = kube_api.put(PYTORCHJOBS, pytorchjob(workers=4, annotations={"podmortem.io/world-size": "2"}))
    seeded = kube_api.put(PODS, {"metadata": {"name": "p", "namespace": NS, "ownerReferences": [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": job["metadata"]["name"], "controller": True}
    ]}})  # fmt: skip
    resolved = await JobResolver(kube).resolve(seeded)
    assert resolved is not None and resolved.world_size == 2


def test_world_size_from_specs() -> None:
    assert jobs.world_size(pytorchjob(workers=3, master=True)) == 4
    assert jobs.world_size({"kind": "Job", "spec": {"parallelism": 2}}) == 2
    assert (
        jobs.world_size({"kind": "Job", "spec": {"completionMode": "Indexed", "completions": 8, "parallelism": 8}}) == 8
    )
    assert (
        jobs.world_size({"kind": "JobSet", "spec": {"replicatedJobs": [{"replicas": 2, "template": {"spec": {}}}]}})
        == 2
    )
    assert jobs.world_size({"kind": "TrainJob", "spec": {"trainer": {"numNodes": 16}}}) == 16
    assert jobs.world_size({"kind": "TrainJob", "spec": {}}) is None
    bad = {"kind": "PyTorchJob", "metadata": {"annotations": {"podmortem.io/world-size": "x"}}, "spec": {}}
    assert jobs.world_size(bad) is None


def test_kubeflow_ranks_depend_on_the_master_replica() -> None:
    with_master = pytorchjob(workers=3, master=True)
    worker0 = {"metadata": {"labels": {"training.kubeflow.org/replica-type": "worker",
                                       "training.kubeflow.org/replica-index": "0"}}}  # fmt: skip
    master0 = {"metadata": {"labels": {"training.kubeflow.org/replica-type": "master",
                                       "training.kubeflow.org/replica-index": "0"}}}  # fmt: skip
    assert jobs.node_rank(with_master, worker0) == 1
    assert jobs.node_rank(pytorchjob(workers=3), worker0) == 0
    assert jobs.node_rank(None, worker0) is None and jobs.node_rank(None, master0) == 0


def test_labels_alone_name_the_workload() -> None:
    pod = {"metadata": {"namespace": NS, "labels": {"jobset.sigs.k8s.io/jobset-name": "llm"}}}
    assert workloads.workload_from_labels(pod) == JobRef(NS, "llm", "JobSet")
    foreign = {"metadata": {"ownerReferences": [{"apiVersion": "example.com/v1", "kind": "Job", "name": "x"}]}}
    assert workloads.controller_of(foreign) is None  # a "Job" of another group is not ours


ROOT_MESSAGE = """Traceback (most recent call last):
  File "/workspace/train.py", line 212, in <module>
    main()
  File "/workspace/train.py", line 188, in train_step
    loss = model(batch["input_ids"]).loss
AttributeError: 'NoneType' object has no attribute 'loss'"""
VICTIM_MESSAGE = (
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
    "Connection closed by peer [10.0.0.2]:14131"
)


async def test_the_root_named_only_in_its_termination_message_is_found(
    kube_api: EmulatorHandle, deciding: tuple[Book, PodWatch]
) -> None:
    book, _ = deciding
    decisions = book.decisions
    _, pods = seed_pytorchjob(kube_api, workers=3)
    await eventually(lambda: book.book.incident((NS, "mixtral-cpt", "")) is not None, "members known")
    # Victims first, and their containers "ended" a second before the root's.
    for victim in (pods[0], pods[2]):
        kube_api.change(PODS, NS, victim, terminated(1, message=VICTIM_MESSAGE, finished="2026-11-21T15:06:09Z"))
    kube_api.change(PODS, NS, pods[1], terminated(1, message=ROOT_MESSAGE, finished="2026-11-21T15:06:10Z"))
    await eventually(lambda: len(decisions) == 1, "a verdict")
    verdict = decisions[0].verdict
    assert decisions[0].closed_by == "quorum"
    assert verdict.pod == pods[1] and verdict.category == "user_code"
    assert "AttributeError" in verdict.message


GLOO_VICTIM_LOG = (
    "[rank0]: Traceback (most recent call last):\n"
    "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
    "Connection closed by peer [10.0.0.11]:14131\n"
)


def two_containers(pod_status: dict[str, Any]) -> dict[str, Any]:
    """The pod status with an exporter container listed before the training container (still running)."""
    statuses = pod_status["status"]["containerStatuses"]
    exporter = {"name": "metrics-exporter", "restartCount": 0, "state": {"running": {}}}
    return {"status": {**pod_status["status"], "containerStatuses": [exporter, *statuses]}}


def restarted_after_failure() -> dict[str, Any]:
    """The training container failed (exit 1, no termination message) and runs again (restartPolicy OnFailure)."""
    return {
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "metrics-exporter", "restartCount": 0, "state": {"running": {}}},
                {
                    "name": "pytorch",
                    "restartCount": 1,
                    "state": {"running": {"startedAt": "2026-11-21T15:06:12Z"}},
                    "lastState": {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "startedAt": "2026-11-21T15:05:49Z",
                            "finishedAt": "2026-11-21T15:06:10Z",
                        }
                    },
                },
            ],
        }
    }


async def test_a_restarted_roots_failed_run_is_read_from_its_previous_log(
    kube_api: EmulatorHandle, deciding: tuple[Book, PodWatch]
) -> None:
    # No sidecars and no termination messages: the logs are the only evidence. The root's container has
    # restarted since its failed run, so its current log is the new run's; the failed run's log must be
    # read with previous=true, from the training container (not the exporter listed first). The victims'
    # kubelets report first, their containers "ending" a second earlier.
    book, _ = deciding
    decisions = book.decisions
    _, pods = seed_pytorchjob(kube_api, workers=3)
    root = pods[1]
    for pod in pods:
        text = ROOT_MESSAGE if pod == root else GLOO_VICTIM_LOG
        kube_api.set_log(NS, pod, "pytorch", text, previous=pod == root)
    kube_api.set_log(NS, root, "pytorch", "epoch 0: starting (restart 1)\n")  # the new run: nothing wrong
    kube_api.set_log(NS, root, "metrics-exporter", "exporter: scrape ok\n")
    await eventually(lambda: book.book.incident((NS, "mixtral-cpt", "")) is not None, "members known")
    for victim in (pods[0], pods[2]):
        kube_api.change(PODS, NS, victim, two_containers(terminated(1, finished="2026-11-21T15:06:09Z")))
    kube_api.change(PODS, NS, root, restarted_after_failure())
    await eventually(lambda: len(decisions) == 1, "a verdict")
    verdict = decisions[0].verdict
    assert decisions[0].closed_by == "quorum"
    assert verdict.pod == root and verdict.category == "user_code", verdict
    assert "AttributeError" in verdict.message
    reads = [path for _, path in kube_api.requests() if "/log?" in path]
    root_reads = [p for p in reads if f"/pods/{root}/log" in p]
    assert root_reads and all("container=pytorch" in p and "previous=true" in p for p in root_reads), reads
    assert all("previous" not in p for p in reads if p not in root_reads)


async def test_a_log_that_cannot_be_read_does_not_hold_the_verdict(
    kube_api: EmulatorHandle, deciding: tuple[Book, PodWatch]
) -> None:
    # Without `pods/log` in its RBAC (403, permanent) the aggregator decides on the rest, at once.
    book, watch = deciding
    decisions = book.decisions
    fault = kube_api.fail(403, 100, methods=("GET",), plural="pods", subresource="log")
    _, pods = seed_pytorchjob(kube_api, workers=2)
    await eventually(lambda: book.book.incident((NS, "mixtral-cpt", "")) is not None, "members known")
    kube_api.change(PODS, NS, pods[0], terminated(137, "OOMKilled"))
    kube_api.change(PODS, NS, pods[1], terminated(143, finished="2026-11-21T15:06:12Z"))
    await eventually(lambda: len(decisions) == 1, "a verdict")
    assert decisions[0].closed_by == "quorum"
    assert (decisions[0].verdict.pod, decisions[0].verdict.category) == (pods[0], "host_oom")
    assert fault.served == 2 and watch.logs is not None and watch.logs.failures == 2
