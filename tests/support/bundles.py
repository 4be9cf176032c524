"""Incident bundles written to real files in tmp_path, for the loader's and `podmortem analyze`'s tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def pod_json(
    name: str,
    *,
    rtype: str = "worker",
    index: int = 0,
    exit_code: int = 1,
    signal: int | None = None,
    reason: str = "Error",
    ip: str = "10.0.0.1",
    deleted: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    term: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": "2026-11-21T14:58:00Z",
        "finishedAt": "2026-11-21T14:58:20Z",
    }
    if signal is not None:
        term["signal"] = signal
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "creationTimestamp": "2026-11-21T14:57:58Z",
        "labels": {
            "training.kubeflow.org/job-name": "job",
            "training.kubeflow.org/replica-type": rtype,
            "training.kubeflow.org/replica-index": str(index),
        },
        "ownerReferences": [{"kind": "PyTorchJob", "name": "job", "uid": "job-uid", "controller": True}],
    }
    if deleted:
        meta["deletionTimestamp"] = deleted
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"nodeName": f"node-{name}", "hostname": name, "containers": [{"name": "pytorch"}]},
        "status": {
            "phase": "Failed",
            "podIP": ip,
            "conditions": conditions or [],
            "containerStatuses": [{"name": "pytorch", "restartCount": 0, "state": {"terminated": term}}],
        },
    }


def error_json(message: str, ts: int) -> dict[str, Any]:
    return {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": "Traceback ...", "timestamp": str(ts)},
            "errorCode": 1,
        }
    }


def make_bundle(
    root: Path,
    pods: dict[str, dict[str, Any]],
    errors: dict[str, Any] | None = None,
    logs: dict[str, str] | None = None,
    world_size: int | None = None,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "incident.json").write_text(
        json.dumps(
            {
                "job": {"namespace": "ns", "name": "job", "kind": "PyTorchJob", "uid": "job-uid"},
                "world_size": world_size or len(pods),
            }
        )
    )
    for name, pod in pods.items():
        d = root / "pods" / name
        d.mkdir(parents=True)
        (d / "pod.json").write_text(json.dumps(pod))
        if errors and name in errors:
            e = errors[name]
            (d / "error.json").write_text(e if isinstance(e, str) else json.dumps(e))
        if logs and name in logs:
            (d / "log.txt").write_text(logs[name])
    return root
