"""The engine on failure text from public issues (tests/corpus-realworld/), composed adversarially into
3-pod incidents (victims end no later than the root; the root's index is random).

Floors sit a little below the figures measured when the rules last changed (docs/engine.md): a rule
change that breaks generalisation fails the build. The held-out half was not read while writing rules.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from podmortem.core.assess import assess
from podmortem.core.engine import decide
from podmortem.core.model import Incident, Verdict
from podmortem.offline import analyze
from podmortem.offline.corpus import Answer, Case, at_threshold, compose, load, score, thread_of, write_bundle

CORPUS = Path(__file__).resolve().parents[1] / "corpus-realworld" / "excerpts.jsonl"
SEEDS = range(3)
# measured (bench/realworld.py --split both, 2026-11-27, the fourth round): train 0.99/0.98/0.99 (n=660), held-out
# 0.99/0.94/0.96 (n=300; a training set since issue 25)
FLOORS = {
    "train": (0.97, 0.96, 0.97),
    "heldout": (0.96, 0.90, 0.93),
    "fresh": (0.93, 0.93, 0.93),
    "fresh2": (0.96, 0.95, 0.96),
    # scored once, blind, 2026-11-27: 0.67 / 0.71 / 0.82 (n=153); one victim's bare TCPStore connect timeout was
    # read as the root in 44 of its 56 misses (docs/engine.md, "The third fresh split"); 0.95 / 0.91 / 0.91 once
    # victims were read from what they mean (a development set since)
    "fresh3": (0.95, 0.92, 0.92),
    # scored once, blind, 2026-11-27: 0.86 / 0.84 / 0.87 (n=153; docs/engine.md, "The fifth round"); a development
    # set since, 0.93 / 0.98 / 0.98 after the fifth round: provisional floors below that
    "fresh4": (0.91, 0.95, 0.95),
    # a development set since its one blind scoring (figures in docs/engine.md, "fresh5's one scoring" and "The seventh
    # round"): provisional floors below its figures after the seventh round
    "fresh5": (0.91, 0.92, 0.92),
    # scored once, blind, at 4c770d9: 0.83 / 0.74 / 0.84 (n=183; docs/engine.md, "fresh6's one scoring"); a development
    # set since: provisional floors below its figures after the rules written from its misses
    "fresh6": (0.87, 0.91, 0.93),
    # scored once, blind, at eb3c449: 0.70 / 0.76 / 0.87 (n=138; docs/engine.md, "fresh7's one scoring"); a development
    # set since: provisional floors below its figures after the rules written from its misses
    "fresh7": (0.93, 0.94, 0.95),
    # scored once, blind, at c2239c5: 0.83 / 0.76 / 0.88 (n=147; docs/engine.md, "fresh8's one scoring"); a development
    # set since: provisional floors below its figures after the rules written from its misses
    "fresh8": (0.93, 0.95, 0.95),
    # scored once, blind, at a804d2d: 0.88 / 0.90 / 0.96 (n=141; docs/engine.md, "fresh9's one scoring"); a development
    # set since: provisional floors below its figures after the rules written from its misses
    "fresh9": (0.89, 0.94, 0.95),
    # scored once, blind, at c64ecea: 0.86 / 0.75 / 0.86 (n=177; docs/engine.md, "fresh10's one scoring"); a development
    # set since: provisional floors below its figures after the rules written from its misses
    "fresh10": (0.95, 0.82, 0.88),
    # scored once, blind, at 59d3223: 0.83 / 0.67 / 0.78 (n=141; docs/engine.md, "fresh11's one scoring"); a development
    # set since: provisional floors below its figures after the rules written from its misses
    "fresh11": (0.86, 0.75, 0.85),
    # scored once, blind, at 0af4eb8: 0.94 / 0.78 / 0.85 (n=144; docs/engine.md, "fresh12's one scoring"); a development
    # set since
    "fresh12": (0.91, 0.75, 0.82),
    # scored once, blind, at 09d596f: 0.88 / 0.74 / 0.82 (n=186; docs/engine.md, "fresh13's one scoring"); a development
    # set since: floors below its figures after the rules written from its misses (0.99 / 0.95 / 0.98)
    "fresh13": (0.96, 0.92, 0.95),
    # scored once, blind, at d65140e: 0.92 / 0.84 / 0.92 (n=180; docs/engine.md, "fresh14's one scoring"); a development
    # set since: provisional floors below its figures after the rules written from its misses (0.99 / 1.00 / 1.00)
    "fresh14": (0.96, 0.96, 0.96),
    # scored once, blind, at d4b7230: 0.93 / 0.83 / 0.87 (n=177; docs/engine.md, "fresh15's one scoring"); a development
    # set since: floors below its figures after the rules written from its misses (0.99 / 0.98 / 0.98)
    "fresh15": (0.96, 0.95, 0.95),
    # scored once, blind, at 6504f67: 0.82 / 0.66 / 0.80 (n=138; docs/engine.md, "fresh16's one scoring"); a development
    # set since: floors below its figures after the rules written from its misses (1.00 / 0.96 / 0.97)
    "fresh16": (0.96, 0.92, 0.93),
    # scored once, blind, at 39d8ac7: 0.94 / 0.84 / 0.87 (n=171; docs/engine.md, "fresh17's one scoring"); a development
    # set since: provisional floors below its figures with the word model refitted on it (0.94 / 0.88 / 0.91)
    "fresh17": (0.92, 0.85, 0.88),
    # scored once, blind, at 9a5b76c: 0.91 / 0.84 / 0.88 (n=159; docs/engine.md, "fresh18's one scoring"); a development
    # set since: provisional floors below those figures
    "fresh18": (0.89, 0.82, 0.86),
    # scored once, blind, at 82c95c8: 0.66 / 0.71 / 0.91 (n=153; docs/engine.md, "fresh19's one scoring"); a development
    # set since: provisional floors below its figures with the word model refitted on it (0.73 / 0.73 / 0.92)
    "fresh19": (0.70, 0.70, 0.90),
    # scored once, blind, at 81c6884: 0.78 / 0.75 / 0.88 (n=216; docs/engine.md, "fresh20's one scoring"); a development
    # set since: floors below its figures after the rules written from its misses (0.98 / 0.98 / 0.99)
    "fresh20": (0.95, 0.95, 0.96),
    # scored once, blind, at 8166d87: 0.90 / 0.84 / 0.90 (n=234; docs/engine.md, "fresh21's one scoring"); a development
    # set since: floors below its figures after the rules written from its misses (0.97 / 0.99 / 0.99)
    "fresh21": (0.94, 0.96, 0.96),
    # scored once, blind, at 3bf1b2b: 0.91 / 0.89 / 0.94 (n=195; docs/engine.md, "fresh22's one scoring"); a development
    # set since: floors below its figures once its one line wrong at the threshold was read by what it says, then its
    # victims and category misses by what theirs mean (0.98 / 1.00 / 1.00)
    "fresh22": (0.96, 0.97, 0.97),
}
# The fresh splits were each scored once, blind, when they were started (the figures are in docs/engine.md);
# their floors guard them from here on, and they are no longer blind.
# pod and category both right, held-out, seed 0, through `podmortem analyze`: measured 83/100 = 0.83
BOTH_RIGHT_FLOOR = 0.79


def _engine(incident: Incident) -> Answer:
    v = decide(incident)
    return v.pod, v.category, v.retryable


def _earliest(incident: Incident) -> Answer:
    first = min(incident.members, key=lambda m: m.termination.finished_at or 0 if m.termination else 0)
    f = assess(first)
    return first.pod, f.category, f.rule.is_retryable if f.rule is not None and f.category else None


def _cases(split: str) -> list[Case]:
    excerpts = load(CORPUS)
    return [c for seed in SEEDS for c in compose(excerpts, split, seed)]


def test_the_corpus_is_sound() -> None:
    excerpts = load(CORPUS)
    assert len(excerpts) >= 300
    assert len({e.id for e in excerpts}) == len(excerpts)
    splits = {"train", "heldout", "fresh", *(f"fresh{n}" for n in range(2, 23))}
    assert {e.split for e in excerpts} == splits
    # A thread's excerpts are all on one side of the split.
    sides: dict[str, set[str]] = {}
    for e in excerpts:
        sides.setdefault(thread_of(e.source), set()).add(e.split)
    assert all(len(s) == 1 for s in sides.values())
    assert all(e.source.startswith("https://") and e.text.strip() for e in excerpts)


@pytest.mark.parametrize("split", ["train", "heldout", "fresh", *(f"fresh{n}" for n in range(2, 23))])
def test_accuracy_floor_and_beats_the_earliest_baseline(split: str) -> None:
    cases = _cases(split)
    engine, baseline = score(cases, _engine)["ALL"], score(cases, _earliest)["ALL"]
    pod, category, retryable = FLOORS[split]
    assert engine["pod"] >= pod and engine["category"] >= category and engine["retryable"] >= retryable, engine
    assert engine["pod"] > baseline["pod"] and engine["category"] > baseline["category"]


# PermanentFailure is written only at the aggregator's --permanent-confidence (default 0.9) and only for a verdict
# that says a retry will not help: among those, at least this share must be right about retryability.
PERMANENT_CONFIDENCE = 0.9
PERMANENT_PRECISION_FLOOR = 0.99


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_verdicts_that_would_write_permanent_failure_are_right_about_retryability(split: str) -> None:
    strict = [c for c in _cases(split) if _permanent(decide(c.incident))]
    right = sum(c.retryable is False for c in strict)
    assert len(strict) >= 50, len(strict)  # enough such verdicts for the share to mean something
    assert right / len(strict) >= PERMANENT_PRECISION_FLOOR, [c.primary.id for c in strict if c.retryable]


# Every rule that decides a verdict at the PermanentFailure threshold is right that often on every split, or it does
# not get the threshold (its max_confidence in rules.yaml); coverage at the threshold stays near what was measured
# (`bench/realworld.py --calibration`; the figures are in docs/engine.md).
RULE_PRECISION_FLOOR = 0.99
# measured 2026-11-27 (docs/engine.md, "The fourth round"): train 0.84, held-out 0.88, fresh 0.87, fresh2 0.80,
# fresh3 0.73; fresh4 scored once, blind: 75/153 = 0.49, then 96/153 = 0.63 after the fifth round (provisional);
# fresh5: provisional, below its coverage after the seventh round (docs/engine.md); fresh6 scored once, blind, at
# 4c770d9: 90/183 = 0.49 (87 right), provisional below its coverage after the rules written from its misses; fresh7
# scored once, blind, at eb3c449: 61/138 = 0.44 (56 right), provisional below its coverage after the same; fresh8
# scored once, blind, at c2239c5: 76/147 = 0.52 (66 right), provisional below its coverage after the same (90/147);
# fresh9 scored once, blind, at a804d2d: 84/141 = 0.60, all right, below it; fresh10 scored once, blind, at c64ecea:
# 71/177 = 0.40, all right, provisional below its coverage after the rules written from its misses (84/177); fresh11
# scored once, blind, at 59d3223: 50/141 = 0.35 (48 right), provisional below its coverage after the same (54/141)
# fresh13 scored once, blind, at 09d596f: 52/186 = 0.28 (46 right), below its coverage after the rules written from
# its wrong answers at the threshold (52/186, all right); fresh14 scored once, blind, at d65140e: 89/180 = 0.49, all
# right, then 114/180 after the rules written from its misses, below that; fresh15 scored once, blind, at d4b7230:
# 87/177 = 0.49 (84 right), then 84/177 = 0.47, all right, once its three wrong answers at the threshold were capped;
# fresh16 scored once, blind, at 6504f67: 40/138 = 0.29 (39 right), then 60/138 = 0.43, all right, after the rules
# written from its misses; fresh17 scored once, blind, at 39d8ac7: 99/171 = 0.58 (96 right), then 96/171 = 0.56, all
# right, once its three wrong answers at the threshold (MPI_Init's fatal handler read as the environment) were capped;
# fresh18 scored once, blind, at 9a5b76c: 84/159 = 0.53 (81 right), then 81/159 = 0.51, all right, once SageMaker's
# CapacityError (a platform client's ValueError) was read as the cloud's capacity below the threshold; fresh20 scored
# once, blind, at 81c6884: 72/216 = 0.33 (62 right), then 72/216, all right, once srun's kills after a step was stopped
# were read as its teardown, and gloo's size check and a thread's EAGAIN under `terminate called` by what they mean;
# fresh21 scored once, blind, at 8166d87: 107/234 = 0.46, all right; after the rules written from the misses of both,
# fresh20 96/216 = 0.44 and fresh21 129/234 = 0.55, all right; fresh22 scored once, blind, at 3bf1b2b: 83/195 = 0.43
# (80 right), then 83/195, all right, once "CUDA error 2: out of memory" under an abort was read as the device's memory,
# then 106/195 = 0.54, all right, once its victims no longer read as roots beside those primaries
COVERAGE_FLOORS = {
    "train": 0.81,
    "heldout": 0.85,
    "fresh": 0.82,
    "fresh2": 0.76,
    "fresh3": 0.70,
    "fresh4": 0.60,
    "fresh5": 0.50,
    "fresh6": 0.50,
    "fresh7": 0.53,
    "fresh8": 0.58,
    "fresh9": 0.57,
    "fresh10": 0.44,
    "fresh11": 0.36,
    "fresh12": 0.42,
    "fresh13": 0.27,
    "fresh14": 0.60,
    "fresh15": 0.47,
    "fresh16": 0.40,
    "fresh17": 0.53,
    "fresh18": 0.50,
    "fresh19": 0.45,
    "fresh20": 0.42,
    "fresh21": 0.53,
    "fresh22": 0.52,
}


@pytest.mark.parametrize(
    "split",
    ["train", "heldout", "fresh", *(f"fresh{n}" for n in range(2, 23))],
)
def test_each_rule_that_reaches_the_permanent_threshold_is_right_there(split: str) -> None:
    n, rows = at_threshold(_cases(split), decide, PERMANENT_CONFIDENCE)
    wrong = {
        rule: (r.n, r.right, r.retryable_right)
        for rule, r in rows.items()
        if r.right < RULE_PRECISION_FLOOR * r.n or r.retryable_right < RULE_PRECISION_FLOOR * r.n
    }
    assert not wrong, wrong
    assert sum(r.n for r in rows.values()) >= COVERAGE_FLOORS[split] * n


def _permanent(v: Verdict) -> bool:
    return v.confidence >= PERMANENT_CONFIDENCE and v.retryable is False


def test_analyze_on_composed_held_out_bundles_names_the_root(tmp_path: Path) -> None:
    cases = compose(load(CORPUS), "heldout", seed=0)
    right = 0
    for case in cases:
        bundle = write_bundle(case, tmp_path / case.incident.incident_id)
        out = io.StringIO()
        with redirect_stdout(out):
            code = analyze.main(str(bundle), as_json=True)
        assert code in (0, 1)
        got = json.loads(out.getvalue())["root_cause"]
        # The offline path (bundle on disk -> loader -> engine) decides as the engine does in memory...
        assert (got["pod"], got["category"]) == _engine(case.incident)[:2], case.primary.id
        right += got["pod"] == case.root and got["category"] == case.category
    # ...and names the right pod and category as often as the floor says.
    assert right / len(cases) >= BOTH_RIGHT_FLOOR
