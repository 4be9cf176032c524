"""The workload's fault plan and its no-torch stand-in, checked without starting torch.

`podmortem.local.workload` is the training program of the demo and the end-to-end tests. Its torch path is
exercised by tests/e2e/test_faults_torchrun.py (slow, marked `torch`); here are the parts that must hold
everywhere: the argument/env contract, the fault marker, and the fallback that runs the same job
without torch — error files in torch's exact format, gloo's secondary messages, SIGTERM answered the
way torchrun's agent answers it — all the way to podmortem's verdict.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from podmortem.local import workload
from podmortem.local.faults import EXPECTED_CATEGORY
from podmortem.local.harness import JobResult, JobSpec, LocalJob, PodOutcome


def test_fault_list_matches_the_expected_categories() -> None:
    assert set(workload.FAULTS) == {"none", *EXPECTED_CATEGORY}


def test_parser_reads_env_and_flags_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODMORTEM_FAULT", "oom")
    monkeypatch.setenv("PODMORTEM_FAIL_RANK", "3")
    args = workload.parse([])
    assert (args.fault, args.fail_rank) == ("oom", 3)
    args = workload.parse(["--fault", "hang", "--fail-rank", "1"])
    assert (args.fault, args.fail_rank) == ("hang", 1)


def test_marker_is_written_whole(tmp_path: Path) -> None:
    workload.write_marker(str(tmp_path), 2, "exception", 7)
    marker = json.loads((tmp_path / "rank-2.json").read_text())
    assert marker["fault"] == "exception" and marker["rank"] == 2 and marker["step"] == 7
    assert isinstance(marker["time"], float)
    assert [p.name for p in tmp_path.iterdir()] == ["rank-2.json"]  # no temporary left behind


def test_workload_module_does_not_import_torch() -> None:
    code = (
        "import sys, podmortem.local.workload, podmortem.local.harness, podmortem.local.demo;"
        " print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "False"


def _fallback(fault: str, **kw: object) -> JobResult:
    spec = JobSpec(fault=fault, use_torch=False, pg_timeout=3.0, deadline=60.0, **kw)  # type: ignore[arg-type]
    result = LocalJob(spec).run()
    assert not result.error, result.error
    return result


def _root(result: JobResult) -> PodOutcome:
    return next(p for p in result.pods if p.name == result.root_pod)


def test_fallback_error_files_have_torchs_format() -> None:
    result = _fallback("exception", pods=3, with_podmortem=False)
    root = _root(result)
    assert root.exit_code == 1 and root.error_file is not None
    inner = root.error_file["message"]
    assert inner["message"].startswith("ValueError: learning rate must be positive")
    assert set(inner["extraInfo"]) == {"py_callstack", "timestamp"} and inner["extraInfo"]["timestamp"].isdigit()
    assert "Traceback" in inner["extraInfo"]["py_callstack"]
    for victim in (p for p in result.pods if p is not root):
        assert victim.error_file is not None
        assert "Connection closed by peer" in victim.error_file["message"]["message"]


@pytest.mark.parametrize("fault", ["exception", "oom", "sigkill", "segfault", "hang", "preempt", "multi"])
def test_fallback_job_gets_the_right_verdict(fault: str) -> None:
    result = _fallback(fault, pods=3, fail_pod=1, second_pod=2)
    category, retryable = EXPECTED_CATEGORY[fault]
    assert result.root_cause == {"pod": result.root_pod, "category": category, "retryable": retryable}, result.verdict
    # How long it took is bench/fault_to_verdict.py's figure; here only that a verdict followed the fault.
    assert result.fault_to_verdict is not None and result.fault_to_verdict > 0
    root = _root(result)
    if fault == "sigkill":
        assert (root.exit_code, root.signal, root.reason) == (137, 9, "OOMKilled")
    if fault == "preempt":
        assert root.preempted and root.error_file is not None
        assert root.error_file["message"]["message"].startswith("SignalException: Process")


def test_sigkill_only_ever_kills_a_real_torchrun_parent() -> None:
    # A parent whose command line merely mentions torchrun (pytest running test_faults_torchrun.py, say)
    # must not be taken for the agent: the sigkill fault would kill the test run.
    child = "import podmortem.local.workload as w; print(w._parent_is_torchrun())"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}], check=True)"
    out = subprocess.run(
        [sys.executable, "-c", parent, "tests/test_torchrun_e2e.py", "torchrun"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "False"
