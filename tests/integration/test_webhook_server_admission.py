"""The retry-policy webhook on what the API server really sends it and really accepts from it.

The emulator models the API server's create path for batch Jobs (tests/support/kube_admission.py: decode and
default, then mutating webhooks, then validation); the real webhook serves HTTPS and the official
`kubernetes` client creates the objects. A JobSet's Job template is defaulted and validated when the JobSet
controller creates its child Jobs, so those Jobs are created through the same path.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import trustme
import yaml
from support.common import free_port
from support.kube_admission import child_job, default_job, validate_job
from support.kube_emulator import JOBS, JOBSETS, EmulatorHandle, Webhook
from support.webhooks import RETRY_POLICY_RESOURCES, register_jobset_defaults, register_retry_policy, webhook_server

from podmortem.core import names
from podmortem.k8s import policy
from podmortem.webhook.server import WebhookServer

NS = "team-a"
OPT_IN = {names.RETRY_POLICY_LABEL: names.RETRY_POLICY_ENABLED}
POD = {"restartPolicy": "Never", "containers": [{"name": "pytorch", "image": "x"}]}


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def webhook(ca: trustme.CA, tmp_path: Path, kube_api: EmulatorHandle) -> AsyncIterator[WebhookServer]:
    async with webhook_server(ca, tmp_path) as srv:
        register_retry_policy(kube_api, srv, ca)
        yield srv


@pytest.fixture
def client(kube_api: EmulatorHandle, tmp_path: Path) -> Iterator[kubernetes.client.ApiClient]:
    path = str(kube_api.kubeconfig(tmp_path / "kubeconfig"))
    api = kubernetes.config.new_client_from_config(path)  # type: ignore[no-untyped-call]
    yield api
    api.close()


def job(name: str = "ddp", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": dict(OPT_IN)},
        "spec": {"completions": 2, "parallelism": 2, "completionMode": "Indexed",
                 "template": {"spec": copy.deepcopy(POD)}, **spec},
    }  # fmt: skip


def jobset(replacement: str | None = None) -> dict[str, Any]:
    job_spec: dict[str, Any] = {"completions": 2, "parallelism": 2, "template": {"spec": copy.deepcopy(POD)}}
    if replacement is not None:
        job_spec["podReplacementPolicy"] = replacement
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": NS, "labels": dict(OPT_IN)},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": job_spec}}]},
    }


async def create_job(client: kubernetes.client.ApiClient, body: dict[str, Any]) -> Any:
    batch = kubernetes.client.BatchV1Api(client)
    return await asyncio.to_thread(batch.create_namespaced_job, NS, body)  # type: ignore[arg-type]  # a dict body


def refused(exc: pytest.ExceptionInfo[kubernetes.client.ApiException]) -> str:
    assert exc.value.status == 422, exc.value.body
    return str(exc.value.body)


# -- the emulator's model of the API server, on its own -----------------------------------------------


def test_the_model_defaults_as_set_defaults_job_does() -> None:
    bare = {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}
    out = default_job(bare)["spec"]
    assert (out["completions"], out["parallelism"], out["backoffLimit"]) == (1, 1, 6)
    assert (out["completionMode"], out["suspend"], out["manualSelector"]) == ("NonIndexed", False, False)
    assert out["podReplacementPolicy"] == "TerminatingOrFailed"
    assert out["template"]["spec"]["restartPolicy"] == "Always"
    with_policy = default_job({"spec": {"podFailurePolicy": {"rules": [{"action": "Ignore", "onPodConditions": [
        {"type": "DisruptionTarget"}]}]}, "template": {"spec": {}}}})["spec"]  # fmt: skip
    assert with_policy["podReplacementPolicy"] == "Failed"
    assert with_policy["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"] == "True"
    assert "podReplacementPolicy" not in default_job(bare, replacement_policy_gate=False)["spec"]
    per_index = default_job({"spec": {"backoffLimitPerIndex": 1, "template": {}}})["spec"]
    assert per_index["backoffLimit"] == 2**31 - 1


def test_the_model_validates_what_podmortem_writes() -> None:
    assert validate_job(default_job(job())) == []
    ours = default_job(job(podFailurePolicy=policy.pod_failure_policy()))
    assert validate_job(ours) == []  # the generated policy, defaulted as the API server would
    errors = validate_job(dict(ours, spec=dict(ours["spec"], podReplacementPolicy="TerminatingOrFailed")))
    assert errors == ['spec.podReplacementPolicy: Unsupported value: "TerminatingOrFailed": supported values: "Failed"']
    on_failure = default_job(job(podFailurePolicy=policy.pod_failure_policy()))
    on_failure["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    assert any('only "Never" is supported when podFailurePolicy' in e for e in validate_job(on_failure))
    unset = default_job({"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}})
    assert validate_job(unset) == [
        'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"'
    ]
    bad_rules = {"rules": [
        {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3, 0, 3]}},
        {"action": "Ignore", "onPodConditions": [{"type": "bad type!", "status": "Maybe"}]},
        {"action": "Count", "onExitCodes": {"operator": "In", "values": [1], "containerName": "nope"}},
        {"action": "Count"},
    ]}  # fmt: skip
    text = "\n".join(validate_job(default_job(job(podFailurePolicy=bad_rules))))
    for expected in ("requires the backoffLimitPerIndex", "must not be 0 for the In operator", "Duplicate value",
                     "must be ordered", "must be a qualified name", 'Unsupported value: "Maybe"',
                     "must be one of the container", "specifying one of OnExitCodes and OnPodConditions"):  # fmt: skip
        assert expected in text, expected


# -- the webhook through the API server's create path ------------------------------------------------


async def test_an_opted_in_job_is_admitted_with_the_policy(
    kube_api: EmulatorHandle, webhook: WebhookServer, client: kubernetes.client.ApiClient
) -> None:
    await create_job(client, job())
    [review] = kube_api.emulator.reviews
    received = review["request"]["object"]["spec"]
    assert received["podReplacementPolicy"] == "TerminatingOrFailed"  # defaulted before mutating admission
    stored = kube_api.get(JOBS, NS, "ddp")
    assert stored is not None
    assert stored["spec"]["podFailurePolicy"] == policy.pod_failure_policy()
    assert stored["spec"]["podReplacementPolicy"] == "Failed"
    assert stored["metadata"]["annotations"][names.RETRY_POLICY_ADDED_ANNOTATION] == "0.1.0"


@pytest.mark.parametrize("explicit", ["TerminatingOrFailed", "Failed"])
async def test_an_explicit_replacement_policy_becomes_failed_with_ours(
    kube_api: EmulatorHandle, webhook: WebhookServer, client: kubernetes.client.ApiClient, explicit: str
) -> None:
    await create_job(client, job(podReplacementPolicy=explicit))
    stored = kube_api.get(JOBS, NS, "ddp")
    assert stored is not None and stored["spec"]["podReplacementPolicy"] == "Failed"
    assert stored["spec"]["podFailurePolicy"] == policy.pod_failure_policy()


async def test_a_job_left_alone_keeps_its_replacement_policy(
    kube_api: EmulatorHandle, webhook: WebhookServer, client: kubernetes.client.ApiClient
) -> None:
    on_failure = job()
    on_failure["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    await create_job(client, on_failure)
    stored = kube_api.get(JOBS, NS, "ddp")
    assert stored is not None and stored["spec"]["podReplacementPolicy"] == "TerminatingOrFailed"
    assert "podFailurePolicy" not in stored["spec"]


async def test_the_api_server_refuses_what_the_webhook_cannot_fix(
    webhook: WebhookServer, client: kubernetes.client.ApiClient
) -> None:
    own = job(podFailurePolicy=policy.pod_failure_policy(), podReplacementPolicy="TerminatingOrFailed")
    with pytest.raises(kubernetes.client.ApiException) as exc:
        await create_job(client, own)  # the user's own policy is never touched: the API refuses it as written
    assert 'spec.podReplacementPolicy: Unsupported value: \\"TerminatingOrFailed\\"' in refused(exc)


@pytest.mark.parametrize("replacement", [None, "TerminatingOrFailed", "Failed"])
async def test_a_jobsets_child_jobs_are_admitted(
    kube_api: EmulatorHandle,
    webhook: WebhookServer,
    client: kubernetes.client.ApiClient,
    replacement: str | None,
) -> None:
    custom = kubernetes.client.CustomObjectsApi(client)
    await asyncio.to_thread(
        custom.create_namespaced_custom_object, "jobset.x-k8s.io", "v1alpha2", NS, "jobsets", jobset(replacement)
    )
    stored = kube_api.get(JOBSETS, NS, "llm")
    assert stored is not None and names.RETRY_POLICY_ADDED_ANNOTATION in stored["metadata"]["annotations"]
    for index in range(2):
        await create_job(client, child_job(stored, "workers", index))  # as the JobSet controller creates them
    for index in range(2):
        child = kube_api.get(JOBS, NS, f"llm-workers-{index}")
        assert child is not None
        assert child["spec"]["podReplacementPolicy"] == "Failed"
        assert child["spec"]["podFailurePolicy"] == policy.pod_failure_policy()
    # The children are the JobSet's: the webhook saw them and left them alone.
    assert [r["request"]["kind"]["kind"] for r in kube_api.emulator.reviews] == ["JobSet", "Job", "Job"]


async def test_a_jobset_defaulted_by_jobsets_own_webhook_first_still_gets_the_policy(
    kube_api: EmulatorHandle, webhook: WebhookServer, client: kubernetes.client.ApiClient
) -> None:
    """JobSet's webhook (configuration `jobset-mutating-webhook-configuration`) runs before ours
    (`podmortem-webhook`) and turns each unset pod restartPolicy into OnFailure, which a podFailurePolicy
    does not allow: ours sees OnFailure, cannot tell it from the user's, and writes Never."""
    register_jobset_defaults(kube_api)
    unset = jobset()
    for rj in unset["spec"]["replicatedJobs"]:
        del rj["template"]["spec"]["template"]["spec"]["restartPolicy"]
    custom = kubernetes.client.CustomObjectsApi(client)
    await asyncio.to_thread(custom.create_namespaced_custom_object, "jobset.x-k8s.io", "v1alpha2", NS, "jobsets", unset)
    [review] = kube_api.emulator.reviews  # ours; JobSet's own is a model, called in-process
    received = review["request"]["object"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert received["template"]["spec"]["restartPolicy"] == "OnFailure"
    stored = kube_api.get(JOBSETS, NS, "llm")
    assert stored is not None and stored["spec"]["failurePolicy"] == policy.jobset_failure_policy(3)
    await create_job(client, child_job(stored, "workers", 0))
    child = kube_api.get(JOBS, NS, "llm-workers-0")
    assert child is not None and child["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert child["spec"]["completionMode"] == "Indexed"  # JobSet's default, kept


@pytest.mark.parametrize(("failure_policy", "status"), [("Ignore", 201), ("Fail", 500)])
async def test_an_unreachable_webhook_follows_its_failure_policy(
    kube_api: EmulatorHandle, client: kubernetes.client.ApiClient, failure_policy: str, status: int
) -> None:
    """The emulator's side of the chart's `webhook.failurePolicy`: Ignore admits the Job as defaulted."""
    hook = Webhook("podmortem-webhook", f"https://127.0.0.1:{free_port()}/mutate", RETRY_POLICY_RESOURCES,
                   failure_policy=failure_policy, timeout=2.0)  # fmt: skip
    kube_api.register_webhook(hook)
    if status == 500:
        with pytest.raises(kubernetes.client.ApiException) as exc:
            await create_job(client, job())
        assert exc.value.status == 500 and 'failed calling webhook \\"podmortem-webhook\\"' in str(exc.value.body)
        assert kube_api.get(JOBS, NS, "ddp") is None
        return
    await create_job(client, job())
    stored = kube_api.get(JOBS, NS, "ddp")
    assert stored is not None and "podFailurePolicy" not in stored["spec"]
    assert stored["spec"]["podReplacementPolicy"] == "TerminatingOrFailed"  # defaulted, nothing added


# -- `podmortem policy` pasted by hand (no webhook): the API server admits what it prints ---------------


def pasted(spec: dict[str, Any], printed: str) -> dict[str, Any]:
    """A spec with the printed fragment pasted under it, in place of the same keys (as the fragment says)."""
    return {**spec, **yaml.safe_load(printed)}


@pytest.mark.parametrize("replacement", [None, "TerminatingOrFailed", "Failed"])
async def test_the_printed_job_fragment_pasted_into_a_job_is_admitted(
    kube_api: EmulatorHandle, client: kubernetes.client.ApiClient, replacement: str | None
) -> None:
    """A Job of the user's own, its `podReplacementPolicy` unset, `TerminatingOrFailed` or `Failed`: with the
    printed fragment pasted in, the API server's create path (defaulting, validation) admits it."""
    mine = job(**({"podReplacementPolicy": replacement} if replacement else {}))
    mine["metadata"]["labels"] = {}  # not opted in: no webhook anyway
    mine["spec"] = pasted(mine["spec"], policy.render("job"))
    await create_job(client, mine)
    stored = kube_api.get(JOBS, NS, "ddp")
    assert stored is not None and stored["spec"]["podFailurePolicy"] == policy.pod_failure_policy()
    assert stored["spec"]["podReplacementPolicy"] == "Failed"


@pytest.mark.parametrize("replacement", [None, "TerminatingOrFailed"])
async def test_the_printed_jobset_fragment_gives_admissible_child_jobs(
    kube_api: EmulatorHandle, client: kubernetes.client.ApiClient, replacement: str | None
) -> None:
    """Each replicatedJob merged with the printed one of its name: the child Jobs the JobSet controller makes
    of it pass the API server's create path."""
    mine = jobset(replacement)
    mine["metadata"]["labels"] = {}
    printed = yaml.safe_load(policy.render("jobset"))
    ours = {rj["name"]: rj["template"]["spec"] for rj in printed["replicatedJobs"]}
    mine["spec"]["failurePolicy"] = printed["failurePolicy"]
    for rj in mine["spec"]["replicatedJobs"]:
        spec = rj["template"]["spec"]
        template = spec["template"]
        spec.update(ours[rj["name"]])
        spec["template"] = {**template, "spec": {**template["spec"], **ours[rj["name"]]["template"]["spec"]}}
    custom = kubernetes.client.CustomObjectsApi(client)
    await asyncio.to_thread(custom.create_namespaced_custom_object, "jobset.x-k8s.io", "v1alpha2", NS, "jobsets", mine)
    stored = kube_api.get(JOBSETS, NS, "llm")
    assert stored is not None
    await create_job(client, child_job(stored, "workers", 0))
    child = kube_api.get(JOBS, NS, "llm-workers-0")
    assert child is not None and child["spec"]["podReplacementPolicy"] == "Failed"
