"""The engine against the labelled development corpus: the accuracy floor it reached must hold.

The corpus is part of the repository (tests/corpus-torchrun/; `$PODMORTEM_CORPUS` points at another
one), so this test runs in every clone. Scored exactly as `python -m bench.accuracy` scores it: every
bundle counts, a bundle that does not load fails the test, and truth.json is read only by the scorer,
after the engine decided.
"""

from __future__ import annotations

from bench.accuracy import score
from bench.common import corpus_dir
from podmortem.core.rules import DEFAULT_RULES

# Reached on the development corpus (34 incidents): `python -m bench.accuracy`.
FLOOR = {"pod": 0.97, "category": 0.97, "retryable": 0.97}


def test_engine_accuracy_floor_and_beats_baselines() -> None:
    corpus = corpus_dir()
    incidents = sorted(p.parent.name for p in corpus.glob("*/incident.json"))
    assert incidents, f"no labelled corpus at {corpus}"
    result = score(corpus, DEFAULT_RULES)
    assert result["errors"] == [], result["errors"]
    assert sorted(row["incident"] for row in result["rows"]) == incidents
    overall = result["table"]["ALL"]
    engine = overall["engine"]
    assert engine["n"] == len(incidents)
    for metric, floor in FLOOR.items():
        assert engine[metric] >= floor, (metric, engine[metric], result["table"])
    for baseline in ("earliest", "last writer"):
        assert engine["pod"] > overall[baseline]["pod"]
    # Every scenario, not only the average.
    for scenario, row in result["table"].items():
        assert row["engine"]["pod"] >= 0.5, (scenario, row["engine"])
