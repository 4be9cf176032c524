"""The injection as a pure function: real AdmissionReview pods in, JSONPatch out, the result schema-valid."""

from __future__ import annotations

import argparse
import base64
import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import trustme

from podmortem.sidecar import config as sidecar_config
from podmortem.webhook import config as webhook_config
from podmortem.webhook import mutation
from podmortem.webhook.mutation import Injection, mutate, review

FIXTURES = Path(__file__).parent.parent / "fixtures" / "admission"
KUBE_VERSION = "1.33.0"
SETTINGS = Injection(aggregator="podmortem.podmortem.svc:50051", image="example.org/podmortem:9.9", version="9.9")


def fixture(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def pod_of(name: str) -> dict[str, Any]:
    return dict(fixture(name)["request"]["object"])


def applied(pod: dict[str, Any], settings: Injection = SETTINGS) -> tuple[dict[str, Any], mutation.Result]:
    result = mutate(pod, settings)
    out = jsonpatch.apply_patch(pod, result.patch)
    kubernetes_validate.validate(out, KUBE_VERSION, strict=True)
    return out, result


def sidecar_of(pod: dict[str, Any]) -> dict[str, Any]:
    found = [
        c for c in pod["spec"].get("initContainers", []) + pod["spec"]["containers"] if c["name"] == "podmortem-sidecar"
    ]
    assert len(found) == 1
    return dict(found[0])


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_pytorchjob_pod_gets_a_native_sidecar_and_an_error_file() -> None:
    pod, result = applied(pod_of("pytorchjob-worker"))
    assert result.outcome == mutation.INJECTED
    sidecar = pod["spec"]["initContainers"][-1]
    assert sidecar["name"] == "podmortem-sidecar" and sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == "example.org/podmortem:9.9" and sidecar["args"] == ["sidecar"]
    env = env_of(sidecar)
    assert env["TORCHELASTIC_ERROR_FILE"] == "/var/run/podmortem/error.json"
    assert env["PODMORTEM_AGGREGATOR"] == "podmortem.podmortem.svc:50051"
    assert env["PODMORTEM_CONTAINER"] == "pytorch"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["PODMORTEM_JOB_NAME"] == {"fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/job-name']"}}
    assert env["PODMORTEM_JOB_KIND"] == "PyTorchJob"
    assert env["PET_NODE_RANK"] == "2" and env["PET_NNODES"] == "4"  # copied from the operator's values
    training = pod["spec"]["containers"][0]
    assert env_of(training)["TORCHELASTIC_ERROR_FILE"] == "/var/run/podmortem/error.json"
    assert {"name": "podmortem-errors", "mountPath": "/var/run/podmortem"} in training["volumeMounts"]
    assert {"name": "podmortem-errors", "mountPath": "/var/run/podmortem", "readOnly": True} in sidecar["volumeMounts"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    token = volumes["podmortem-token"]["projected"]["sources"][0]["serviceAccountToken"]
    assert token == {"audience": "podmortem", "expirationSeconds": 3600, "path": "token"}
    assert sidecar["resources"] == {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "128Mi"}}
    assert sidecar["securityContext"]["runAsNonRoot"] is True
    assert pod["metadata"]["annotations"]["podmortem.io/injected"] == "9.9"
    # Untouched: the user's own volumes, mounts and env, in order.
    original = pod_of("pytorchjob-worker")
    assert pod["spec"]["volumes"][: len(original["spec"]["volumes"])] == original["spec"]["volumes"]
    assert training["env"][:-4] == original["spec"]["containers"][0]["env"]  # + error file, capture dir, FR x2


def test_every_sidecar_env_name_is_a_sidecar_setting() -> None:
    parser = argparse.ArgumentParser()
    sidecar_config.add_arguments(parser)
    help_text = " ".join(parser.format_help().split())  # help wraps lines anywhere
    for name in ("pytorchjob-worker", "indexed-job"):
        pod, _ = applied(pod_of(name))
        for var in env_of(sidecar_of(pod)):
            assert f"[env {var}]" in help_text, var


