"""Score the engine on 3-pod incidents composed from the real-world corpus (tests/corpus-realworld/).

    python -m bench.realworld [--split train|heldout|both|fresh|fresh2|...|fresh22] [--seeds N] [--misses]
                              [--from-line N] [--cross] [--unknown-victims] [--blind-once]

Each primary excerpt becomes an incident whose root's log tail is that excerpt and whose two victims'
log tails are victims' messages of the same split; victims end no later than the root and the root's
index is random (podmortem.offline.corpus). Prints root / category / retryable accuracy per category and
overall for the engine and for the `earliest` baseline (the first container to finish, classified by
the same rules). Read only the train split while writing rules; score held-out at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from bench.common import REALWORLD_CORPUS
from podmortem.core.assess import assess
from podmortem.core.conditions import PERMANENT_CONFIDENCE
from podmortem.core.engine import decide
from podmortem.core.model import Incident
from podmortem.offline.corpus import BLIND, Answer, Case, Excerpt, at_threshold, compose, load, score


def engine(incident: Incident) -> Answer:
    v = decide(incident)
    return v.pod, v.category, v.retryable


def earliest(incident: Incident) -> Answer:
    first = min(incident.members, key=lambda m: (m.termination.finished_at or 0) if m.termination else 0)
    f = assess(first)
    return first.pod, f.category, f.rule.is_retryable if f.rule is not None and f.category else None


def table(cases: list[Case]) -> str:
    eng, base = score(cases, engine), score(cases, earliest)
    lines = [f"{'category':<12}{'n':>4}  {'engine pod/cat/retry':<24}  earliest pod/cat/retry"]
    for key in [*sorted(k for k in eng if k != "ALL"), "ALL"]:
        e, b = eng[key], base[key]
        lines.append(
            f"{key:<12}{int(e['n']):>4}  {e['pod']:.2f} / {e['category']:.2f} / {e['retryable']:.2f}      "
            f"{b['pod']:.2f} / {b['category']:.2f} / {b['retryable']:.2f}"
        )
    return "\n".join(lines)


def permanent_precision(cases: list[Case]) -> tuple[int, int]:
    """(right, n) over verdicts at confidence >= PERMANENT_CONFIDENCE that say "not retryable": how many are right
    about retryability (each wrong one would make a job give up that a retry could have saved)."""
    right = n = 0
    for c in cases:
        v = decide(c.incident)
        if v.confidence >= PERMANENT_CONFIDENCE and v.retryable is False:
            n += 1
            right += c.retryable is False
    return right, n


def precision_table(cases: list[Case]) -> str:
    """Coverage at the PermanentFailure threshold, and each rule that reached it with its precision (the CI floor per
    rule is in tests/unit/test_realworld_accuracy.py)."""
    n, rows = at_threshold(cases, decide, PERMANENT_CONFIDENCE)
    at = sum(r.n for r in rows.values())
    right = sum(r.right for r in rows.values())
    share = f"{right / at:.3f}" if at else "-"
    lines = [
        f"coverage at confidence >= {PERMANENT_CONFIDENCE}: {at}/{n} = {at / n:.2f}, right (pod and category) "
        f"{right}/{at} = {share}",
        f"  {'rule at >= 0.9':<34}{'n':>5}{'pod+category':>14}{'retryable':>11}",
    ]
    for rule, r in rows.items():
        lines.append(f"  {rule:<34}{r.n:>5}{r.right / r.n:>14.3f}{r.retryable_right / r.n:>11.3f}")
    return "\n".join(lines)


def reliability(cases: list[Case]) -> str:
    """Is the verdict's confidence worth reading? Brier score of confidence against "the root pod and
    category are right", observed accuracy per confidence bin, and the precision PermanentFailure relies on."""
    pairs = []
    for c in cases:
        v = decide(c.incident)
        pairs.append((v.confidence, float(v.pod == c.root and v.category == c.category)))
    brier = sum((conf - hit) ** 2 for conf, hit in pairs) / len(pairs)
    lines = [f"Brier score {brier:.3f} (n={len(pairs)}); confidence bin -> n, observed accuracy, mean confidence"]
    for lo, hi in ((0.0, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.85), (0.85, 0.9), (0.9, 1.01)):
        inside = [(conf, hit) for conf, hit in pairs if lo <= conf < hi]
        if inside:
            acc = sum(h for _, h in inside) / len(inside)
            mean = sum(c for c, _ in inside) / len(inside)
            lines.append(
                f"  [{lo:.2f}, {min(hi, 1.0):.2f})  n={len(inside):>3}  accuracy {acc:.2f}  confidence {mean:.2f}"
            )
    right, n = permanent_precision(cases)
    share = f"{right / n:.3f}" if n else "-"
    lines.append(
        f"not retryable at confidence >= {PERMANENT_CONFIDENCE}: right about retryability {right}/{n} = {share}"
        " (the verdicts that write PermanentFailure)"
    )
    return "\n".join(lines)


