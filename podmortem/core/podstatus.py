"""Read a Pod object (as `kubectl get pod -o json` or the API returns it) into typed facts.

Three places look at pods — the sidecar watching its own pod, the aggregator watching the job's pods,
and `podmortem analyze` reading a bundle's pod.json — and all of them need the same few facts: who the
pod is (job, rank, node), how its training container ended, its DisruptionTarget condition and whether
it was deleted. This module is the one place that knows where those live in a Pod. Pure functions over
plain dicts; no Kubernetes client.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from podmortem.core.model import Condition, JobRef, Member, Termination

# Labels that carry a pod's position in its job, by workload kind.
KUBEFLOW_JOB = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
BATCH_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
BATCH_JOB_NAME = "batch.kubernetes.io/job-name"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
TRAINJOB_NAME = "trainer.kubeflow.org/trainjob-ancestor-step"  # informational only

# Conditions worth keeping: the others (Ready, Initialized, ...) say nothing about a failure.
INTERESTING_CONDITIONS = frozenset({"DisruptionTarget"})


def parse_time(value: Any) -> float | None:
    """RFC 3339 ('2026-11-21T14:57:18Z', fractional seconds allowed) -> epoch seconds."""
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class PodSnapshot:
    """What one observation of a Pod tells about a failure."""

    name: str
    namespace: str
    uid: str
    node: str
    pod_ip: str
    phase: str
    phase_reason: str
    labels: dict[str, str]
    owner: JobRef | None
    replica_type: str
    replica_index: int | None
    rank: int | None
    container: str
    termination: Termination | None
    running: bool
    restart_count: int
    last_termination: Termination | None  # lastState.terminated: an earlier run of the container
    conditions: tuple[Condition, ...]
    deleted_at: float | None
    started_at: float | None = None  # when the container's current run started (running or terminated)


def _termination(state: dict[str, Any], restart_count: int) -> Termination | None:
    t = state.get("terminated") if isinstance(state, dict) else None
    if not isinstance(t, dict):
        return None
    return Termination(
        exit_code=_int(t.get("exitCode")),
        signal=_int(t.get("signal")),
        reason=str(t.get("reason") or ""),
        message=str(t.get("message") or ""),
        started_at=parse_time(t.get("startedAt")),
        finished_at=parse_time(t.get("finishedAt")),
        restart_count=restart_count,
    )


def _pick_container(statuses: list[dict[str, Any]], container: str | None) -> dict[str, Any]:
    if container:
        for s in statuses:
            if s.get("name") == container:
                return s
        return {}
    theirs = [s for s in statuses if not str(s.get("name", "")).startswith("podmortem")]
    # Default: the container that failed (now, or in its run before a restart) — in a multi-container
    # pod that is the training container, not whichever is listed first — else the first one not ours.
    for s in theirs:
        for where in ("state", "lastState"):
            state = s.get(where)
            done = state.get("terminated") if isinstance(state, dict) else None
            if isinstance(done, dict) and _int(done.get("exitCode")) not in (None, 0):
                return s
    return theirs[0] if theirs else {}


def rank_of(labels: dict[str, str], env_rank: int | None = None) -> tuple[str, int | None, int | None]:
    """(replica_type, replica_index, node rank) from the labels of the workload kinds we know."""
    if env_rank is not None:
        rtype = labels.get(KUBEFLOW_REPLICA_TYPE, "")
        return rtype, _int(labels.get(KUBEFLOW_REPLICA_INDEX)), env_rank
    if KUBEFLOW_REPLICA_TYPE in labels:
        rtype = labels[KUBEFLOW_REPLICA_TYPE].lower()
        index = _int(labels.get(KUBEFLOW_REPLICA_INDEX))
        # Kubeflow: master-0 is node rank 0 and worker-i is rank i+1 when a Master replica exists;
        # whether one exists is not visible on a worker pod, so the rank stays unknown there unless
        # the job says (the aggregator knows the job spec).
        rank = 0 if rtype == "master" and index == 0 else None
        return rtype, index, rank
    if JOBSET_GLOBAL_INDEX in labels:
        # The JobSet's global index numbers its child *Jobs*, not pods, and the completion index counts
        # within one child Job: with several pods per child Job the rank needs the JobSet's spec (the
        # aggregator's `node_rank`). Unknown beats wrong.
        return "", _int(labels.get(BATCH_COMPLETION_INDEX)), None
    if BATCH_COMPLETION_INDEX in labels:
        index = _int(labels[BATCH_COMPLETION_INDEX])
        return "", index, index
    return "", None, None


def owner_of(metadata: dict[str, Any]) -> JobRef | None:
    namespace = str(metadata.get("namespace") or "")
    for ref in metadata.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller", True):
            return JobRef(namespace, str(ref.get("name", "")), str(ref.get("kind", "")), str(ref.get("uid", "")))
    labels = metadata.get("labels") or {}
    for label, kind in ((KUBEFLOW_JOB, "PyTorchJob"), (JOBSET_NAME, "JobSet"), (BATCH_JOB_NAME, "Job")):
        if label in labels:
            return JobRef(namespace, str(labels[label]), kind)
    return None


def snapshot(pod: dict[str, Any], container: str | None = None) -> PodSnapshot:
    """Typed facts from one Pod object. Missing parts become None/empty, never an exception."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    statuses = [s for s in status.get("containerStatuses") or [] if isinstance(s, dict)]
    cs = _pick_container(statuses, container)
    restarts = _int(cs.get("restartCount")) or 0
    state = cs.get("state") or {}
    rtype, rindex, rank = rank_of(labels)
    conditions = tuple(
        Condition(
            type=str(c.get("type", "")),
            status=str(c.get("status", "")),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
            last_transition_time=parse_time(c.get("lastTransitionTime")),
        )
        for c in status.get("conditions") or []
        if isinstance(c, dict) and c.get("type") in INTERESTING_CONDITIONS
    )
    return PodSnapshot(
        name=str(metadata.get("name", "")),
        namespace=str(metadata.get("namespace", "")),
        uid=str(metadata.get("uid", "")),
        node=str(spec.get("nodeName") or ""),
        pod_ip=str(status.get("podIP") or ""),
        phase=str(status.get("phase") or ""),
        phase_reason=str(status.get("reason") or ""),
        labels=labels,
        owner=owner_of(metadata),
        replica_type=rtype,
        replica_index=rindex,
        rank=rank,
        container=str(cs.get("name", "")),
        termination=_termination(state, restarts),
        running=isinstance(state, dict) and "running" in state,
        restart_count=restarts,
        last_termination=_termination(cs.get("lastState") or {}, restarts),
        conditions=conditions,
        deleted_at=parse_time(metadata.get("deletionTimestamp")),
        started_at=_started(state),
    )


def _started(state: Any) -> float | None:
    for phase in ("running", "terminated"):
        part = state.get(phase) if isinstance(state, dict) else None
        if isinstance(part, dict):
            return parse_time(part.get("startedAt"))
    return None


def assign_ranks(members: Sequence[Member]) -> tuple[Member, ...]:
    """Fill in Kubeflow node ranks: worker-i is rank i+1 when the job has a Master replica, else rank i.

    Ranks already known (from labels the workload sets, or the pod's own registration) are kept.
    """
    has_master = any(m.replica_type.lower() == "master" for m in members)
    out: list[Member] = []
    for m in members:
        rank = m.rank
        if rank is None and m.replica_index is not None:
            rtype = m.replica_type.lower()
            if rtype == "master":
                rank = m.replica_index
            elif rtype == "worker":
                rank = m.replica_index + 1 if has_master else m.replica_index
        out.append(m if rank == m.rank else dataclasses.replace(m, rank=rank))
    return tuple(out)