def test_the_injected_pod_configures_a_valid_sidecar() -> None:
    """The env the sidecar will see (downward API resolved) passes the sidecar's own settings reader."""
    pod, _ = applied(pod_of("pytorchjob-worker"))
    resolved = {
        "metadata.name": "llm-worker-1", "metadata.namespace": "team-a", "metadata.uid": "u-1",
        "spec.nodeName": "node-7", "status.podIP": "10.0.0.5",
        "metadata.labels['training.kubeflow.org/job-name']": "llm",
        "metadata.labels['training.kubeflow.org/replica-type']": "worker",
        "metadata.labels['training.kubeflow.org/replica-index']": "1",
    }  # fmt: skip
    env = {
        k: v if isinstance(v, str) else resolved[v["fieldRef"]["fieldPath"]] for k, v in env_of(sidecar_of(pod)).items()
    }
    settings = sidecar_config.from_env_and_args(env)
    assert (settings.pod_name, settings.namespace, settings.job_name, settings.job_kind) == (
        "llm-worker-1", "team-a", "llm", "PyTorchJob",
    )  # fmt: skip
    assert (settings.rank, settings.world_size, settings.replica_index, settings.container) == (2, 4, 1, "pytorch")
    assert str(settings.error_file) == "/var/run/podmortem/error.json"


