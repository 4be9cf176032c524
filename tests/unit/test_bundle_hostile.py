"""`podmortem analyze` on hostile or broken bundles: a one-line error and exit 2 (or a verdict), never a
traceback, a hang or unbounded reading. Plus a property: whatever pod.json holds, the loader either
refuses it with BundleError or returns an Incident that the engine decides without raising."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.bundles import error_json, make_bundle, pod_json
from support.properties import examples

from podmortem.core.engine import decide
from podmortem.core.model import MAX_WORLD_SIZE
from podmortem.offline import analyze
from podmortem.offline.bundle import BundleError, load_bundle


def _analyze(bundle: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = analyze.main(str(bundle), as_json=True, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _good(root: Path) -> Path:
    return make_bundle(
        root,
        {"job-worker-0": pod_json("job-worker-0")},
        errors={"job-worker-0": error_json("ValueError: x", 1795271119)},
    )


def _one_line_error(code: int, err: str, needle: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err


@pytest.mark.timeout(20)  # a FIFO used to block the reader for ever
def test_a_fifo_instead_of_pod_json_is_refused(tmp_path: Path) -> None:
    bundle = _good(tmp_path / "b")
    pod = bundle / "pods" / "job-worker-0" / "pod.json"
    pod.unlink()
    os.mkfifo(pod)
    _one_line_error(*_analyze(bundle)[::2], "not a regular file")


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name", ["pod.json", "log.txt"])
def test_a_link_to_dev_zero_is_refused(tmp_path: Path, name: str) -> None:
    bundle = _good(tmp_path / "b")
    target = bundle / "pods" / "job-worker-0" / name
    if target.exists():
        target.unlink()
    target.symlink_to("/dev/zero")
    _one_line_error(*_analyze(bundle)[::2], "not a regular file")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"x": Infinity}}', "Infinity"),
        ('{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"x": 1e999}}', "out of range"),
        ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    ],
)
def test_numbers_and_nesting_json_cannot_hold_are_refused(tmp_path: Path, text: str, needle: str) -> None:
    bundle = _good(tmp_path / "b")
    (bundle / "pods" / "job-worker-0" / "pod.json").write_text(text)
    _one_line_error(*_analyze(bundle)[::2], needle)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p["status"].update(containerStatuses="not a list"),
        lambda p: p["status"].update(containerStatuses=[{"state": {"terminated": {"exitCode": "x" * 50}}}]),
        lambda p: p["status"]["containerStatuses"][0]["state"]["terminated"].update(finishedAt="-0001-01-01T00:00:00Z"),
        lambda p: p["status"]["containerStatuses"][0]["state"]["terminated"].update(finishedAt="0001-01-01T00:00:00Z"),
        lambda p: p["status"]["containerStatuses"][0]["state"]["terminated"].update(exitCode=2**80),
        lambda p: p["metadata"].update(labels=["not", "a", "map"]),
        lambda p: p.update(status=None),
    ],
)
def test_wrong_types_and_impossible_values_give_a_verdict_or_one_line(tmp_path: Path, mutate: Any) -> None:
    pod = pod_json("job-worker-0")
    mutate(pod)
    bundle = make_bundle(tmp_path / "b", {"job-worker-0": pod})
    code, out, err = _analyze(bundle)
    if code == 2:
        _one_line_error(code, err, "job-worker-0")
    else:
        assert code in (0, 1) and "root_cause" in json.loads(out)


JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
JSON = st.recursive(
    JSON_LEAF,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=25,
)
TERMINATED_KEYS = st.sampled_from(["exitCode", "signal", "reason", "message", "startedAt", "finishedAt"])


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    status=st.dictionaries(st.sampled_from(["phase", "podIP", "conditions", "reason", "containerStatuses"]), JSON),
    terminated=st.dictionaries(TERMINATED_KEYS, JSON),
    phase=st.sampled_from(["Failed", "Unknown", "Running", "Succeeded", ""]),
)
def test_the_loader_refuses_or_the_engine_decides(
    tmp_path: Path, status: dict[str, Any], terminated: dict[str, Any], phase: str
) -> None:
    pod = pod_json("job-worker-0")
    pod["status"]["containerStatuses"][0]["state"]["terminated"].update(terminated)
    pod["status"].update(status)
    pod["status"]["phase"] = phase
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    bundle = make_bundle(root, {"job-worker-0": pod, "job-worker-1": pod_json("job-worker-1")})
    try:
        incident = load_bundle(bundle)
    except BundleError as exc:
        assert "\n" not in str(exc)
        return
    decide(incident)  # must not raise


@pytest.mark.parametrize("world", [MAX_WORLD_SIZE + 1, 2**62])
def test_an_enormous_world_size_is_refused_where_the_aggregator_bounds_it(tmp_path: Path, world: int) -> None:
    # The engine enumerates a job's ranks: 2**62 of them was a MemoryError traceback. The bound is the
    # aggregator's (`core.model.MAX_WORLD_SIZE`); the largest size it allows still loads.
    bundle = _good(tmp_path / "b")
    meta = json.loads((bundle / "incident.json").read_text())
    (bundle / "incident.json").write_text(json.dumps({**meta, "world_size": world}))
    _one_line_error(*_analyze(bundle)[::2], f"'world_size' {world} is over {MAX_WORLD_SIZE}")
    (bundle / "incident.json").write_text(json.dumps({**meta, "world_size": MAX_WORLD_SIZE}))
    assert load_bundle(bundle).world_size == MAX_WORLD_SIZE
