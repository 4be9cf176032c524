"""What a log's words say when no rule knows them: a victim's or a failure's, and of which category.

The rules (`podmortem.core.rules`) know a failure by its stable tokens. A log in words no rule knows is read by a
generic rule (any Python exception, a bare exit code) and says nothing more. Most such logs in the real-world corpus
are of two kinds: a victim's message from a stack the rules have not met (a parameter server's RPC "Unavailable", a
federated client's stream reset), which then reads as a failure of its own and can out-time the root; and a failure
of its own whose category its words do say to a reader ("permission denied", "address already in use", "bytes"
and "allocate"), read as `user_code`.

This module holds a word model fitted on the corpus (`podmortem/offline/wordfit.py` writes `wordmodel.json`): for
each word, how many excerpts of each kind (primary, secondary) and of each category held it. Words are the runs of
letters of a log, split at case changes (`ConnectionResetError` -> connection, reset, error), lower-cased; only words
that occur in excerpts from at least `wordfit.MIN_THREADS` different threads are kept, so that one thread's names and
paths say nothing. Two readings, each a naive-Bayes score over the words present:

- `victim_score(text)`: log odds that the text is a victim's rather than a failure's own (> 0: a victim's).
- `category_guess(text)`: the category whose excerpts hold these words most, and its margin in log odds over the next.

The engine uses them only where the rules gave up (`podmortem.core.engine`, "words no rule knows"), and never for a
verdict at the PermanentFailure threshold. Pure: the model is read once, at import.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from podmortem.core.categories import Category

WORD = re.compile(r"[A-Za-z][a-z]{2,}|[A-Z]{2,}[a-z]*")
# The words of a log's last lines: where its failure is, and not the training's own output before it (a pod's log
# tail holds hundreds of lines; the corpus' excerpts 2 to 40). At most this many characters: a bound on the cost per
# member (bench/engine_speed.py --unknown-words).
TAIL_LINES = 40
TAIL_CHARS = 8192


def words(text: str) -> frozenset[str]:
    """The distinct words of the last `TAIL_LINES` lines of `text` (its last `TAIL_CHARS` characters at most)."""
    tail = text[-TAIL_CHARS:].rstrip("\n")
    cut = len(tail)
    for _ in range(TAIL_LINES):
        cut = tail.rfind("\n", 0, cut)
        if cut < 0:
            break
    return frozenset(w.lower() for w in WORD.findall(tail, cut + 1))


@dataclass(frozen=True)
class WordModel:
    """Counts per word, by kind and by category; `alpha` smooths every count."""

    alpha: float
    kinds: dict[str, int]  # primary, secondary: how many excerpts of each
    categories: dict[str, int]
    by_kind: dict[str, dict[str, int]]  # word -> {kind: excerpts holding it}
    by_category: dict[str, dict[str, int]]  # word -> {category: primaries holding it}
    _victim: dict[str, float] = field(default_factory=dict, compare=False, repr=False)
    _category: dict[str, dict[str, float]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        a = self.alpha
        p, s = self.kinds.get("primary", 0), self.kinds.get("secondary", 0)
        for w, n in self.by_kind.items():
            self._victim[w] = math.log((n.get("secondary", 0) + a) / (s + a)) - math.log(
                (n.get("primary", 0) + a) / (p + a)
            )
        k = len(self.categories)
        for w, n in self.by_category.items():
            total = sum(n.values())
            self._category[w] = {c: math.log((n.get(c, 0) + a) / (total + a * k)) for c in self.categories}

    @property
    def prior(self) -> float:
        p, s = self.kinds.get("primary", 0), self.kinds.get("secondary", 0)
        return math.log(s / p) if p and s else 0.0

    def victim_score(self, text: str) -> float:
        """Log odds that `text` is a victim's message rather than a failure of its own."""
        return self.prior + sum(self._victim.get(w, 0.0) for w in words(text))

    def category_guess(self, text: str) -> tuple[Category | None, float]:
        """The category these words are most of, and its margin (log odds) over the next; (None, 0) without words
        the model knows."""
        present = [self._category[w] for w in words(text) if w in self._category]
        if not present or len(self.categories) < 2:
            return None, 0.0
        scores = {c: sum(s[c] for s in present) for c in self.categories}
        ranked = sorted(scores.items(), key=lambda kv: -kv[1])
        return ranked[0][0], ranked[0][1] - ranked[1][1]  # type: ignore[return-value]

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> WordModel:
        return cls(
            alpha=float(doc["alpha"]),
            kinds=dict(doc["kinds"]),
            categories=dict(doc["categories"]),
            by_kind={w: dict(v) for w, v in doc["by_kind"].items()},
            by_category={w: dict(v) for w, v in doc["by_category"].items()},
        )


def _load() -> WordModel:
    doc = json.loads(resources.files("podmortem.core").joinpath("wordmodel.json").read_text(encoding="utf-8"))
    return WordModel.from_json(doc)


MODEL = _load()
