"""Which job a training pod belongs to, and how many pods that job expects — pure functions over dicts.

The incident book keys incidents by (namespace, job name, attempt) and needs the job's size to know
when every member has reported. A pod does not carry either directly: its controller ownerReference
names the object that created it (a PyTorchJob, or a batch Job that a JobSet created, which a TrainJob
created), and the size is in that object's spec. This module knows the workload kinds we support:

| kind (apiVersion)                        | pods carry labels           | world size (pods)              |
| ----------------------------------------- | --------------------------- | ------------------------------ |
| PyTorchJob (kubeflow.org/v1)              | training.kubeflow.org/*     | sum of replicas of all types   |
| Job (batch/v1)                            | batch.kubernetes.io/*       | completions if Indexed, else   |
|                                           |                             | parallelism                    |
| JobSet (jobset.x-k8s.io/v1alpha2)         | jobset.sigs.k8s.io/*        | sum of replicas x pods per Job |
| TrainJob (trainer.kubeflow.org/v1alpha1)  | (those of its JobSet)       | spec.trainer.numNodes          |

The annotation `podmortem.io/world-size` on the job overrides the computed size (elastic jobs, or a
spec we do not understand).

The job an incident is filed under is the outermost workload we know (a TrainJob over its JobSet, a
JobSet over its child Jobs), because that is what the user submitted and what a sidecar registers
with. `podmortem.k8s.workloads.workload_from_labels` gives the same answer from a pod's labels alone,
without reading any object: the sidecar uses it when it is given no job name, so both file a failure
under one incident. The attempt is `jobset.sigs.k8s.io/restart-attempt` for JobSet pods and "" otherwise.
"""

from __future__ import annotations

from typing import Any

from podmortem.core.names import (
    BATCH_COMPLETION_INDEX,
    KUBEFLOW_REPLICA_INDEX,
    KUBEFLOW_REPLICA_TYPE,
    WORLD_SIZE_ANNOTATION,
)
from podmortem.k8s.objects import JSON, labels_of, metadata_of, spec_of


def _int(value: Any, default: int | None = None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def world_size(job: JSON) -> int | None:
    """Expected number of pods (torchrun nodes) of a job object; None when its spec does not say."""
    meta = metadata_of(job)
    override = _int((meta.get("annotations") or {}).get(WORLD_SIZE_ANNOTATION))
    if override is not None and override > 0:
        return override
    kind = str(job.get("kind", ""))
    spec = spec_of(job)
    size: int | None = None
    if kind == "PyTorchJob":
        replicas = spec.get("pytorchReplicaSpecs") or {}
        size = sum(_int((r or {}).get("replicas"), 1) or 0 for r in replicas.values()) if replicas else None
    elif kind == "Job":
        size = _batch_job_pods(spec)
    elif kind == "JobSet":
        total = 0
        for rj in spec.get("replicatedJobs") or []:
            per_job = _batch_job_pods(((rj or {}).get("template") or {}).get("spec") or {})
            total += (_int((rj or {}).get("replicas"), 1) or 0) * (per_job or 0)
        size = total or None
    elif kind == "TrainJob":
        size = _int((spec.get("trainer") or {}).get("numNodes"))
    return size if size and size > 0 else None


def _batch_job_pods(spec: JSON) -> int | None:
    parallelism = _int(spec.get("parallelism"), 1)
    if spec.get("completionMode") == "Indexed":
        completions = _int(spec.get("completions"), parallelism)
        # Every index of a torchrun job must run at once: the size is the number of indexes.
        return completions
    return parallelism


def node_rank(job: JSON | None, pod: JSON) -> int | None:
    """The pod's torchrun node rank, using the job spec where the pod's labels are not enough.

    Kubeflow names ranks per replica type: with a Master replica, master-0 is rank 0 and worker-i is
    rank i+1; without one, worker-i is rank i. Only the job's spec tells which.
    """
    labels = labels_of(pod)
    if KUBEFLOW_REPLICA_TYPE in labels:
        rtype = str(labels[KUBEFLOW_REPLICA_TYPE]).lower()
        index = _int(labels.get(KUBEFLOW_REPLICA_INDEX))
        if index is None:
            return None
        if rtype == "master":
            return index
        if job is None:
            return None
        specs = {str(k).lower(): v for k, v in (spec_of(job).get("pytorchReplicaSpecs") or {}).items()}
        if rtype == "worker":
            masters = _int((specs.get("master") or {}).get("replicas"), 1) if "master" in specs else 0
            return (masters or 0) + index
        return None
    if BATCH_COMPLETION_INDEX in labels and "jobset.sigs.k8s.io/job-global-index" not in labels:
        return _int(labels[BATCH_COMPLETION_INDEX])
    return _jobset_rank(job, labels)


def _jobset_rank(jobset: JSON | None, labels: dict[str, Any]) -> int | None:
    """JobSet: rank = pods of the child Jobs before this one + this pod's completion index."""
    index = _int(labels.get(BATCH_COMPLETION_INDEX))
    global_index = _int(labels.get("jobset.sigs.k8s.io/job-global-index"))
    if index is None or global_index is None:
        return None
    if jobset is None or jobset.get("kind") != "JobSet":
        return None
    before = 0
    seen_jobs = 0
    for rj in spec_of(jobset).get("replicatedJobs") or []:
        per_job = _batch_job_pods(((rj or {}).get("template") or {}).get("spec") or {}) or 0
        for _ in range(_int((rj or {}).get("replicas"), 1) or 0):
            if seen_jobs == global_index:
                return before + index
            before += per_job
            seen_jobs += 1
    return None
