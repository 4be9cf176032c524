"""The webhook's opt-in retry policy: added only where the user has none, never merged into theirs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import jsonschema
import kubernetes_validate
import pytest

from podmortem.core import names
from podmortem.k8s import policy
from podmortem.webhook import retrypolicy
from podmortem.webhook.retrypolicy import mutate_job, mutate_jobset

SUBSCHEMAS = Path(__file__).parent.parent / "fixtures" / "jobset" / "jobset-v1alpha2-schema.json"
OPT_IN = {names.RETRY_POLICY_LABEL: names.RETRY_POLICY_ENABLED}


def job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ddp", "namespace": "team-a", "labels": dict(OPT_IN)},
        "spec": {
            "completions": 2,
            "parallelism": 2,
            "completionMode": "Indexed",
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "pytorch", "image": "x"}]}},
            **spec,
        },
    }


def jobset(restart: str | None = None, **spec: Any) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [{"name": "pytorch", "image": "x"}]}
    if restart is not None:
        pod_spec["restartPolicy"] = restart
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": "team-a", "labels": dict(OPT_IN)},
        "spec": {
            "replicatedJobs": [
                {"name": name, "replicas": 2, "template": {"spec": {"template": {"spec": copy.deepcopy(pod_spec)}}}}
                for name in ("leader", "workers")
            ],
            **spec,
        },
    }


def apply(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(jsonpatch.apply_patch(obj, patch))


def test_an_opted_in_job_gets_the_rules_and_stays_valid() -> None:
    patch, outcome, _ = mutate_job(job(), "1.2.3")
    assert outcome == retrypolicy.ADDED
    out = apply(job(), patch)
    assert out["spec"]["podFailurePolicy"] == policy.pod_failure_policy()
    assert out["metadata"]["annotations"][names.RETRY_POLICY_ADDED_ANNOTATION] == "1.2.3"
    kubernetes_validate.validate(out, "1.33.0", strict=True)
    assert out["spec"]["podReplacementPolicy"] == "Failed"
    assert {op["path"] for op in patch} <= {
        "/spec/podFailurePolicy",
        "/spec/podReplacementPolicy",
        "/metadata/annotations",
    }


def test_a_jobs_own_policy_is_never_touched() -> None:
    own = {"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [42]}}]}
    patch, outcome, reason = mutate_job(job(podFailurePolicy=own), "1")
    assert (patch, outcome) == ([], retrypolicy.OWN_POLICY)
    assert "podFailurePolicy" in reason


def test_restart_on_failure_is_left_alone_and_said() -> None:
    j = job()
    j["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    patch, outcome, reason = mutate_job(j, "1")
    assert (patch, outcome) == ([], retrypolicy.RESTART_ON_FAILURE)
    assert "OnFailure" in reason


def test_not_opted_in_and_jobset_children_are_left_alone() -> None:
    j = job()
    del j["metadata"]["labels"][names.RETRY_POLICY_LABEL]
    assert mutate_job(j, "1")[:2] == ([], retrypolicy.NOT_OPTED_IN)
    child = job()
    child["metadata"]["labels"][names.JOBSET_NAME] = "llm"
    assert mutate_job(child, "1")[:2] == ([], retrypolicy.JOBSET_CHILD)


def test_an_opted_in_jobset_gets_failure_policy_max_restarts_and_child_rules() -> None:
    original = jobset()
    patch, outcome, _ = mutate_jobset(original, "1", max_restarts=7)
    assert outcome == retrypolicy.ADDED
    out = apply(original, patch)
    assert out["spec"]["failurePolicy"] == policy.jobset_failure_policy(7)
    schemas = json.loads(SUBSCHEMAS.read_text())["schemas"]
    jsonschema.validate(out["spec"]["failurePolicy"], schemas["/properties/spec/properties/failurePolicy"])
    for rj in out["spec"]["replicatedJobs"]:  # every child Job: a victim counted anywhere races the root
        assert rj["template"]["spec"]["podFailurePolicy"] == policy.pod_failure_policy()
        assert rj["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"
        child = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "c"}, "spec": rj["template"]["spec"]}
        kubernetes_validate.validate(child, "1.33.0", strict=True)
    assert original == jobset()  # the input is not modified


@pytest.mark.parametrize(
    "make",
    [
        lambda: jobset(failurePolicy={"maxRestarts": 1}),
        lambda: _with_child_policy(jobset()),
    ],
)
def test_a_jobsets_own_policy_is_never_touched(make: Any) -> None:
    assert mutate_jobset(make(), "1", 3)[:2] == ([], retrypolicy.OWN_POLICY)


def _with_child_policy(js: dict[str, Any]) -> dict[str, Any]:
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["podFailurePolicy"] = {"rules": []}
    return js


def test_a_jobsets_on_failure_pods_become_never() -> None:
    """JobSet's webhook, called first, defaults an unset restartPolicy to OnFailure: indistinguishable from
    the user's, and a podFailurePolicy needs Never."""
    patch, outcome, reason = mutate_jobset(jobset("OnFailure"), "1", 3)
    assert outcome == retrypolicy.ADDED and "restartPolicy OnFailure" in reason
    for rj in apply(jobset("OnFailure"), patch)["spec"]["replicatedJobs"]:
        assert rj["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert mutate_jobset(jobset("Never"), "1", 3)[1:] == (retrypolicy.ADDED, "")
    assert mutate_jobset(jobset("Always"), "1", 3)[1] == retrypolicy.UNSUPPORTED


def test_malformed_objects_are_unsupported_not_errors() -> None:
    assert mutate_jobset({"metadata": {"labels": OPT_IN}}, "1", 3)[1] == retrypolicy.UNSUPPORTED
    assert mutate_jobset({"metadata": {"labels": OPT_IN}, "spec": {"replicatedJobs": ["x"]}}, "1", 3)[1] == (
        retrypolicy.UNSUPPORTED
    )
    assert mutate_job({"metadata": {"labels": OPT_IN}}, "1")[1] == retrypolicy.UNSUPPORTED


def test_objects_a_controller_keeps_are_left_alone() -> None:
    """A TrainJob's JobSet (its trainer applies the spec again; failurePolicy is immutable) is left alone; a
    CronJob's Job is not (the CronJob creates it once)."""
    trainer = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": "t",
        "uid": "u",
        "controller": True,
    }
    owned = jobset()
    owned["metadata"]["ownerReferences"] = [trainer]
    patch, outcome, reason = mutate_jobset(owned, "1", 3)
    assert (patch, outcome) == ([], retrypolicy.OWNED) and "TrainJob/t" in reason
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "u", "controller": True}
    scheduled = job()
    scheduled["metadata"]["ownerReferences"] = [cron]
    assert mutate_job(scheduled, "1")[1] == retrypolicy.ADDED
    other = job()
    other["metadata"]["ownerReferences"] = [dict(trainer, kind="MPIJob")]
    assert mutate_job(other, "1")[1] == retrypolicy.OWNED
