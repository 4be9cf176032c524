"""The local harness's kubelet: each "pod"'s status as Kubernetes would write it, and its end.

`LocalJob` (`harness.py`) starts the processes and plays the job controller; this module plays the
parts a node and the API server play for one pod:

* the **Pod JSON** (`Kubelet.pod_object`, written by `write_status` to the file the sidecar watches),
  shaped exactly like `kubectl get pod -o json`. Node-clock times (startedAt, finishedAt) are on the
  pod's possibly skewed clock, control-plane times (deletionTimestamp, DisruptionTarget) on the real one;
* the **end of a container** (`agent_exited`): when an agent exits, every process left in its
  "container" is killed (a container dies with its PID 1), and the status gets `state.terminated` with
  the real exit code, or 128 + signal and `signal` when it died by a signal; `reason` is OOMKilled for
  the simulated OOM kill, Error or Completed otherwise. In the kubelet's order (`kubelet_order`) a
  native sidecar is signalled first and the status follows `status_lag` seconds later;
* **deletion and preemption** (`delete`, `preempt`): deletionTimestamp (and a DisruptionTarget
  condition for a preemption) in the Pod JSON, SIGTERM to the container's PID 1; SIGKILL to what is
  left after the grace period is the harness's loop (`Pod.kill_at`).

A pod's processes are found by an environment token (`TOKEN_ENV`) torchrun passes down to its workers
(`/proc/<pid>/environ`), since torchrun starts workers in their own sessions.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from podmortem.core.names import DISRUPTION_TARGET
from podmortem.k8s.objects import rfc3339

TOKEN_ENV = "PODMORTEM_HARNESS_POD"


def write_json_atomically(path: Path, doc: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, path)


def pids_with_token(token: str) -> list[int]:
    """Processes whose environment carries TOKEN_ENV=token: one pod's agent and workers."""
    needle = f"{TOKEN_ENV}={token}".encode() + b"\0"
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env or env.endswith(needle[:-1]):
            found.append(int(entry.name))
    return found


