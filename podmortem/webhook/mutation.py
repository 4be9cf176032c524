"""What the webhook does to a pod: a pure function from an AdmissionReview to a JSONPatch, no I/O.

The API server sends every pod CREATE in an opted-in namespace (and, with `reinvocationPolicy:
IfNeeded`, again after later webhooks changed it). `review` answers an `admission.k8s.io/v1`
AdmissionReview; `mutate` is the core: it edits a copy of the pod and `jsonpatch.make_patch` turns
the difference into RFC 6902 operations, so the patch is exactly what changed and nothing is
hand-indexed. What an injected pod gets:

- the sidecar `podmortem-sidecar`: a native sidecar (an init container with `restartPolicy: Always`,
  Kubernetes >= 1.29) or, with `native_sidecars=False`, a regular container;
- a shared `emptyDir` (`podmortem-errors`) mounted in the training container and, read-only, in the
  sidecar; `TORCHELASTIC_ERROR_FILE` on the training container points into it. When the user set
  `TORCHELASTIC_ERROR_FILE` already, their path is kept: if one of their volumes holds it, the sidecar
  mounts that same volume at the same place; otherwise the emptyDir is mounted at the file's directory
  in both containers;
- the sidecar's settings as environment: identity from the downward API (`POD_NAME`, `POD_NAMESPACE`,
  `POD_UID`, `NODE_NAME`, `POD_IP`), the job from the pod's labels (as `podmortem/aggregator/kube/jobs.py`
  `workload_from_labels` reads them), `PODMORTEM_AGGREGATOR`, `PODMORTEM_CONTAINER`, and the torchrun
  rank and size copied from the training container when the operator set them literally;
- resources, a locked-down securityContext, and a projected ServiceAccount token for podmortem's
  audience (`podmortem-token`), for the aggregator to authenticate sidecars by;
- hang evidence (docs/kubernetes.md, "Hangs"): the capture dir is the error file's directory on
  podmortem's own volume, in both containers (none when the error file is on a volume of the user's, which
  every pod of the job may share). `PODMORTEM_CAPTURE_DIR` points both there; `TORCH_FR_DUMP_TEMP_FILE` and its old name
  `TORCH_NCCL_DEBUG_INFO_TEMP_FILE` (where NCCL writes Flight Recorder dumps on a timeout) point the
  training container to `<dir>/fr-`, unless the user set either. The sidecar's stall-after
  (`PODMORTEM_STALL_AFTER`, seconds) is the pod's `podmortem.io/stall-after` annotation (`300`, `90s`,
  `5m`, `1h`; `0` off), else the webhook's default. Opt-in: the start-up hook (`python_hook`, or the
  annotation `podmortem.io/python-hook: "true"`/`"false"`): an init container `podmortem-python` copies
  podmortem/inject/sitecustomize.py into `<dir>/python`, which goes first on the training container's
  `PYTHONPATH` (before a value the pod sets; an image's own `ENV PYTHONPATH` is replaced, as any pod value
  replaces it); only on podmortem's own volume, and not when `PYTHONPATH` comes from a reference.
  A training container that names a non-root user (`runAsUser`, container or pod) gets a sidecar of the
  same user and group, which may then connect to the workers' control-plane sockets (created with their
  umask, so usually for their owner only). Opt-in: py-spy (`pyspy`): `shareProcessNamespace: true` and a
  sidecar that runs as root with `SYS_PTRACE` as its only capability (not when the pod sets
  `shareProcessNamespace: false`);
- the annotation `podmortem.io/injected: "<version>"`.

Never breaks a pod: anything it does not understand (no training labels, no containers, an error
file path it cannot see, a name already taken) leaves the pod unchanged, with the reason as the
outcome the server counts. A pod that already has the sidecar gets an empty patch (idempotent on
reinvocation), and `podmortem.io/inject: "false"` on the pod always wins.
"""

from __future__ import annotations

import base64
import copy
import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonpatch

