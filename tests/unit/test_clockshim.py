"""The clock shim shifts only the wall clock, for every way a process reads it.

The skew tests depend on it: a "pod" run under the shim must see CLOCK_REALTIME (time.time(),
gettimeofday, time(2), date) shifted, while CLOCK_MONOTONIC — which timed waits, torchrun and gloo
rely on — stays untouched. Compiled with the machine's gcc; skipped where there is none.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podmortem.local import clockshim

pytestmark = pytest.mark.skipif(
    not (shutil.which("gcc") or shutil.which("cc")), reason="no C compiler to build the clock shim"
)

PROBE = """
import ctypes, json, time
libc = ctypes.CDLL(None)
class timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]
tv = timeval()
libc.gettimeofday(ctypes.byref(tv), None)
libc.time.restype = ctypes.c_long
print(json.dumps({
    "time": time.time(),
    "gettimeofday": tv.tv_sec + tv.tv_usec / 1e6,
    "time2": libc.time(None),
    "monotonic": time.monotonic(),
    "timed_wait": (lambda t0: (time.sleep(0.2), time.monotonic() - t0)[1])(time.monotonic()),
}))
"""


def _probe(env: dict[str, str]) -> dict[str, float]:
    import json

    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=30, check=True)
    result: dict[str, float] = json.loads(out.stdout)
    return result


def test_shifts_realtime_only(tmp_path: Path) -> None:
    env = dict(os.environ)
    env.update(clockshim.shim_env(-7.5, env, cache_dir=tmp_path))
    before_mono = time.monotonic()
    before = time.time()
    got = _probe(env)
    after = time.time()
    # Bracketed by our own clock read before and after the probe ran, so a slow start cannot flake it
    # (1 ms for rounding; time() is whole seconds: one more second below).
    assert before - 7.501 <= got["time"] <= after - 7.499
    assert before - 7.501 <= got["gettimeofday"] <= after - 7.499
    assert before - 8.501 <= got["time2"] <= after - 7.499
    assert got["monotonic"] >= before_mono  # CLOCK_MONOTONIC is shared and untouched
    # A timed wait still waits (libfaketime's broke them): a 0.2 s sleep is never shorter. A wait that
    # hangs is caught by the probe's own timeout.
    assert got["timed_wait"] >= 0.2


def test_positive_shift_and_other_programs(tmp_path: Path) -> None:
    env = dict(os.environ)
    env.update(clockshim.shim_env(3600, env, cache_dir=tmp_path))
    before = time.time()
    out = subprocess.run(["date", "+%s"], env=env, capture_output=True, text=True, timeout=30, check=True)
    after = time.time()
    assert int(before) + 3600 <= int(out.stdout) <= after + 3600


def test_build_is_cached_and_keeps_existing_preload(tmp_path: Path) -> None:
    first = clockshim.build(tmp_path)
    assert clockshim.build(tmp_path) == first and first.stat().st_size > 0
    env = clockshim.shim_env(1.0, {"LD_PRELOAD": "/usr/lib/other.so"}, cache_dir=tmp_path)
    assert env["LD_PRELOAD"] == f"{first}:/usr/lib/other.so"
    assert env[clockshim.SHIFT_ENV] == "1.0"


def test_no_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(clockshim.ShimUnavailable):
        clockshim.build(tmp_path / "cache")
