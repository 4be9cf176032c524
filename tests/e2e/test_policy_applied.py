"""The policy `podmortem policy` prints, applied to real held pods as they stood when their sidecars exited.

Pods fail in the kubelet's order with real sidecars and the real aggregator (tests/support/kubelet_order.py);
each pod is taken from the emulator's history at the write that made it Failed (its sidecar had exited),
in that order, and handed to the documented model of the Job and JobSet controllers
(tests/support/job_controllers.py) with the generated policy: one incident charges the budget at most once,
a permanent root cause fails the Job and the JobSet.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from support.job_controllers import JobModel, JobSetModel
from support.kube_emulator import JOBS, PODS, EmulatorHandle
from support.kube_objects import indexed_job, indexed_pod, seed_jobset
from support.kubelet_order import Sidecar, run_incident

from podmortem.k8s import policy


def at_exit(api: EmulatorHandle, sidecars: list[Sidecar]) -> list[dict[str, Any]]:
    """Each pod as stored by the write that marked its sidecar's exit (phase Failed), in exit order."""
    history = {(rv, obj["metadata"]["name"]): obj for rv, res, _, obj in api.emulator.history if res.plural == "pods"}
    out = []
    for s in sorted(sidecars, key=lambda s: s.exit_version):
        pod = history[(s.exit_version, s.pod)]
        assert pod["status"]["phase"] == "Failed"
        out.append(pod)
    return out


async def test_an_indexed_job_fails_at_once_on_a_permanent_root(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    job = kube_api.put(JOBS, indexed_job("train", 3))
    pods = [kube_api.put(PODS, indexed_pod(job, i)) for i in range(3)]
    _, sidecars = await run_incident(kube_api, tmp_path, pods, root=1)
    model = JobModel("train", policy.pod_failure_policy(), backoff_limit=3)
    for pod in at_exit(kube_api, sidecars):
        model.observe(pod)
    assert model.failure_target is not None
    assert model.failure_target[0] == "PodFailurePolicy"
    assert f"{sidecars[1].pod} has condition podmortem.io/PermanentFailure" in model.failure_target[1]
    assert model.failed == 0


async def test_a_preempted_root_charges_the_budget_once(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    job = kube_api.put(JOBS, indexed_job("train", 3))
    pods = [kube_api.put(PODS, indexed_pod(job, i)) for i in range(3)]
    preempted = {
        "conditions": [
            {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
             "message": "Preempted in order to admit critical pod",
             "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        ]
    }  # fmt: skip
    _, sidecars = await run_incident(
        kube_api, tmp_path, pods, root=0, root_extra=preempted, root_message=None, root_exit=143
    )
    model = JobModel("train", policy.pod_failure_policy(), backoff_limit=3)
    for pod in at_exit(kube_api, sidecars):
        model.observe(pod)
    assert (model.failed, model.ignored, model.failure_target) == (1, 2, None)
    baseline = JobModel("train", None, backoff_limit=3)  # Kubernetes' default, for contrast
    for pod in at_exit(kube_api, sidecars):
        baseline.observe(pod)
    assert baseline.failed == 3


async def test_a_jobset_fails_through_the_message_pattern(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    _, pods = seed_jobset(kube_api, "llm", [("leader", 1, 1), ("workers", 1, 2)])
    _, sidecars = await run_incident(kube_api, tmp_path, pods, root=2)
    children: dict[str, JobModel] = {}
    remaining: dict[str, int] = {}
    for pod in pods:
        job_name = pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]
        replicated = pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
        children.setdefault(job_name, JobModel(job_name, policy.pod_failure_policy(), 0, replicated))
        remaining[job_name] = remaining.get(job_name, 0) + 1
    jobset = JobSetModel(policy.jobset_failure_policy(max_restarts=3))
    for step, pod in enumerate(at_exit(kube_api, sidecars), start=1):
        job_name = pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]
        children[job_name].observe(pod)
        remaining[job_name] -= 1
        for name, child in children.items():
            child.settle(step, pods_still_running=remaining[name] > 0)
        jobset.reconcile(list(children.values()))
    assert jobset.outcome == "Failed" and jobset.matched_rule == "PodmortemPermanentFailure"
    assert jobset.restarts == 0
    assert all(c.failed == 0 for c in children.values())  # no victim charged anything
    [leader] = [c for c in children.values() if c.replicated_job == "leader"]
    assert (leader.ignored, leader.failed_condition) == (1, None)  # its victim was Ignored: it never failed
