"""The sidecar runs in every training pod: it must stay small, so heavy libraries stay out of its imports."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("kubernetes", "torch", "prometheus_client", "aiohttp", "kmock")


def test_no_kubernetes_client_in_the_import_graph() -> None:
    code = (
        "import sys\n"
        "import podmortem.sidecar.running\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "assert 'kubernetes' not in sys.modules, bad\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_every_sidecar_module_imports_alone() -> None:
    modules = ["config", "outbox", "watcher", "podsource", "stream", "running"]
    code = "import importlib\n" + "".join(f"importlib.import_module('podmortem.sidecar.{m}')\n" for m in modules)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
