"""Hangs on real torchrun jobs (gloo): what torch itself records, and what podmortem makes of it.

Flight Recorder state and stacks made by torch itself, read and matched by podmortem:

1. `tests/support/fr_dump_job.py`: three ranks, two enqueue an all_reduce the third never enters, and each
   writes its own `_dump_fr_trace()` (pickle) and `_dump_fr_trace_json()`: read by the restricted unpickler,
   summarised, matched.
2. The demo workload (`podmortem.local.workload`) mid-hang, asked through torch's worker control plane the
   way the sidecar asks (`POST /handler/fr_trace_json`, `/handler/dump_traceback` on
   `$PODMORTEM_CAPTURE_DIR/worker-<RANK>.sock`): `--fault hang` names the rank and its `load_batch` line,
   `--fault desync` a mismatch naming the rank that skipped.

One torchrun agent, 3 workers; process-group timeouts long enough that the questions come first.

Hangs end to end on real torchrun jobs: the rank that stopped, and the line it stopped on.

Each case runs `podmortem.local.harness.LocalJob` (real torchrun agents on gloo, a real sidecar per pod,
the real aggregator) with one worker made to hang or to skip a collective, and one way for the sidecars
to see inside the workers (`JobSpec.capture`), with or without stall detection. The cases are the hang
story's: a rank sleeping in user code, with its pod's sibling timing out (the pod is not silent); a rank
that skipped a collective; a rank stuck in a DataLoader worker; and each capture path alone (stall with
the control plane, stall with py-spy, the SIGTERM stack at teardown, best effort at the first timeout),
and none at all (the verdict as before: the pod and the category, no rank or line). Flight Recorder dump
files are NCCL's, written on its timeout; gloo writes none, so that path is the sidecar's own tests'
(`tests/integration/test_capture_process.py`), while the Flight Recorder state itself comes here
through the control plane (`fr_trace_json`).

Collective timeouts are short and jobs small (2 cores): every job has a hard deadline and kills all its
processes when it ends. Timing figures are `bench/`'s; here only what the verdict says, and that the
provisional verdict came while every pod still ran.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from podmortem.core.flightrecorder import summarize_json, summarize_pickle
from podmortem.core.hangs import RankCapture, match
from podmortem.core.model import WorkerCapture
from podmortem.local.harness import JobResult, JobSpec, LocalJob
from podmortem.sidecar.capture import find_pyspy

pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
    pytest.mark.timeout(300),
]
JOB = Path(__file__).parents[1] / "support" / "fr_dump_job.py"


def _torchrun(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3", "--max-restarts", "0", *args]
    with log.open("wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.mark.parametrize("mismatch", [False, True])
def test_dumps_torch_wrote_itself(tmp_path: Path, mismatch: bool) -> None:
    env = dict(os.environ, FR_OUT=str(tmp_path), FR_MISMATCH="1" if mismatch else "0", TORCH_FR_BUFFER_SIZE="200")
    proc = _torchrun([str(JOB)], env, tmp_path / "log.txt")
    try:
        assert proc.wait(240) == 0, (tmp_path / "log.txt").read_text()[-3000:]
    finally:
        _stop(proc)
    for kind, read in (("pkl", summarize_pickle), ("json", summarize_json)):
        caps = [
            RankCapture(
                r,
                f"pod-{r}",
                WorkerCapture(
                    "fr_file", global_rank=r, flight_recorder=read((tmp_path / f"fr-{r}.{kind}").read_bytes(), rank=r)
                ),
            )
            for r in range(3)
        ]
        found = match(caps)
        assert found is not None, kind
        if mismatch:
            assert (found.finding, found.stuck_ranks, found.process_group, found.op) == (
                "mismatch",
                (1,),
                "1",
                "broadcast",
            )
        else:
            assert (found.finding, found.stuck_ranks, found.seq, found.op) == ("behind", (2,), 4, "all_reduce")
        # Only rank 2's dump missing: the others' state still names it.
        found = match(caps[:2], all_ranks=range(3), owners={2: "pod-2"})
        assert found is not None and found.stuck_ranks == ((1,) if mismatch else (2,))


def _ask(sock: Path, handler: str) -> bytes:
    """POST /handler/<handler> on a worker's control-plane socket (HTTP/1.1); the answer's body."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(sock))
        s.sendall(
            f"POST /handler/{handler} HTTP/1.1\r\nHost: localhost\r\n"
            "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
        )
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