def kill_pids(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


@dataclass
class Pod:
    """The harness's own bookkeeping for one pod (mutable; the outcome is copied out at the end)."""

    index: int
    name: str
    uid: str
    node: str
    ip: str
    replica_type: str
    replica_index: int
    shift: float
    dir: Path
    token: str
    created_at: float
    started_at: float = 0.0
    agent: subprocess.Popen[bytes] | None = None
    sidecar: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    sidecar_log: IO[bytes] | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    deleted_at: float | None = None
    disruption_at: float | None = None
    kill_at: float | None = None  # grace period end
    status_due: float | None = None  # kubelet order: when the status showing the end is written

    @property
    def status_file(self) -> Path:
        return self.dir / "pod.json"

    @property
    def error_file(self) -> Path:
        return self.dir / "error.json"

    @property
    def log_file(self) -> Path:
        return self.dir / "log.txt"

    @property
    def running(self) -> bool:
        return self.finished_at is None

    def node_time(self, t: float) -> float:
        """A real time as this pod's node clock shows it."""
        return t + self.shift


class Kubelet:
    """Writes each pod's status and plays the node's part when a pod ends or is deleted."""

    def __init__(
        self,
        *,
        namespace: str,
        job_name: str,
        job_uid: str,
        grace_period: float,
        kubelet_order: bool,
        status_lag: float,
        note: Callable[[str], None],
    ) -> None:
        self.namespace = namespace
        self.job_name = job_name
        self.job_uid = job_uid
        self.grace_period = grace_period
        self.kubelet_order = kubelet_order
        self.status_lag = status_lag
        self._note = note

    def preempt(self, pod: Pod) -> None:
        now = time.time()
        self._note(f"scheduler preempts {pod.name}: DisruptionTarget, SIGTERM")
        pod.disruption_at = now
        self.delete(pod, now)

    def delete(self, pod: Pod, now: float) -> None:
        """The API server marks the pod deleted; the kubelet SIGTERMs its container's PID 1."""
        pod.deleted_at = now
        self.write_status(pod)
        if pod.agent is not None and pod.agent.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                pod.agent.send_signal(signal.SIGTERM)
        pod.kill_at = time.monotonic() + self.grace_period

    def agent_exited(self, pod: Pod, rc: int, oom_killed: bool) -> None:
        # The container's PID 1 is gone: the kernel kills the rest of its PID namespace.
        kill_pids(pids_with_token(pod.token), signal.SIGKILL)
        pod.finished_at = time.time()
        if rc < 0:
            pod.signal, pod.exit_code = -rc, 128 - rc
        else:
            pod.exit_code = rc
        pod.reason = "OOMKilled" if oom_killed else ("Completed" if rc == 0 else "Error")
        if self.kubelet_order and pod.sidecar is not None:
            # A native sidecar is signalled as the training container exits; the status follows later.
            pod.status_due = time.monotonic() + self.status_lag
            if pod.sidecar.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    pod.sidecar.send_signal(signal.SIGTERM)
        else:
            self.write_status(pod)
        how = f"signal {pod.signal}" if pod.signal else f"exit code {pod.exit_code}"
        wrote = "wrote an error file" if pod.error_file.exists() else "no error file"
        self._note(f"{pod.name} ended: {how}, {pod.reason}, {wrote}")
        if pod.log is not None:
            pod.log.close()
            pod.log = None

    def write_status(self, pod: Pod) -> None:
        write_json_atomically(pod.status_file, self.pod_object(pod))

    def pod_object(self, pod: Pod) -> dict[str, Any]:
        """The pod as `kubectl get pod -o json` would show it now (shape of the corpus' pod.json)."""
        labels = {
            "training.kubeflow.org/job-name": self.job_name,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": pod.replica_type,
            "training.kubeflow.org/replica-index": str(pod.replica_index),
        }
        if pod.replica_type == "master":
            labels["training.kubeflow.org/job-role"] = "master"
        metadata: dict[str, Any] = {
            "name": pod.name,
            "namespace": self.namespace,
            "uid": pod.uid,
            "creationTimestamp": rfc3339(pod.created_at),
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": self.job_name,
                    "uid": self.job_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
        if pod.deleted_at is not None:
            metadata["deletionTimestamp"] = rfc3339(pod.deleted_at)
            metadata["deletionGracePeriodSeconds"] = int(self.grace_period)
        started = rfc3339(pod.node_time(pod.started_at))
        conditions: list[dict[str, Any]] = [
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(pod.created_at),
            },
            {"type": "Initialized", "status": "True", "lastProbeTime": None, "lastTransitionTime": started},
        ]
        container: dict[str, Any] = {
            "name": "pytorch",
            "image": "local/podmortem-workload:dev",
            "ready": pod.running,
            "restartCount": 0,
            "started": pod.running,
            "lastState": {},
        }
        if pod.running:
            phase = "Running"
            container["state"] = {"running": {"startedAt": started}}
            conditions += [
                {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": started},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": None, "lastTransitionTime": started},
            ]
        else:
            assert pod.finished_at is not None
            phase = "Succeeded" if pod.exit_code == 0 else "Failed"
            finished = rfc3339(pod.node_time(pod.finished_at))
            terminated: dict[str, Any] = {"exitCode": pod.exit_code, "reason": pod.reason}
            if pod.signal is not None:
                terminated["signal"] = pod.signal
            terminated.update({"startedAt": started, "finishedAt": finished})
            container["state"] = {"terminated": terminated}
            why = "PodCompleted" if phase == "Succeeded" else "PodFailed"
            conditions += [
                {
                    "type": "Ready",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": finished,
                    "reason": why,
                },
                {
                    "type": "ContainersReady",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": finished,
                    "reason": why,
                },
            ]
        if pod.disruption_at is not None:
            conditions.append(
                {
                    "type": DISRUPTION_TARGET,
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(pod.disruption_at),
                    "reason": "PreemptionByScheduler",
                    "message": "default-scheduler: preempting to accommodate a higher priority pod",
                }
            )
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {
                "nodeName": pod.node,
                "hostname": pod.name,
                "subdomain": self.job_name,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": int(self.grace_period),
                "containers": [{"name": "pytorch", "image": "local/podmortem-workload:dev"}],
            },
            "status": {
                "phase": phase,
                "conditions": conditions,
                "hostIP": f"127.0.1.{10 + pod.index}",
                "podIP": pod.ip,
                "podIPs": [{"ip": pod.ip}],
                "startTime": rfc3339(pod.node_time(pod.started_at)),
                "containerStatuses": [container],
                "qosClass": "Burstable",
            },
        }
