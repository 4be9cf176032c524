"""The Kubernetes emulator (tests/support/kube_emulator.py) against the API's documented behaviour.

Every other Kubernetes test trusts it: a selector that matched everything would let a pod-selector
test pass for the wrong reason. Plain HTTP from the test, as any client would speak it; each case
cites the documentation it follows:

- labels: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors
- fields: https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/
- merge patch: RFC 7386; JSON patch: RFC 6902
- watch, resourceVersion, 410 Gone: https://kubernetes.io/docs/reference/using-api/api-concepts/
- pod logs (tailLines, limitBytes, previous): the PodLogOptions of the core/v1 API reference
- 429 and Retry-After: https://kubernetes.io/docs/reference/using-api/api-concepts/ (and RFC 9110)
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from support.kube_emulator import PODS, PYTORCHJOBS, EmulatorHandle
from support.kube_objects import NS, pytorchjob, training_pod

PODS_URL = f"/api/v1/namespaces/{NS}/pods"
JOBS_URL = f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs"


def call(
    api: EmulatorHandle,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    token: str | None = "test-token",
    **params: str,
) -> tuple[int, Any, dict[str, str]]:
    """(status, decoded body, headers) of one request; errors are answers too."""
    url = api.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", content_type)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw, status, headers = response.read(), response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        raw, status, headers = error.read(), error.code, dict(error.headers)
    text = raw.decode()
    try:
        return status, json.loads(text), headers
    except json.JSONDecodeError:
        return status, text, headers


def pod(name: str, phase: str = "Running", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "pytorch"}]},
        "status": {"phase": phase},
    }


def names(api: EmulatorHandle, **params: str) -> set[str]:
    status, body, _ = call(api, "GET", PODS_URL, **params)
    assert status == 200, body
    return {item["metadata"]["name"] for item in body["items"]}


@pytest.fixture
def three_pods(kube_api: EmulatorHandle) -> EmulatorHandle:
    kube_api.put(PODS, pod("prod-a", tier="frontend", env="production"))
    kube_api.put(PODS, pod("qa-b", "Succeeded", tier="backend", env="qa"))
    kube_api.put(PODS, pod("bare-c", "Failed"))
    return kube_api


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ("env=production", {"prod-a"}),
        ("env==production", {"prod-a"}),
        # `!=` and `notin` also select objects that do not have the key at all (the docs say so).
        ("tier!=frontend", {"qa-b", "bare-c"}),
        ("env in (production, qa)", {"prod-a", "qa-b"}),
        ("tier notin (frontend, backend)", {"bare-c"}),
        ("tier", {"prod-a", "qa-b"}),
        ("!tier", {"bare-c"}),
        ("env=production,tier=frontend", {"prod-a"}),  # a comma is a logical AND
        ("env=production,tier=backend", set()),
        ("", {"prod-a", "qa-b", "bare-c"}),
    ],
)
def test_label_selectors_as_documented(three_pods: EmulatorHandle, selector: str, selected: set[str]) -> None:
    assert names(three_pods, labelSelector=selector) == selected


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        ("metadata.name=qa-b", {"qa-b"}),
        ("status.phase!=Running", {"qa-b", "bare-c"}),
        ("status.phase=Failed,metadata.name!=qa-b", {"bare-c"}),
        ("metadata.namespace=elsewhere", set()),
    ],
)
def test_field_selectors_as_documented(three_pods: EmulatorHandle, selector: str, selected: set[str]) -> None:
    assert names(three_pods, fieldSelector=selector) == selected


def test_writes_get_increasing_resource_versions_and_stale_writes_conflict(kube_api: EmulatorHandle) -> None:
    status, created, _ = call(kube_api, "POST", PODS_URL, pod("w"))
    assert status == 201 and created["metadata"]["uid"] and created["metadata"]["creationTimestamp"]
    first = int(created["metadata"]["resourceVersion"])
    status, patched, _ = call(
        kube_api, "PATCH", f"{PODS_URL}/w", {"metadata": {"labels": {"a": "1"}}}, "application/merge-patch+json"
    )
    assert status == 200 and int(patched["metadata"]["resourceVersion"]) > first
    assert patched["metadata"]["uid"] == created["metadata"]["uid"]
    status, body, _ = call(kube_api, "PUT", f"{PODS_URL}/w", created)  # carries the old resourceVersion
    assert status == 409 and body["reason"] == "Conflict"
    status, body, _ = call(kube_api, "POST", PODS_URL, pod("w"))
    assert status == 409 and body["reason"] == "AlreadyExists"
    status, body, _ = call(kube_api, "GET", f"{PODS_URL}/nope")
    assert status == 404 and body["kind"] == "Status" and body["reason"] == "NotFound"


def test_a_merge_patch_follows_rfc_7386(kube_api: EmulatorHandle) -> None:
    obj = pod("m", tier="frontend", env="qa")
    obj["spec"]["tolerations"] = [{"key": "a"}, {"key": "b"}]
    kube_api.put(PODS, obj)
    patch = {
        "metadata": {"labels": {"env": None, "new": "yes"}},  # null removes a key, others merge
        "spec": {"tolerations": [{"key": "c"}]},  # a list is replaced, not merged
    }
    status, body, _ = call(kube_api, "PATCH", f"{PODS_URL}/m", patch, "application/merge-patch+json")
    assert status == 200, body
    assert body["metadata"]["labels"] == {"tier": "frontend", "new": "yes"}
    assert body["spec"]["tolerations"] == [{"key": "c"}]
    assert body["spec"]["containers"] == [{"name": "pytorch"}]  # untouched


def test_a_json_patch_follows_rfc_6902(kube_api: EmulatorHandle) -> None:
    kube_api.put(PODS, pod("j", tier="frontend"))
    ops = [{"op": "test", "path": "/metadata/labels/tier", "value": "frontend"},
           {"op": "add", "path": "/metadata/labels/x", "value": "1"}]  # fmt: skip
    status, body, _ = call(kube_api, "PATCH", f"{PODS_URL}/j", ops, "application/json-patch+json")
    assert status == 200 and body["metadata"]["labels"] == {"tier": "frontend", "x": "1"}
    failing = [{"op": "test", "path": "/metadata/labels/tier", "value": "backend"}]
    status, body, _ = call(kube_api, "PATCH", f"{PODS_URL}/j", failing, "application/json-patch+json")
    assert status == 422 and body["reason"] == "Invalid"


def test_the_status_subresource_is_written_apart(kube_api: EmulatorHandle) -> None:
    job = kube_api.put(PYTORCHJOBS, pytorchjob())
    name = job["metadata"]["name"]
    spec_patch = {"spec": {"runPolicy": {"suspend": True}}, "status": {"conditions": []}}
    status, body, _ = call(kube_api, "PATCH", f"{JOBS_URL}/{name}", spec_patch, "application/merge-patch+json")
    assert status == 200 and body["status"] == job["status"]  # the main resource ignores .status
    assert body["metadata"]["generation"] == job["metadata"]["generation"] + 1  # a spec change
    status_patch = {"spec": {"runPolicy": {"suspend": False}}, "status": {"conditions": []}}
    status, body, _ = call(kube_api, "PATCH", f"{JOBS_URL}/{name}/status", status_patch, "application/merge-patch+json")
    assert status == 200 and body["status"] == {"conditions": []}
    assert body["spec"]["runPolicy"] == {"suspend": True}  # /status ignores everything else


def watch_events(api: EmulatorHandle, **params: str) -> list[tuple[str, str]]:
    """(type, name or status code) of every event of a watch that ends by its timeoutSeconds."""
    url = api.url + PODS_URL + "?" + urllib.parse.urlencode({"watch": "true", **params})
    request = urllib.request.Request(url, headers={"Authorization": "Bearer test-token"})
    with urllib.request.urlopen(request, timeout=30) as response:
        lines = response.read().decode().splitlines()
    events = [json.loads(line) for line in lines if line.strip()]
    return [(e["type"], e["object"].get("metadata", {}).get("name") or str(e["object"].get("code"))) for e in events]


def test_a_watch_replays_only_what_came_after_its_resource_version(kube_api: EmulatorHandle) -> None:
    kube_api.put(PODS, pod("before", tier="x"))
    _, listed, _ = call(kube_api, "GET", PODS_URL)
    version = listed["metadata"]["resourceVersion"]
    kube_api.put(PODS, pod("after", tier="x"))
    kube_api.change(PODS, NS, "before", {"metadata": {"labels": {"seen": "yes"}}})
    kube_api.put(PODS, pod("stranger", tier="z"))
    kube_api.remove(PODS, NS, "after")
    assert watch_events(kube_api, resourceVersion=version, timeoutSeconds="1") == [
        ("ADDED", "after"),
        ("MODIFIED", "before"),
        ("ADDED", "stranger"),
        ("DELETED", "after"),
    ]
    # Selectors apply to watches too.
    assert watch_events(kube_api, resourceVersion=version, timeoutSeconds="1", labelSelector="tier=x") == [
        ("ADDED", "after"),
        ("MODIFIED", "before"),
        ("DELETED", "after"),
    ]
    # Without a version: the current objects as ADDED, then the stream waits (here: its timeout).
    assert sorted(watch_events(kube_api, timeoutSeconds="1")) == [("ADDED", "before"), ("ADDED", "stranger")]


def test_a_watch_from_a_compacted_version_gets_410_gone(kube_api: EmulatorHandle) -> None:
    kube_api.put(PODS, pod("old"))
    _, listed, _ = call(kube_api, "GET", PODS_URL)
    kube_api.put(PODS, pod("newer"))
    kube_api.compact()
    assert watch_events(kube_api, resourceVersion=listed["metadata"]["resourceVersion"], timeoutSeconds="1") == [
        ("ERROR", "410")
    ]


def test_pod_logs_honour_tail_lines_limit_bytes_and_previous(kube_api: EmulatorHandle) -> None:
    kube_api.put(PODS, training_pod(pytorchjob(), 0))
    name = "mixtral-cpt-worker-0"
    kube_api.set_log(NS, name, "pytorch", "one\ntwo\nthree\n")
    kube_api.set_log(NS, name, "pytorch", "before the restart\n", previous=True)
    log = f"{PODS_URL}/{name}/log"
    assert call(kube_api, "GET", log, container="pytorch")[1] == "one\ntwo\nthree\n"
    assert call(kube_api, "GET", log, container="pytorch", tailLines="2")[1] == "two\nthree\n"
    # limitBytes keeps the first bytes of what tailLines selected.
    assert call(kube_api, "GET", log, container="pytorch", tailLines="2", limitBytes="5")[1] == "two\nt"
    assert call(kube_api, "GET", log, container="pytorch", previous="true")[1] == "before the restart\n"
    assert call(kube_api, "GET", log, container="sidecar")[0] == 400


def test_injected_faults_answer_as_the_api_does(kube_api: EmulatorHandle) -> None:
    kube_api.put(PODS, pod("f"))
    kube_api.fail(429, 1, methods=("GET",), retry_after=7)
    status, body, headers = call(kube_api, "GET", f"{PODS_URL}/f")
    assert status == 429 and body["kind"] == "Status" and body["code"] == 429
    assert headers["Retry-After"] == "7"
    assert call(kube_api, "GET", f"{PODS_URL}/f")[0] == 200  # `times` used up
    kube_api.fail(429, 1, methods=("GET",))
    assert call(kube_api, "GET", f"{PODS_URL}/f")[2]["Retry-After"] == "0"
    assert call(kube_api, "GET", f"{PODS_URL}/f", token="wrong")[0] == 401
    assert call(kube_api, "GET", f"{PODS_URL}/f", token=None)[0] == 401
