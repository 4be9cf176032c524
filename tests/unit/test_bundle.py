"""Bundle loading: real files in tmp_path, the shared fold, rank inference, and clear errors.

`podmortem analyze` on hostile or broken bundles: a one-line error and exit 2 (or a verdict), never a
traceback, a hang or unbounded reading. Plus a property: whatever pod.json holds, the loader either
refuses it with BundleError or returns an Incident that the engine decides without raising.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.bundles import error_json, hang_bundle, make_bundle, pod_json
from support.properties import examples

from bench.common import corpus_dir
from podmortem.core.engine import decide
from podmortem.core.model import MAX_WORLD_SIZE, Member
from podmortem.offline import analyze
from podmortem.offline.bundle import BundleError, assign_ranks, load_bundle

TS = 1795273090  # 2026-11-21T14:58:10Z


def test_loads_members_through_the_fold(tmp_path: Path) -> None:
    b = make_bundle(
        tmp_path / "b",
        {
            "job-master-0": pod_json("job-master-0", rtype="master", ip="10.0.0.1"),
            "job-worker-0": pod_json(
                "job-worker-0", index=0, ip="10.0.0.2", exit_code=143, signal=15, deleted="2026-11-21T14:58:21Z"
            ),
            "job-worker-1": pod_json(
                "job-worker-1",
                index=1,
                ip="10.0.0.3",
                conditions=[
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": "PreemptionByScheduler",
                        "lastTransitionTime": "2026-11-21T14:58:05Z",
                    }
                ],
            ),
        },
        errors={"job-master-0": error_json("ValueError: bad", TS)},
        logs={"job-worker-0": "hello\n"},
    )
    inc = load_bundle(b)
    assert inc.job.name == "job" and inc.world_size == 3 and inc.incident_id == "b"
    m = {x.pod: x for x in inc.members}
    assert [x.pod for x in inc.members] == ["job-master-0", "job-worker-0", "job-worker-1"]
    assert m["job-master-0"].error is not None and m["job-master-0"].error.timestamp == TS
    assert m["job-master-0"].error.exception_type == "ValueError"
    assert m["job-worker-0"].termination is not None and m["job-worker-0"].termination.exit_code == 143
    assert m["job-worker-0"].deleted_at is not None and m["job-worker-0"].log_tail == "hello\n"
    cond = m["job-worker-1"].condition("DisruptionTarget")
    assert cond is not None and cond.reason == "PreemptionByScheduler"
    # Kubeflow ranks with a Master replica: master-0 is 0, worker-i is i+1.
    assert (m["job-master-0"].rank, m["job-worker-0"].rank, m["job-worker-1"].rank) == (0, 1, 2)
    # No sidecar observed a bundle: the fold's read-time stamps are not evidence.
    assert all(x.error_observed_at is None and x.termination_observed_at is None for x in inc.members)


def test_ranks_without_a_master_replica() -> None:
    members = [Member(pod=f"w-{i}", replica_type="worker", replica_index=i) for i in (2, 0, 1)]
    assert [m.rank for m in assign_ranks(members)] == [2, 0, 1]
    with_master = [Member(pod="m-0", replica_type="Master", replica_index=0), *members]
    assert [m.rank for m in assign_ranks(with_master)] == [0, 3, 1, 2]
    known = [Member(pod="w-0", replica_type="worker", replica_index=0, rank=7)]
    assert assign_ranks(known)[0].rank == 7


def test_garbage_error_file_is_kept_as_unreadable(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b", {"w-0": pod_json("w-0", exit_code=139, signal=11)}, errors={"w-0": "{oops"})
    (m,) = load_bundle(b).members
    assert m.error is not None and m.error.parse_error


# Every file this process opens while `_OPENED` is a list (an audit hook sees os.open, open() and
# Path.open alike: the loader reads with os.open). Audit hooks cannot be removed: it is added once,
# and records nothing outside the guarded block.
_OPENED: list[str] | None = None
_HOOKED = False


def _record_opens(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _OPENED is not None:
        _OPENED.append(os.fsdecode(args[0]) if isinstance(args[0], str | bytes | os.PathLike) else str(args[0]))


def opened_while(load: Callable[[], object]) -> list[str]:
    """The paths of every file opened by this process during `load()`."""
    global _OPENED, _HOOKED
    if not _HOOKED:
        sys.addaudithook(_record_opens)
        _HOOKED = True
    _OPENED = []
    try:
        load()
        return _OPENED
    finally:
        _OPENED = None


def test_truth_json_is_never_read(tmp_path: Path) -> None:
    b = make_bundle(tmp_path / "b", {"w-0": pod_json("w-0")})
    (b / "truth.json").write_text(json.dumps({"root_pod": "w-0"}))
    opened = opened_while(lambda: load_bundle(b))
    assert str(b / "pods" / "w-0" / "pod.json") in opened  # the guard sees the loader's reads
    assert not [p for p in opened if Path(p).name == "truth.json"]


def test_no_bundle_of_the_labelled_corpus_has_its_truth_read() -> None:
    corpus = corpus_dir()
    incidents = [p for p in sorted(corpus.iterdir()) if (p / "truth.json").is_file()]
    assert incidents, f"no labelled corpus at {corpus}"
    for incident in incidents:
        opened = opened_while(lambda: load_bundle(incident))  # noqa: B023 - called at once
        assert not [p for p in opened if Path(p).name == "truth.json"], incident.name


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        ("no-dir", "no such directory"),
        ("file", "not a directory"),
        ("symlink-loop", "cannot be read: Too many levels of symbolic links"),
        ("no-incident", "incident.json not found"),
        ("bad-incident-json", "incident.json is not valid JSON"),
        ("incident-not-object", "must be a JSON object"),
        ("incident-no-job", "'job' must be an object"),
        ("bad-world-size", "'world_size' must be a positive integer"),
        ("no-pods", "no pods/ directory"),
        ("empty-pods", "no pod directories"),
        ("pod-json-missing", "pod.json not found"),
        ("pod-json-garbage", "pod.json is not valid JSON"),
        ("pod-json-not-pod", "not a Pod object"),
    ],
)
def test_broken_bundles_raise_one_clear_line(tmp_path: Path, breakage: str, expected: str) -> None:
    b = make_bundle(tmp_path / "b", {"w-0": pod_json("w-0")})
    target: Path = b
    if breakage == "no-dir":
        target = tmp_path / "absent"
    elif breakage == "file":
        target = b / "incident.json"
    elif breakage == "symlink-loop":
        target = tmp_path / "loop-a"
        target.symlink_to(tmp_path / "loop-b")
        (tmp_path / "loop-b").symlink_to(target)
    elif breakage == "no-incident":
        (b / "incident.json").unlink()
    elif breakage == "bad-incident-json":
        (b / "incident.json").write_text("{")
    elif breakage == "incident-not-object":
        (b / "incident.json").write_text("[]")
    elif breakage == "incident-no-job":
        (b / "incident.json").write_text(json.dumps({"world_size": 1}))
    elif breakage == "bad-world-size":
        (b / "incident.json").write_text(json.dumps({"job": {"name": "j"}, "world_size": "two"}))
    elif breakage == "no-pods":
        (b / "pods" / "w-0" / "pod.json").unlink()
        (b / "pods" / "w-0").rmdir()
        (b / "pods").rmdir()
    elif breakage == "empty-pods":
        (b / "pods" / "w-0" / "pod.json").unlink()
        (b / "pods" / "w-0").rmdir()
    elif breakage == "pod-json-missing":
        (b / "pods" / "w-0" / "pod.json").unlink()
    elif breakage == "pod-json-garbage":
        (b / "pods" / "w-0" / "pod.json").write_text("not json at all")
    elif breakage == "pod-json-not-pod":
        (b / "pods" / "w-0" / "pod.json").write_text(json.dumps({"kind": "Pod"}))
    with pytest.raises(BundleError) as info:
        load_bundle(target)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_large_log_keeps_the_tail(tmp_path: Path) -> None:
    big = "".join(f"line {i}\n" for i in range(60_000)) + "RuntimeError: the end\n"
    b = make_bundle(tmp_path / "b", {"w-0": pod_json("w-0")}, logs={"w-0": big})
    tail = load_bundle(b).members[0].log_tail
    assert tail.endswith("RuntimeError: the end\n") and len(tail) < len(big) and tail.startswith("line ")


def test_evolve_builds_what_dataclasses_replace_builds() -> None:
    import dataclasses

    from podmortem.core.model import ErrorRecord, Member, Termination, evolve

    m = Member(pod="w-0", rank=0, error=ErrorRecord(message="ValueError: x"), log_tail="a")
    end = Termination(exit_code=1)
    assert evolve(m, termination=end, running=False, log_tail="b") == dataclasses.replace(
        m, termination=end, running=False, log_tail="b"
    )
    assert m.log_tail == "a"  # the original is untouched
    with pytest.raises(TypeError):
        evolve(m, no_such_field=1)


def test_a_large_bundle_is_read_in_parallel_into_the_same_incident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bundles from `PARALLEL_FROM_PODS` pods on are read by several processes: same members, same order,
    and a broken pod still fails the whole load with its one-line error."""
    from podmortem.offline import bundle

    pods = {f"job-worker-{i}": pod_json(f"job-worker-{i}", index=i, ip=f"10.0.0.{i + 1}") for i in range(12)}
    errors = {f"job-worker-{i}": error_json(f"ValueError: pod {i}", TS) for i in range(0, 12, 3)}
    b = make_bundle(tmp_path / "b", pods, errors=errors, logs={"job-worker-5": "step 1\nstep 2\n"})
    serial = load_bundle(b)
    monkeypatch.setattr(bundle, "PARALLEL_FROM_PODS", 4)
    dirs = sorted(str(p) for p in (b / "pods").iterdir())
    assert bundle._load_members(dirs, workers=2) == list(bundle._load_chunk(dirs))
    assert load_bundle(b) == serial
    (b / "pods" / "job-worker-7" / "pod.json").write_text("{not json")
    with pytest.raises(BundleError, match=r"job-worker-7/pod\.json: pod\.json is not valid JSON"):
        bundle._load_members(dirs, workers=2)  # read by a forked worker
    (b / "pods" / "job-worker-1" / "pod.json").write_text("[]")
    with pytest.raises(BundleError, match=r"job-worker-1/pod\.json: not a Pod object"):
        bundle._load_members(dirs, workers=2)  # read by this process: the first in order still wins
    with pytest.raises(BundleError, match=r"job-worker-1/pod\.json: not a Pod object"):
        bundle._load_members(dirs, workers=3)


