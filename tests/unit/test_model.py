"""The shared data shapes (podmortem.core.model)."""

from __future__ import annotations

import dataclasses
import json

from podmortem.core.model import Secondary, Verdict


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
