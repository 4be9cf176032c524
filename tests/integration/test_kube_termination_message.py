"""A pod-watch-only job (no sidecars): the root's error is only in its container's termination message
(terminationMessagePolicy: FallbackToLogsOnError), and the kubelets report the victims first, a second
*earlier*. The engine reads termination messages as it reads log tails, so the root is still named."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from support.common import eventually
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import NS, make_kube, seed_pytorchjob, terminated

from podmortem.aggregator.config import KubeSettings
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import IncidentBook
from podmortem.aggregator.kube.podwatch import PodWatch
from podmortem.aggregator.running import make_decide
from podmortem.k8s.backoff import Backoff

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
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    kube = make_kube(kube_api, tmp_path)
    decisions: list[Decision] = []
    book = IncidentBook(make_decide(), decisions.append, quorum_timeout=600)
    settings = KubeSettings(namespaces=(NS,), pod_selectors=("training.kubeflow.org/job-name",))
    task = asyncio.create_task(PodWatch(kube, book, settings, backoff=Backoff(0.001, 0.01, jitter=0)).run())
    try:
        _, pods = seed_pytorchjob(kube_api, workers=3)
        await eventually(lambda: book.incident((NS, "mixtral-cpt", "")) is not None, "members known")
        # Victims first, and their containers "ended" a second before the root's.
        for victim in (pods[0], pods[2]):
            kube_api.change(PODS, NS, victim, terminated(1, message=VICTIM_MESSAGE, finished="2026-11-21T15:06:09Z"))
        kube_api.change(PODS, NS, pods[1], terminated(1, message=ROOT_MESSAGE, finished="2026-11-21T15:06:10Z"))
        await eventually(lambda: len(decisions) == 1, "a verdict")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        kube.close()
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
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # No sidecars and no termination messages: the logs are the only evidence. The root's container has
    # restarted since its failed run, so its current log is the new run's; the failed run's log must be
    # read with previous=true, from the training container (not the exporter listed first). The victims'
    # kubelets report first, their containers "ending" a second earlier.
    kube = make_kube(kube_api, tmp_path)
    decisions: list[Decision] = []
    book = IncidentBook(make_decide(), decisions.append, quorum_timeout=600)
    settings = KubeSettings(namespaces=(NS,), pod_selectors=("training.kubeflow.org/job-name",))
    task = asyncio.create_task(PodWatch(kube, book, settings, backoff=Backoff(0.001, 0.01, jitter=0)).run())
    try:
        _, pods = seed_pytorchjob(kube_api, workers=3)
        root = pods[1]
        for pod in pods:
            text = ROOT_MESSAGE if pod == root else GLOO_VICTIM_LOG
            kube_api.set_log(NS, pod, "pytorch", text, previous=pod == root)
        kube_api.set_log(NS, root, "pytorch", "epoch 0: starting (restart 1)\n")  # the new run: nothing wrong
        kube_api.set_log(NS, root, "metrics-exporter", "exporter: scrape ok\n")
        await eventually(lambda: book.incident((NS, "mixtral-cpt", "")) is not None, "members known")
        for victim in (pods[0], pods[2]):
            kube_api.change(PODS, NS, victim, two_containers(terminated(1, finished="2026-11-21T15:06:09Z")))
        kube_api.change(PODS, NS, root, restarted_after_failure())
        await eventually(lambda: len(decisions) == 1, "a verdict")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        kube.close()
    verdict = decisions[0].verdict
    assert decisions[0].closed_by == "quorum"
    assert verdict.pod == root and verdict.category == "user_code", verdict
    assert "AttributeError" in verdict.message
    reads = [path for _, path in kube_api.requests() if "/log?" in path]
    root_reads = [p for p in reads if f"/pods/{root}/log" in p]
    assert root_reads and all("container=pytorch" in p and "previous=true" in p for p in root_reads), reads
    assert all("previous" not in p for p in reads if p not in root_reads)


async def test_a_log_that_cannot_be_read_does_not_hold_the_verdict(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    # Without `pods/log` in its RBAC (403, permanent) the aggregator decides on the rest, at once.
    kube = make_kube(kube_api, tmp_path)
    decisions: list[Decision] = []
    book = IncidentBook(make_decide(), decisions.append, quorum_timeout=600)
    settings = KubeSettings(namespaces=(NS,), pod_selectors=("training.kubeflow.org/job-name",))
    watch = PodWatch(kube, book, settings, backoff=Backoff(0.001, 0.01, jitter=0))
    task = asyncio.create_task(watch.run())
    fault = kube_api.fail(403, 100, methods=("GET",), plural="pods", subresource="log")
    try:
        _, pods = seed_pytorchjob(kube_api, workers=2)
        await eventually(lambda: book.incident((NS, "mixtral-cpt", "")) is not None, "members known")
        kube_api.change(PODS, NS, pods[0], terminated(137, "OOMKilled"))
        kube_api.change(PODS, NS, pods[1], terminated(143, finished="2026-11-21T15:06:12Z"))
        await eventually(lambda: len(decisions) == 1, "a verdict")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        kube.close()
    assert decisions[0].closed_by == "quorum"
    assert (decisions[0].verdict.pod, decisions[0].verdict.category) == (pods[0], "host_oom")
    assert fault.served == 2 and watch.logs is not None and watch.logs.failures == 2
