"""Shared fixtures: the Kubernetes API emulator (tests/kube_emulator.py) for the test_kube_* modules."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # so that test modules can `import kube_emulator`

from kube_emulator import EmulatorHandle, running_emulator


@pytest.fixture
def kube_api() -> Iterator[EmulatorHandle]:
    """A fresh emulator per test, in its own thread; `.url`, `.put()`, `.fail()`, `.kubeconfig()`..."""
    with running_emulator() as handle:
        yield handle
