"""The policy `podmortem policy` prints, applied to pods as they stood when their sidecars exited, by the Job
and JobSet controllers' documented rules (tests/support/job_controllers.py, sources in docs/retries.md).

What must hold: one incident charges the retry budget at most once (its victims are Ignored, whatever order
the pods end in); a permanent root cause fails the Job (and the JobSet) at once; retries stay bounded; a
pod the aggregator could not mark falls back to Kubernetes' default; the native sidecar's exit code cannot
decide for a pod podmortem marked; and a victim must be Ignored in every child Job of a JobSet.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from support.job_controllers import JobModel, JobSetModel, condition, match_pod_failure_policy, pod

from podmortem.core import conditions
from podmortem.k8s import policy

VICTIM = condition(conditions.VICTIM, "Victim")
PERMANENT = condition(conditions.PERMANENT, "UserCode")
RETRYABLE = condition(conditions.RETRYABLE, "Hardware")
DISRUPTED = condition("DisruptionTarget", "DeletionByPodGC")

JSON = dict[str, Any]


def incident(root: JSON, attempt: int = 0, size: int = 4) -> list[JSON]:
    """The pods of one failed attempt of a 4-pod indexed Job: the root (rank 0) and its victims."""
    root_pod = pod(f"ddp-{attempt}-0", exit_code=1, conditions=(root,))
    if root is DISRUPTED:  # its node vanished: no sidecar status, no podmortem condition
        root_pod = pod(f"ddp-{attempt}-0", exit_code=137, conditions=(root,), sidecar_exit=None)
    victims = [pod(f"ddp-{attempt}-{i}", exit_code=1, conditions=(VICTIM,)) for i in range(1, size)]
    return [root_pod, *victims]


def job_with_policy(backoff_limit: int = 3) -> JobModel:
    return JobModel("ddp", policy.pod_failure_policy(), backoff_limit=backoff_limit)


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_a_permanent_root_cause_fails_the_job_whatever_order_the_pods_end_in(order: tuple[int, ...]) -> None:
    pods = incident(PERMANENT)
    job = job_with_policy()
    for i in order:
        job.observe(pods[i])
    assert job.failure_target is not None
    reason, message = job.failure_target
    assert reason == "PodFailurePolicy"
    assert "has condition podmortem.io/PermanentFailure matching FailJob rule at index 1" in message
    assert job.failed == 0  # no victim was counted on the way


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_a_retryable_incident_charges_the_budget_once(order: tuple[int, ...]) -> None:
    pods = incident(RETRYABLE)
    job = job_with_policy()
    for i in order:
        job.observe(pods[i])
    assert (job.failed, job.ignored, job.failure_target) == (1, 3, None)


def test_without_the_policy_one_incident_charges_every_pod() -> None:
    """The pain this fixes: Kubernetes' default counts each victim, so one bug spends the whole budget."""
    job = JobModel("ddp", None, backoff_limit=3)
    for p in incident(RETRYABLE):
        job.observe(p)
    assert job.failed == 4
    assert job.failure_target is not None and job.failure_target[0] == "BackoffLimitExceeded"


def test_retries_stay_bounded_by_the_backoff_limit() -> None:
    """Retryable is Count, not Ignore: a hardware fault that recurs ends the Job after backoffLimit + 1."""
    job = job_with_policy(backoff_limit=3)
    for attempt in range(4):
        assert job.failure_target is None
        for p in incident(RETRYABLE, attempt):
            job.observe(p)
    assert job.failed == 4
    assert job.failure_target == ("BackoffLimitExceeded", "Job has reached the specified backoff limit")


def test_a_root_on_a_vanished_node_is_counted_once_through_disruption_target() -> None:
    job = job_with_policy()
    for p in incident(DISRUPTED):
        job.observe(p)
    assert (job.failed, job.ignored, job.failure_target) == (1, 3, None)
    assert match_pod_failure_policy(policy.pod_failure_policy(), incident(DISRUPTED)[0])[0] == "Count"


def test_a_pod_without_a_condition_gets_kubernetes_default() -> None:
    """Aggregator unreachable, or a failure that cannot be told from an echo: counted, as with no policy."""
    unmarked = pod("ddp-0-0", exit_code=1)
    assert match_pod_failure_policy(policy.pod_failure_policy(), unmarked) == (None, None)
    job = job_with_policy()
    job.observe(unmarked)
    assert job.failed == 1


def test_a_condition_written_after_the_pod_is_terminal_comes_too_late() -> None:
    """Why the sidecar holds the pod: the controller decides on the conditions the pod has when it is Failed."""
    job = job_with_policy()
    late = pod("ddp-0-1", exit_code=1)  # Failed, Victim not yet written
    job.observe(late)
    late["status"]["conditions"].append(VICTIM)
    job.observe(late)  # a pod is accounted once
    assert (job.failed, job.ignored) == (1, 0)


def test_a_still_running_pod_is_not_failed_yet() -> None:
    """A pod whose native sidecar still runs has phase Running (kubelet getPhase): nothing is decided."""
    job = job_with_policy()
    held = pod("ddp-0-0", exit_code=1, conditions=(PERMANENT,), phase="Running")
    assert job.observe(held) is None
    assert job.failure_target is None


USERS_OOM_RULE = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [137]}}  # no containerName


