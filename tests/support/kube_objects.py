"""The Kubernetes objects the tests seed into the emulator, shaped as their controllers make them.

A PyTorchJob and its pods as the training operator labels them (shaped like the development corpus'
pod.json), indexed Jobs, JobSets with their child Jobs and pods (labelled as the JobSet controller
does), TrainJobs, a terminated container's status, a `Decision` to publish, and a `Kube` client
pointed at a running emulator.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from podmortem.aggregator.config import KubeSettings
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.kube.client import Kube, load_configuration
from podmortem.core.model import Incident, JobRef, Member, Verdict
from podmortem.k8s.backoff import Backoff
from support.kube_emulator import JOBS, JOBSETS, PODS, PYTORCHJOBS, EmulatorHandle

NS = "kubeflow-user"
JOB = "mixtral-cpt"
CONTROLLER_CONDITIONS = [
    {"type": "Created", "status": "True", "reason": "PyTorchJobCreated", "message": "created",
     "lastTransitionTime": "2026-11-21T15:05:40Z", "lastUpdateTime": "2026-11-21T15:05:40Z"},
    {"type": "Running", "status": "False", "reason": "PyTorchJobRunning", "message": "was running",
     "lastTransitionTime": "2026-11-21T15:06:12Z", "lastUpdateTime": "2026-11-21T15:06:12Z"},
    {"type": "Failed", "status": "True", "reason": "PyTorchJobFailed", "message": "worker 1 failed",
     "lastTransitionTime": "2026-11-21T15:06:12Z", "lastUpdateTime": "2026-11-21T15:06:12Z"},
]  # fmt: skip


def pytorchjob(
    name: str = JOB, workers: int = 3, master: bool = False, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    specs: dict[str, Any] = {"Worker": {"replicas": workers, "restartPolicy": "Never", "template": {}}}
    if master:
        specs["Master"] = {"replicas": 1, "restartPolicy": "Never", "template": {}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NS, "annotations": dict(annotations or {})},
        "spec": {"pytorchReplicaSpecs": specs},
        "status": {"conditions": copy.deepcopy(CONTROLLER_CONDITIONS)},
    }


def training_pod(job: dict[str, Any], index: int, rtype: str = "worker", phase: str = "Running") -> dict[str, Any]:
    name = f"{job['metadata']['name']}-{rtype}-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                "training.kubeflow.org/job-name": job["metadata"]["name"],
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": rtype,
                "training.kubeflow.org/replica-index": str(index),
            },
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": job["metadata"]["name"],
                    "uid": job["metadata"].get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"nodeName": f"node-{index}", "hostname": name, "containers": [{"name": "pytorch", "image": "t"}]},
        "status": {
            "phase": phase,
            "podIP": f"10.0.0.{10 + index}",
            "containerStatuses": [
                {"name": "pytorch", "restartCount": 0, "state": {"running": {"startedAt": "2026-11-21T15:05:49Z"}}}
            ],
        },
    }


def terminated(
    exit_code: int, reason: str = "Error", message: str = "", finished: str = "2026-11-21T15:06:10Z"
) -> dict[str, Any]:
    """A pod status whose training container ended (`message`: its termination message, as with
    terminationMessagePolicy FallbackToLogsOnError: the tail of its log)."""
    state: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": "2026-11-21T15:05:49Z",
        "finishedAt": finished,
    }
    if message:
        state["message"] = message
    return {
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "restartCount": 0,
                    "state": {"terminated": state},
                }
            ],
        }
    }


def seed_pytorchjob(api: EmulatorHandle, workers: int = 3, **annotations: str) -> tuple[dict[str, Any], list[str]]:
    job = api.put(PYTORCHJOBS, pytorchjob(workers=workers, annotations=annotations))
    pods = [api.put(PODS, training_pod(job, i))["metadata"]["name"] for i in range(workers)]
    return job, pods


def controller_ref(owner: dict[str, Any]) -> dict[str, Any]:
    """The ownerReference a controller sets on what it creates (`owner` as stored: apiVersion, kind, metadata)."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


def indexed_job(name: str, completions: int, owner: dict[str, Any] | None = None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": dict(labels)}
    if owner is not None:
        meta["ownerReferences"] = [controller_ref(owner)]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"completionMode": "Indexed", "completions": completions, "parallelism": completions},
    }


