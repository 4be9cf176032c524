"""How property tests draw their examples.

In `make test` (CI included) every property test draws the same examples on every run (`derandomize`), so
that no red run depends on a random draw, and no example database is kept between runs of the same clone.
`make properties` searches wider: fresh random draws, ten times each test's own budget
(HYPOTHESIS_PROFILE=wide). A failure it finds prints the example to pin with `@example`.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "repeatable")
WIDTH = 10 if PROFILE == "wide" else 1

settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
settings.register_profile("wide", derandomize=False, database=None, print_blob=True)


def load() -> None:
    """Load the profile the environment names (`repeatable` unless told otherwise)."""
    settings.load_profile(PROFILE)


def examples(budget: int) -> int:
    """A test's number of examples: its own budget, widened under `make properties`."""
    return budget * WIDTH