def test_our_rules_first_keep_the_sidecars_exit_code_from_deciding() -> None:
    """A sidecar killed at the end of its grace exits 137; a user's '137 -> FailJob' rule below ours never sees
    a pod podmortem marked. Above ours, it fails the Job on a victim: the warning `podmortem policy` prints."""
    victim = pod("ddp-0-2", exit_code=1, conditions=(VICTIM,), sidecar_exit=137)
    ours_first = {"rules": [*policy.pod_failure_policy()["rules"], USERS_OOM_RULE]}
    assert match_pod_failure_policy(ours_first, victim) == ("Ignore", None)
    theirs_first = {"rules": [USERS_OOM_RULE, *policy.pod_failure_policy()["rules"]]}
    action, message = match_pod_failure_policy(theirs_first, victim)
    assert action == "FailJob"
    assert message is not None and message.startswith("Container podmortem-sidecar for pod team-a/ddp-0-2")


# -- JobSet: two replicated Jobs of two pods each; the root is in the first ------------------------------

Step = int


def run_jobset(jobset: JobSetModel, schedule: dict[str, tuple[JobModel, list[tuple[Step, JSON]]]]) -> str:
    """Pods turn terminal at their step, in the kubelet's order (the root first, held victims later); after
    each step every child Job syncs, then the JobSet reconciles. Returns the JobSet's outcome."""
    last = max(step for _, pods in schedule.values() for step, _ in pods)
    for step in range(1, last + 1):
        for job, pods in schedule.values():
            for at, p in pods:
                if at == step:
                    job.observe(p)
            job.settle(step, pods_still_running=any(at > step for at, _ in pods))
        if jobset.reconcile([job for job, _ in schedule.values()]) != "Running":
            return jobset.outcome
    return jobset.outcome


def child(name: str, pod_policy: JSON | None) -> JobModel:
    return JobModel(name, pod_policy, backoff_limit=0, replicated_job=name.split("-")[0])


def jobset_incident(root: JSON, policy_b: JSON | None, attempt: int = 0) -> dict[str, tuple[JobModel, list[Any]]]:
    """a-0 fails first (step 1); its victims end while held: b-0 and b-1 at step 2, a-1 at step 3."""
    pods = policy.pod_failure_policy()
    a, b = child("a-0", pods), child("b-0", policy_b)
    return {
        "a": (
            a,
            [
                (1, pod(f"a-{attempt}-0", exit_code=1, conditions=(root,))),
                (3, pod(f"a-{attempt}-1", exit_code=1, conditions=(VICTIM,))),
            ],
        ),
        "b": (
            b,
            [
                (2, pod(f"b-{attempt}-0", exit_code=1, conditions=(VICTIM,))),
                (2, pod(f"b-{attempt}-1", exit_code=1, conditions=(VICTIM,))),
            ],
        ),
    }


def test_a_permanent_root_fails_the_jobset_through_the_message_pattern() -> None:
    jobset = JobSetModel(policy.jobset_failure_policy(max_restarts=3))
    assert run_jobset(jobset, jobset_incident(PERMANENT, policy.pod_failure_policy())) == "Failed"
    assert jobset.matched_rule == "PodmortemPermanentFailure"
    assert jobset.restarts == 0


def test_a_victim_counted_in_its_own_job_restarts_the_jobset_before_the_root_is_seen() -> None:
    """The FailureTarget-then-Failed race: without the Victim rule in job b, b fails (BackoffLimitExceeded)
    at step 2 while a, whose root was permanent, is only FailureTarget until its held victim ends at step 3."""
    jobset = JobSetModel(policy.jobset_failure_policy(max_restarts=3))
    assert run_jobset(jobset, jobset_incident(PERMANENT, None)) == "Restarted"
    assert jobset.matched_rule == "PodmortemRetryable"


def test_a_retryable_incident_restarts_the_jobset_once_and_restarts_stay_bounded() -> None:
    jobset = JobSetModel(policy.jobset_failure_policy(max_restarts=2))
    outcomes = []
    for attempt in range(3):
        jobset.outcome = "Running"
        outcomes.append(run_jobset(jobset, jobset_incident(RETRYABLE, policy.pod_failure_policy(), attempt)))
        if attempt < 2:
            assert jobset.restarts == attempt + 1  # one restart per incident, not one per failed pod or Job
    assert outcomes == ["Restarted", "Restarted", "Failed"]


def test_a_jobset_without_a_failure_policy_fails_on_its_first_child_failure() -> None:
    """JobSet's default, which adding a failurePolicy changes: why maxRestarts is always written out."""
    jobset = JobSetModel(None)
    assert run_jobset(jobset, jobset_incident(RETRYABLE, policy.pod_failure_policy())) == "Failed"


REPEATED = condition(conditions.PERMANENT, "RepeatedFailure")


def test_a_repeated_failure_stops_the_jobset_with_the_policy_as_generated() -> None:
    """A retryable cause that repeats is written as PermanentFailure with reason RepeatedFailure
    (`core.repeats`): the same condition type, so the printed policy needs no rule of its own. Attempt 0
    (RetryableFailure) restarts the JobSet; attempt 1 (RepeatedFailure) fails it, with restarts to spare."""
    jobset = JobSetModel(policy.jobset_failure_policy(max_restarts=3))
    assert run_jobset(jobset, jobset_incident(RETRYABLE, policy.pod_failure_policy(), 0)) == "Restarted"
    jobset.outcome = "Running"
    assert run_jobset(jobset, jobset_incident(REPEATED, policy.pod_failure_policy(), 1)) == "Failed"
    assert (jobset.matched_rule, jobset.restarts) == ("PodmortemPermanentFailure", 1)
    job = job_with_policy()
    for p in incident(REPEATED):
        job.observe(p)
    assert job.failure_target is not None and job.failure_target[0] == "PodFailurePolicy"
    assert all("RepeatedFailure" not in str(rule) for rule in policy.pod_failure_policy()["rules"])
