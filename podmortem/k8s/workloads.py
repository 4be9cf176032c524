"""Which workload a pod belongs to, from the pod alone (labels and its controller ownerReference).

Shared by the aggregator (`aggregator.kube.jobs`, which also reads the job objects for size and rank)
and the sidecar (which may read only its own pod): both must file a failure under the same job and
attempt, or one failure becomes two incidents. Pure: plain dicts in, `JobRef`s out.
"""

from __future__ import annotations

from dataclasses import dataclass

from podmortem.core.model import JobRef
from podmortem.core.names import BATCH_JOB_NAME, JOBSET_NAME, JOBSET_RESTART_ATTEMPT, KUBEFLOW_JOB
from podmortem.k8s.objects import JSON, labels_of, metadata_of


@dataclass(frozen=True)
class Workload:
    """Where a kind of job lives in the API."""

    kind: str
    api_version: str
    plural: str


WORKLOADS: dict[str, Workload] = {
    w.kind: w
    for w in (
        Workload("PyTorchJob", "kubeflow.org/v1", "pytorchjobs"),
        Workload("Job", "batch/v1", "jobs"),
        Workload("JobSet", "jobset.x-k8s.io/v1alpha2", "jobsets"),
        Workload("TrainJob", "trainer.kubeflow.org/v1alpha1", "trainjobs"),
    )
}


@dataclass(frozen=True)
class OwnerRef:
    kind: str
    api_version: str
    name: str
    uid: str = ""

    @property
    def workload(self) -> Workload | None:
        w = WORKLOADS.get(self.kind)
        # Match the group too: another operator may call its kind "Job".
        if w is None or w.api_version.split("/")[0] != self.api_version.split("/")[0]:
            return None
        return w


def controller_of(obj: JSON) -> OwnerRef | None:
    """The controller ownerReference of any object (a pod, a Job, a JobSet), if it is one we know."""
    refs = [r for r in metadata_of(obj).get("ownerReferences") or [] if isinstance(r, dict)]
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if chosen is None:
        return None
    ref = OwnerRef(str(chosen.get("kind", "")), str(chosen.get("apiVersion", "")), str(chosen.get("name", "")),
                   str(chosen.get("uid", "")))  # fmt: skip
    return ref if ref.workload is not None else None


def workload_from_labels(pod: JSON) -> JobRef | None:
    """The outermost workload a pod belongs to, from its labels alone (no API reads).

    A TrainJob's pods are labelled with its JobSet, which has the TrainJob's name, so the key
    (namespace, name) is the same; only the kind differs (JobSet), which `resolve` refines.
    """
    meta = metadata_of(pod)
    labels = meta.get("labels") or {}
    namespace = str(meta.get("namespace") or "")
    if KUBEFLOW_JOB in labels:
        return JobRef(namespace, str(labels[KUBEFLOW_JOB]), "PyTorchJob")
    if JOBSET_NAME in labels:
        return JobRef(namespace, str(labels[JOBSET_NAME]), "JobSet")
    if BATCH_JOB_NAME in labels:
        return JobRef(namespace, str(labels[BATCH_JOB_NAME]), "Job")
    owner = controller_of(pod)
    return JobRef(namespace, owner.name, owner.kind, owner.uid) if owner else None


def attempt_of(pod: JSON, restarts: int = 0) -> str:
    """The job attempt a pod's run belongs to, when none is given: JobSet's restart attempt (a JobSet
    restart recreates its pods), then the training container's restart count when it has restarted in
    place (`restartPolicy: OnFailure`: the kubelet restarts it in the same pod, as for a PyTorchJob's
    replicas). "" for a first run with no JobSet attempt, "r1" for its first restart, "2.r1" for the first
    restart within JobSet attempt 2. One failure of the job, one incident: a torchrun job's members fail
    and restart together, so their runs share a restart count."""
    return attempt_from(labels_of(pod), restarts)


def attempt_from(labels: dict[str, str], restarts: int = 0) -> str:
    """`attempt_of` from a pod's labels and its training container's restart count."""
    parts = [str(labels.get(JOBSET_RESTART_ATTEMPT, ""))]
    if restarts > 0:
        parts.append(f"r{restarts}")
    return ".".join(p for p in parts if p)
