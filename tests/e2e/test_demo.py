"""`podmortem demo` as a user runs it: a subprocess that must print a verdict naming the failed pod.

The real demo starts torchrun (marked `torch`, slow); the same command without torch
(PODMORTEM_HARNESS_TORCH=0: plain worker processes stand in for torchrun) runs everywhere in seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


def _demo(*args: str, torch: bool) -> tuple[int, str]:
    env = dict(os.environ)
    if not torch:
        env["PODMORTEM_HARNESS_TORCH"] = "0"
    proc = subprocess.run(
        [sys.executable, "-m", "podmortem.cli", "demo", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _assert_names_the_failed_pod(output: str, category: str) -> None:
    target = re.search(r"fault: pod (\S+) \(node rank", output)
    named = re.search(r"root pod\s*: (\S+)", output)
    assert target and named, output
    assert named.group(1) == target.group(1), output
    assert re.search(rf"category\s*: {category}\b", output), output
    assert "podmortem got it right" in output, output
    assert re.search(r"fault -> verdict: \d+\.\d s", output), output


@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_demo_with_torchrun() -> None:
    code, output = _demo("--fault", "exception", "--pods", "2", "--fail-rank", "0", torch=True)
    assert code == 0, output
    _assert_names_the_failed_pod(output, "user_code")
    assert "ValueError" in output


def test_demo_without_torch() -> None:
    code, output = _demo("--fault", "segfault", "--pods", "3", torch=False)
    assert code == 0, output
    assert "without torch" in output
    _assert_names_the_failed_pod(output, "crash")


def test_demo_keep_leaves_a_bundle_that_analyze_decides_alike(tmp_path: Path) -> None:
    kept = tmp_path / "bundle"
    code, output = _demo("--fault", "exception", "--pods", "2", "--keep", str(kept), torch=False)
    assert code == 0, output
    assert f"kept: {kept}" in output
    assert f"page: {kept / 'incident.html'}" in output and (kept / "incident.html").is_file()
    target = re.search(r"fault: pod (\S+) \(node rank", output)
    assert target, output
    analyzed = subprocess.run(
        [sys.executable, "-m", "podmortem.cli", "analyze", str(kept), "--json"], capture_output=True, text=True
    )
    assert analyzed.returncode == 0, analyzed.stderr
    assert json.loads(analyzed.stdout)["root_cause"]["pod"] == target.group(1)
    again, output = _demo("--keep", str(kept), torch=False)  # not an empty directory: refused, nothing lost
    assert again == 2 and "not an empty directory" in output
    assert (kept / "incident.json").exists()