@pytest.mark.parametrize("fault", ["hang", "desync"])
def test_demo_workload_through_the_control_plane(tmp_path: Path, fault: str) -> None:
    cap, faults = tmp_path / "cap", tmp_path / "faults"
    cap.mkdir()
    env = dict(os.environ, PODMORTEM_CAPTURE_DIR=str(cap), POD_IP="127.0.0.1")
    args = ["-m", "podmortem.local.workload", "--fault", fault, "--fail-rank", "1", "--fail-step", "3"]
    proc = _torchrun([*args, "--pg-timeout", "60", "--fault-dir", str(faults)], env, tmp_path / "log.txt")
    try:
        deadline = time.monotonic() + 180
        while not (faults / "rank-1.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "log.txt").read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(2.0)  # the others reach the collective rank 1 does not
        caps = []
        for r in range(3):
            sock = cap / f"worker-{r}.sock"
            summary = summarize_json(_ask(sock, "fr_trace_json"), rank=r)
            stack = _ask(sock, "dump_traceback").decode()
            caps.append(
                RankCapture(
                    r, f"pod-{r}", WorkerCapture("control_plane", global_rank=r, flight_recorder=summary, stack=stack)
                )
            )
    finally:
        _stop(proc)
    found = match(caps)
    assert found is not None
    assert found.stuck_ranks == (1,)
    assert found.frame is not None and found.frame.file.endswith("podmortem/local/workload.py")
    if fault == "hang":
        assert (found.finding, found.op, found.frame.function) == ("behind", "all_reduce", "load_batch")
    else:
        assert found.finding == "mismatch" and "different order" in found.detail


WORKLOAD = "podmortem/local/workload.py"


def _run(spec: JobSpec, tmp_path: Path) -> JobResult:
    result = LocalJob(dataclasses.replace(spec, workdir=str(tmp_path / "job"), deadline=240.0)).run()
    assert not result.error, f"{result.error}\n{_diagnose(result)}"
    return result


def _diagnose(result: JobResult) -> str:
    lines = [f"workdir {result.workdir}", f"verdict {result.verdict_doc}", f"provisional {result.provisional_doc}"]
    for p in result.pods:
        lines.append(f"{p.name}: exit={p.exit_code} signal={p.signal} reason={p.reason}")
    return "\n".join(lines)


def _hang(result: JobResult) -> dict[str, Any]:
    verdict = result.verdict or {}
    hang = verdict.get("hang")
    assert isinstance(hang, dict), _diagnose(result)
    return hang


def _names_the_hung_worker(result: JobResult, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """The verdict (or `doc`'s) names the hung worker's pod and global rank, and a frame of the workload."""
    verdict = (doc or result.verdict_doc or {}).get("verdict") or {}
    assert (verdict.get("pod"), verdict.get("global_rank")) == (result.root_pod, result.fail_rank), _diagnose(result)
    hang = verdict.get("hang") or {}
    assert result.fail_rank in hang.get("stuck_ranks", []), _diagnose(result)
    frame = hang.get("frame") or {}
    assert str(frame.get("file", "")).endswith(WORKLOAD) and isinstance(frame.get("line"), int), _diagnose(result)
    assert verdict.get("confidence", 0) >= 0.9, _diagnose(result)
    return hang


def _captures(result: JobResult) -> list[tuple[str, str, list[int]]]:
    """(request id, trigger, ranks whose stack came) of every capture the aggregator took, from its log."""
    text = (Path(result.workdir) / "aggregator.log").read_text(errors="replace")
    found = re.findall(r"capture (\S+) \((\w+)\) from \S+: \d+ worker\(s\), stacks of rank\(s\) \[([\d, ]*)\]", text)
    return [(rid, trigger, [int(r) for r in ranks.split(",") if r.strip()]) for rid, trigger, ranks in found]


def test_stall_with_the_control_plane_names_the_rank_sleeping_while_its_sibling_times_out(tmp_path: Path) -> None:
    # Two workers a pod; local rank 1 of pod 1 sleeps in load_batch, its sibling waits in the all_reduce
    # and times out with the others: the pod is not silent at the end, and its first error is the sibling's.
    spec = JobSpec(
        fault="hang",
        pods=2,
        nproc=2,
        fail_pod=1,
        fail_local_rank=1,
        pg_timeout=20,
        stall_after=4,
        capture="cooperative",
    )
    result = _run(spec, tmp_path)
    assert result.provisional_doc is not None and result.running_at_provisional, _diagnose(result)
    assert result.fault_to_provisional is not None and result.fault_to_provisional < spec.stall_after + 30
    provisional = result.provisional_doc
    assert (provisional["provisional"], provisional["final"]) == (True, False)
    _names_the_hung_worker(result, provisional)
    # The final verdict takes over, with the captured evidence.
    assert result.final and result.root_cause == {"pod": result.root_pod, "category": "hang", "retryable": True}
    hang = _names_the_hung_worker(result)
    assert (hang["finding"], hang["path"]) == ("behind", "control_plane")
    assert any(t == "stall" and result.fail_rank in ranks for _, t, ranks in _captures(result))


def test_desync_is_user_code_naming_the_rank(tmp_path: Path) -> None:
    spec = JobSpec(fault="desync", pods=3, nproc=1, fail_pod=1, pg_timeout=20, stall_after=4, capture="cooperative")
    result = _run(spec, tmp_path)
    verdict = result.verdict or {}
    assert result.root_cause == {"pod": result.root_pod, "category": "user_code", "retryable": False}, _diagnose(result)
    assert verdict.get("global_rank") == result.fail_rank, _diagnose(result)
    assert result.fail_rank in _hang(result)["stuck_ranks"]


@pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed")
def test_stall_with_py_spy_names_a_rank_stuck_in_its_dataloader_worker(tmp_path: Path) -> None:
    # A script that does not cooperate; the rank waits for its DataLoader worker process, which blocks.
    spec = JobSpec(fault="dataloader", pods=2, nproc=1, fail_pod=1, pg_timeout=20, stall_after=4, capture="py_spy")
    result = _run(spec, tmp_path)
    assert result.provisional_doc is not None and result.running_at_provisional, _diagnose(result)
    stall = [ranks for _, t, ranks in _captures(result) if t == "stall"]
    assert any(result.fail_rank in ranks for ranks in stall), _captures(result)  # py-spy had its stack in time
    hang = _names_the_hung_worker(result)
    assert hang["path"] == "py_spy" and (hang.get("frame") or {}).get("function") == "load_batch_from_workers"


@pytest.mark.skipif(
    not (Path(__file__).resolve().parents[2] / "podmortem" / "inject" / "sitecustomize.py").is_file(),
    reason="no injected sitecustomize",
)
def test_the_sigterm_stack_at_teardown_names_the_line_without_stall_detection(tmp_path: Path) -> None:
    # No stall detection, a workload that does nothing itself: the injected sitecustomize registers
    # faulthandler for SIGTERM, and the stuck rank's stack reaches the log tail when its agent tears it down.
    spec = JobSpec(fault="hang", pods=2, nproc=2, fail_pod=1, fail_local_rank=0, pg_timeout=8, capture="sitecustomize")
    result = _run(spec, tmp_path)
    assert result.provisional_doc is None
    hang = _names_the_hung_worker(result)
    assert hang["path"] == "sigterm_stack"


def test_best_effort_at_the_first_timeout_asks_every_member(tmp_path: Path) -> None:
    # No stall detection: the first timeout makes the aggregator ask every sidecar at once. Whether the
    # stuck rank is still there to answer is a race (bench/capture_race.py counts how often it is); here,
    # that every member was asked and answered, and the verdict is at least today's.
    spec = JobSpec(fault="hang", pods=3, nproc=1, fail_pod=2, pg_timeout=8, capture="cooperative")
    result = _run(spec, tmp_path)
    answers = [c for c in _captures(result) if c[1] == "first_timeout"]
    assert len({rid for rid, _, _ in answers}) == 1 and len(answers) == 3, _captures(result)
    assert result.root_cause == {"pod": result.root_pod, "category": "hang", "retryable": True}, _diagnose(result)


def test_with_no_capture_path_the_verdict_is_as_before(tmp_path: Path) -> None:
    # A script that does nothing, no capture dir, no stall detection: the first-timeout request is answered
    # with "no capture path", and the verdict names the pod and the category only, worded as likely.
    spec = JobSpec(fault="hang", pods=2, nproc=1, fail_pod=1, pg_timeout=8, capture="none")
    result = _run(spec, tmp_path)
    assert result.root_cause == {"pod": result.root_pod, "category": "hang", "retryable": True}, _diagnose(result)
    verdict = result.verdict or {}
    assert verdict.get("hang") is None and verdict.get("confidence", 1) < 0.9, _diagnose(result)
    assert all(not ranks for _, _, ranks in _captures(result)), _captures(result)