from podmortem.core.names import (
    AGGREGATOR_ENV,
    BATCH_COMPLETION_INDEX,
    BATCH_JOB_NAME,
    CONTAINER_ANNOTATION,
    INJECT_ANNOTATION,
    INJECTED_ANNOTATION,
    JOBSET_NAME,
    JOBSET_RESTART_ATTEMPT,
    KUBEFLOW_JOB,
    KUBEFLOW_REPLICA_INDEX,
    KUBEFLOW_REPLICA_TYPE,
    LEGACY_JOB_NAME,
    PYTHON_HOOK_ANNOTATION,
    STALL_AFTER_ANNOTATION,
    TOKEN_DIR,
    TOKEN_FILE,
)
from podmortem.k8s.objects import JSON, annotations_of, metadata_of, spec_of
from podmortem.webhook import retrypolicy

SIDECAR_NAME = "podmortem-sidecar"
ERRORS_VOLUME = "podmortem-errors"
TOKEN_VOLUME = "podmortem-token"
ERROR_FILE_NAME = "error.json"
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
PYTHON_HOOK_NAME = "podmortem-python"
FR_DUMP_ENVS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
# The shared volume holds the error file and the workers' Flight Recorder dumps (a few MiB each with
# torch's default ring of 2,000 entries); the kubelet evicts the pod past its sizeLimit.
ERRORS_VOLUME_SIZE = "256Mi"
# The container the Kubeflow training operator requires in a PyTorchJob.
KUBEFLOW_CONTAINER = "pytorch"


# Outcomes, as counted by the server (`podmortem_webhook_reviews_total{outcome}`): a fixed set.
INJECTED = "injected"
ALREADY_INJECTED = "already_injected"
OPTED_OUT = "opted_out"
NOT_TRAINING = "not_training_pod"
NOT_POD_CREATE = "not_pod_create"
UNSUPPORTED = "unsupported"  # a training pod we do not understand: let through unchanged
OUTCOMES = (INJECTED, ALREADY_INJECTED, OPTED_OUT, NOT_TRAINING, NOT_POD_CREATE, UNSUPPORTED)


@dataclass(frozen=True)
class Injection:
    """What to inject. Defaults match `podmortem webhook --help`; the chart sets each one."""

    aggregator: str = "podmortem-aggregator.podmortem.svc:50051"
    image: str = "ghcr.io/podmortem/podmortem:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    # Native sidecars (init containers with restartPolicy Always) are on by default from Kubernetes 1.29.
    native_sidecars: bool = True
    cpu_request: str = "10m"
    memory_request: str = "48Mi"
    cpu_limit: str = ""  # no CPU limit: throttling would delay the report when the node is busy
    # The sidecar's budget is 40 MiB RSS idle; a capture streams Flight Recorder dump files (about 1 MiB each
    # whatever their size: `bench/fr_memory.py`) and parses control-plane answers of up to 2 MiB whole (about
    # 6x that while read), so the limit leaves room for that.
    memory_limit: str = "128Mi"
    error_dir: str = "/var/run/podmortem"
    token_audience: str = "podmortem"
    token_expiration_seconds: int = 3600  # the API server's minimum is 600
    # Set explicitly so that a pod-level runAsUser 0 does not make runAsNonRoot refuse to start it.
    run_as_user: int = 65532
    version: str = "0.1.0"
    # PEM of the CA that signed the aggregator's gRPC certificate: injected as PODMORTEM_TLS_CA_PEM, so
    # that each sidecar speaks TLS and verifies the aggregator ("" = plain gRPC).
    tls_ca_pem: str = ""
    # maxRestarts of the failurePolicy given to an opted-in JobSet (podmortem/webhook/retrypolicy.py).
    jobset_max_restarts: int = 3
    # The sidecar's --hold-timeout, injected as PODMORTEM_HOLD_TIMEOUT ("" = the sidecar's own default):
    # how long a failed pod stays non-terminal waiting for its podmortem.io condition (docs/retries.md).
    hold_timeout: str = ""
    # Hangs: the sidecar's stall-after in seconds when the pod has no podmortem.io/stall-after ("" = off),
    # the opt-in start-up hook (sitecustomize) and the opt-in py-spy path.
    stall_after: str = ""
    python_hook: bool = False
    pyspy: bool = False


@dataclass(frozen=True)
class Result:
    """The patch (empty when the object is left alone) and why; `kind` is what was reviewed (Pod, Job, JobSet)."""

    patch: list[JSON]
    outcome: str
    reason: str = ""
    kind: str = "Pod"


class Unsupported(Exception):
    """A training pod this webhook does not understand; the message says what."""


def _field(path: str) -> JSON:
    return {"fieldRef": {"fieldPath": path}}