def indexed_pod(job: dict[str, Any], index: int, **labels: str) -> dict[str, Any]:
    name = f"{job['metadata']['name']}-{index}-abcde"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                "batch.kubernetes.io/job-name": job["metadata"]["name"],
                "batch.kubernetes.io/job-completion-index": str(index),
                **labels,
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job["metadata"]["name"],
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": f"node-{index}", "containers": [{"name": "trainer"}]},
        "status": {"phase": "Running"},
    }


def jobset(name: str, replicated: list[tuple[str, int, int]], owner: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if owner is not None:
        meta["ownerReferences"] = [controller_ref(owner)]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta,
        "spec": {
            "replicatedJobs": [
                {"name": rj, "replicas": replicas,
                 "template": {"spec": {"completionMode": "Indexed", "completions": pods, "parallelism": pods}}}
                for rj, replicas, pods in replicated
            ]
        },
    }  # fmt: skip


def seed_jobset(
    api: EmulatorHandle, name: str, replicated: list[tuple[str, int, int]], owner: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A JobSet, its child Jobs and their pods, labelled as the JobSet controller does."""
    js = api.put(JOBSETS, jobset(name, replicated, owner))
    pods = []
    global_index = 0
    for rj, replicas, per_job in replicated:
        for j in range(replicas):
            labels = {
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": rj,
                "jobset.sigs.k8s.io/job-index": str(j),
                "jobset.sigs.k8s.io/job-global-index": str(global_index),
                "jobset.sigs.k8s.io/restart-attempt": "0",
            }
            child = api.put(JOBS, indexed_job(f"{name}-{rj}-{j}", per_job, js, **labels))
            for i in range(per_job):
                pods.append(api.put(PODS, indexed_pod(child, i, **labels)))
            global_index += 1
    return js, pods


def trainjob(name: str, num_nodes: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtimeRef": {"name": "torch-distributed"}, "trainer": {}}
    if num_nodes is not None:
        spec["trainer"]["numNodes"] = num_nodes
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def decision(
    pod: str | None = f"{JOB}-worker-1",
    revision: int = 1,
    category: str | None = "user_code",
    message: str = "ValueError: bad label 7 in batch 1234",
    job: JobRef | None = None,
    members: tuple[str, ...] = (f"{JOB}-worker-0", f"{JOB}-worker-1", f"{JOB}-worker-2"),
    *,
    incident_id: str = "",
    retryable: bool | None = False,
    exception_type: str = "ValueError",
    node: str = "node-1",
    closed_by: str = "quorum",
    opened_at: float = 1795271119.0,
    decided_at: float = 1795271125.0,
) -> Decision:
    """A decision as the aggregator publishes it: `pod` (None: no root found) raised `message` first."""
    job = job or JobRef(NS, JOB, "PyTorchJob")
    incident = Incident(
        job=job,
        world_size=len(members),
        members=tuple(Member(pod=m, namespace=job.namespace) for m in members),
        attempt="",
        incident_id=incident_id or f"{job.namespace}.{job.name}.0",
        opened_at=opened_at,
    )
    verdict = Verdict(
        pod=pod,
        category=category,  # type: ignore[arg-type]
        retryable=retryable if pod else None,
        summary="rank 1 raised ValueError first; the others lost their peer" if pod else "all pods succeeded",
        rank=1 if pod else None,
        node=node if pod else "",
        exception_type=exception_type if pod else "",
        message=message if pod else "",
        evidence=("error file: ValueError at 15:06:10", "peers: gloo connection closed by peer"),
        confidence=0.92,
        rule="python-exception",
    )
    return Decision(
        incident=incident,
        verdict=verdict,
        decided_at=decided_at,
        revision=revision,
        closed_by=closed_by,  # type: ignore[arg-type]
        reported=len(members),
    )


def make_kube(api: EmulatorHandle, tmp_path: Path, **kwargs: Any) -> Kube:
    settings = KubeSettings(kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig", NS)))
    options: dict[str, Any] = {"backoff": Backoff(0.001, 0.01, jitter=0), "watch_timeout": 30}
    options.update(kwargs)
    return Kube(load_configuration(settings), **options)
