"""Flight Recorder state and stacks made by torch itself, read and matched by podmortem (real torchrun, gloo).

1. `tests/support/fr_dump_job.py`: three ranks, two enqueue an all_reduce the third never enters, and each
   writes its own `_dump_fr_trace()` (pickle) and `_dump_fr_trace_json()`: read by the restricted unpickler,
   summarised, matched.
2. The demo workload (`podmortem.local.workload`) mid-hang, asked through torch's worker control plane the
   way the sidecar asks (`POST /handler/fr_trace_json`, `/handler/dump_traceback` on
   `$PODMORTEM_CAPTURE_DIR/worker-<RANK>.sock`): `--fault hang` names the rank and its `load_batch` line,
   `--fault desync` a mismatch naming the rank that skipped.

One torchrun agent, 3 workers; process-group timeouts long enough that the questions come first.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podmortem.core.flightrecorder import summarize_json, summarize_pickle
from podmortem.core.hangs import RankCapture, match
from podmortem.core.model import WorkerCapture

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