def test_indexed_job_keeps_the_users_error_file_on_their_volume() -> None:
    pod, result = applied(pod_of("indexed-job"))
    assert result.outcome == mutation.INJECTED
    sidecar = sidecar_of(pod)
    env = env_of(sidecar)
    assert env["TORCHELASTIC_ERROR_FILE"] == "/ckpt/errors/error.json"
    assert env["PODMORTEM_JOB_NAME"] == {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-name']"}}
    assert env["PODMORTEM_JOB_KIND"] == "Job"
    assert env["PET_NODE_RANK"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
    }
    # The sidecar reads the file through the user's own volume, at the same place; no emptyDir is added.
    assert {"name": "ckpt", "mountPath": "/ckpt", "readOnly": True} in sidecar["volumeMounts"]
    assert "podmortem-errors" not in {v["name"] for v in pod["spec"]["volumes"]}
    assert pod["spec"]["containers"][0] == pod_of("indexed-job")["spec"]["containers"][0]


def test_users_error_file_outside_any_volume_gets_the_shared_volume_at_its_directory() -> None:
    pod = pod_of("pytorchjob-worker")
    pod["spec"]["containers"][0]["env"].append({"name": "TORCHELASTIC_ERROR_FILE", "value": "/tmp/elastic/err.json"})
    out, _ = applied(pod)
    training, sidecar = out["spec"]["containers"][0], sidecar_of(out)
    assert env_of(training)["TORCHELASTIC_ERROR_FILE"] == "/tmp/elastic/err.json"  # kept, not duplicated
    assert [e["name"] for e in training["env"]].count("TORCHELASTIC_ERROR_FILE") == 1
    assert {"name": "podmortem-errors", "mountPath": "/tmp/elastic"} in training["volumeMounts"]
    assert {"name": "podmortem-errors", "mountPath": "/tmp/elastic", "readOnly": True} in sidecar["volumeMounts"]
    assert env_of(sidecar)["TORCHELASTIC_ERROR_FILE"] == "/tmp/elastic/err.json"


def test_regular_container_when_native_sidecars_are_off() -> None:
    pod, _ = applied(pod_of("pytorchjob-worker"), Injection(native_sidecars=False))
    assert "initContainers" not in pod["spec"]
    assert pod["spec"]["containers"][-1]["name"] == "podmortem-sidecar"
    assert "restartPolicy" not in pod["spec"]["containers"][-1]


def test_jobset_pod_registers_under_the_jobset_and_its_attempt() -> None:
    pod = pod_of("indexed-job")
    pod["metadata"]["labels"].update(
        {"jobset.sigs.k8s.io/jobset-name": "big", "jobset.sigs.k8s.io/restart-attempt": "3"}
    )
    env = env_of(sidecar_of(applied(pod)[0]))
    assert env["PODMORTEM_JOB_NAME"] == {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/jobset-name']"}}
    assert env["PODMORTEM_JOB_KIND"] == "JobSet"
    assert env["PODMORTEM_ATTEMPT"] == {
        "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}
    }
    assert "PET_NODE_RANK" not in env  # a JobSet rank needs the JobSet's spec: the aggregator works it out


def test_reinvocation_on_an_injected_pod_is_an_empty_patch() -> None:
    pod, _ = applied(pod_of("pytorchjob-worker"))
    again = mutate(pod, SETTINGS)
    assert (again.patch, again.outcome) == ([], mutation.ALREADY_INJECTED)


def test_opt_out_annotation_wins() -> None:
    pod = pod_of("pytorchjob-worker")
    pod["metadata"]["annotations"]["podmortem.io/inject"] = "false"
    assert mutate(pod, SETTINGS) == mutation.Result([], mutation.OPTED_OUT, 'annotation podmortem.io/inject: "false"')


def test_non_training_pod_is_left_alone() -> None:
    result = mutate(pod_of("leave-alone"), SETTINGS)
    assert (result.patch, result.outcome) == ([], mutation.NOT_TRAINING)


def test_no_api_credentials_means_no_api_pod_source() -> None:
    pod = pod_of("pytorchjob-worker")
    pod["spec"]["automountServiceAccountToken"] = False
    assert env_of(sidecar_of(applied(pod)[0]))["PODMORTEM_POD_SOURCE"] == "none"


def test_container_annotation_picks_the_training_container() -> None:
    pod = pod_of("indexed-job")
    pod["spec"]["containers"].insert(0, {"name": "proxy", "image": "envoy:1"})
    pod["metadata"]["annotations"]["podmortem.io/container"] = "trainer"
    assert env_of(sidecar_of(applied(pod)[0]))["PODMORTEM_CONTAINER"] == "trainer"


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda p: p["metadata"]["annotations"].update({"podmortem.io/container": "nope"}), "names no container"),
        (lambda p: p["spec"]["volumes"].append({"name": "podmortem-token", "emptyDir": {}}), "exists already"),
        (
            lambda p: p["spec"]["containers"][0]["env"].append(
                {"name": "TORCHELASTIC_ERROR_FILE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}
            ),
            "from a reference",
        ),
        (
            lambda p: p["spec"]["containers"][0]["env"].append(
                {"name": "TORCHELASTIC_ERROR_FILE", "value": "err.json"}
            ),
            "absolute path",
        ),
        (
            lambda p: p["spec"]["containers"][0]["volumeMounts"].append(
                {"name": "dshm", "mountPath": "/var/run/podmortem"}
            ),
            "already a mount point",
        ),
        (lambda p: p["spec"].update({"containers": []}), "no containers"),
    ],
)
def test_pods_it_does_not_understand_pass_unchanged(edit: Any, reason: str) -> None:
    pod = pod_of("pytorchjob-worker")
    edit(pod)
    before = copy.deepcopy(pod)
    result = mutate(pod, SETTINGS)
    assert (result.patch, result.outcome) == ([], mutation.UNSUPPORTED)
    assert reason in result.reason
    assert pod == before  # the input is never modified


def test_review_answers_with_a_base64_jsonpatch_and_the_request_uid() -> None:
    body = fixture("pytorchjob-worker")
    answer, result = review(body, SETTINGS)
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == result.patch


def test_review_of_a_pod_left_alone_has_no_patch() -> None:
    answer, result = review(fixture("leave-alone"), SETTINGS)
    assert answer["response"] == {"uid": "e5f6a7b8-c9d0-4e1f-8a2b-3c4d5e6f7a8b", "allowed": True}
    assert result.outcome == mutation.NOT_TRAINING


