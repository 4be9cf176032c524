"""The benchmarks still run (a small configuration each); they print figures and assert nothing about time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        ("burst.py", ["--smoke", "--echo"], "ratio"),
        # Several jobs failing at once; exits 1 when a job's verdict names someone else.
        ("ceiling.py", ["--smoke"], "verdicts right 3/3"),
        # One real torchrun job in the kubelet's order; exits 1 on a wrong verdict.
        ("fault_to_verdict.py", ["--only", "sigkill", "--pods", "2", "--kubelet-order"], "quorum"),
        ("stream_rss.py", ["--smoke"], "KiB per open stream"),
        # Pods held for their condition in the kubelet's order; exits 1 when a pod's condition is wrong.
        ("hold_cost.py", ["--rounds", "1", "--pods", "2"], "conditions right: 4/4"),
        ("realworld.py", ["--split", "train", "--seeds", "1", "--calibration"], "Brier score"),
        # A few SIGKILLs: every cycle must end with one final verdict naming the root (exit 1 otherwise).
        ("chaos.py", ["--cycles", "4", "--seed", "7"], "exactly one final verdict naming the root: 4/4"),
        ("chaos.py", ["--cycles", "4", "--seed", "7", "--mid-stream"], "naming the root: 4/4"),
        ("fuzz.py", ["--smoke"], "fuzz engine: 2000 inputs"),
        ("late_events.py", ["--counts", "50,100", "--repeat", "1"], "members   100"),
        # The CLI as a process on a written bundle; exits 1 when it names the wrong root.
        ("analyze_speed.py", ["--pods", "60", "--repeat", "1", "--profile"], "podmortem analyze, 60 pods"),
        ("sidecar_rss.py", ["--writes", "5", "--idle", "1"], "idle CPU over 1 s"),
        ("engine_speed.py", ["--members", "200", "--repeat", "1"], "200"),
        # The book's share of a burst, in process; exits 1 when the verdict names someone else.
        ("ingest_speed.py", ["--pods", "16", "--tail-kib", "4", "--repeat", "1", "--profile"], "ingest W=16"),
    ],
)
def test_benchmark_runs_and_prints_its_figures(script: str, args: list[str], expect: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert expect in done.stdout
