"""The sidecar runs in every training pod: it must stay small, so heavy libraries stay out of its imports."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

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


def test_no_ctypes_util_and_what_it_pulls() -> None:
    """ctypes.util (find_library) imports tempfile, shutil, bz2 and lzma: ~0.8 MiB of every sidecar's
    budget for finding a libc the process already has (podmortem.sidecar.inotify uses CDLL(None))."""
    heavy = ("ctypes.util", "tempfile", "shutil", "bz2", "lzma")
    code = f"import sys, podmortem.sidecar.running\nprint(sorted(set({heavy!r}) & set(sys.modules)))\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_api_pod_source_and_capture_readers_stay_out_until_used() -> None:
    """A sidecar in a pod reads its pod from the API (apiserver, kubeconfig): tempfile (with shutil, bz2,
    lzma) is only for a kubeconfig's inline key, yaml only for reading a kubeconfig, and the Flight
    Recorder reader (with pickletools) only for a capture or the aggregator's reading of one: ~0.5 MiB of
    every sidecar, `bench/sidecar_rss.py`. The engine, its rules and RE2 are the aggregator's."""
    heavy = (
        *("tempfile", "shutil", "bz2", "lzma", "yaml", "pickletools", "podmortem.core.flightrecorder"),
        *("podmortem.core.engine", "podmortem.core.rules", "re2"),
    )
    code = (
        "import sys, podmortem.sidecar.running, podmortem.sidecar.apiserver, podmortem.sidecar.kubeconfig\n"
        f"print(sorted(set({heavy!r}) & set(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "entry",
    [
        "from podmortem import cli; cli.main(['sidecar', '--help'])",
        "from podmortem.sidecar import running; running.main(['--help'])",
    ],
)
def test_parsing_the_command_line_does_not_import_shutil(entry: str) -> None:
    """argparse's own formatter imports shutil (and bz2, lzma) for the terminal width on every
    add_argument: ~0.7 MiB of every sidecar (podmortem.settings.HelpFormatter finds it without)."""
    code = f"import sys\ntry:\n    {entry}\nexcept SystemExit:\n    pass\nprint('shutil' in sys.modules)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "False"


def test_no_hashlib_and_the_same_event_ids() -> None:
    """Error-file event ids are SHA-256 from CPython's C module (hashlib loads OpenSSL's digests: ~0.65
    MiB a sidecar); the digest, hence every id, is hashlib's."""
    code = (
        "import sys, podmortem.sidecar.running\n"
        "from podmortem.protocol import wire\n"
        "from podmortem.core.model import ErrorRecord\n"
        "print('hashlib' in sys.modules, wire.sha256(b'abc').hexdigest())\n"
        "print(wire.error_event_id('ns/pod', ErrorRecord('ValueError: x', 'ValueError', timestamp=5)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first == f"False {hashlib.sha256(b'abc').hexdigest()}"
    facts = "ValueError: x\x005\x00None\x00\x000"
    assert second == f"ns/pod/error/{hashlib.sha256(facts.encode()).hexdigest()[:20]}"