def test_review_of_something_else_than_a_pod_create() -> None:
    body = fixture("pytorchjob-worker")
    body["request"]["operation"] = "UPDATE"
    answer, result = review(body, SETTINGS)
    assert "patch" not in answer["response"] and result.outcome == mutation.NOT_POD_CREATE


@pytest.mark.parametrize("body", [[], {}, {"request": {}}, {"request": {"uid": ""}}, {"request": "x"}])
def test_review_rejects_what_is_not_an_admission_review(body: Any) -> None:
    with pytest.raises(ValueError, match=r"not|uid"):
        review(body, SETTINGS)


def test_the_aggregators_ca_is_handed_to_the_sidecar() -> None:
    ca = trustme.CA().cert_pem.bytes().decode()
    pod, _ = applied(pod_of("pytorchjob-worker"), dataclasses.replace(SETTINGS, tls_ca_pem=ca))
    env = env_of(sidecar_of(pod))
    assert env["PODMORTEM_TLS_CA_PEM"] == ca
    required = {"POD_NAME": "p", "POD_NAMESPACE": "n", "TORCHELASTIC_ERROR_FILE": "/e", "PODMORTEM_AGGREGATOR": "a:1"}
    settings = sidecar_config.from_env_and_args({**required, "PODMORTEM_TLS_CA_PEM": ca})
    assert settings.tls_ca_pem.startswith("-----BEGIN CERTIFICATE-----")
    plain, _ = applied(pod_of("pytorchjob-worker"))
    assert "PODMORTEM_TLS_CA_PEM" not in env_of(sidecar_of(plain))


def test_the_hold_timeout_is_handed_to_the_sidecar_only_when_set() -> None:
    pod, _ = applied(pod_of("pytorchjob-worker"), dataclasses.replace(SETTINGS, hold_timeout="8"))
    env = env_of(sidecar_of(pod))
    assert env["PODMORTEM_HOLD_TIMEOUT"] == "8"
    required = {"POD_NAME": "p", "POD_NAMESPACE": "n", "TORCHELASTIC_ERROR_FILE": "/e", "PODMORTEM_AGGREGATOR": "a:1"}
    assert (
        sidecar_config.from_env_and_args(
            {**required, "PODMORTEM_HOLD_TIMEOUT": env["PODMORTEM_HOLD_TIMEOUT"]}
        ).hold_timeout
        == 8
    )
    plain, _ = applied(pod_of("pytorchjob-worker"))
    assert "PODMORTEM_HOLD_TIMEOUT" not in env_of(sidecar_of(plain))


# The hang additions: the capture dir, Flight Recorder dumps, stall-after, the start-up hook, py-spy.


