"""A pod-watch-only job (no sidecars): the root's error is only in its container's termination message
(terminationMessagePolicy: FallbackToLogsOnError), and the kubelets report the victims first, a second
*earlier*. The engine reads termination messages as it reads log tails, so the root is still named."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.kube_emulator import NS, PODS, EmulatorHandle, eventually, make_kube, seed_pytorchjob, terminated

from podmortem.aggregator.incidents import IncidentBook
from podmortem.aggregator.kube.client import KubeSettings
from podmortem.aggregator.kube.podwatch import PodWatch
from podmortem.aggregator.publishing import Decision
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
