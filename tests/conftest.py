"""Shared fixtures. Test helpers live in tests/support/ (a package importable as `support`).

Tiers: tests/unit (pure, fast: `make check`), tests/integration (real gRPC, the Kubernetes emulator,
real sidecar processes) and tests/e2e (real torchrun, Prometheus, kubectl): `make e2e`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # so that test modules can `import support.*`

from support.kube_emulator import EmulatorHandle, running_emulator


@pytest.fixture
def kube_api() -> Iterator[EmulatorHandle]:
    """A fresh emulator per test, in its own thread; `.url`, `.put()`, `.fail()`, `.kubeconfig()`..."""
    with running_emulator() as handle:
        yield handle
