"""Run a process with its wall clock shifted, the way a pod on a skewed node sees time.

podmortem must not be fooled by pods whose clocks disagree (error-file timestamps are on each pod's
own clock), so the skew test and demo run some "pods" seconds behind. libfaketime does not work for
this: it also shifts CLOCK_MONOTONIC and hooks the timed-wait functions, and torchrun's agent,
the TCPStore client and gloo's timeouts broke under it on this machine. What works is the tiny
LD_PRELOAD shim in `clockshim.c`, which shifts only CLOCK_REALTIME readings (`clock_gettime`,
`gettimeofday`, `time`) — exactly what a skewed node looks like to its processes.

`shim_env(shift)` compiles the shim with the machine's gcc on first use (cached by source hash under
`$XDG_CACHE_HOME/podmortem` or `~/.cache/podmortem`) and returns the environment variables that apply
it. `ShimUnavailable` is raised when there is no C compiler.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from podmortem import settings

SHIFT_ENV = "PODMORTEM_CLOCK_SHIFT"


class ShimUnavailable(RuntimeError):
    """The shim cannot be built here (no gcc/cc, or the build failed)."""


def _source() -> bytes:
    return resources.files("podmortem.local").joinpath("clockshim.c").read_bytes()


def _cache_dir() -> Path:
    base = settings.platform("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "podmortem"


def build(cache_dir: Path | None = None) -> Path:
    """Compile the shim once (keyed by source hash); returns the path of the shared object."""
    src = _source()
    digest = hashlib.sha256(src).hexdigest()[:16]
    out_dir = cache_dir or _cache_dir()
    target = out_dir / f"clockshim-{digest}.so"
    if target.exists():
        return target
    cc = settings.platform("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise ShimUnavailable("no C compiler (gcc/cc) found to build the clock shim")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        c_file = Path(tmp) / "clockshim.c"
        c_file.write_bytes(src)
        so_tmp = Path(tmp) / "clockshim.so"
        try:
            proc = subprocess.run(
                [cc, "-shared", "-fPIC", "-O2", "-o", str(so_tmp), str(c_file), "-ldl"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ShimUnavailable(f"cannot run the C compiler {cc!r}: {exc}") from exc
        if proc.returncode != 0:
            raise ShimUnavailable(f"building the clock shim failed: {proc.stderr.strip()[:2000]}")
        os.replace(so_tmp, target)  # atomic: concurrent builders both end with a whole file
    return target


def shim_env(shift_seconds: float, base: dict[str, str] | None = None, cache_dir: Path | None = None) -> dict[str, str]:
    """Environment additions that run a process with its wall clock shifted by `shift_seconds`.

    Negative shifts make the clock run behind. An existing LD_PRELOAD in `base` is kept after ours.
    """
    so = build(cache_dir)
    preload = str(so)
    existing = (base or {}).get("LD_PRELOAD", "")
    if existing:
        preload = f"{preload}:{existing}"
    return {"LD_PRELOAD": preload, SHIFT_ENV: repr(float(shift_seconds))}