def _label(key: str) -> JSON:
    return _field(f"metadata.labels['{key}']")


def _workload_env(labels: Mapping[str, str], annotations: Mapping[str, str]) -> list[JSON] | None:
    """The sidecar's job settings from the pod's labels, in `workload_from_labels`'s order; None: not training."""
    env: list[JSON]
    if KUBEFLOW_JOB in labels:
        env = [
            {"name": "PODMORTEM_JOB_NAME", "valueFrom": _label(KUBEFLOW_JOB)},
            {"name": "PODMORTEM_JOB_KIND", "value": "PyTorchJob"},
        ]
        if KUBEFLOW_REPLICA_TYPE in labels:
            env.append({"name": "PODMORTEM_REPLICA_TYPE", "valueFrom": _label(KUBEFLOW_REPLICA_TYPE)})
        if KUBEFLOW_REPLICA_INDEX in labels:
            env.append({"name": "PODMORTEM_REPLICA_INDEX", "valueFrom": _label(KUBEFLOW_REPLICA_INDEX)})
        return env
    if JOBSET_NAME in labels:
        # docs/kubernetes.md: JobSet (and TrainJob) pods register under the JobSet and its restart attempt.
        env = [
            {"name": "PODMORTEM_JOB_NAME", "valueFrom": _label(JOBSET_NAME)},
            {"name": "PODMORTEM_JOB_KIND", "value": "JobSet"},
        ]
        if JOBSET_RESTART_ATTEMPT in labels:
            env.append({"name": "PODMORTEM_ATTEMPT", "valueFrom": _label(JOBSET_RESTART_ATTEMPT)})
        return env
    for key in (BATCH_JOB_NAME, LEGACY_JOB_NAME):
        if key in labels:
            env = [
                {"name": "PODMORTEM_JOB_NAME", "valueFrom": _label(key)},
                {"name": "PODMORTEM_JOB_KIND", "value": "Job"},
            ]
            if BATCH_COMPLETION_INDEX in annotations:
                # An indexed Job's completion index is the pod's torchrun node rank.
                env.append(
                    {"name": "PET_NODE_RANK", "valueFrom": _field(f"metadata.annotations['{BATCH_COMPLETION_INDEX}']")}
                )
            return env
    return None


def _training_container(containers: list[JSON], annotations: Mapping[str, str]) -> JSON:
    wanted = annotations.get(CONTAINER_ANNOTATION)
    if wanted:
        for c in containers:
            if c.get("name") == wanted:
                return c
        raise Unsupported(f"annotation {CONTAINER_ANNOTATION}={wanted!r} names no container")
    for c in containers:
        if c.get("name") == KUBEFLOW_CONTAINER:
            return c
    return containers[0]


def _error_file(container: JSON, settings: Injection) -> tuple[str, bool]:
    """The error file path and whether the user set it (True) or we choose it (False)."""
    for item in container.get("env") or []:
        if item.get("name") != ERROR_FILE_ENV:
            continue
        value = item.get("value")
        if "valueFrom" in item or not isinstance(value, str):
            raise Unsupported(f"{ERROR_FILE_ENV} is set from a reference; its path is not known at admission")
        path = posixpath.normpath(value)
        if not posixpath.isabs(path) or posixpath.dirname(path) == "/":
            raise Unsupported(f"{ERROR_FILE_ENV}={value!r} must be an absolute path below a directory")
        return path, True
    return posixpath.join(settings.error_dir, ERROR_FILE_NAME), False


def _covering_mount(container: JSON, path: str) -> JSON | None:
    """The container's volume mount holding `path` (the deepest one), if any."""
    best: JSON | None = None
    for mount in container.get("volumeMounts") or []:
        mount_path = posixpath.normpath(str(mount.get("mountPath", "")))
        if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
            if best is None or len(mount_path) > len(posixpath.normpath(str(best.get("mountPath", "")))):
                best = mount
    return best


def _copied_env(container: JSON) -> list[JSON]:
    """torchrun's rank and size, when the operator set them on the training container as plain values."""
    out = []
    for item in container.get("env") or []:
        if item.get("name") in ("PET_NODE_RANK", "PET_NNODES") and isinstance(item.get("value"), str):
            out.append({"name": item["name"], "value": item["value"]})
    return out


