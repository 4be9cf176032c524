"""Retry policies that make podmortem's pod conditions act: pure data, and the YAML `podmortem policy` prints.

The aggregator writes exactly one of three pod conditions on a failed member pod while its sidecar
still holds the pod non-terminal (`podmortem.io/Victim`, `podmortem.io/PermanentFailure`,
`podmortem.io/RetryableFailure`). Kubernetes acts on them only through policies the job carries:

- a batch Job's `spec.podFailurePolicy` (`pod_failure_policy`): victims `Ignore` (not counted against
  `backoffLimit`), a permanent failure `FailJob`, a retryable one `Count`, and pods Kubernetes itself
  marked `DisruptionTarget` (a vanished node, preemption, eviction: no sidecar was there to hold them)
  `Count`. Our rules come first: the Job controller applies the first rule that matches.
- a JobSet's `spec.failurePolicy` (`jobset_failure_policy`) on top of the same `podFailurePolicy` in every
  child Job: a child Job failed by our `FailJob` rule has the reason `PodFailurePolicy` and the message
  `Pod NS/NAME has condition podmortem.io/PermanentFailure matching FailJob rule at index N`, so a
  `FailJobSet` rule on that message pattern stops the JobSet; every other child failure restarts it,
  up to an explicit `maxRestarts`.
- a TrainJob (Kubeflow Trainer v2) carries neither; its (Cluster)TrainingRuntime's JobSet template
  does, so the JobSet fragment goes there.

Why each choice, with sources, is in docs/retries.md; the test that applies these policies by the
Job and JobSet controllers' documented matching rules is tests/unit/test_policy.py.
Pure: plain data in, plain data and text out (PyYAML dumps each rule); no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from podmortem.core.names import DISRUPTION_TARGET, PERMANENT, RETRYABLE, VICTIM
from podmortem.k8s.objects import JSON

# The reason the Job controller gives a Job failed by a podFailurePolicy FailJob rule, and the message
# pattern (RE2, unanchored: JobSet matches with Go's regexp.MatchString) that names our condition in it.
JOB_REASON_POD_FAILURE_POLICY = "PodFailurePolicy"
JOB_REASON_BACKOFF_LIMIT = "BackoffLimitExceeded"
PERMANENT_MESSAGE_PATTERN = rf"has condition {re.escape(PERMANENT)} matching FailJob rule"

# The only `podReplacementPolicy` the API server accepts on a Job with a `podFailurePolicy`
# (`validatePodReplacementPolicy` in pkg/apis/batch/validation/validation.go): printed beside the rules, as a
# Job whose own field says `TerminatingOrFailed` is refused (422) once the rules are pasted in.
REPLACEMENT_POLICY = "Failed"

DEFAULT_MAX_RESTARTS = 3
DEFAULT_JOBSET_REPLICATED_JOB = "workers"
DEFAULT_TRAINJOB_REPLICATED_JOB = "node"  # the trainer step of Kubeflow Trainer's torch-distributed runtime

Action = Literal["Ignore", "FailJob", "Count"]


@dataclass(frozen=True)
class PodRule:
    action: Action
    condition: str
    why: tuple[str, ...]  # the comment printed above the rule


POD_RULES: tuple[PodRule, ...] = (
    PodRule(
        "Ignore",
        VICTIM,
        (
            "Failed because another member failed (peer closed, collective timeout, teardown):",
            "not counted against backoffLimit, so one bug on one rank charges the budget once, not N times.",
            "In a JobSet this rule must be in EVERY child Job: a victim counted in its own Job can fail",
            "that Job before the root's Job turns Failed, and the JobSet restarts on the wrong failure.",
        ),
    ),
    PodRule(
        "FailJob",
        PERMANENT,
        (
            "Failed on its own, and a retry as is fails the same way (user_code, gpu_oom, host_oom, crash),",
            "written only at confidence >= --permanent-confidence (default 0.9): stop, keep the GPU hours.",
        ),
    ),
    PodRule(
        "Count",
        RETRYABLE,
        (
            "Failed on its own, and a retry is expected to help (hardware, network, infra, preemption,",
            "node_lost, hang): counted, so retries stay bounded by backoffLimit. Not Ignore: Ignore has no",
            "limit, and a retryable cause on a bad node would loop forever. Listed so that no rule of yours",
            "further down (say, exit code 137 -> FailJob) decides for a pod podmortem has classified.",
        ),
    ),
    PodRule(
        "Count",
        DISRUPTION_TARGET,
        (
            "Marked by Kubernetes (preemption, eviction, node lost) with no podmortem condition: its sidecar",
            "could not hold it (the node vanished). Counted, bounded like any retryable failure; Kubernetes'",
            "own example uses Ignore here, which is unbounded.",
        ),
    ),
)


def pod_failure_policy() -> JSON:
    """A batch Job's `spec.podFailurePolicy`: our condition rules, in this order."""
    return {
        "rules": [{"action": r.action, "onPodConditions": [{"type": r.condition, "status": "True"}]} for r in POD_RULES]
    }


