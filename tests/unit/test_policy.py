"""`podmortem policy`: what it prints is valid where it goes (Kubernetes' Job schema, JobSet's API schema and
webhook rules), says what it does in comments, and loads to exactly the data the webhook injects."""

from __future__ import annotations

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
from support.kube_admission import default_job, validate_job

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
