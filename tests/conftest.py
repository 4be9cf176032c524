"""Shared fixtures. Test helpers live in tests/support/ (the package `support`, importable through
pyproject's pytest `pythonpath`).

Tiers: tests/unit (pure, fast: `make check`), tests/integration (real gRPC, the Kubernetes emulator,
real sidecar processes) and tests/e2e (real torchrun, Prometheus, kubectl): `make e2e`. tests/README.md
says which files test which module (`tests/*/test_<module>*`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import properties
from support.kube_emulator import EmulatorHandle, running_emulator

properties.load()  # the same draws on every run; `make properties` searches wider (tests/support/properties.py)


@pytest.fixture
def kube_api() -> Iterator[EmulatorHandle]:
    """A fresh emulator per test, in its own thread; `.url`, `.put()`, `.fail()`, `.kubeconfig()`..."""
    with running_emulator() as handle:
        yield handle