@dataclass(frozen=True)
class JobSetRule:
    name: str
    action: str
    reasons: tuple[str, ...]
    patterns: tuple[str, ...]
    why: tuple[str, ...]


JOBSET_RULES: tuple[JobSetRule, ...] = (
    JobSetRule(
        "PodmortemPermanentFailure",
        "FailJobSet",
        (JOB_REASON_POD_FAILURE_POLICY,),
        (PERMANENT_MESSAGE_PATTERN,),
        (
            "A child Job failed by the FailJob rule on podmortem.io/PermanentFailure: its message reads",
            "'Pod NS/NAME has condition podmortem.io/PermanentFailure matching FailJob rule at index N'.",
            "JobSet checks rules in order against every failed child Job, so this one wins.",
        ),
    ),
    JobSetRule(
        "PodmortemRetryable",
        "RestartJobSet",
        (JOB_REASON_BACKOFF_LIMIT,),
        (),
        (
            "A child Job that spent its backoffLimit on counted failures (RetryableFailure, DisruptionTarget,",
            "failures podmortem could not classify): restart the JobSet, up to maxRestarts. JobSet does the",
            "same when no rule matches; written out so the order and the budget are explicit.",
        ),
    ),
)


def jobset_failure_policy(max_restarts: int = DEFAULT_MAX_RESTARTS) -> JSON:
    """A JobSet's `spec.failurePolicy`: stop on a permanent root cause, restart on anything else."""
    if max_restarts < 0:
        raise ValueError(f"maxRestarts must be >= 0, got {max_restarts}")
    rules: list[JSON] = []
    for r in JOBSET_RULES:
        rule: JSON = {"name": r.name, "action": r.action}
        if r.reasons:
            rule["onJobFailureReasons"] = list(r.reasons)
        if r.patterns:
            rule["onJobFailureMessagePatterns"] = list(r.patterns)
        rules.append(rule)
    return {"maxRestarts": max_restarts, "rules": rules}


def replicated_job_fragment(name: str) -> JSON:
    """What one replicatedJob needs: the Job fields of `job_fragment`, and `restartPolicy: Never` (JobSet's
    webhook defaults an unset pod restartPolicy to OnFailure, which a podFailurePolicy does not allow)."""
    return {"name": name, "template": {"spec": {**job_fragment(), "template": {"spec": {"restartPolicy": "Never"}}}}}


def job_fragment() -> JSON:
    """The fields a batch Job spec needs: the rules, and the one `podReplacementPolicy` they allow."""
    return {"podReplacementPolicy": REPLACEMENT_POLICY, "podFailurePolicy": pod_failure_policy()}


