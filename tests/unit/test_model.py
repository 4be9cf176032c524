"""The shared data shapes (podmortem.core.model)."""

from __future__ import annotations

import dataclasses
import json

from podmortem.core.model import Frame, HangFinding, Secondary, Verdict


def test_verdict_to_dict_is_asdict_with_lists() -> None:
    """to_dict builds the dict without dataclasses.asdict's deep copies; the result is the same."""
    verdict = Verdict(
        pod="w-0",
        category="user_code",
        retryable=False,
        summary="s",
        rank=0,
        evidence=("a", "b"),
        secondary=(Secondary("w-1", "gloo"), Secondary("w-2", "SIGTERM")),
        confidence=0.9,
        failed_at=1.5,
        runner_up_pod="w-3",
        runner_up_category="network",
    )
    expected = dataclasses.asdict(verdict)
    expected["evidence"] = ["a", "b"]
    expected["secondary"] = [dataclasses.asdict(s) for s in verdict.secondary]
    got = verdict.to_dict()
    assert got == expected
    assert json.dumps(got) == json.dumps(expected)  # same keys in the same order
    assert isinstance(got["secondary"][0], dict)


def test_verdict_dict_carries_the_hang_finding() -> None:

    plain = Verdict(pod="p", category="hang", retryable=True, summary="s")
    assert plain.to_dict()["hang"] is None
    hang = HangFinding(
        finding="behind",
        stuck_ranks=(5,),
        stuck_pods=("llm-worker-1",),
        process_group="0",
        seq=4812,
        op="all_reduce",
        frame=Frame("/app/train.py", 211, "load_batch"),
        path="control_plane",
        detail="rank 5 never entered all_reduce #4812",
    )
    d = json.loads(json.dumps(dataclasses.replace(plain, hang=hang).to_dict()))
    assert d["hang"] == {
        "finding": "behind",
        "stuck_ranks": [5],
        "stuck_pods": ["llm-worker-1"],
        "process_group": "0",
        "seq": 4812,
        "op": "all_reduce",
        "frame": {"file": "/app/train.py", "line": 211, "function": "load_batch"},
        "path": "control_plane",
        "detail": "rank 5 never entered all_reduce #4812",
    }
    assert hang.frame is not None and hang.frame.where() == "train.py:211 in load_batch"
