"""The opt-in retry policy: a batch Job or JobSet labelled `podmortem.io/retry-policy: enabled` gets the rules of
`podmortem policy` at admission. Pure: the object in, a JSONPatch (or none) and the outcome out.

The rules (`podmortem/k8s/policy.py`; why each, with sources: docs/retries.md) are added only to an
object that has no policy of its own: a Job with a `spec.podFailurePolicy`, or a JobSet with a
`spec.failurePolicy` or any child Job template with a `podFailurePolicy`, is left exactly as written.
Nothing is merged into a user's policy. What else holds:

- A JobSet also gets `maxRestarts` (the webhook's `--jobset-max-restarts`, a chart value), because
  adding a `failurePolicy` changes JobSet's default from "fail on the first child failure" to
  "restart", and the budget should be stated, not left at 0 by omission. Each replicatedJob's pod
  template gets `restartPolicy: Never`, also over `OnFailure`: JobSet's own defaulting webhook, which the
  API server calls before ours (configurations run in name order, `jobset-…` before `podmortem-…`),
  turns an unset one into `OnFailure`, which a `podFailurePolicy` does not allow, and the webhook cannot
  tell that default from a user's `OnFailure` (docs/retries.md).
- A batch Job whose pods use `restartPolicy: OnFailure` (always the user's choice: the API server
  defaults a Job's pods to `Always`, which a Job refuses) cannot have a `podFailurePolicy`: left alone,
  counted as `restart_on_failure`.
- A batch Job created by a JobSet (label `jobset.sigs.k8s.io/jobset-name`) is left alone: its JobSet is
  the unit that carries the policy, and a JobSet of a user's own policy must not get ours in its Jobs.
- An object created by another controller (a controller ownerReference other than a CronJob's: the
  JobSet of a TrainJob, say) is left alone: that controller owns the spec and may apply it again
  without our fields (and a JobSet's failurePolicy is immutable). A TrainJob's policy goes in its
  runtime (`podmortem policy trainjob`).
- With the rules, every Job (and every replicatedJob's Job template) gets `podReplacementPolicy: Failed`:
  with a `podFailurePolicy` it is the only value the API server accepts. The API server has already
  defaulted the field to `TerminatingOrFailed` (Kubernetes >= 1.29) when the webhook sees a Job, so a
  user's explicit `TerminatingOrFailed` cannot be told from the default and is replaced too; what that
  costs (a replacement pod starts only once the old one is terminal) and the sources: docs/retries.md.
- The annotation `podmortem.io/retry-policy-added: "<version>"` says that it was added, and by which
  version.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch

from podmortem.core.names import JOBSET_NAME, RETRY_POLICY_ADDED_ANNOTATION, RETRY_POLICY_ENABLED, RETRY_POLICY_LABEL
from podmortem.k8s import policy
from podmortem.k8s.objects import JSON, labels_of, metadata_of

# Outcomes, counted by the server as `podmortem_webhook_retry_policy_total{kind,outcome}`: a fixed set.
ADDED = "added"
OWN_POLICY = "own_policy"
RESTART_ON_FAILURE = "restart_on_failure"
JOBSET_CHILD = "jobset_child"
OWNED = "owned_by_controller"
NOT_OPTED_IN = "not_opted_in"
UNSUPPORTED = "unsupported"
OUTCOMES = (ADDED, OWN_POLICY, RESTART_ON_FAILURE, JOBSET_CHILD, OWNED, NOT_OPTED_IN, UNSUPPORTED)
MUTABLE_OWNERS = frozenset({"CronJob"})  # creates a Job once and never applies its spec again
KINDS = {("batch", "Job"): "Job", ("jobset.x-k8s.io", "JobSet"): "JobSet"}
REPLACEMENT_POLICY = policy.REPLACEMENT_POLICY


def kind_of(group: str, kind: str) -> str | None:
    """'Job' or 'JobSet' for the kinds this policy is for, else None."""
    return KINDS.get((group, kind))


def _dict(parent: JSON, key: str) -> JSON:
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


def _opted_in(obj: Mapping[str, Any]) -> bool:
    labels = labels_of(obj)
    return str(labels.get(RETRY_POLICY_LABEL, "")).lower() == RETRY_POLICY_ENABLED


def _controller(obj: Mapping[str, Any]) -> str | None:
    """'Kind/name' of the controller that owns `obj` and keeps its spec, else None."""
    for ref in metadata_of(obj).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") and ref.get("kind") not in MUTABLE_OWNERS:
            return f"{ref.get('kind')}/{ref.get('name')}"
    return None


def _restart_policy(job_spec: Mapping[str, Any]) -> str:
    return str((((job_spec.get("template") or {}).get("spec")) or {}).get("restartPolicy") or "")


def mutate_job(job: Mapping[str, Any], version: str) -> tuple[list[JSON], str, str]:
    """(patch, outcome, reason) for a batch Job CREATE."""
    if not _opted_in(job):
        return [], NOT_OPTED_IN, f"no label {RETRY_POLICY_LABEL}: {RETRY_POLICY_ENABLED}"
    labels = labels_of(job)
    if JOBSET_NAME in labels:
        return [], JOBSET_CHILD, f"created by JobSet {labels[JOBSET_NAME]}: the JobSet carries the policy"
    if owner := _controller(job):
        return [], OWNED, f"owned by {owner}, which keeps its spec"
    spec = job.get("spec")
    if not isinstance(spec, Mapping):
        return [], UNSUPPORTED, "the Job has no spec"
    if spec.get("podFailurePolicy") is not None:
        return [], OWN_POLICY, "it has a podFailurePolicy of its own"
    restart = _restart_policy(spec)
    if restart == "OnFailure":
        return [], RESTART_ON_FAILURE, "its pods use restartPolicy OnFailure, which a podFailurePolicy does not allow"
    if restart != "Never":
        return [], UNSUPPORTED, f"pod restartPolicy {restart or '(unset)'}: a Job needs Never or OnFailure"
    out = copy.deepcopy(dict(job))
    reason = _with_policy(_dict(out, "spec"))
    _dict(_dict(out, "metadata"), "annotations")[RETRY_POLICY_ADDED_ANNOTATION] = version
    return list(jsonpatch.make_patch(dict(job), out).patch), ADDED, reason


def _with_policy(job_spec: JSON) -> str:
    """Put our rules and `podReplacementPolicy: Failed` into a Job spec; what was replaced, if anything."""
    before = job_spec.get("podReplacementPolicy")
    job_spec.update(policy.job_fragment())
    if before is None or before == REPLACEMENT_POLICY:
        return ""
    return (
        f"podReplacementPolicy {before} (the API server's default, or the user's) replaced by {REPLACEMENT_POLICY}, "
        "the only value a podFailurePolicy allows"
    )


def mutate_jobset(jobset: Mapping[str, Any], version: str, max_restarts: int) -> tuple[list[JSON], str, str]:
    """(patch, outcome, reason) for a JobSet CREATE."""
    if not _opted_in(jobset):
        return [], NOT_OPTED_IN, f"no label {RETRY_POLICY_LABEL}: {RETRY_POLICY_ENABLED}"
    if owner := _controller(jobset):
        return [], OWNED, f"owned by {owner}, which keeps its spec (a TrainJob: use podmortem policy trainjob)"
    spec = jobset.get("spec")
    if not isinstance(spec, Mapping):
        return [], UNSUPPORTED, "the JobSet has no spec"
    if spec.get("failurePolicy") is not None:
        return [], OWN_POLICY, "it has a failurePolicy of its own"
    replicated = spec.get("replicatedJobs")
    if not isinstance(replicated, list) or not replicated or not all(isinstance(r, Mapping) for r in replicated):
        return [], UNSUPPORTED, "no replicatedJobs"
    for rj in replicated:
        job_spec = (rj.get("template") or {}).get("spec") or {}
        if job_spec.get("podFailurePolicy") is not None:
            return [], OWN_POLICY, f"replicatedJob {rj.get('name')!r} has a podFailurePolicy of its own"
        restart = _restart_policy(job_spec)
        if restart not in ("", "Never", "OnFailure"):
            return [], UNSUPPORTED, f"replicatedJob {rj.get('name')!r} uses restartPolicy {restart}"
    out = copy.deepcopy(dict(jobset))
    out_spec = _dict(out, "spec")
    out_spec["failurePolicy"] = policy.jobset_failure_policy(max_restarts)
    replaced = []
    for rj in out_spec["replicatedJobs"]:
        job_spec = _dict(_dict(rj, "template"), "spec")
        if why := _with_policy(job_spec):
            replaced.append(f"replicatedJob {rj.get('name')!r}: {why}")
        pod_spec = _dict(_dict(job_spec, "template"), "spec")
        if pod_spec.get("restartPolicy") == "OnFailure":
            replaced.append(
                f"replicatedJob {rj.get('name')!r}: restartPolicy OnFailure (JobSet's default, or the user's) "
                "replaced by Never, the only value a podFailurePolicy allows"
            )
        pod_spec["restartPolicy"] = "Never"
    _dict(_dict(out, "metadata"), "annotations")[RETRY_POLICY_ADDED_ANNOTATION] = version
    return list(jsonpatch.make_patch(dict(jobset), out).patch), ADDED, "; ".join(replaced)