def jobset_fragment(replicated_jobs: tuple[str, ...], max_restarts: int = DEFAULT_MAX_RESTARTS) -> JSON:
    if not replicated_jobs:
        raise ValueError("name at least one replicatedJob")
    return {
        "failurePolicy": jobset_failure_policy(max_restarts),
        "replicatedJobs": [replicated_job_fragment(n) for n in replicated_jobs],
    }


# -- what `podmortem policy` prints: the same data, with the reasons as comments ----------------------

ONEXITCODES_WARNING = (
    "WARNING: an onExitCodes rule without containerName also reads init containers, and so podmortem's",
    "native sidecar. The sidecar exits 0 on SIGTERM, but one killed at the end of its grace period exits",
    "137 and matches a '137 = OOM -> FailJob' rule. Give such rules containerName, and keep them below these.",
)


def _comment(lines: tuple[str, ...] | list[str], indent: int) -> list[str]:
    return [" " * indent + "# " + line if line else " " * indent + "#" for line in lines]


def _dump(data: Any, indent: int) -> list[str]:
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)
    return [" " * indent + line for line in text.splitlines()]


REPLACEMENT_WHY = (
    "The only value the API server accepts beside a podFailurePolicy (a Job that says TerminatingOrFailed is",
    "refused, 422): a failed pod is replaced once it is terminal. It replaces a podReplacementPolicy of yours.",
)


def _pod_policy_lines(indent: int) -> list[str]:
    """`podReplacementPolicy:` and `podFailurePolicy:` with each rule under its reason, at `indent`."""
    out = _comment(REPLACEMENT_WHY, indent)
    out.append(" " * indent + f"podReplacementPolicy: {REPLACEMENT_POLICY}")
    out += [" " * indent + "podFailurePolicy:", " " * (indent + 2) + "rules:"]
    for rule, data in zip(POD_RULES, pod_failure_policy()["rules"], strict=True):
        out += _comment(rule.why, indent + 4)
        block = _dump([data], indent + 4)
        out += block
    out += _comment(["Rules of your own go below these (the first rule that matches decides)."], indent + 4)
    return out


def _failure_policy_lines(max_restarts: int, indent: int) -> list[str]:
    policy = jobset_failure_policy(max_restarts)
    out = [" " * indent + "failurePolicy:"]
    out += _comment(
        [
            "Set explicitly: a JobSet with no failurePolicy fails on its first child failure; with one,",
            "an unmatched failure restarts it. Each restart recreates every child Job.",
        ],
        indent + 2,
    )
    out.append(" " * (indent + 2) + f"maxRestarts: {policy['maxRestarts']}")
    out.append(" " * (indent + 2) + "rules:")
    for rule, data in zip(JOBSET_RULES, policy["rules"], strict=True):
        out += _comment(rule.why, indent + 4)
        out += _dump([data], indent + 4)
    return out


def _replicated_jobs_lines(names: tuple[str, ...], indent: int) -> list[str]:
    out = [" " * indent + "replicatedJobs:"]
    out += _comment(
        [
            "Merge into each of your replicatedJobs (matched by name): every child Job needs the pod rules,",
            "and its pods restartPolicy Never (a podFailurePolicy does not allow OnFailure, JobSet's default).",
        ],
        indent + 2,
    )
    for name in names:
        out.append(" " * (indent + 2) + f"- name: {name}")
        out.append(" " * (indent + 4) + "template:")
        out.append(" " * (indent + 6) + "spec:")
        out += _pod_policy_lines(indent + 8)
        out.append(" " * (indent + 8) + "template:")
        out.append(" " * (indent + 10) + "spec:")
        out.append(" " * (indent + 12) + "restartPolicy: Never")
    return out


HEADER = (
    "Generated by `podmortem policy`: makes podmortem's pod conditions decide retries.",
    "Why each rule is here, with the Kubernetes and JobSet sources: docs/retries.md.",
)


