"""The webhook over real HTTPS (trustme certificates): AdmissionReviews in, patches applied and schema-checked."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import kubernetes_validate
import pytest
import trustme
from support.common import eventually, free_port
from support.webhooks import client_ssl, webhook_server, write_cert

from podmortem.webhook import mutation, server
from podmortem.webhook.server import WebhookServer

FIXTURES = Path(__file__).parent.parent / "fixtures" / "admission"
REPO = Path(__file__).parent.parent.parent


def fixture(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def webhook(ca: trustme.CA, tmp_path: Path) -> AsyncIterator[WebhookServer]:
    async with webhook_server(ca, tmp_path) as srv:
        yield srv


async def post(ca: trustme.CA, port: int, body: Any) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"https://127.0.0.1:{port}/mutate",
            data=body if isinstance(body, bytes) else json.dumps(body),
            headers={"Content-Type": "application/json"},
            ssl=client_ssl(ca),
        ) as resp:
            return resp.status, dict(await resp.json())


def patched(review: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    pod = review["request"]["object"]
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"] and response["allowed"] is True
    if "patch" not in response:
        return dict(pod)
    assert response["patchType"] == "JSONPatch"
    result = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    kubernetes_validate.validate(result, "1.33.0", strict=True)
    return dict(result)


def count(srv: WebhookServer, outcome: str) -> float:
    value = srv.metrics.registry.get_sample_value("podmortem_webhook_reviews_total", {"outcome": outcome})
    return float(value or 0)


async def test_pytorchjob_pod_is_injected_and_reinvocation_changes_nothing(
    ca: trustme.CA, webhook: WebhookServer
) -> None:
    review = fixture("pytorchjob-worker")
    status, answer = await post(ca, webhook.port, review)
    assert status == 200
    pod = patched(review, answer)
    sidecar = pod["spec"]["initContainers"][-1]
    assert sidecar["name"] == "podmortem-sidecar" and sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == "example.org/podmortem:1.0"
    # The API server reinvokes the webhook with the patched pod (reinvocationPolicy IfNeeded).
    again = {**review, "request": {**review["request"], "object": pod}}
    status, answer = await post(ca, webhook.port, again)
    assert status == 200 and "patch" not in answer["response"]
    assert count(webhook, mutation.INJECTED) == 1 and count(webhook, mutation.ALREADY_INJECTED) == 1


async def test_indexed_job_pod_is_injected(ca: trustme.CA, webhook: WebhookServer) -> None:
    review = fixture("indexed-job")
    _, answer = await post(ca, webhook.port, review)
    pod = patched(review, answer)
    sidecar = next(c for c in pod["spec"]["initContainers"] if c["name"] == "podmortem-sidecar")
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["TORCHELASTIC_ERROR_FILE"]["value"] == "/ckpt/errors/error.json"
    assert env["PODMORTEM_JOB_KIND"]["value"] == "Job"


async def test_a_pod_to_leave_alone_gets_no_patch(ca: trustme.CA, webhook: WebhookServer) -> None:
    review = fixture("leave-alone")
    _, answer = await post(ca, webhook.port, review)
    assert patched(review, answer) == review["request"]["object"]
    assert answer["response"] == {"uid": review["request"]["uid"], "allowed": True}
    assert count(webhook, mutation.NOT_TRAINING) == 1


async def test_a_pod_already_injected_by_hand_gets_no_patch(ca: trustme.CA, webhook: WebhookServer) -> None:
    """A pod whose template carries the README's hand-written sidecar (per-namespace installs)."""
    review = fixture("indexed-job")
    review["request"]["object"]["spec"]["containers"].append(
        {"name": "podmortem-sidecar", "image": "example.org/podmortem:1.0", "args": ["sidecar"]}
    )
    _, answer = await post(ca, webhook.port, review)
    assert "patch" not in answer["response"]
    assert count(webhook, mutation.ALREADY_INJECTED) == 1


async def test_a_pod_it_does_not_understand_passes_unchanged_and_is_counted(
    ca: trustme.CA, webhook: WebhookServer
) -> None:
    review = fixture("pytorchjob-worker")
    review["request"]["object"]["spec"]["containers"][0]["env"].append(
        {"name": "TORCHELASTIC_ERROR_FILE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
    )
    _, answer = await post(ca, webhook.port, review)
    assert answer["response"] == {"uid": review["request"]["uid"], "allowed": True}
    assert count(webhook, mutation.UNSUPPORTED) == 1


def retry_count(srv: WebhookServer, kind: str, outcome: str) -> float:
    labels = {"kind": kind, "outcome": outcome}
    return float(srv.metrics.registry.get_sample_value("podmortem_webhook_retry_policy_total", labels) or 0)


def workload_review(obj: dict[str, Any]) -> dict[str, Any]:
    group, _, version = obj["apiVersion"].rpartition("/")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "7f0d2c4e-1111-4d3b-9c61-0c0ffee00001",
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "resource": {"group": group, "version": version, "resource": obj["kind"].lower() + "s"},
            "namespace": "team-a",
            "operation": "CREATE",
            "object": obj,
        },
    }


