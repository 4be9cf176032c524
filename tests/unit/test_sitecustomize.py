"""The injected start-up hook, run as Python runs it: first on PYTHONPATH of a real interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from podmortem.inject.__main__ import main as inject

PROGRAM = """
import os, signal, sys, time
def waiting_here():
    print(os.environ.get("TORCH_WORKER_SERVER_SOCKET"), os.environ.get("TORCH_FR_BUFFER_SIZE"), flush=True)
    if "--sigterm" in sys.argv:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
waiting_here()
"""
WORKER = {"LOCAL_RANK": "1", "RANK": "3", "PODMORTEM_CAPTURE_DIR": "/var/run/podmortem"}
CLEAN = ("TORCH_WORKER_SERVER_SOCKET", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "LOCAL_RANK", "RANK")


@pytest.fixture
def hook(tmp_path: Path) -> Path:
    target = tmp_path / "python"
    assert inject([str(target)]) == 0
    return target


def run(
    hook: Path, env: dict[str, str], *args: str, pythonpath: str = "", shell_suffix: str = ""
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in CLEAN}
    full = {**base, **env, "PYTHONPATH": os.pathsep.join(p for p in (str(hook), pythonpath) if p)}
    cmd = [sys.executable, "-c", PROGRAM, *args]
    if shell_suffix:
        quoted = " ".join(f"'{c}'" for c in cmd)
        return subprocess.run(
            f"{quoted} {shell_suffix}", shell=True, env=full, capture_output=True, text=True, timeout=60
        )
    return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=60)


def test_in_a_torchrun_worker_it_sets_the_socket_and_the_ring(hook: Path) -> None:
    result = run(hook, WORKER)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["/var/run/podmortem/worker-3.sock", "2000"]


def test_a_sigterm_prints_every_threads_stack_then_ends_the_process_as_before(hook: Path) -> None:
    result = run(hook, WORKER, "--sigterm")
    assert result.returncode == -signal.SIGTERM
    assert "Current thread" in result.stderr and "line 6 in waiting_here" in result.stderr


def test_what_the_user_set_is_kept(hook: Path) -> None:
    mine = {**WORKER, "TORCH_WORKER_SERVER_SOCKET": "/mine.sock", "TORCH_NCCL_TRACE_BUFFER_SIZE": "5"}
    assert run(hook, mine).stdout.split() == ["/mine.sock", "None"]


@pytest.mark.parametrize("env", [{}, {**WORKER, "PODMORTEM_HOOK": "0"}], ids=["not-a-worker", "turned-off"])
def test_outside_a_worker_or_turned_off_it_does_nothing(hook: Path, env: dict[str, str]) -> None:
    assert run(hook, env).stdout.split() == ["None", "None"]
    result = run(hook, env, "--sigterm")
    assert result.returncode == -signal.SIGTERM and "waiting_here" not in result.stderr


def test_the_images_own_sitecustomize_still_runs(hook: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['TORCH_FR_BUFFER_SIZE'] = 'theirs'\n")
    assert run(hook, WORKER, pythonpath=str(theirs)).stdout.split() == ["/var/run/podmortem/worker-3.sock", "theirs"]
    (theirs / "sitecustomize.py").write_text("raise ValueError('broken image hook')\n")
    result = run(hook, WORKER, pythonpath=str(theirs))
    assert result.returncode == 0 and result.stdout.split()[0] == "/var/run/podmortem/worker-3.sock"
    assert "Error in sitecustomize" in result.stderr and "broken image hook" in result.stderr


def test_an_error_in_the_hook_leaves_the_program_alone(hook: Path) -> None:
    # With stderr closed, faulthandler.register raises: the hook gives up, silently, and the program runs.
    result = run(hook, WORKER, shell_suffix="2>&-")
    assert result.returncode == 0
    assert result.stdout.split() == ["None", "None"]