def training_of(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(pod["spec"]["containers"][0])


def test_the_capture_dir_is_the_shared_volume_and_fr_dumps_go_there() -> None:
    pod, _ = applied(pod_of("pytorchjob-worker"))
    train, side = env_of(training_of(pod)), env_of(sidecar_of(pod))
    assert train["PODMORTEM_CAPTURE_DIR"] == side["PODMORTEM_CAPTURE_DIR"] == "/var/run/podmortem"
    assert train["TORCH_FR_DUMP_TEMP_FILE"] == train["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "/var/run/podmortem/fr-"
    assert "PODMORTEM_STALL_AFTER" not in side and "PODMORTEM_PYSPY" not in side  # both off by default
    assert "PYTHONPATH" not in train and len(pod["spec"]["initContainers"]) == 1  # no hook by default
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["podmortem-errors"]["emptyDir"] == {"sizeLimit": "256Mi"}
    assert "shareProcessNamespace" not in pod["spec"]


@pytest.mark.parametrize("name", ["TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"])
def test_a_dump_location_the_user_set_is_kept(name: str) -> None:
    pod = pod_of("pytorchjob-worker")
    pod["spec"]["containers"][0]["env"].append({"name": name, "value": "/scratch/dump-"})
    out, _ = applied(pod)
    train = env_of(training_of(out))
    assert train[name] == "/scratch/dump-"
    assert not {"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"} - {name} & set(train)


def test_no_capture_dir_on_a_users_volume() -> None:
    """A user's volume may be shared by every pod of the job: no pod may read another's sockets and dumps."""
    pod, _ = applied(pod_of("indexed-job"))
    assert "PODMORTEM_CAPTURE_DIR" not in env_of(sidecar_of(pod))
    assert pod["spec"]["containers"][0] == pod_of("indexed-job")["spec"]["containers"][0]


@pytest.mark.parametrize(
    ("annotation", "default", "expected"),
    [
        ("5m", "", "300"),
        ("90s", "", "90"),
        ("1.5h", "", "5400"),
        ("120", "600", "120"),
        ("0", "600", None),  # off for this pod
        ("soon", "600", "600"),  # not a duration: the default, and the pod is still injected
        (None, "600", "600"),
        (None, "", None),
    ],
)
def test_stall_after_comes_from_the_annotation_else_the_default(
    annotation: str | None, default: str, expected: str | None
) -> None:
    pod = pod_of("pytorchjob-worker")
    if annotation is not None:
        pod["metadata"].setdefault("annotations", {})["podmortem.io/stall-after"] = annotation
    out, result = applied(pod, dataclasses.replace(SETTINGS, stall_after=default))
    assert result.outcome == mutation.INJECTED
    assert env_of(sidecar_of(out)).get("PODMORTEM_STALL_AFTER") == expected


@pytest.mark.parametrize("text", ["nan", "inf", "-5m", "1e9h", ""])
def test_stall_seconds_refuses_what_is_not_a_duration(text: str) -> None:
    assert mutation.stall_seconds(text) is None


def test_the_python_hook_goes_first_on_pythonpath_from_an_init_container() -> None:
    pod = pod_of("pytorchjob-worker")
    pod["spec"]["containers"][0]["env"].append({"name": "PYTHONPATH", "value": "/app/src"})
    out, _ = applied(pod, dataclasses.replace(SETTINGS, python_hook=True))
    train = training_of(out)
    assert env_of(train)["PYTHONPATH"] == "/var/run/podmortem/python:/app/src"
    assert [e["name"] for e in train["env"]].count("PYTHONPATH") == 1
    hook, side = out["spec"]["initContainers"]
    assert side["name"] == "podmortem-sidecar"
    assert hook["name"] == "podmortem-python" and "restartPolicy" not in hook  # runs to completion first
    assert hook["command"] == ["python", "-m", "podmortem.inject", "/var/run/podmortem/python"]
    assert hook["volumeMounts"] == [{"name": "podmortem-errors", "mountPath": "/var/run/podmortem"}]
    assert hook["securityContext"]["runAsNonRoot"] is True and hook["securityContext"]["capabilities"] == {
        "drop": ["ALL"]
    }


@pytest.mark.parametrize(
    ("default", "annotation", "env", "hooked"),
    [
        (False, "true", None, True),
        (True, "false", None, False),
        (True, None, {"name": "PYTHONPATH", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}, False),
    ],
    ids=["annotation-opts-in", "annotation-opts-out", "pythonpath-from-a-reference"],
)
def test_the_python_hook_per_pod(
    default: bool, annotation: str | None, env: dict[str, Any] | None, hooked: bool
) -> None:
    pod = pod_of("pytorchjob-worker")
    if annotation is not None:
        pod["metadata"].setdefault("annotations", {})["podmortem.io/python-hook"] = annotation
    if env is not None:
        pod["spec"]["containers"][0]["env"].append(env)
    out, result = applied(pod, dataclasses.replace(SETTINGS, python_hook=default))
    assert result.outcome == mutation.INJECTED
    assert ("podmortem-python" in {c["name"] for c in out["spec"]["initContainers"]}) is hooked
    if env is not None:
        assert env in training_of(out)["env"]  # the user's reference is left as it is


def test_pyspy_shares_the_process_namespace_and_gives_ptrace_to_the_sidecar_alone() -> None:
    out, _ = applied(pod_of("pytorchjob-worker"), dataclasses.replace(SETTINGS, pyspy=True, python_hook=True))
    assert out["spec"]["shareProcessNamespace"] is True
    side = sidecar_of(out)
    assert env_of(side)["PODMORTEM_PYSPY"] == "1"
    ctx = side["securityContext"]
    assert ctx["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert (ctx["runAsUser"], ctx["runAsNonRoot"], ctx["allowPrivilegeEscalation"]) == (0, False, False)
    others = [c for c in out["spec"]["initContainers"] + out["spec"]["containers"] if c["name"] != side["name"]]
    assert len(others) == 2  # the hook's init container and the training container
    assert all("SYS_PTRACE" not in str(c.get("securityContext")) for c in others)
    assert training_of(out).get("securityContext") == training_of(pod_of("pytorchjob-worker")).get("securityContext")


def test_pyspy_respects_a_pod_that_refuses_to_share_its_process_namespace() -> None:
    pod = pod_of("pytorchjob-worker")
    pod["spec"]["shareProcessNamespace"] = False
    out, _ = applied(pod, dataclasses.replace(SETTINGS, pyspy=True))
    assert out["spec"]["shareProcessNamespace"] is False
    assert "PODMORTEM_PYSPY" not in env_of(sidecar_of(out))
    assert sidecar_of(out)["securityContext"]["runAsNonRoot"] is True


def test_the_webhook_settings_for_them() -> None:
    env = {"PODMORTEM_WEBHOOK_TLS_CERT": "c", "PODMORTEM_WEBHOOK_TLS_KEY": "k", "PODMORTEM_SIDECAR_STALL_AFTER": "5m"}
    loaded = webhook_config.load(
        None, {**env, "PODMORTEM_SIDECAR_PYTHON_HOOK": "true", "PODMORTEM_SIDECAR_PYSPY": "false"}
    )
    assert (loaded.injection.stall_after, loaded.injection.python_hook, loaded.injection.pyspy) == ("300", True, False)
    with pytest.raises(webhook_config.ConfigError, match="is not a duration"):
        webhook_config.load(None, {**env, "PODMORTEM_SIDECAR_STALL_AFTER": "forever"})
    with pytest.raises(webhook_config.ConfigError, match="is not true or false"):
        webhook_config.load(None, {**env, "PODMORTEM_SIDECAR_PYSPY": "yes please"})


@pytest.mark.parametrize(
    ("pod_ctx", "container_ctx", "expected"),
    [
        ({}, {}, (65532, 65532)),  # no user named: podmortem's own
        ({"runAsUser": 1000, "runAsGroup": 2000}, {}, (1000, 2000)),
        ({"runAsUser": 1000}, {"runAsUser": 1001}, (1001, 1001)),  # the container's wins
        ({}, {"runAsUser": 0}, (65532, 65532)),  # never root for the control plane's sake
    ],
)
def test_the_sidecar_runs_as_the_training_user_to_reach_its_sockets(
    pod_ctx: dict[str, Any], container_ctx: dict[str, Any], expected: tuple[int, int]
) -> None:
    pod = pod_of("pytorchjob-worker")
    if pod_ctx:
        pod["spec"]["securityContext"] = pod_ctx
    if container_ctx:
        pod["spec"]["containers"][0]["securityContext"] = container_ctx
    out, _ = applied(pod)
    ctx = sidecar_of(out)["securityContext"]
    assert (ctx["runAsUser"], ctx["runAsGroup"]) == expected and ctx["runAsNonRoot"] is True
