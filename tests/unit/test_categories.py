"""The category registry: one entry per category, read by engine, rules, report and publishers."""

from __future__ import annotations

import re
from typing import get_args

from podmortem.core import categories
from podmortem.core.categories import CATEGORIES, REGISTRY, condition_reason
from podmortem.core.rules import rule_from_dict

REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")  # metav1.Condition reason


def test_every_category_is_described_once_and_the_literal_matches() -> None:
    assert set(get_args(categories.Category)) == set(CATEGORIES) == set(REGISTRY)
    reasons = [REGISTRY[c].reason for c in CATEGORIES]
    assert len(set(reasons)) == len(reasons)
    for c in CATEGORIES:
        info = REGISTRY[c]
        assert REASON.match(info.reason), info.reason
        assert info.advice.strip() and info.title.strip()
        assert categories.RETRYABLE[c] is info.retryable and categories.ADVICE[c] == info.advice


def test_condition_reason_comes_from_the_registry() -> None:
    assert condition_reason("user_code") == "UserCode"
    assert condition_reason("gpu_oom") == "GpuOom"
    assert condition_reason(None) == "NoFailure"
    assert condition_reason("made_up") == "Unknown"


def test_a_rule_inherits_retryable_from_its_category() -> None:
    for category in CATEGORIES:
        rule = rule_from_dict({"id": "x", "message": "No space left", "category": category})
        assert rule.is_retryable is REGISTRY[category].retryable
