"""A failure that repeats stops the retries: the rule, over a job's history of attempts.

A retryable root cause is retried (`RetryableFailure`, counted against the job's budget). When the same
failure (`core.signature`) comes back on consecutive attempts of the same job, a retry has already been
shown not to help: at the `limit`-th identical attempt in a row, the root pod gets
`podmortem.io/PermanentFailure` with reason `RepeatedFailure` instead, so the job's policy stops it
(the same condition type as any permanent cause: the generated policies need no change).

The rule (`escalate`):

* only a root's `RetryableFailure` is escalated: a permanent cause stops the job anyway, a victim is
  ignored, a member that is not the root is not the job's failure;
* the current attempt and the `limit - 1` attempts before it (the job's history, newest first, one entry
  per attempt, the current attempt's own entry left out) all have the same signature;
* each of those verdicts is at or above the permanent confidence (`--permanent-confidence`): a job is
  never stopped on a guess, and a repeat of a guess is still a guess;
* `preemption` never escalates (the cluster took the pod; it says nothing of the job), and neither does
  a category with no signature; `hardware` and `node_lost` repeat only on the same node (the node is
  part of their signature);
* `limit` 0 (or 1) is off.

A different signature in between resets the count: only a run of identical attempts counts. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from podmortem.core.conditions import PERMANENT, RETRYABLE, PodCondition
from podmortem.core.model import Incident, Verdict
from podmortem.core.signature import signature

REPEATED_REASON = "RepeatedFailure"
DEFAULT_LIMIT = 2  # the second identical attempt stops the job
MAX_ATTEMPTS = 8  # entries of history kept per job: more than any useful limit needs
NEVER = frozenset({"preemption"})
_MAX_MESSAGE = 512  # podmortem.core.conditions.MAX_MESSAGE


@dataclass(frozen=True)
class Attempt:
    """One decided attempt of a job, as its history keeps it."""

    attempt: str  # the incident's attempt ("0", "1", "r1", "g2", "" for the first run)
    category: str
    signature: str
    decided_at: float
    confidence: float = 0.0
    retryable: bool | None = None
    node: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The compact form kept in the verdict annotation and the verdict file (`attempt_history`)."""
        return {
            "attempt": self.attempt,
            "category": self.category,
            "signature": self.signature,
            "decidedAt": round(self.decided_at, 3),
            "confidence": round(self.confidence, 3),
            "retryable": self.retryable,
            "node": self.node,
        }

    @staticmethod
    def from_dict(doc: Any) -> Attempt | None:
        """An entry read back from an annotation; None for anything malformed (it is not ours to trust)."""
        if not isinstance(doc, dict):
            return None
        try:
            at = float(doc["decidedAt"])
            confidence = float(doc.get("confidence") or 0.0)
        except (KeyError, TypeError, ValueError):
            return None
        fields = (doc.get("attempt"), doc.get("category"), doc.get("signature"), doc.get("node") or "")
        if not all(isinstance(f, str) and len(f) <= 253 for f in fields) or at != at:
            return None
        retryable = doc.get("retryable")
        return Attempt(
            attempt=str(doc["attempt"]),
            category=str(doc["category"]),
            signature=str(doc["signature"]),
            decided_at=at,
            confidence=max(0.0, min(confidence, 1.0)),
            retryable=retryable if isinstance(retryable, bool) else None,
            node=str(doc.get("node") or ""),
        )


def entry(incident: Incident, verdict: Verdict, decided_at: float) -> Attempt | None:
    """The history entry of `incident`'s attempt as `verdict` decides it (None: no root cause). The
    signature reads the root's own traceback and the incident's pod and node names (`core.signature`)."""
    if verdict.pod is None or verdict.category is None:
        return None
    root = next((m for m in incident.members if m.pod == verdict.pod), None)
    traceback = root.error.traceback if root is not None and root.error is not None else ""
    names = [n for m in incident.members for n in (m.pod, m.node) if n]
    return Attempt(
        attempt=incident.attempt,
        category=verdict.category,
        signature=signature(verdict, traceback, names),
        decided_at=decided_at,
        confidence=verdict.confidence,
        retryable=verdict.retryable,
        node=verdict.node,
    )


def recorded(history: Sequence[Attempt], entry: Attempt, keep: int = MAX_ATTEMPTS) -> tuple[Attempt, ...]:
    """`history` (newest first) with `entry` in its attempt's place (a revision replaces it), newest first,
    at most `keep` entries."""
    rest = [a for a in history if a.attempt != entry.attempt]
    return tuple(sorted([entry, *rest], key=lambda a: a.decided_at, reverse=True)[:keep])


def run_length(history: Sequence[Attempt], current: Attempt) -> int:
    """How many attempts in a row, ending with `current`, have its signature (1: only this one).
    `history`: newest first; `current`'s own attempt in it is skipped."""
    if not current.signature:
        return 1
    count = 1
    for previous in history:
        if previous.attempt == current.attempt:
            continue
        if previous.signature != current.signature:
            break
        count += 1
    return count


def escalate(
    condition: PodCondition,
    current: Attempt,
    history: Sequence[Attempt],
    *,
    limit: int,
    permanent_confidence: float,
    root: bool,
) -> PodCondition:
    """`condition`, or `PermanentFailure`/`RepeatedFailure` in its place when the rule above says so."""
    if condition.type != RETRYABLE or not root or limit < 2 or current.category in NEVER:
        return condition
    if not current.signature or current.confidence < permanent_confidence:
        return condition
    run = [a for a in history if a.attempt != current.attempt][: limit - 1]
    if len(run) < limit - 1:
        return condition
    if any(a.signature != current.signature or a.confidence < permanent_confidence for a in run):
        return condition
    attempts = ", ".join(_name(a.attempt) for a in [*reversed(run), current])
    text = (
        f"same failure on {limit} attempts in a row ({attempts}), signature {current.signature}: "
        f"a retry is not expected to help; {condition.message}"
    )
    one = " ".join(text.split())
    one = one if len(one) <= _MAX_MESSAGE else one[: _MAX_MESSAGE - 1] + "…"
    return replace(condition, type=PERMANENT, reason=REPEATED_REASON, message=one)


def _name(attempt: str) -> str:
    return f"attempt {attempt}" if attempt else "the first run"
