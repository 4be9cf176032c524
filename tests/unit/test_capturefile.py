"""Captures as JSON: the verdict file's `captures` written back as each pod's captures.json reads back as the
same captures (`offline.bundle`), bounded with the root's and the stuck pods' first."""

from __future__ import annotations

import json
from pathlib import Path

from support.bundles import hang_bundle

from podmortem.core.capturefile import LEFT_OUT, captures_by_pod, verdict_captures
from podmortem.core.engine import decide
from podmortem.offline.bundle import load_bundle


def rewrite(bundle: Path, entries: list[dict[str, object]]) -> None:
    for path in bundle.glob("pods/*/captures.json"):
        path.unlink()
    for pod, captures in captures_by_pod(json.loads(json.dumps(entries))).items():  # through JSON, as a file
        (bundle / "pods" / pod / "captures.json").write_text(json.dumps(captures))


def test_the_verdict_files_captures_read_back_as_the_same_captures_and_verdict(tmp_path: Path) -> None:
    bundle = hang_bundle(tmp_path)
    before = load_bundle(bundle)
    assert all(m.captures and m.captures[0].flight_recorder is not None for m in before.members)
    entries = verdict_captures(before.members)
    assert [e["pod"] for e in entries] == [m.pod for m in before.members]
    rewrite(bundle, entries)
    after = load_bundle(bundle)
    assert [m.captures for m in after.members] == [m.captures for m in before.members]
    assert decide(after).hang == decide(before).hang is not None


def test_past_the_bound_the_first_pods_keep_their_evidence_and_the_rest_say_it_was_left_out(tmp_path: Path) -> None:
    members = load_bundle(hang_bundle(tmp_path)).members
    stuck = members[1].pod  # rank 1 never entered the collective
    one = len(members[1].captures[0].stack) + len(json.dumps(members[1].captures[0].flight_recorder.to_dict()))  # type: ignore[union-attr]
    entries = verdict_captures(members, first=(stuck, stuck), limit=one)  # the root, and the stuck pod it is
    assert [e["pod"] for e in entries] == [stuck, members[0].pod, members[2].pod]
    assert entries[0]["stack"] and entries[0]["flight_recorder"] and LEFT_OUT not in entries[0]["note"]
    for entry in entries[1:]:
        assert (entry["stack"], entry["flight_recorder"], entry["note"]) == ("", None, LEFT_OUT)
        assert entry["global_rank"] is not None and entry["path"] == "control_plane"  # still placed


def test_entries_without_a_pod_are_skipped() -> None:
    entries = [{"pod": "a", "path": "py_spy"}, {"path": "py_spy"}, "x", {"pod": 3}, {"pod": "a", "path": "fr_file"}]
    assert captures_by_pod(entries) == {"a": [{"path": "py_spy"}, {"path": "fr_file"}]}
    assert captures_by_pod({"a": []}) == {} and captures_by_pod(None) == {}
