"""Run a real multi-pod torchrun job on this machine, make it fail, and time podmortem's verdict.

The demo and the end-to-end tests need what a cluster would give podmortem — real torch failures,
real pods ending, a real sidecar per pod and a real aggregator — without a cluster. `LocalJob` starts:

* one aggregator process (`podmortem aggregator`, verdicts written to a directory),
* per "pod": one real torchrun agent (`python -m torch.distributed.run --nnodes N --node-rank i ...`
  running `podmortem.local.workload`) with its own TORCHELASTIC_ERROR_FILE, log file and 127.0.0.x pod IP,
  and one real sidecar process (`podmortem sidecar`) watching that pod's error file and Pod JSON,

and itself plays the parts of Kubernetes that are missing:

* **kubelet** (`kubelet.py`) — each pod's Pod JSON (the file the sidecar watches, shaped exactly like
  `kubectl get pod -o json`), its end when its agent exits (the rest of its "container" killed, the
  real exit code or signal, OOMKilled for the simulated OOM kill), deletion and preemption.
* **job controller** (Kubeflow training operator) — once the first pod failed, after a reconcile
  delay it deletes every pod still running: deletionTimestamp in its Pod JSON, SIGTERM to its
  agent, SIGKILL to whatever is left after the grace period.
* **scheduler preemption** — for the `preempt` fault the workload only writes its fault marker; the
  harness then sets a DisruptionTarget condition (PreemptionByScheduler) and deletionTimestamp on that
  pod and SIGTERMs its agent.

Each fault is injected by the workload, which writes `<run>/faults/rank-<R>.json` holding its
`time.time()` right before; the verdict's arrival is the modification time of the verdict file the
aggregator writes. Their difference is the reported fault-to-verdict time.

This module is one run's lifecycle (start, supervise, collect the verdicts, tear down), kept in one
`LocalJob` because every step shares the run's processes and deadlines; the per-pod kubelet part is
`kubelet.py`.

Lifecycle: `LocalJob(spec).run()` does everything in one call and returns a `JobResult`. Every wait
has a deadline (`spec.deadline` for the whole run), and every process started is killed in `finally`
— by process handle, and for a pod's workers by an environment token torchrun passes down to them
(`/proc/<pid>/environ`), since torchrun starts workers in their own sessions.

Without torch: when torch is not importable, each pod runs `podmortem.local.workload` in its no-torch mode
(one process per pod, no torchrun) — same fault plan, error files in torch's exact format, gloo's
messages imitated for the peers. The real-torch path is what tests marked `torch` exercise.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from podmortem import settings
from podmortem.local import clockshim
from podmortem.local.kubelet import TOKEN_ENV, Kubelet, Pod, kill_pids, pids_with_token

POLL = 0.02  # seconds between looks at processes, markers and verdicts


class HarnessError(RuntimeError):
    """The local job could not be run (a process did not start, a deadline passed)."""


@dataclass(frozen=True)
class JobSpec:
    """What to run. Pods are torchrun nodes; `fail_pod` is the node rank made to fail."""

    fault: str = "exception"
    pods: int = 3
    nproc: int = 1
    fail_pod: int | None = None  # default: the last pod
    fail_local_rank: int = 0
    fail_step: int = 8
    # multi: the pod with the second error (default: the one before); skew: when set, that pod (clock
    # behind) also fails on its own a moment after the root, with a timestamp that reads earlier.
    second_pod: int | None = None
    second_delay: float = 1.0  # multi: seconds between the two errors
    skew_seconds: float = 6.0  # skew: how far behind the other pods' clocks run
    pg_timeout: float = 6.0  # gloo collective timeout
    step_time: float = 0.05
    controller_delay: float = 1.0  # job controller reaction time before deleting the other pods
    grace_period: float = 5.0  # terminationGracePeriodSeconds stand-in
    quorum_timeout: float = 15.0
    deadline: float = 150.0  # whole run, start to verdict
    verdict_wait: float = 25.0  # after every pod ended: how long to wait for a final verdict
    # After a final verdict, keep watching this long: a "final" revision has been seen to be revised
    # milliseconds later (a member's log tail arriving after its termination).
    settle: float = 1.0
    namespace: str = "default"
    job_name: str = ""  # default: podmortem-<fault>-<random>
    workdir: str = ""  # default: a fresh temporary directory
    keep_workdir: bool = False  # keep a temporary workdir after the run (it is always kept when given)
    use_torch: bool | None = None  # None: torch when importable
    # False: pods only (no aggregator, no sidecars, no verdict) — to look at what torch itself does.
    with_podmortem: bool = True
    sidecar_extra_env: dict[str, str] = field(default_factory=dict)
    # The kubelet's order with a native sidecar: the sidecar gets SIGTERM as soon as the training
    # container exits, and the pod status that shows the container's end reaches the sidecar's pod
    # source `status_lag` seconds later (the kubelet's status sync to the API server). False: the status
    # is written at once and the sidecars are stopped only after the verdict (the friendliest order).
    kubelet_order: bool = False
    status_lag: float = 0.5
    # Hangs. `stall_after`: seconds of silence after which each pod's sidecar says its training container
    # is quiet (PODMORTEM_STALL_AFTER; 0: stall detection off); keep it below `pg_timeout`. `capture`: how
    # the workers' stacks can be had: "faulthandler" (the workload registers faulthandler for SIGTERM, its
    # stack reaches the log tail at teardown; the sidecars get no capture dir), "cooperative" (that, and
    # the workload serves torch's worker control plane in the sidecars' capture dir), "py_spy" (the
    # sidecar runs py-spy; the workload does nothing), "sitecustomize" (the injected start-up hook
    # registers faulthandler; the workload does nothing) or "none" (no capture path at all).
    stall_after: float = 0.0
    capture: str = "faulthandler"

    def failing_pod(self) -> int:
        return self.pods - 1 if self.fail_pod is None else self.fail_pod


CAPTURE_MODES = ("faulthandler", "cooperative", "py_spy", "sitecustomize", "none")


@dataclass
class PodOutcome:
    name: str
    node_rank: int
    pod_ip: str
    clock_shift: float
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    deleted: bool = False
    preempted: bool = False
    error_file: dict[str, Any] | None = None  # what torch wrote, parsed
    log_file: str = ""


@dataclass
class JobResult:
    spec: JobSpec
    job_name: str
    workdir: str
    torch: bool
    root_pod: str  # the pod made to fail (ground truth)
    pods: list[PodOutcome]
    verdict_doc: dict[str, Any] | None  # the last verdict file read, whole
    revisions: int  # verdict files seen (distinct revisions)
    fault_time: float | None  # wall clock (real), the earliest fault marker
    first_verdict_time: float | None
    verdict_time: float | None  # when the verdict file last returned was written
    last_exit_time: float | None  # wall clock (real): when the last pod's training container ended
    started_at: float
    ended_at: float
    error: str = ""
    fail_rank: int | None = None  # the global rank of the worker made to fail
    provisional_doc: dict[str, Any] | None = None  # the first provisional verdict (a stall) after the fault
    provisional_time: float | None = None  # when it was written
    running_at_provisional: bool = False  # every pod's training container still ran when it was seen

    @property
    def fault_to_provisional(self) -> float | None:
        if self.fault_time is None or self.provisional_time is None:
            return None
        return self.provisional_time - self.fault_time

    @property
    def verdict(self) -> dict[str, Any] | None:
        v = (self.verdict_doc or {}).get("verdict")
        return v if isinstance(v, dict) else None

    @property
    def root_cause(self) -> dict[str, Any] | None:
        r = (self.verdict_doc or {}).get("root_cause")
        return r if isinstance(r, dict) else None

    @property
    def final(self) -> bool:
        return bool((self.verdict_doc or {}).get("final"))

    @property
    def fault_to_verdict(self) -> float | None:
        if self.fault_time is None or self.verdict_time is None:
            return None
        return self.verdict_time - self.fault_time

    @property
    def last_exit_to_verdict(self) -> float | None:
        if self.last_exit_time is None or self.verdict_time is None:
            return None
        return self.verdict_time - self.last_exit_time

    @property
    def fault_to_first_verdict(self) -> float | None:
        if self.fault_time is None or self.first_verdict_time is None:
            return None
        return self.first_verdict_time - self.fault_time


def torch_available() -> bool:
    """Is torch importable here? PODMORTEM_HARNESS_TORCH=0 forces the no-torch fallback."""
    if settings.platform("PODMORTEM_HARNESS_TORCH") == "0":
        return False
    return importlib.util.find_spec("torch") is not None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _import_root() -> str | None:
    """The source tree that holds the `podmortem` package this process runs; None when it is installed (the
    children's interpreter finds it in site-packages as this one did)."""
    root = Path(__file__).resolve().parents[2]
    return None if root.name in ("site-packages", "dist-packages") else str(root)


def _base_env() -> dict[str, str]:
    """Every child's environment. Children start as `python -m ...`, and `-m` puts the current directory
    (the user's, for the aggregator) first on `sys.path`: PYTHONSAFEPATH keeps it off, so that a folder
    named `podmortem` where the user stands (the clone itself, seen from its parent) is never imported in
    place of the package; PYTHONPATH names the source tree this process runs from, if any."""
    env = settings.environment()
    env.pop(TOKEN_ENV, None)
    root = _import_root()
    if root is not None:
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONSAFEPATH"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class LocalJob:
    """One local job run: `LocalJob(JobSpec(fault="oom", pods=3)).run()` -> JobResult."""

    def __init__(self, spec: JobSpec, progress: Callable[[str], None] | None = None) -> None:
        if spec.pods < 1 or spec.nproc < 1:
            raise ValueError("pods and nproc must be >= 1")
        if not 0 <= spec.failing_pod() < spec.pods:
            raise ValueError(f"fail pod {spec.failing_pod()} is not a node rank of a {spec.pods}-pod job")
        if spec.fault == "multi" and spec.pods < 2:
            raise ValueError("the multi fault needs at least two pods")
        if spec.capture not in CAPTURE_MODES:
            raise ValueError(f"capture {spec.capture!r} is not one of {', '.join(CAPTURE_MODES)}")
        self.spec = spec
        self.torch = torch_available() if spec.use_torch is None else spec.use_torch
        self.nproc = spec.nproc if self.torch else 1
        self.job_name = spec.job_name or f"podmortem-{spec.fault}-{secrets.token_hex(3)}"
        self.job_uid = str(uuid.uuid4())
        self._progress = progress
        self._tmp: str | None = None
        self._capture_root: str | None = None  # the pods' capture dirs (sockets, Flight Recorder dumps)
        # Resolved once, here: every child runs in its own pod's directory and is handed absolute paths.
        self.workdir = Path(spec.workdir).resolve() if spec.workdir else Path()
        self.pods: list[Pod] = []
        self.aggregator: subprocess.Popen[bytes] | None = None
        self._aggregator_log: IO[bytes] | None = None
        self.aggregator_address = ""
        self._markers: dict[str, dict[str, Any]] = {}
        self._cleanup_at: float | None = None
        self._controller_fired = False
        self._verdicts: dict[str, float] = {}  # file -> mtime last read
        self._revisions: set[tuple[str, int]] = set()  # (file, revision) seen
        self._first_verdict: float | None = None
        self._last_doc: dict[str, Any] | None = None
        self._last_doc_time: float | None = None
        self._provisionals: list[tuple[dict[str, Any], float, bool]] = []  # doc, mtime, pods all running
        self.kubelet = Kubelet(
            namespace=spec.namespace,
            job_name=self.job_name,
            job_uid=self.job_uid,
            grace_period=spec.grace_period,
            kubelet_order=spec.kubelet_order,
            status_lag=spec.status_lag,
            note=self._note,
        )

    def pod_name(self, node_rank: int) -> str:
        """Kubeflow naming with a Master replica: <job>-master-0, then <job>-worker-<node rank - 1>."""
        return f"{self.job_name}-master-0" if node_rank == 0 else f"{self.job_name}-worker-{node_rank - 1}"

    def fail_rank(self) -> int:
        """The global rank of the worker made to fail (torchrun numbers a pod's workers consecutively)."""
        s = self.spec
        return s.failing_pod() * self.nproc + min(s.fail_local_rank, self.nproc - 1)

    def _capture_env(self, pod: Pod) -> dict[str, str]:
        """What the pod's containers share for captures (the webhook's part in a cluster): the capture dir
        for sockets and Flight Recorder dumps, and the recorder's settings."""
        if self.spec.capture in ("none", "faulthandler"):
            return {}
        if self._capture_root is None:
            # Short: a unix socket's path is at most 107 bytes, and a run's workdir (pytest's tmp_path) is long.
            self._capture_root = tempfile.mkdtemp(prefix="pm-")
        capture_dir = Path(self._capture_root) / str(pod.index)
        capture_dir.mkdir(exist_ok=True)
        return {
            "PODMORTEM_CAPTURE_DIR": str(capture_dir),
            "TORCH_FR_BUFFER_SIZE": "2000",
            "TORCH_FR_DUMP_TEMP_FILE": str(capture_dir / "fr-"),
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(capture_dir / "fr-"),
        }

    def _note(self, text: str) -> None:
        if self._progress is not None:
            self._progress(text)

    # ---------------------------------------------------------------------------------- running

    def run(self) -> JobResult:
        """Start everything, play Kubernetes until the verdict (or a deadline), stop everything. Once."""
        if self.pods:
            raise HarnessError("a LocalJob runs once; make a new one")
        started = time.time()
        deadline = time.monotonic() + self.spec.deadline
        error = ""
        try:
            self._prepare()
            if self.spec.with_podmortem:
                self._start_aggregator(deadline)
            self._start_pods()
            self._supervise(deadline)
            if self.spec.with_podmortem:
                self._await_verdict(deadline)
        except HarnessError as exc:
            error = str(exc)
        finally:
            self._stop_everything()
        result = self._result(started, error)
        if self._capture_root is not None:
            shutil.rmtree(self._capture_root, ignore_errors=True)
        if self._tmp and not self.spec.keep_workdir:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return result

    def _prepare(self) -> None:
        if not self.spec.workdir:
            self._tmp = tempfile.mkdtemp(prefix=f"{self.job_name}-")
            self.workdir = Path(self._tmp)
        for sub in ("faults", "verdicts", "pods"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        now = time.time()
        fail = self.spec.failing_pod()
        for i in range(self.spec.pods):
            rtype, rindex = ("master", 0) if i == 0 else ("worker", i - 1)
            name = self.pod_name(i)
            shift = -self.spec.skew_seconds if self.spec.fault == "skew" and i != fail else 0.0
            d = self.workdir / "pods" / name
            d.mkdir(parents=True, exist_ok=True)
            self.pods.append(
                Pod(
                    index=i,
                    name=name,
                    uid=str(uuid.uuid4()),
                    node=f"local-node-{i}",
                    ip=f"127.0.0.{10 + i}",
                    replica_type=rtype,
                    replica_index=rindex,
                    shift=shift,
                    dir=d,
                    token=f"{self.job_uid}/{name}",
                    created_at=now,
                )
            )

    def _start_aggregator(self, deadline: float) -> None:
        ready = self.workdir / "aggregator.ready"
        cmd = [
            sys.executable,
            "-m",
            "podmortem.cli",
            "aggregator",
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
            "--verdict-dir",
            str(self.workdir / "verdicts"),
            "--world-size",
            str(self.spec.pods),
            "--quorum-timeout",
            str(self.spec.quorum_timeout),
            "--metrics-listen",
            "127.0.0.1:0",
        ]
        self._aggregator_log = (self.workdir / "aggregator.log").open("wb")
        self.aggregator = subprocess.Popen(
            cmd, env=_base_env(), stdout=self._aggregator_log, stderr=subprocess.STDOUT, start_new_session=True
        )
        limit = min(deadline, time.monotonic() + 30.0)
        while time.monotonic() < limit:
            if ready.exists() and ready.read_text().strip():
                self.aggregator_address = ready.read_text().strip()
                self._note(f"aggregator serving on {self.aggregator_address}")
                return
            if self.aggregator.poll() is not None:
                raise HarnessError(
                    f"aggregator exited with {self.aggregator.returncode}: {self._tail('aggregator.log')}"
                )
            time.sleep(POLL)
        raise HarnessError("aggregator did not become ready within 30 s")

    def _tail(self, rel: str, n: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return (self.workdir / rel).read_text(errors="replace")[-n:]
        return ""

    def _start_pods(self) -> None:
        for pod in self.pods:
            pod.started_at = time.time()
            self.kubelet.write_status(pod)
            if self.spec.with_podmortem:
                self._start_sidecar(pod)
        if self.spec.with_podmortem:
            time.sleep(0.5)  # let the sidecars register before anything can fail
        master_port = _free_port()
        for pod in self.pods:
            self._start_agent(pod, master_port)
        what = "torchrun agents" if self.torch else "worker processes (no torch)"
        with_sidecars = " with a sidecar each" if self.spec.with_podmortem else ""
        self._note(f"started {len(self.pods)} pods ({what}{with_sidecars}); torch takes a while to start")

    def _shim_env(self, pod: Pod, base: dict[str, str]) -> dict[str, str]:
        if not pod.shift:
            return {}
        try:
            return clockshim.shim_env(pod.shift, base)
        except clockshim.ShimUnavailable as exc:
            raise HarnessError(f"the skew fault needs the clock shim: {exc}") from exc

    def _start_sidecar(self, pod: Pod) -> None:
        env = _base_env()
        env.update(
            {
                "POD_NAME": pod.name,
                "POD_NAMESPACE": self.spec.namespace,
                "POD_UID": pod.uid,
                "NODE_NAME": pod.node,
                "POD_IP": pod.ip,
                "TORCHELASTIC_ERROR_FILE": str(pod.error_file),
                "PODMORTEM_AGGREGATOR": self.aggregator_address,
                "PODMORTEM_JOB_NAME": self.job_name,
                "PODMORTEM_JOB_KIND": "PyTorchJob",
                "PODMORTEM_JOB_UID": self.job_uid,
                "PODMORTEM_REPLICA_TYPE": pod.replica_type,
                "PODMORTEM_REPLICA_INDEX": str(pod.replica_index),
                "PET_NODE_RANK": str(pod.index),
                "PET_NNODES": str(self.spec.pods),
                "PODMORTEM_POD_STATUS_FILE": str(pod.status_file),
                "PODMORTEM_LOG_FILE": str(pod.log_file),
            }
        )
        env.update(self._capture_env(pod))
        if self.spec.stall_after > 0:
            env["PODMORTEM_STALL_AFTER"] = f"{self.spec.stall_after:g}"
        if self.spec.capture == "py_spy":
            env["PODMORTEM_PYSPY"] = "1"
        env.update(self.spec.sidecar_extra_env)
        env.update(self._shim_env(pod, env))  # the sidecar shares its node's clock
        pod.sidecar_log = (pod.dir / "sidecar.log").open("wb")
        pod.sidecar = subprocess.Popen(
            [sys.executable, "-m", "podmortem.cli", "sidecar"],
            env=env,
            cwd=pod.dir,
            stdout=pod.sidecar_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _workload_args(self) -> list[str]:
        s = self.spec
        args = [
            "--fault",
            s.fault,
            "--fail-rank",
            str(self.fail_rank()),
            "--fail-step",
            str(s.fail_step),
            "--pg-timeout",
            str(s.pg_timeout),
            "--step-time",
            str(s.step_time),
            "--fault-dir",
            str(self.workdir / "faults"),
        ]
        second = self._second_pod()
        if second is not None:
            args += ["--second-rank", str(second * self.nproc), "--second-delay", str(s.second_delay)]
        return args

    def _workload_capture_env(self, env: dict[str, str]) -> dict[str, str]:
        """How the workload takes part in captures (`JobSpec.capture`)."""
        mode = self.spec.capture
        out = {"PODMORTEM_WORKLOAD_COOPERATE": "1" if mode in ("cooperative", "faulthandler") else "0"}
        if mode == "sitecustomize":
            inject = str(Path(__file__).resolve().parent.parent / "inject")  # podmortem/inject
            out["PYTHONPATH"] = inject + os.pathsep + env.get("PYTHONPATH", "")
        return out

    def _start_agent(self, pod: Pod, master_port: int) -> None:
        env = _base_env()
        env.update(
            {
                TOKEN_ENV: pod.token,
                "TORCHELASTIC_ERROR_FILE": str(pod.error_file),
                "POD_IP": pod.ip,
                "HOSTNAME": pod.name,
                "PET_NODE_RANK": str(pod.index),
                "PET_NNODES": str(self.spec.pods),
            }
        )
        env.update(self._capture_env(pod))
        env.update(self._workload_capture_env(env))
        env.update(self._shim_env(pod, env))
        # torchrun and torch keep scratch directories (torchelastic_*, torchinductor_*) in the temporary
        # directory and leave them when torn down: in the run's own `tmp/` they go with the run.
        tmp = self.workdir / "tmp" / pod.name
        tmp.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmp)
        if self.torch:
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                str(self.spec.pods),
                "--node-rank",
                str(pod.index),
                "--nproc-per-node",
                str(self.nproc),
                "--rdzv-backend",
                "static",
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(master_port),
                "--max-restarts",
                "0",
                "-m",
                "podmortem.local.workload",
                *self._workload_args(),
            ]
        else:
            env.update({"PODMORTEM_WORKLOAD_FALLBACK": "1", "RANK": str(pod.index), "WORLD_SIZE": str(self.spec.pods)})
            cmd = [sys.executable, "-m", "podmortem.local.workload", *self._workload_args(), "--pod-ip", pod.ip]
        pod.log = pod.log_file.open("ab")
        pod.agent = subprocess.Popen(
            cmd, env=env, cwd=pod.dir, stdout=pod.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    # ------------------------------------------------------------------------ kubelet/controller

    def _supervise(self, deadline: float) -> None:
        """Play kubelet and job controller until every pod has ended."""
        while any(p.running or p.status_due is not None for p in self.pods):
            if time.monotonic() > deadline:
                raise HarnessError("deadline passed with pods still running")
            now = time.time()
            self._read_markers()
            for pod in self.pods:
                if pod.status_due is not None and time.monotonic() >= pod.status_due:
                    pod.status_due = None
                    self.kubelet.write_status(pod)
                if pod.running and pod.agent is not None and pod.agent.poll() is not None:
                    self._on_agent_exit(pod, pod.agent.returncode)
                elif pod.running and pod.kill_at is not None and time.monotonic() >= pod.kill_at:
                    kill_pids(pids_with_token(pod.token), signal.SIGKILL)
            if self._cleanup_at is not None and time.monotonic() >= self._cleanup_at and not self._second_pending():
                self._cleanup_at = None
                doomed = [p for p in self.pods if p.running and p.deleted_at is None]
                if doomed:
                    self._note(f"job failed: the controller deletes {', '.join(p.name for p in doomed)}")
                for pod in doomed:
                    self.kubelet.delete(pod, now)
            self._scan_verdicts()
            time.sleep(POLL)

    def _read_markers(self) -> None:
        for f in (self.workdir / "faults").glob("rank-*.json"):
            if f.name in self._markers:
                continue
            try:
                marker = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            self._markers[f.name] = marker
            where = self.pods[int(marker["rank"]) // self.nproc].name
            self._note(
                f"fault: {marker.get('fault')} on rank {marker.get('rank')} ({where}) at step {marker.get('step')}"
            )
            if marker.get("fault") == "multi-second" and self._cleanup_at is not None:
                # The controller's reaction is counted from the scenario's second error, so that the
                # cleanup never races it (the second error is independent of the first, by design).
                self._cleanup_at = max(self._cleanup_at, time.monotonic() + self.spec.controller_delay)
            if marker.get("fault") == "preempt":
                pod = self.pods[int(marker["rank"]) // self.nproc]
                if pod.running:
                    self.kubelet.preempt(pod)

    def _second_pending(self) -> bool:
        """The scenario has a second, independent error (multi, skew with a second pod) whose pod has not
        failed of it yet: the job controller's cleanup waits until that pod's agent has exited with it (its
        error file written), or a loaded machine lets the deletion win the race. The overall deadline
        bounds the wait."""
        second = self._second_pod()
        return second is not None and self.pods[second].running and self.pods[second].deleted_at is None

    def _second_pod(self) -> int | None:
        """The node rank of the pod with the scenario's second, independent error; None without one."""
        s = self.spec
        if s.fault == "multi" or (s.fault == "skew" and s.second_pod is not None):
            return (s.failing_pod() - 1) % s.pods if s.second_pod is None else s.second_pod
        return None

    def _on_agent_exit(self, pod: Pod, rc: int) -> None:
        oom_killed = any(
            m.get("fault") == "sigkill" and int(m["rank"]) // self.nproc == pod.index for m in self._markers.values()
        )
        self.kubelet.agent_exited(pod, rc, oom_killed)
        if rc != 0 and not self._controller_fired:  # the job failed: the operator deletes the rest
            self._controller_fired = True
            self._cleanup_at = time.monotonic() + self.spec.controller_delay

    def _provisional(self) -> tuple[dict[str, Any], float, bool] | None:
        """The first provisional verdict after the fault (a silent start-up can look like a stall too)."""
        fault = self._fault_time()
        after = [p for p in self._provisionals if fault is None or p[1] >= fault]
        return after[0] if after else None

    def _fault_time(self) -> float | None:
        times = []
        for m in self._markers.values():
            pod = self.pods[int(m["rank"]) // self.nproc]
            times.append(float(m["time"]) - pod.shift)  # back to the real clock
        return min(times) if times else None

    # -------------------------------------------------------------------------------- verdicts

    def _scan_verdicts(self) -> None:
        for f in (self.workdir / "verdicts").glob("*.json"):
            if f.name.startswith("."):
                continue
            try:
                mtime = f.stat().st_mtime
                if self._verdicts.get(f.name) == mtime:
                    continue
                doc = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(doc, dict):
                continue
            if doc.get("closed_by") == "stall":
                running = all(p.running for p in self.pods)
                self._provisionals.append((doc, mtime, running))
                self._note(f"provisional verdict (pods {'still running' if running else 'ending'})")
            if self._first_verdict is None and not doc.get("provisional"):
                self._first_verdict = mtime  # the first verdict on the failure (provisional ones are apart)
            root = doc.get("root_cause") or {}
            final = "final" if doc.get("final") else "not final"
            self._note(f"verdict revision {doc.get('revision')} ({final}): {root.get('pod')} — {root.get('category')}")
            self._verdicts[f.name] = mtime
            self._revisions.add((f.name, int(doc.get("revision") or 0)))
            self._last_doc, self._last_doc_time = doc, mtime

    def _await_verdict(self, deadline: float) -> None:
        limit = min(deadline, time.monotonic() + self.spec.verdict_wait)
        settled_at: float | None = None
        while time.monotonic() < limit:
            self._scan_verdicts()
            if self._last_doc is not None and self._last_doc.get("final"):
                settled_at = settled_at or time.monotonic() + self.spec.settle
                if time.monotonic() >= settled_at:
                    return
            if self.aggregator is not None and self.aggregator.poll() is not None:
                raise HarnessError(f"aggregator exited with {self.aggregator.returncode}")
            time.sleep(POLL)
        if self._last_doc is None:
            raise HarnessError(f"no verdict within {self.spec.verdict_wait:g} s after the pods ended")

    # ---------------------------------------------------------------------------------- teardown

    def _stop_everything(self) -> None:
        """Kill every process this run started. Sidecars and the aggregator get SIGTERM first."""
        for pod in self.pods:
            kill_pids(pids_with_token(pod.token), signal.SIGKILL)
            if pod.agent is not None and pod.agent.poll() is None:
                pod.agent.kill()
        daemons = [p.sidecar for p in self.pods if p.sidecar is not None]
        _stop(daemons, timeout=5.0)
        if self.aggregator is not None:
            _stop([self.aggregator], timeout=8.0)
        for pod in self.pods:
            if pod.agent is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    pod.agent.wait(timeout=2.0)
            for fh in (pod.log, pod.sidecar_log):
                if fh is not None:
                    fh.close()
            pod.log = pod.sidecar_log = None
        if self._aggregator_log is not None:
            self._aggregator_log.close()
        self._scan_verdicts()  # the aggregator may publish once more while stopping

    def _result(self, started: float, error: str) -> JobResult:
        provisional = self._provisional()
        outcomes = []
        for pod in self.pods:
            err: dict[str, Any] | None = None
            with contextlib.suppress(OSError, ValueError):
                loaded = json.loads(pod.error_file.read_text())
                err = loaded if isinstance(loaded, dict) else None
            outcomes.append(
                PodOutcome(
                    name=pod.name,
                    node_rank=pod.index,
                    pod_ip=pod.ip,
                    clock_shift=pod.shift,
                    exit_code=pod.exit_code,
                    signal=pod.signal,
                    reason=pod.reason,
                    deleted=pod.deleted_at is not None,
                    preempted=pod.disruption_at is not None,
                    error_file=err,
                    log_file=str(pod.log_file),
                )
            )
        return JobResult(
            spec=self.spec,
            job_name=self.job_name,
            workdir=str(self.workdir),
            torch=self.torch,
            root_pod=self.pods[self.spec.failing_pod()].name if self.pods else "",
            pods=outcomes,
            verdict_doc=copy.deepcopy(self._last_doc),
            revisions=len(self._revisions),
            fault_time=self._fault_time(),
            first_verdict_time=self._first_verdict,
            verdict_time=self._last_doc_time,
            last_exit_time=max((p.finished_at for p in self.pods if p.finished_at is not None), default=None),
            started_at=started,
            ended_at=time.time(),
            error=error,
            fail_rank=self.fail_rank(),
            provisional_doc=copy.deepcopy(provisional[0]) if provisional else None,
            provisional_time=provisional[1] if provisional else None,
            running_at_provisional=provisional[2] if provisional else False,
        )


def _stop(procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """SIGTERM, wait up to `timeout` for all, then SIGKILL the rest."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
    limit = time.monotonic() + timeout
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(limit - time.monotonic(), 0.01))
    for p in procs:
        if p.poll() is None:
            p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=2.0)


def run_job(spec: JobSpec) -> JobResult:
    """Run one local job to its verdict (or its deadline). Never leaves a process behind."""
    return LocalJob(spec).run()
