"""`podmortem analyze`: report and JSON output, rules files, exit codes, no tracebacks."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from podmortem.offline import analyze

FIXTURE_PODS = 3


def write_bundle(root: Path) -> Path:
    """Three pods: worker-1 raises; worker-0 loses its peer; worker-2 is torn down."""
    root.mkdir(parents=True)
    (root / "incident.json").write_text(json.dumps({"job": {"namespace": "ns", "name": "job"}, "world_size": 3}))

    def pod(name: str, index: int, ip: str, exit_code: int, signal: int | None = None) -> dict[str, Any]:
        term: dict[str, Any] = {"exitCode": exit_code, "reason": "Error", "finishedAt": "2026-11-21T14:58:20Z"}
        if signal:
            term["signal"] = signal
        return {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "labels": {
                    "training.kubeflow.org/replica-type": "worker",
                    "training.kubeflow.org/replica-index": str(index),
                },
            },
            "spec": {"nodeName": f"node-{index}"},
            "status": {
                "phase": "Failed",
                "podIP": ip,
                "containerStatuses": [{"name": "pytorch", "state": {"terminated": term}}],
            },
        }

    files = {
        "job-worker-0": (
            pod("job-worker-0", 0, "10.0.0.1", 143, 15),
            "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.2]:99.",
        ),
        "job-worker-1": (pod("job-worker-1", 1, "10.0.0.2", 1), "KeyError: 'cosine_restarts'"),
        "job-worker-2": (pod("job-worker-2", 2, "10.0.0.3", 1), "SignalException: Process 7 got signal: 15"),
    }
    for name, (p, msg) in files.items():
        d = root / "pods" / name
        d.mkdir(parents=True)
        (d / "pod.json").write_text(json.dumps(p))
        (d / "error.json").write_text(
            json.dumps({"message": {"message": msg, "extraInfo": {"py_callstack": "", "timestamp": "1795273090"}}})
        )
    return root


def run(path: Path | str, **kw: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = analyze.main(str(path), out=out, err=err, **kw)
    return code, out.getvalue(), err.getvalue()


def test_report(tmp_path: Path) -> None:
    code, out, err = run(write_bundle(tmp_path / "b"))
    assert code == 0 and err == ""
    first = out.splitlines()[2]
    assert first.startswith("job-worker-1") and "KeyError" in first
    assert "Victims (2)" in out and "job-worker-0" in out and "job-worker-2" in out
    assert "10.0.0.2 is job-worker-1" in out


def test_json_shape(tmp_path: Path) -> None:
    code, out, _ = run(write_bundle(tmp_path / "b"), as_json=True)
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"root_cause", "verdict", "explanation"}
    assert doc["root_cause"] == {"pod": "job-worker-1", "category": "user_code", "retryable": False}
    v = doc["verdict"]
    assert v["pod"] == "job-worker-1" and v["rank"] == 1 and v["node"] == "node-1"
    assert v["exception_type"] == "KeyError" and 0 < v["confidence"] <= 1 and v["rule"]
    assert {s["pod"] for s in v["secondary"]} == {"job-worker-0", "job-worker-2"}
    assert all(s["reason"] for s in v["secondary"]) and isinstance(v["evidence"], list)
    assert doc["explanation"] == v["summary"]


def test_clean_job_json(tmp_path: Path) -> None:
    b = write_bundle(tmp_path / "b")
    for p in (b / "pods").iterdir():
        (p / "error.json").unlink()
        doc = json.loads((p / "pod.json").read_text())
        doc["status"]["containerStatuses"][0]["state"]["terminated"] = {"exitCode": 0, "reason": "Completed"}
        doc["status"]["phase"] = "Succeeded"
        (p / "pod.json").write_text(json.dumps(doc))
    code, out, _ = run(b, as_json=True)
    assert code == 0 and json.loads(out)["root_cause"] == {"pod": None, "category": None, "retryable": None}


def test_rules_file_is_applied(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"rules": [{"id": "site.sched", "message": "cosine_restarts", "category": "infra"}]}))
    code, out, _ = run(write_bundle(tmp_path / "b"), as_json=True, rules_path=str(rules))
    assert code == 0
    assert json.loads(out)["root_cause"] == {"pod": "job-worker-1", "category": "infra", "retryable": True}


@pytest.mark.parametrize("what", ["missing", "not-a-bundle", "broken-pod", "bad-rules", "missing-rules"])
def test_invalid_input_exits_2_with_one_line(tmp_path: Path, what: str) -> None:
    b = write_bundle(tmp_path / "b")
    kw: dict[str, Any] = {}
    target: Path = b
    if what == "missing":
        target = tmp_path / "nope"
    elif what == "not-a-bundle":
        shutil.rmtree(b / "pods")
    elif what == "broken-pod":
        (b / "pods" / "job-worker-0" / "pod.json").write_text("{{")
    elif what == "bad-rules":
        (tmp_path / "r.json").write_text(json.dumps({"rules": [{"id": "x", "message": "(", "category": "infra"}]}))
        kw["rules_path"] = str(tmp_path / "r.json")
    else:
        kw["rules_path"] = str(tmp_path / "absent.json")
    code, out, err = run(target, **kw)
    assert code == 2 and out == ""
    assert err.startswith("podmortem analyze: ") and err.count("\n") == 1 and "Traceback" not in err
