"""The verdict file as a reader meets it: its counts agree with each other, and its keys are the ones the
README lists."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from podmortem.aggregator.config import AggregatorConfig
from podmortem.aggregator.running import Aggregator
from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb

README = (Path(__file__).resolve().parent.parent.parent / "README.md").read_text()


def readme_keys() -> dict[str, set[str]]:
    """key -> its documented sub-keys ('incident.job', 'verdict.secondary' for nested ones)."""
    start = README.index("### The verdict file")
    section = README[start : README.index("\n#", start + 1)]
    keys: dict[str, set[str]] = {}
    for line in section.splitlines():
        row = re.match(r"^\| `([a-z_]+)` \| (.*) \|$", line)
        if not row:
            continue
        key, text = row.groups()
        plain = re.sub(r"\{[^}]*\}", "", re.sub(r"\([^(){}]*\)", "", text))  # asides and nested keys out
        keys[key] = set(re.findall(r"`([a-z_]+)`", plain))
        for name, inner in re.findall(r"`([a-z_]+)`[^`{]*\{([^}]*)\}", text):
            keys[f"{key}.{name}"] = set(re.findall(r"`([a-z_]+)`", inner))
    return keys


async def test_a_timeout_verdict_counts_its_silent_member_as_missing_and_matches_the_readme(tmp_path: Path) -> None:
    verdicts = tmp_path / "verdicts"
    agg = Aggregator(
        AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir=str(verdicts), quorum_timeout=3600),
        registry=CollectorRegistry(),
    )
    await agg.start()
    try:
        job = pb.JobRef(namespace="ml", name="j", kind="PyTorchJob")
        failed = agg.book.register(pb.Register(job=job, pod="j-worker-0", world_size_hint=2, node="n0", rank=0))
        agg.book.set_clock(failed, 0.25, 0.002)  # its sidecar's estimate
        agg.book.register(pb.Register(job=job, pod="j-worker-1", world_size_hint=2, rank=1))  # stays silent
        agg.book.ingest(failed, make_event(error_to_pb(ErrorRecord(message="KeyError: 'x'", timestamp=5)), "e"))
        end = make_event(termination_to_pb(Termination(exit_code=1, reason="Error")), "t")
        agg.book.ingest(failed, end, from_sidecar=True)
    finally:
        await agg.stop(grace=2)  # decides the open incident now, as a timeout
    [path] = verdicts.glob("*.json")
    doc: dict[str, Any] = json.loads(path.read_text())
    assert doc["closed_by"] == "timeout" and not doc["final"]
    incident, verdict = doc["incident"], doc["verdict"]
    assert (incident["reported"], incident["world_size"]) == (1, 2)
    assert verdict["members_missing"] == incident["world_size"] - incident["reported"] == 1
    assert verdict["rank"] == 0 and verdict["node"] == "n0" and verdict["pod"] == "j-worker-0"
    assert incident["clock_offsets"] == {"j-worker-0": 0.25}  # the silent member was never measured
    assert incident["stalled_at"] is None

    documented = readme_keys()
    assert {k for k in documented if "." not in k} == set(doc)
    for key, value in doc.items():
        if isinstance(value, dict):
            assert documented[key] == set(value), key
    assert documented["incident.job"] == set(incident["job"])
    assert documented["verdict.secondary"] == {"pod", "reason"}
