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

from podmortem.local.faults import EXPECTED_CATEGORY

README = Path(__file__).resolve().parents[2] / "README.md"
# The installed entry point, as the README calls it (`.venv/bin/podmortem`).
ENTRY_POINT = Path(sys.executable).parent / "podmortem"


def _demo(*args: str, torch: bool, cwd: Path | None = None, command: list[str] | None = None) -> tuple[int, str]:
    env = dict(os.environ)
    if not torch:
        env["PODMORTEM_HARNESS_TORCH"] = "0"
    proc = subprocess.run(
        [*(command or [sys.executable, "-m", "podmortem.cli"]), "demo", *args],
        env=env,
        cwd=cwd,
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


@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_demo_hang_names_the_worker_and_its_line_before_the_timeout(tmp_path: Path) -> None:
    kept = tmp_path / "bundle"
    code, output = _demo(
        "--fault", "hang", "--pods", "2", "--nproc", "2", "--fail-rank", "1", "--keep", str(kept), torch=True
    )  # fmt: skip
    assert code == 0, output
    _assert_names_the_failed_pod(output, "hang")
    told = re.search(r"fault: pod \S+ \(node rank 1, global rank (\d+)\)", output)
    assert told and told.group(1) == "2", output  # the demo says which worker hangs, so it can be checked
    assert "the verdict names both" in output, output
    assert re.search(r"provisional : [\d.]+ s after the fault, while every pod still ran", output), output
    assert re.search(r"hang\s+: behind: rank\(s\) \[2\] .*workload\.py:\d+ in load_batch", output), output
    assert "named by    : the control_plane capture path" in output, output
    # The kept bundle carries the captures the aggregator held: analyze decides as the live verdict did,
    # down to the capture path, the collective the stuck rank never entered and its line.
    [live] = [json.loads(f.read_text()) for f in (kept / "verdicts").glob("*.json")]
    assert live["final"] and live["captures"], live
    assert any((kept / "pods").glob("*/captures.json"))
    analyzed = subprocess.run(
        [sys.executable, "-m", "podmortem.cli", "analyze", str(kept), "--json"], capture_output=True, text=True
    )
    assert analyzed.returncode == 0, analyzed.stderr
    offline = json.loads(analyzed.stdout)
    assert offline["root_cause"] == live["root_cause"]
    assert offline["verdict"]["global_rank"] == live["verdict"]["global_rank"] == 2
    assert offline["verdict"]["hang"] == live["verdict"]["hang"], (offline["verdict"]["hang"], live["verdict"]["hang"])


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


def _readme_demo_example() -> list[str]:
    """The demo command the README prints, word for word (`.venv/bin/podmortem demo --fault ...`)."""
    text = " ".join(README.read_text().split())  # the README wraps it over two lines
    found = re.search(r"`(\.venv/bin/podmortem demo [^`]+)`", text)
    assert found, "the README no longer shows a demo example"
    return found.group(1).split()


@pytest.mark.torch
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_the_readme_demo_example_works_as_printed(tmp_path: Path) -> None:
    """Run from a directory of the user's, with the README's relative `--keep ./demo-bundle`."""
    words = _readme_demo_example()
    assert words[:2] == [".venv/bin/podmortem", "demo"], words
    keep = words[words.index("--keep") + 1]
    assert not Path(keep).is_absolute(), "the example is meant to show a relative --keep"
    code, output = _demo(*words[2:], torch=True, cwd=tmp_path, command=[str(ENTRY_POINT)])
    assert code == 0, output
    fault = words[words.index("--fault") + 1]
    _assert_names_the_failed_pod(output, EXPECTED_CATEGORY[fault][0])
    bundle = tmp_path / keep
    assert (bundle / "incident.json").is_file(), output
    pods = int(words[words.index("--pods") + 1])
    assert len(list((bundle / "pods").iterdir())) == pods, output
    for log in (bundle / "pods").glob("*/log.txt"):  # the set-up installs what torch warns about
        assert "Failed to initialize NumPy" not in log.read_text(), log


def test_demo_runs_beside_a_folder_named_podmortem(tmp_path: Path) -> None:
    """The directory that holds the clone (`podmortem/`) is no package: the demo's children never import it."""
    (tmp_path / "podmortem").mkdir()
    (tmp_path / "podmortem" / "README.md").write_text("a clone of podmortem, not the package\n")
    code, output = _demo("--fault", "exception", "--pods", "2", torch=False, cwd=tmp_path, command=[str(ENTRY_POINT)])
    assert code == 0, output
    _assert_names_the_failed_pod(output, "user_code")