def crossed(excerpts: list[Excerpt], split: str) -> list[Excerpt]:
    """The primaries of `split` with the *other* split's victims, all relabelled `split`: how the engine does
    when the victims' words are ones no rule was written from (the hidden set brings its own victims)."""
    other = "heldout" if split != "heldout" else "train"
    keep = [
        e for e in excerpts if (e.kind == "primary" and e.split == split) or (e.kind != "primary" and e.split == other)
    ]
    return [dataclasses.replace(e, split=split) for e in keep]


# Victims in words no rule knows: an exception of a carrier class from a runtime no rule names, raised as the rank
# lost its peers (our own words; `--unknown-victims`).
UNKNOWN_ECHOES = (
    'Traceback (most recent call last):\n  File "/opt/venv/lib/python3.11/site-packages/meshrt/group.py", line 212, '
    "in wait\n    raise MeshError(status)\nmeshrt.errors.MeshError: member 3 left the group (status 17)",
    "[rank5]: RuntimeError: collective 'grad_sync' aborted: transport session 0x7f3e closed unexpectedly",
)


def unknown_victims(excerpts: list[Excerpt], split: str) -> list[Excerpt]:
    """The primaries of `split` with only victims in words no rule knows (UNKNOWN_ECHOES): how often the root is still
    found when nothing a victim says is recognised — the case an unseen launcher or runtime brings."""
    primaries = [e for e in excerpts if e.kind == "primary" and e.split == split]
    echoes = [
        Excerpt(
            f"unknown-echo-{i}", "https://example.invalid/", "other", "secondary", None, "peer", None, None, t, split
        )
        for i, t in enumerate(UNKNOWN_ECHOES)
    ]
    return [*primaries, *echoes]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=REALWORLD_CORPUS)
    ap.add_argument(
        "--split",
        choices=("train", "heldout", "both", "fresh", *(f"fresh{n}" for n in range(2, 23))),
        default="train",
        help="both = train and heldout; fresh = the split started with issue 25, scored once at its end; "
        "fresh2 = the split started with issue 34, scored once at its end; "
        "fresh3 = a second split built before any rule of that issue's second round changed, scored once at its end; "
        "fresh4 = a third, collected by people who write no rules, frozen before the third round's rules changed; "
        "fresh5 = a fourth, collected the same way after fresh4's scoring and frozen before the fifth round's rules; "
        "fresh6 = a fifth, collected the same way by three people after fresh5's scoring, frozen before the seventh "
        "round's rules; fresh7 = a sixth, collected the same way during the seventh round, before the rules written "
        "from fresh6's scoring; fresh8 = a seventh, collected the same way before the rules written from fresh7's "
        "scoring; fresh9 = an eighth, collected the same way before the rules written from fresh8's scoring; "
        "fresh10 = a ninth, collected the same way by three people after fresh9's scoring, before the tenth round's "
        "rules; fresh11 = a tenth, collected the same way by two people during the tenth round, before the rules "
        "written from fresh10's scoring; fresh12 = an eleventh, collected the same way by two people during the tenth "
        "round, before the rules written from fresh11's scoring; fresh13 = a twelfth, collected the same way by three "
        "people after the thirteenth round, before the fourteenth round's rules; fresh14 = a thirteenth, collected "
        "the same way by three people during the fourteenth round, before the fifteenth round's rules; fresh15 = a "
        "fourteenth, collected the same way by three people during the fourteenth round, before the sixteenth round's "
        "rules; fresh16 = a fifteenth, collected the same way by three people during the fifteenth round, before "
        "the seventeenth round's rules; fresh17 and fresh18 = a sixteenth and a seventeenth, collected the same way by "
        "six people before the nineteenth round; fresh19 = an eighteenth, collected the same way by three people "
        "after fresh18's scoring, before the twenty-first round's rules; fresh20 = a nineteenth, collected the same "
        "way by four people after fresh19's scoring, before the twenty-third round's rules; fresh21 = a twentieth, "
        "collected the same way by four people during the twenty-third round, before the twenty-fourth round's rules; "
        "fresh22 = a twenty-first, collected the same way by four people during the twenty-fourth round, before the "
        "twenty-fifth round's rules",
    )
    ap.add_argument("--seeds", type=int, default=3, help="compositions per primary (different victims/order)")
    ap.add_argument(
        "--misses",
        action="store_true",
        help="list the cases the engine got wrong (not for a BLIND split, whose one scoring is still to come)",
    )
    ap.add_argument("--calibration", action="store_true", help="print the Brier score and a reliability table")
    ap.add_argument(
        "--from-line",
        type=int,
        default=1,
        metavar="N",
        help="score only the primaries from line N of the corpus on (a batch just added, before any rule changes; "
        "victims still come from the whole split)",
    )
    ap.add_argument(
        "--cross",
        action="store_true",
        help="compose each split's primaries with the OTHER split's victims (unseen victims' words; aggregates only)",
    )
    ap.add_argument(
        "--unknown-victims",
        action="store_true",
        help="compose each primary with victims in words no rule knows (a stress test of the decision; aggregates)",
    )
    ap.add_argument(
        "--blind-once",
        action="store_true",
        help="score a BLIND split: its one scoring, at the end of the work it measures",
    )
    ns = ap.parse_args(argv)
    if ns.split in BLIND and not ns.blind_once:
        ap.error(f"{ns.split} is blind: it is scored once, at the end of the work it measures (--blind-once)")
    excerpts = load(ns.corpus)
    for split in ("train", "heldout") if ns.split == "both" else (ns.split,):
        scored = {e.id for e in excerpts[ns.from_line - 1 :]}
        pool = crossed(excerpts, split) if ns.cross else excerpts
        pool = unknown_victims(pool, split) if ns.unknown_victims else pool
        cases = [c for seed in range(ns.seeds) for c in compose(pool, split, seed) if c.primary.id in scored]
        if not cases:
            print(f"== {split}: no primaries from line {ns.from_line}")
            continue
        victims = f", victims from {'heldout' if split == 'train' else 'train'}" if ns.cross else ""
        print(f"== {split}: {len(cases)} incidents ({ns.seeds} compositions per primary{victims})")
        print(table(cases))
        if ns.calibration:
            print(reliability(cases))
            print(precision_table(cases))
        if ns.misses and split not in BLIND and not (ns.cross or ns.unknown_victims):
            for c in cases:
                pod, cat, retry = engine(c.incident)
                if (pod, cat, retry) != (c.root, c.category, c.retryable):
                    print(f"  MISS {c.primary.id}: want {c.root} {c.category} {c.retryable}; got {pod} {cat} {retry}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