def _resources(settings: Injection) -> JSON:
    requests = {k: v for k, v in (("cpu", settings.cpu_request), ("memory", settings.memory_request)) if v}
    limits = {k: v for k, v in (("cpu", settings.cpu_limit), ("memory", settings.memory_limit)) if v}
    out: JSON = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def stall_seconds(text: str) -> str | None:
    """A stall-after ("300", "90s", "5m", "1.5h"; "0" off) as seconds for PODMORTEM_STALL_AFTER; None when
    it is not one (the annotation is then ignored: the webhook never fails a pod)."""
    value = text.strip().lower()
    unit = value[-1:] if value[-1:] in ("s", "m", "h") else ""
    try:
        number = float(value[: len(value) - len(unit)])
    except ValueError:
        return None
    if not 0 <= number < 1e7:  # refuses NaN and infinities too
        return None
    return f"{number * _UNITS[unit]:g}"


def _env_value(container: JSON, name: str) -> tuple[bool, str | None]:
    """(set at all, its literal value or None when it comes from a reference)."""
    for item in container.get("env") or []:
        if item.get("name") == name:
            value = item.get("value")
            return True, value if "valueFrom" not in item and isinstance(value, str) else None
    return False, None


def _has_name(items: list[JSON] | None, name: str) -> bool:
    return any(i.get("name") == name for i in items or [])


def mutate(pod: Mapping[str, Any], settings: Injection) -> Result:
    """The JSONPatch that injects the sidecar into `pod`, or an empty one with the reason it is left alone."""
    meta = metadata_of(pod)
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    spec = spec_of(pod)
    if str(annotations.get(INJECT_ANNOTATION, "")).lower() == "false":
        return Result([], OPTED_OUT, f'annotation {INJECT_ANNOTATION}: "false"')
    if _has_name(spec.get("initContainers"), SIDECAR_NAME) or _has_name(spec.get("containers"), SIDECAR_NAME):
        return Result([], ALREADY_INJECTED, f"{SIDECAR_NAME} is already in the pod")
    workload_env = _workload_env(labels, annotations)
    if workload_env is None:
        return Result([], NOT_TRAINING, "no Kubeflow, JobSet or batch Job label")
    try:
        mutated = _inject(copy.deepcopy(dict(pod)), settings, workload_env)
    except Unsupported as exc:
        return Result([], UNSUPPORTED, str(exc))
    patch = jsonpatch.make_patch(dict(pod), mutated)
    return Result(list(patch.patch), INJECTED)


