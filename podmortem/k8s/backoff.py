"""Exponential backoff with jitter — the one policy for every retry loop in podmortem.

The sidecar's stream reconnects, the sidecar's and the aggregator's list/watch loops and the
aggregator's API writes all wait `initial * factor**attempt`, capped at `maximum`, spread by +/- `jitter`
so that 512 sidecars cut off together do not come back together.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """`delay(attempt)`: seconds to wait before retry number `attempt` (0-based)."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2  # +-20 %

    def delay(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        base = min(self.maximum, self.initial * self.factor ** max(attempt, 0))
        return max(0.0, base * (1 + self.jitter * (2 * rand() - 1)))
