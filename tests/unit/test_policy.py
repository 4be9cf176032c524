"""`podmortem policy`: what it prints is valid where it goes (Kubernetes' Job schema, JobSet's API schema and
webhook rules), says what it does in comments, and loads to exactly the data the webhook injects.

The policy `podmortem policy` prints, applied to pods as they stood when their sidecars exited, by the Job
and JobSet controllers' documented rules (tests/support/job_controllers.py, sources in docs/retries.md).

What must hold: one incident charges the retry budget at most once (its victims are Ignored, whatever order
the pods end in); a permanent root cause fails the Job (and the JobSet) at once; retries stay bounded; a
pod the aggregator could not mark falls back to Kubernetes' default; the native sidecar's exit code cannot
decide for a pod podmortem marked; and a victim must be Ignored in every child Job of a JobSet.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import re2
import yaml
from support.job_controllers import JobModel, JobSetModel, condition, match_pod_failure_policy, pod
from support.kube_admission import default_job, validate_job

from podmortem.core import names
from podmortem.k8s import policy

SUBSCHEMAS = Path(__file__).parent.parent / "fixtures" / "jobset" / "jobset-v1alpha2-schema.json"
SPEC = "/properties/spec/properties"
REPLICATED = SPEC + "/replicatedJobs/items/properties"
JOB_SPEC = REPLICATED + "/template/properties/spec/properties"
# JobSet's webhook (pkg/webhooks/jobset_webhook.go, v0.12.0) checks what the API types' schema does not.
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
JOB_FAILURE_REASONS = {
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podmortem.cli", *args], capture_output=True, text=True, timeout=60)


def schema(pointer: str) -> dict[str, Any]:
    return dict(json.loads(SUBSCHEMAS.read_text())["schemas"][pointer])


def job(spec_extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ddp", "namespace": "team-a"},
        "spec": {
            "completions": 4,
            "parallelism": 4,
            "completionMode": "Indexed",
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "pytorch", "image": "x"}]}},
            **spec_extra,
        },
    }


@pytest.mark.parametrize("kind", ["job", "jobset", "trainjob"])
def test_the_printed_yaml_is_the_fragment(kind: str) -> None:
    result = run("policy", kind)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout) == policy.fragment(kind)
    assert "onExitCodes rule without containerName" in result.stdout  # the sidecar's exit-code trap


def test_the_job_fragment_is_a_valid_job_spec_with_our_rules_first() -> None:
    fragment = yaml.safe_load(run("policy", "job").stdout)
    assert list(fragment) == ["podReplacementPolicy", "podFailurePolicy"]
    kubernetes_validate.validate(job(fragment), "1.33.0", strict=True)
    # What a schema cannot see: the API server's defaulting and cross-field validation (support.kube_admission).
    assert validate_job(default_job(job(fragment))) == []
    # Pasted over a Job's own TerminatingOrFailed, the fragment's Failed replaces it: the rules alone are refused.
    assert validate_job(default_job(job({"podReplacementPolicy": "TerminatingOrFailed", **fragment}))) == []
    rules_only = {"podFailurePolicy": fragment["podFailurePolicy"], "podReplacementPolicy": "TerminatingOrFailed"}
    assert validate_job(default_job(job(rules_only))) == [
        'spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported values: "Failed"'
    ]
    rules = fragment["podFailurePolicy"]["rules"]
    assert [(r["action"], r["onPodConditions"][0]["type"]) for r in rules] == [
        ("Ignore", "podmortem.io/Victim"),
        ("FailJob", "podmortem.io/PermanentFailure"),
        ("Count", "podmortem.io/RetryableFailure"),
        ("Count", "DisruptionTarget"),
    ]
    assert all(r["onPodConditions"] == [{"type": r["onPodConditions"][0]["type"], "status": "True"}] for r in rules)


@pytest.mark.parametrize("version", ["1.29.0", "1.31.0", "1.35.0", "1.37.0"])
def test_the_job_fragment_is_valid_on_every_supported_kubernetes(version: str) -> None:
    """Native sidecars are on by default from 1.29; podFailurePolicy is GA from 1.31."""
    kubernetes_validate.validate(job(policy.job_fragment()), version, strict=True)


def test_every_rule_is_explained_by_a_comment_above_it() -> None:
    text = run("policy", "job").stdout.splitlines()
    for i, line in enumerate(text):
        if line.strip().startswith("- action:"):
            assert text[i - 1].strip().startswith("#"), f"rule at line {i + 1} has no comment"


@pytest.mark.parametrize("kind", ["jobset", "trainjob"])
def test_the_jobset_fragment_validates_against_the_jobset_schema(kind: str) -> None:
    fragment = yaml.safe_load(run("policy", kind, "--max-restarts", "5").stdout)
    jsonschema.validate(fragment["failurePolicy"], schema(SPEC + "/failurePolicy"))
    assert fragment["failurePolicy"]["maxRestarts"] == 5  # explicit: adding a failurePolicy changes the default
    for rule in fragment["failurePolicy"]["rules"]:
        assert RULE_NAME.match(rule["name"]) and len(rule["name"]) <= 128
        assert set(rule.get("onJobFailureReasons", [])) <= JOB_FAILURE_REASONS
        for pattern in rule.get("onJobFailureMessagePatterns", []):
            re2.compile(pattern)  # JobSet compiles them with Go's RE2
    for replicated in fragment["replicatedJobs"]:
        jsonschema.validate(replicated["name"], schema(REPLICATED + "/name"))
        job_spec = replicated["template"]["spec"]
        jsonschema.validate(job_spec["podFailurePolicy"], schema(JOB_SPEC + "/podFailurePolicy"))
        restart = job_spec["template"]["spec"]["restartPolicy"]
        jsonschema.validate(restart, schema(JOB_SPEC + "/template/properties/spec/properties/restartPolicy"))
        # ... and the child Job the JobSet controller creates from it is a valid batch/v1 Job.
        kubernetes_validate.validate(job({"podFailurePolicy": job_spec["podFailurePolicy"]}), "1.33.0", strict=True)


def test_a_bad_rule_fails_the_jobset_schema() -> None:
    """The schema check can fail: an action JobSet does not know is refused."""
    bad = policy.jobset_failure_policy()
    bad["rules"][0]["action"] = "FailJob"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema(SPEC + "/failurePolicy"))


def test_the_message_pattern_matches_the_job_controllers_failjob_message() -> None:
    """pkg/controller/job/pod_failure_policy.go: "Pod %s/%s has condition %v matching %v rule at index %d"."""
    ours = "Pod team-a/ddp-workers-0-1-x7k has condition podmortem.io/PermanentFailure matching FailJob rule at index 1"
    other = "Pod team-a/w-0-1 has condition podmortem.io/RetryableFailure matching FailJob rule at index 2"
    exit_code = "Container pytorch for pod team-a/p failed with exit code 1 matching FailJob rule at index 4"
    pattern = re2.compile(policy.PERMANENT_MESSAGE_PATTERN)
    assert pattern.search(ours)
    assert not pattern.search(other)
    assert not pattern.search(exit_code)


def test_trainjob_names_the_runtimes_replicated_jobs() -> None:
    fragment = yaml.safe_load(run("policy", "trainjob", "--replicated-job", "node", "--replicated-job", "init").stdout)
    assert [r["name"] for r in fragment["replicatedJobs"]] == ["node", "init"]
    assert "TrainingRuntime" in run("policy", "trainjob").stdout


def test_bad_arguments_are_usage_errors() -> None:
    assert run("policy", "cronjob").returncode == 2
    pytorchjob = run("policy", "pytorchjob")
    assert pytorchjob.returncode == 2 and pytorchjob.stdout == ""
    assert "restartPolicy: ExitCode" in pytorchjob.stderr and "podmortem policy trainjob" in pytorchjob.stderr
    result = run("policy", "jobset", "--max-restarts", "-1")
    assert result.returncode == 2
    assert "maxRestarts" in result.stderr
    assert result.stdout == ""


VICTIM = condition(names.VICTIM, "Victim")
PERMANENT = condition(names.PERMANENT, "UserCode")
RETRYABLE = condition(names.RETRYABLE, "Hardware")
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


REPEATED = condition(names.PERMANENT, "RepeatedFailure")


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
