"""`kubectl podmortem`'s arguments: what each command takes is refused or accepted before any cluster is
asked (the commands themselves run against the emulator with the real kubectl:
tests/e2e/test_kubectl_plugin_kube.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podmortem import kubectl_plugin


@pytest.fixture
def kubectl_that_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `kubectl` that only records that it ran: a refused target must never reach it."""
    called = tmp_path / "kubectl-was-called"
    script = tmp_path / "kubectl"
    script.write_text(f'#!/bin/sh\necho "$@" > "{called}"\nexit 1\n')
    script.chmod(0o755)
    monkeypatch.setenv("KUBECTL", str(script))
    return called


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["explain", "deployment/x"], "explain takes a job or a pod"),
        (["explain", "node/gpu-1"], "explain takes a job or a pod"),
        (["bundle", "pod/x", "DIR"], "bundle takes a job"),
        (["bundle", "statefulsets.apps/x", "DIR"], "bundle takes a job"),
        (["explain", "x"], "name the object as <kind>/<name>"),
        (["explain", "job/"], "name the object as <kind>/<name>"),
    ],
)
def test_a_target_the_command_does_not_take_is_refused_before_kubectl_runs(
    argv: list[str], said: str, kubectl_that_records: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = [str(tmp_path / "bundle") if a == "DIR" else a for a in argv]
    assert kubectl_plugin.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and said in err and "error: error:" not in err
    assert not kubectl_that_records.exists()
    assert not (tmp_path / "bundle").exists()


@pytest.mark.parametrize(
    "target", ["pytorchjob/x", "pytorchjobs.kubeflow.org/x", "job/x", "jobs.batch/x", "JobSet/x", "trainjob/x"]
)
def test_job_kinds_in_any_of_kubectls_spellings_are_taken(target: str) -> None:
    assert kubectl_plugin.target_problem("bundle", target) is None
    assert kubectl_plugin.target_problem("explain", target) is None


def test_pods_are_explained_but_not_bundled() -> None:
    assert kubectl_plugin.target_problem("explain", "pod/x") is None
    assert kubectl_plugin.target_problem("explain", "po/x") is None
    assert kubectl_plugin.target_problem("bundle", "pod/x") is not None


def test_bundle_refuses_a_directory_that_holds_anything_before_kubectl_runs(
    kubectl_that_records: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "incident.json").write_text("{}\n")
    assert kubectl_plugin.main(["bundle", "job/x", str(taken)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert not kubectl_that_records.exists()
    assert [p.name for p in taken.iterdir()] == ["incident.json"]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read it"),
        ("dir", "not a regular file"),
        ("{not json", "not a JSON verdict file"),
        ('["a list"]', "no incident.job"),
        ('{"incident": {"job": {"namespace": "ml", "name": "other"}}}', "the verdict of ml/other, not of ml/llm"),
    ],
)
def test_a_verdict_file_that_is_not_this_jobs_is_refused_with_its_reason(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "verdict.json"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    with pytest.raises(kubectl_plugin.PluginError, match=f"--verdict-file {path}: .*{problem}"):
        kubectl_plugin.verdict_file_captures(path, "ml", "llm")


def test_a_verdict_files_captures_are_read_by_pod(tmp_path: Path) -> None:
    path = tmp_path / "verdict.json"
    doc = {"incident": {"job": {"namespace": "ml", "name": "llm"}}, "captures": [{"pod": "p", "path": "py_spy"}]}
    path.write_text(json.dumps(doc))
    assert kubectl_plugin.verdict_file_captures(path, "ml", "llm") == {"p": [{"path": "py_spy"}]}