def _inject(pod: JSON, settings: Injection, workload_env: list[JSON]) -> JSON:
    spec = pod.setdefault("spec", {})
    containers = spec.get("containers") or []
    if not containers:
        raise Unsupported("the pod has no containers")
    volumes: list[JSON] = spec.setdefault("volumes", [])
    for name in (ERRORS_VOLUME, TOKEN_VOLUME):
        if _has_name(volumes, name):
            raise Unsupported(f"a volume named {name!r} exists already")
    annotations = annotations_of(pod)
    training = _training_container(containers, annotations)
    error_file, user_set = _error_file(training, settings)

    sidecar_mounts: list[JSON] = []
    user_mount = _covering_mount(training, error_file) if user_set else None
    if user_mount is not None:
        # The file is on one of the user's volumes: the sidecar reads it through the same volume.
        shared = {k: v for k, v in user_mount.items() if k in ("name", "mountPath", "subPath", "subPathExpr")}
        sidecar_mounts.append({**shared, "readOnly": True})
    else:
        error_dir = posixpath.dirname(error_file)
        if any(
            posixpath.normpath(str(m.get("mountPath", ""))) == error_dir for m in training.get("volumeMounts") or []
        ):
            raise Unsupported(f"{error_dir} is already a mount point in container {training.get('name')!r}")
        volumes.append({"name": ERRORS_VOLUME, "emptyDir": {"sizeLimit": ERRORS_VOLUME_SIZE}})
        training.setdefault("volumeMounts", []).append({"name": ERRORS_VOLUME, "mountPath": error_dir})
        sidecar_mounts.append({"name": ERRORS_VOLUME, "mountPath": error_dir, "readOnly": True})
    if not user_set:
        training.setdefault("env", []).append({"name": ERROR_FILE_ENV, "value": error_file})
    # The capture dir is on podmortem's own emptyDir only: a user's volume may be shared by every pod of
    # the job (a checkpoint PVC), where one pod's sidecar would read the others' sockets and dumps.
    capture_dir = posixpath.dirname(error_file) if user_mount is None else None
    training_env = training.setdefault("env", [])
    if capture_dir is not None and not _env_value(training, "PODMORTEM_CAPTURE_DIR")[0]:
        training_env.append({"name": "PODMORTEM_CAPTURE_DIR", "value": capture_dir})
    if capture_dir is not None and not any(_env_value(training, name)[0] for name in FR_DUMP_ENVS):
        training_env.extend({"name": name, "value": posixpath.join(capture_dir, "fr-")} for name in FR_DUMP_ENVS)
    hook = _python_hook(training, annotations, settings, capture_dir)

    volumes.append(
        {
            "name": TOKEN_VOLUME,
            "projected": {
                "sources": [
                    {
                        "serviceAccountToken": {
                            "audience": settings.token_audience,
                            "expirationSeconds": settings.token_expiration_seconds,
                            "path": TOKEN_FILE,
                        }
                    }
                ]
            },
        }
    )
    sidecar_mounts.append({"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True})

    env: list[JSON] = [
        {"name": "POD_NAME", "valueFrom": _field("metadata.name")},
        {"name": "POD_NAMESPACE", "valueFrom": _field("metadata.namespace")},
        {"name": "POD_UID", "valueFrom": _field("metadata.uid")},
        {"name": "NODE_NAME", "valueFrom": _field("spec.nodeName")},
        {"name": "POD_IP", "valueFrom": _field("status.podIP")},
        {"name": ERROR_FILE_ENV, "value": error_file},
        {"name": AGGREGATOR_ENV, "value": settings.aggregator},
        {"name": "PODMORTEM_CONTAINER", "value": str(training.get("name", ""))},
        *workload_env,
    ]
    if settings.tls_ca_pem:
        env.append({"name": "PODMORTEM_TLS_CA_PEM", "value": settings.tls_ca_pem})
    if settings.hold_timeout:
        env.append({"name": "PODMORTEM_HOLD_TIMEOUT", "value": settings.hold_timeout})
    if capture_dir is not None:
        env.append({"name": "PODMORTEM_CAPTURE_DIR", "value": capture_dir})
    stall = stall_seconds(str(annotations[STALL_AFTER_ANNOTATION])) if STALL_AFTER_ANNOTATION in annotations else None
    stall = stall if stall is not None else settings.stall_after
    if stall and stall != "0":
        env.append({"name": "PODMORTEM_STALL_AFTER", "value": stall})
    pyspy = settings.pyspy and spec.get("shareProcessNamespace") is not False
    if pyspy:
        env.append({"name": "PODMORTEM_PYSPY", "value": "1"})
    have = {e["name"] for e in env}
    env.extend(e for e in _copied_env(training) if e["name"] not in have)
    if spec.get("automountServiceAccountToken") is False:
        # No API credentials in this pod, by the user's choice: the sidecar reports the error file only
        # (the aggregator's pod watch still sees the pod's status).
        env.append({"name": "PODMORTEM_POD_SOURCE", "value": "none"})

    locked_down: JSON = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": settings.run_as_user,
        "runAsGroup": settings.run_as_user,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    sidecar: JSON = {
        "name": SIDECAR_NAME,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "args": ["sidecar"],
        "env": env,
        "resources": _resources(settings),
        "securityContext": copy.deepcopy(locked_down),
        "volumeMounts": sidecar_mounts,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    user = _run_as(training, spec)
    if capture_dir is not None and user is not None and user[0] != 0:
        # The workers' control-plane sockets are created with their umask (0755 usually): only their own
        # user may connect. A training container that names its (non-root) user gets a sidecar of that user.
        sidecar["securityContext"].update(runAsUser=user[0], runAsGroup=user[1] if user[1] is not None else user[0])
    if pyspy:
        # py-spy reads another process's memory (ptrace): root with SYS_PTRACE as its only capability, in a
        # process namespace shared with the training container (docs/kubernetes.md says what that grants).
        spec["shareProcessNamespace"] = True
        sidecar["securityContext"].update(
            runAsUser=0, runAsGroup=0, runAsNonRoot=False, capabilities={"drop": ["ALL"], "add": ["SYS_PTRACE"]}
        )
    if hook is not None:
        training_env[:] = [e for e in training_env if e.get("name") != "PYTHONPATH"]
        training_env.append({"name": "PYTHONPATH", "value": hook})
        assert capture_dir is not None  # `_python_hook` gives none without it
        hook_dir = posixpath.join(capture_dir, "python")
        spec.setdefault("initContainers", []).append(
            {
                "name": PYTHON_HOOK_NAME,
                "image": settings.image,
                "imagePullPolicy": settings.image_pull_policy,
                "command": ["python", "-m", "podmortem.inject", hook_dir],
                "resources": _resources(settings),
                "securityContext": locked_down,
                "volumeMounts": [{"name": ERRORS_VOLUME, "mountPath": capture_dir}],
            }
        )
    if settings.native_sidecars:
        # Appended last: it starts after the pod's own init containers, just before the training container.
        spec.setdefault("initContainers", []).append({**sidecar, "restartPolicy": "Always"})
    else:
        containers.append(sidecar)
    meta = pod.setdefault("metadata", {})
    meta.setdefault("annotations", {})[INJECTED_ANNOTATION] = settings.version
    return pod


def _run_as(container: JSON, spec: JSON) -> tuple[int, int | None] | None:
    """The training container's user and group when the pod names them (container over pod)."""
    pod_ctx = spec.get("securityContext") or {}
    ctx = container.get("securityContext") or {}
    user = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
    group = ctx.get("runAsGroup", pod_ctx.get("runAsGroup"))
    if not isinstance(user, int) or isinstance(user, bool):
        return None
    return user, group if isinstance(group, int) and not isinstance(group, bool) else None


def _python_hook(
    training: JSON, annotations: Mapping[str, str], settings: Injection, own_dir: str | None
) -> str | None:
    """The training container's PYTHONPATH with the start-up hook's directory (in `own_dir`, on podmortem's
    own volume) first, when the hook is asked for and can be had; None otherwise."""
    asked = str(annotations.get(PYTHON_HOOK_ANNOTATION, "")).strip().lower()
    if not (asked == "true" or (settings.python_hook and asked != "false")) or own_dir is None:
        return None
    present, value = _env_value(training, "PYTHONPATH")
    if present and value is None:
        return None  # from a reference: what it holds is not known at admission
    hook_dir = posixpath.join(own_dir, "python")
    return f"{hook_dir}:{value}" if value else hook_dir


def review(admission_review: Mapping[str, Any], settings: Injection) -> tuple[JSON, Result]:
    """Answer an `admission.k8s.io/v1` AdmissionReview. Always allowed: this webhook never rejects an object.
    A pod CREATE gets the sidecar (`mutate`); a batch Job or JobSet CREATE the opt-in retry policy
    (`retrypolicy`).

    Raises `ValueError` when the body is not an AdmissionReview with a request uid (the server answers 400).
    """
    if not isinstance(admission_review, Mapping):
        raise ValueError("the body is not a JSON object")
    request = admission_review.get("request")
    if not isinstance(request, Mapping) or not isinstance(request.get("uid"), str) or not request["uid"]:
        raise ValueError("not an AdmissionReview: request.uid is missing")
    api_version = str(admission_review.get("apiVersion") or "admission.k8s.io/v1")
    response: JSON = {"uid": request["uid"], "allowed": True}
    kind = request.get("kind") or {}
    pod = request.get("object")
    workload = retrypolicy.kind_of(str(kind.get("group", "")), str(kind.get("kind", "")))
    if workload is not None and request.get("operation") == "CREATE" and isinstance(pod, Mapping):
        if workload == "Job":
            patch, outcome, reason = retrypolicy.mutate_job(pod, settings.version)
        else:
            patch, outcome, reason = retrypolicy.mutate_jobset(pod, settings.version, settings.jobset_max_restarts)
        result = Result(patch, outcome, reason, kind=workload)
    elif kind.get("kind") != "Pod" or kind.get("group", "") != "" or request.get("operation") != "CREATE":
        result = Result([], NOT_POD_CREATE, f"{kind.get('kind')} {request.get('operation')}")
    elif not isinstance(pod, Mapping):
        result = Result([], UNSUPPORTED, "request.object is not a pod")
    else:
        result = mutate(pod, settings)
    if result.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(result.patch).encode()).decode()
    return {"apiVersion": api_version, "kind": "AdmissionReview", "response": response}, result