def _captures_bundle(tmp_path: Path, captures: Any) -> Path:
    b = hang_bundle(tmp_path / "b", captured=captures == "workload")
    if captures != "workload":
        (b / "pods" / "job-worker-1" / "captures.json").write_text(
            captures if isinstance(captures, str) else json.dumps(captures)
        )
    return b


def test_captures_in_a_bundle_decide_the_hang(tmp_path: Path) -> None:
    from podmortem.core.engine import decide

    incident = load_bundle(_captures_bundle(tmp_path, "workload"))
    member = next(m for m in incident.members if m.pod == "job-worker-1")
    assert len(member.captures) == 1 and member.captures[0].flight_recorder is not None
    v = decide(incident)
    assert (v.pod, v.global_rank, v.category, v.confidence) == ("job-worker-1", 1, "hang", 0.95)
    assert v.hang is not None and v.hang.frame is not None and v.hang.frame.function == "load_batch"


@pytest.mark.parametrize(
    ("captures", "expected"),
    [
        ({"path": "py_spy"}, "must be a list"),
        (["x"], "capture 0 is not an object"),
        ([{"path": "gdb"}], "path 'gdb' is not one of"),
        ([{"path": "py_spy", "global_rank": -1}], "global_rank must be a rank"),
        ([{"path": "py_spy", "global_rank": True}], "global_rank must be a rank"),
        ([{"path": "py_spy", "stack": 3}], "stack must be a string"),
        (
            [{"path": "fr_file", "flight_recorder": {"version": 9, "source": "json"}}],
            "flight_recorder: summary version 9",
        ),
        ([{"path": "fr_file", "flight_recorder": "{"}], "flight_recorder: summary is not JSON"),
        ([{"path": "py_spy", "captured_at": "yesterday"}], "captured_at must be a number"),
        ('[{"path": "py_spy", "captured_at": NaN}]', "NaN"),
        ([{"path": "py_spy"}] * 300, "more than the 256"),
    ],
)
def test_bad_captures_are_one_clear_line(tmp_path: Path, captures: Any, expected: str) -> None:
    with pytest.raises(BundleError, match=expected):
        load_bundle(_captures_bundle(tmp_path, captures))


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