def render_job() -> str:
    lines = _comment(list(HEADER), 0)
    lines += _comment(
        [
            "Paste under the Job's spec (batch/v1), in place of the same keys of yours. The pod template needs",
            "restartPolicy: Never.",
            "",
            *ONEXITCODES_WARNING,
        ],
        0,
    )
    lines += _pod_policy_lines(0)
    return "\n".join(lines) + "\n"


def render_jobset(replicated_jobs: tuple[str, ...], max_restarts: int = DEFAULT_MAX_RESTARTS) -> str:
    jobset_fragment(replicated_jobs, max_restarts)  # validates the arguments
    lines = _comment(list(HEADER), 0)
    lines += _comment(
        [
            "Paste under the JobSet's spec (jobset.x-k8s.io/v1alpha2; JobSet >= v0.10 for message patterns).",
            "",
            *ONEXITCODES_WARNING,
        ],
        0,
    )
    lines += _failure_policy_lines(max_restarts, 0)
    lines += _replicated_jobs_lines(replicated_jobs, 0)
    return "\n".join(lines) + "\n"


def render_trainjob(replicated_jobs: tuple[str, ...], max_restarts: int = DEFAULT_MAX_RESTARTS) -> str:
    jobset_fragment(replicated_jobs, max_restarts)
    lines = _comment(list(HEADER), 0)
    lines += _comment(
        [
            "A TrainJob cannot carry these policies: its (Cluster)TrainingRuntime's JobSet template can.",
            "Paste under the runtime's spec.template.spec (a JobSet spec); every TrainJob using the runtime gets",
            f"them. '{DEFAULT_TRAINJOB_REPLICATED_JOB}' is the trainer step of the torch-distributed runtime; "
            "name your runtime's replicatedJobs with --replicated-job (initializers too, if it has them).",
            "",
            *ONEXITCODES_WARNING,
        ],
        0,
    )
    lines += _failure_policy_lines(max_restarts, 0)
    lines += _replicated_jobs_lines(replicated_jobs, 0)
    return "\n".join(lines) + "\n"


PYTORCHJOB_NOTE = (
    "podmortem policy: a PyTorchJob (kubeflow.org/v1) has no hook for a retry policy: the training operator\n"
    "creates its pods itself, not through batch Jobs, and reads no pod condition. What it has: the verdict\n"
    "(podmortem.io/* annotations, the PodmortemRootCause condition, Events, the pod conditions) for people and\n"
    "tools to act on, runPolicy.backoffLimit, and per replica restartPolicy: ExitCode (exit codes >= 128 are\n"
    "retried, 1-127 fail the job). Kubeflow Trainer v2 (TrainJob) can: podmortem policy trainjob."
)


def render(kind: str, replicated_jobs: tuple[str, ...] = (), max_restarts: int = DEFAULT_MAX_RESTARTS) -> str:
    """The YAML `podmortem policy KIND` prints."""
    if kind == "job":
        return render_job()
    if kind == "jobset":
        return render_jobset(replicated_jobs or (DEFAULT_JOBSET_REPLICATED_JOB,), max_restarts)
    if kind == "trainjob":
        return render_trainjob(replicated_jobs or (DEFAULT_TRAINJOB_REPLICATED_JOB,), max_restarts)
    raise ValueError(f"unknown kind {kind!r}: job, jobset or trainjob")


def fragment(kind: str, replicated_jobs: tuple[str, ...] = (), max_restarts: int = DEFAULT_MAX_RESTARTS) -> JSON:
    """The data `render(kind, ...)` prints (what its YAML loads to)."""
    if kind == "job":
        return job_fragment()
    default = DEFAULT_JOBSET_REPLICATED_JOB if kind == "jobset" else DEFAULT_TRAINJOB_REPLICATED_JOB
    if kind in ("jobset", "trainjob"):
        return jobset_fragment(replicated_jobs or (default,), max_restarts)
    raise ValueError(f"unknown kind {kind!r}: job, jobset or trainjob")
