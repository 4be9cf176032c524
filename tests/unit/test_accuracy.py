"""The engine against the labelled development corpus: the accuracy floor it reached must hold.

The corpus lives outside the repository (`../shared/corpus`, or `$PODMORTEM_CORPUS`); a clean clone in
CI may not have it, and then this test is skipped. Scored exactly as `bench/accuracy.py` scores it
(truth.json is read only by the scorer, after the engine decided).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from podmortem.core.rules import DEFAULT_RULES

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(os.environ.get("PODMORTEM_CORPUS") or REPO.parent / "shared" / "corpus")

# Measured on the development corpus (34 incidents) with `python bench/accuracy.py ../shared/corpus`.
FLOOR = {"pod": 0.97, "category": 0.97, "retryable": 0.97}


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("podmortem_bench_accuracy", REPO / "bench" / "accuracy.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(
    not (CORPUS.is_dir() and any(CORPUS.glob("*/incident.json"))),
    reason=f"no labelled corpus at {CORPUS} (set PODMORTEM_CORPUS)",
)
def test_engine_accuracy_floor_and_beats_baselines() -> None:
    result = _bench().score(CORPUS, DEFAULT_RULES)
    overall = result["table"]["ALL"]
    engine = overall["engine"]
    assert engine["n"] >= 10
    for metric, floor in FLOOR.items():
        assert engine[metric] >= floor, (metric, engine[metric], result["table"])
    for baseline in ("earliest", "last writer"):
        assert engine["pod"] > overall[baseline]["pod"]
    # Every scenario, not only the average.
    for scenario, row in result["table"].items():
        assert row["engine"]["pod"] >= 0.5, (scenario, row["engine"])
