"""The benchmarks still run (a small configuration each); they print figures and assert nothing about time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("script", "args", "expect"),
    [
        ("burst", ["--smoke", "--floor"], "service over an inert book"),
        # Several jobs failing at once; exits 1 when a job's verdict names someone else.
        ("ceiling", ["--smoke"], "verdicts right 3/3"),
        # One real torchrun job in the kubelet's order; exits 1 on a wrong verdict.
        ("fault_to_verdict", ["--only", "sigkill", "--pods", "2", "--kubelet-order"], "quorum"),
        ("stream_rss", ["--smoke"], "KiB per open stream"),
        # Pods held for their condition in the kubelet's order; exits 1 when a pod's condition is wrong.
        ("hold_cost", ["--rounds", "1", "--pods", "2"], "conditions right: 4/4"),
        ("hold_cost", ["--desk", "64"], "victims 63/63"),
        # W pods holding against the emulator; exits 1 unless every pod's condition was written in its hold.
        ("hold_cost", ["--api", "16"], "'podmortem.io/Victim': 15"),
        ("realworld", ["--split", "train", "--seeds", "1", "--calibration"], "Brier score"),
        # A few SIGKILLs: every cycle must end with one final verdict naming the root (exit 1 otherwise).
        ("chaos", ["--cycles", "4", "--seed", "7"], "exactly one final verdict naming the root: 4/4"),
        ("chaos", ["--cycles", "4", "--seed", "7", "--mid-stream"], "naming the root: 4/4"),
        ("fuzz", ["--smoke"], "fuzz engine: 2000 inputs"),
        ("late_events", ["--counts", "50,100", "--repeat", "1"], "members   100"),
        # The CLI as a process on a written bundle; exits 1 when it names the wrong root.
        ("analyze_speed", ["--pods", "60", "--repeat", "1", "--profile"], "podmortem analyze, 60 pods"),
        # The incident page in a real Chromium; exits 1 on a wrong root, a console error or any request.
        ("page", ["--pods", "100", "--per-node", "4", "--repeat", "1"], "incident page, 100 pods, 4 a node"),
        ("sidecar_rss", ["--writes", "5", "--idle", "1"], "idle CPU over 1 s"),
        # With the pod source a sidecar has in a pod: its own Pod read and watched (the emulator).
        ("sidecar_rss", ["--writes", "5", "--idle", "1", "--api"], "idle CPU over 1 s"),
        ("engine_speed", ["--members", "200", "--repeat", "1"], "200"),
        ("errorfile_speed", ["--mib", "2", "--repeat", "1"], "ms (best of 1)"),
        # The book's share of a burst, in process; exits 1 when the verdict names someone else.
        ("ingest_speed", ["--pods", "16", "--tail-kib", "4", "--repeat", "1", "--profile"], "ingest W=16"),
        # A hang's first timeout: every member asked to capture; exits 1 unless the verdict names the culprit.
        ("first_timeout", ["--members", "4", "--rounds", "1"], "names the culprit's rank"),
    ],
)
def test_benchmark_runs_and_prints_its_figures(script: str, args: list[str], expect: str, tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"  # the benchmark's temporary files: it leaves none behind
    scratch.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{script}", *args],
        cwd=REPO,
        env=dict(os.environ, TMPDIR=str(scratch)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert expect in done.stdout
    said = done.stdout + done.stderr  # what a benchmark keeps on purpose (a slow fuzz input) it names
    left = [p.name for p in scratch.iterdir() if str(p) not in said]
    assert not left, f"left behind: {sorted(left)}"