async def test_opted_in_job_gets_the_retry_policy_over_https(ca: trustme.CA, webhook: WebhookServer) -> None:
    pod_spec = {"restartPolicy": "Never", "containers": [{"name": "pytorch", "image": "x"}]}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ddp", "namespace": "team-a", "labels": {"podmortem.io/retry-policy": "enabled"}},
        "spec": {"completions": 2, "completionMode": "Indexed", "template": {"spec": pod_spec}},
    }
    review = workload_review(job)
    status, answer = await post(ca, webhook.port, review)
    assert status == 200
    out = patched(review, answer)  # applied and validated as a batch/v1 Job
    assert [r["onPodConditions"][0]["type"] for r in out["spec"]["podFailurePolicy"]["rules"]][:3] == [
        "podmortem.io/Victim",
        "podmortem.io/PermanentFailure",
        "podmortem.io/RetryableFailure",
    ]
    # The user's own policy wins: a second Job with one is passed unchanged.
    own = json.loads(json.dumps(job))
    own["spec"]["podFailurePolicy"] = {"rules": [{"action": "Count", "onPodConditions": [{"type": "X"}]}]}
    _, answer = await post(ca, webhook.port, workload_review(own))
    assert "patch" not in answer["response"]
    on_failure = json.loads(json.dumps(job))
    on_failure["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    _, answer = await post(ca, webhook.port, workload_review(on_failure))
    assert "patch" not in answer["response"]
    assert retry_count(webhook, "Job", "added") == 1
    assert retry_count(webhook, "Job", "own_policy") == 1
    assert retry_count(webhook, "Job", "restart_on_failure") == 1
    assert count(webhook, mutation.INJECTED) == 0  # pods' counter untouched


async def test_opted_in_jobset_gets_failure_policy_over_https(ca: trustme.CA, webhook: WebhookServer) -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": "team-a", "labels": {"podmortem.io/retry-policy": "enabled"}},
        "spec": {
            "replicatedJobs": [
                {"name": "workers", "replicas": 2, "template": {"spec": {"template": {"spec": {"containers": []}}}}}
            ]
        },
    }
    review = workload_review(jobset)
    _, answer = await post(ca, webhook.port, review)
    response = answer["response"]
    out = jsonpatch.apply_patch(jobset, json.loads(base64.b64decode(response["patch"])))
    assert out["spec"]["failurePolicy"]["maxRestarts"] == 3
    assert out["spec"]["failurePolicy"]["rules"][0]["action"] == "FailJobSet"
    assert out["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert retry_count(webhook, "JobSet", "added") == 1


async def test_bad_requests_get_400_and_are_counted(ca: trustme.CA, webhook: WebhookServer) -> None:
    status, answer = await post(ca, webhook.port, b"{not json")
    assert status == 400 and "AdmissionReview" in answer["error"]
    status, answer = await post(ca, webhook.port, {"apiVersion": "admission.k8s.io/v1", "request": {}})
    assert status == 400 and "uid" in answer["error"]
    status, answer = await post(ca, webhook.port, b"[" * 5000)  # json recurses per level: was a 500
    assert status == 400 and "nested too deeply" in answer["error"]
    assert count(webhook, server.BAD_REQUEST) == 3


async def test_health_and_metrics(ca: trustme.CA, webhook: WebhookServer) -> None:
    await post(ca, webhook.port, fixture("leave-alone"))
    async with aiohttp.ClientSession() as session:
        async with session.get(f"https://127.0.0.1:{webhook.port}/healthz", ssl=client_ssl(ca)) as resp:
            assert resp.status == 200
        async with session.get(f"http://127.0.0.1:{webhook.metrics_port}/metrics") as resp:
            text = await resp.text()
    assert 'podmortem_webhook_reviews_total{outcome="not_training_pod"} 1.0' in text
    assert 'podmortem_webhook_reviews_total{outcome="unsupported"} 0.0' in text


async def test_a_renewed_certificate_is_served_without_restart(
    ca: trustme.CA, webhook: WebhookServer, tmp_path: Path
) -> None:
    other = trustme.CA()
    renewed_dir = tmp_path / "renewed"
    renewed_dir.mkdir()
    cert, key = write_cert(other, renewed_dir, "127.0.0.1")
    os.replace(cert, webhook.config.tls_cert)  # as the kubelet swaps a Secret volume's files
    os.replace(key, webhook.config.tls_key)
    assert webhook.load_certificate() is True
    assert webhook.load_certificate() is False  # unchanged files are not reloaded
    status, _ = await post(other, webhook.port, fixture("leave-alone"))
    assert status == 200
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await post(ca, webhook.port, fixture("leave-alone"))


async def test_the_command_starts_with_three_flags_and_stops_on_sigterm(ca: trustme.CA, tmp_path: Path) -> None:
    cert, key = write_cert(ca, tmp_path, "127.0.0.1")
    port = free_port()  # a process started by its flags reports no port
    env = {**os.environ, "PYTHONPATH": str(REPO), "PODMORTEM_WEBHOOK_METRICS_LISTEN": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "podmortem.cli", "webhook", "--listen", f"127.0.0.1:{port}",
         "--tls-cert", str(cert), "--tls-key", str(key)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:

        async def answered() -> int:
            try:
                return (await post(ca, port, fixture("leave-alone")))[0]
            except aiohttp.ClientConnectorError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                return 0

        assert await eventually(answered, "the webhook answering", every=0.2) == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
        assert b"webhook stopped" in (proc.stderr.read() if proc.stderr else b"")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_command_refuses_missing_certificates(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for var in ("PODMORTEM_WEBHOOK_TLS_CERT", "PODMORTEM_WEBHOOK_TLS_KEY"):
        env.pop(var, None)
    out = subprocess.run(
        [sys.executable, "-m", "podmortem.cli", "webhook", "--tls-cert", str(tmp_path / "nope.crt"),
         "--tls-key", str(tmp_path / "nope.key")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "nope.crt does not exist" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "podmortem.cli", "webhook", "--native-sidecars", "maybe"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert "PODMORTEM_WEBHOOK_TLS_CERT (or --tls-cert) is required" in out.stderr
    assert "'maybe' is not true or false" in out.stderr
