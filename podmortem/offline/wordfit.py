"""Fit the word model (`podmortem/core/wordmodel.py`) on the real-world corpus.

    python -m podmortem.offline.wordfit [--corpus tests/corpus-realworld/excerpts.jsonl] [--skip SPLIT ...] [--write]

Fits on every split but the blind ones (`corpus.BLIND`: a split's one scoring measures words the model never saw) and
the skipped ones, and prints the model's size; `--write` writes
podmortem/core/wordmodel.json, which records the splits it was fitted on (tests/unit/test_wordmodel.py refits from
them and compares).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from podmortem.core.wordmodel import words
from podmortem.offline.corpus import BLIND, Excerpt, load, thread_of

ALPHA = 0.5
MIN_THREADS = 3  # a word says something only when excerpts of this many different threads hold it
MODEL_PATH = Path(__file__).resolve().parents[1] / "core" / "wordmodel.json"
CORPUS = Path(__file__).resolve().parents[2] / "tests" / "corpus-realworld" / "excerpts.jsonl"


def fit(excerpts: Iterable[Excerpt], splits: Iterable[str]) -> dict[str, Any]:
    """The model's document (JSON-ready) fitted on the excerpts of `splits`."""
    chosen = sorted(set(splits))
    rows = [e for e in excerpts if e.split in chosen]
    kinds: dict[str, int] = defaultdict(int)
    categories: dict[str, int] = defaultdict(int)
    by_kind: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_category: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    threads: dict[str, set[str]] = defaultdict(set)
    for e in rows:
        kinds[e.kind] += 1
        if e.kind == "primary" and e.category is not None:
            categories[e.category] += 1
        for w in words(e.text):
            threads[w].add(thread_of(e.source))
            by_kind[w][e.kind] += 1
            if e.kind == "primary" and e.category is not None:
                by_category[w][e.category] += 1
    kept = sorted(w for w, t in threads.items() if len(t) >= MIN_THREADS)
    return {
        "splits": chosen,
        "alpha": ALPHA,
        "min_threads": MIN_THREADS,
        "kinds": dict(sorted(kinds.items())),
        "categories": dict(sorted(categories.items())),
        "by_kind": {w: dict(sorted(by_kind[w].items())) for w in kept},
        "by_category": {w: dict(sorted(by_category[w].items())) for w in kept if by_category[w]},
    }


def development_splits(excerpts: Iterable[Excerpt], skip: Iterable[str] = ()) -> list[str]:
    """The splits the model is fitted on: every split of the corpus but the blind ones and `skip`."""
    return sorted({e.split for e in excerpts} - BLIND - set(skip))


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--skip", action="append", default=[], help="a split not to fit on (repeatable)")
    ap.add_argument("--write", action="store_true", help=f"write {MODEL_PATH.name}")
    ns = ap.parse_args(argv)
    excerpts = load(ns.corpus)
    splits = development_splits(excerpts, ns.skip)
    doc = fit(excerpts, splits)
    print(
        f"fitted on {len(splits)} splits: {doc['kinds']} excerpts, {len(doc['by_kind'])} words "
        f"(in >= {MIN_THREADS} threads), {len(doc['categories'])} categories"
    )
    if ns.write:
        MODEL_PATH.write_text(dumps(doc), encoding="utf-8")
        print(f"wrote {MODEL_PATH}")


if __name__ == "__main__":
    main()
