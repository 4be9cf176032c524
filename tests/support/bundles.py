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


# Text a training pod controls, written to look like markup: on the incident page each must show as text.
HOSTILE_LINES = (
    "<script>window.__pwned = 1</script>",
    '</svg><img src=x onerror="window.__pwned = 2">',
    '<a href="javascript:window.__pwned = 3">open the dashboard</a>',
    '"><svg onload="window.__pwned = 4">',
    "</title></textarea><style>body { display: none }</style>",
    "{{ 7 * 7 }} {% raw %}",
)
HOSTILE_ROOT_MESSAGE = "ValueError: bad label <script>window.__pwned = 5</script> in batch 7"
HOSTILE_POD = 'job-worker-2"><img src=x onerror="window.__pwned = 6">'


def hostile_bundle(root: Path) -> Path:
    """A bundle whose pods put markup everywhere they can: the root's error message and log, a victim's
    log, a victim's pod name and node name, a termination message."""
    logs = {
        "job-worker-1": "\n".join(
            ["[rank1] step 10 loss 1.2", *HOSTILE_LINES, "Traceback (most recent call last):", HOSTILE_ROOT_MESSAGE]
        ),
        "job-worker-0": "\n".join([*HOSTILE_LINES, "RuntimeError: Connection closed by peer [10.0.0.2]:29500"]),
    }
    hostile_pod = pod_json(HOSTILE_POD, index=2, exit_code=143, signal=15, ip="10.0.0.3")
    hostile_pod["spec"]["nodeName"] = "node-<b>bold</b>"
    hostile_pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = HOSTILE_LINES[1]
    pods = {
        "job-worker-0": pod_json("job-worker-0", index=0, ip="10.0.0.1"),
        "job-worker-1": pod_json("job-worker-1", index=1, ip="10.0.0.2"),
        "job-worker-2": hostile_pod,
    }
    errors = {
        "job-worker-1": error_json(HOSTILE_ROOT_MESSAGE, 1795272000),
        "job-worker-0": error_json(
            "RuntimeError: Connection closed by peer [10.0.0.2]:29500 " + HOSTILE_LINES[2], 1795272001
        ),
    }
    return make_bundle(root, pods, errors, logs)


FR_FIXTURES = Path(__file__).parents[1] / "fixtures" / "flightrecorder" / "workload-hang"
HANG_TS = 1795273080  # the stall's captures are from half a second later; the ranks timed out 10 s later
TIMEOUT = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 6000ms for recv operation"


def hang_bundle(root: Path, captured: bool = True) -> Path:
    """Three pods of one rank each that timed out; with `captured`, each pod's captures.json holds what the
    worker control plane answered at the stall (real torch 2.13 answers, tests/fixtures/flightrecorder/README.md):
    rank 1 never entered all_reduce #4, it was in `load_batch`."""
    from podmortem.core.flightrecorder import summarize_json

    pods = {f"job-worker-{r}": pod_json(f"job-worker-{r}", index=r, ip=f"10.0.0.{r + 1}") for r in range(3)}
    b = make_bundle(root, pods, errors={p: error_json(TIMEOUT, HANG_TS + 10) for p in pods})
    for r in range(3) if captured else ():
        summary = summarize_json((FR_FIXTURES / f"fr_trace_json-{r}.txt").read_bytes(), rank=r)
        doc = [
            {
                "path": "control_plane",
                "global_rank": r,
                "local_rank": 0,
                "trigger": "stall",
                "stack": (FR_FIXTURES / f"dump_traceback-{r}.txt").read_text(),
                # as an object here, as the wire's JSON text for rank 2: both are read
                "flight_recorder": summary.to_json() if r == 2 else summary.to_dict(),
                "captured_at": HANG_TS + 0.5,
            }
        ]
        (b / "pods" / f"job-worker-{r}" / "captures.json").write_text(json.dumps(doc))
    return b
