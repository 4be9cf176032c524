"""How long the sidecar takes to read a hostile error file over the 1 MiB limit (its head and tail salvaged).

    python -m bench.errorfile_speed [--mib 2] [--repeat 3]

Writes a file of one field repeated (`"message":"\\x01` and the like: thousands of fields in the 64 KiB
head and tail) and prints the best of `--repeat` wall-clock times of `errorfile.read_error_file` per
shape. tests/unit/test_errorfile.py holds the work linear (characters decoded); this prints the time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from podmortem.core.errorfile import read_error_file

SHAPES = ('"message":"\x01', '"timestamp":"\x01', '"message":[1,', '"message":')


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=2, help="file size in MiB")
    ap.add_argument("--repeat", type=int, default=3)
    ns = ap.parse_args(argv)
    print(f"errorfile_speed: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, {ns.mib} MiB files")
    with tempfile.TemporaryDirectory(prefix="podmortem-errorfile-") as tmp:
        path = Path(tmp) / "error.json"
        for unit in SHAPES:
            path.write_text("{" + unit * ((ns.mib << 20) // len(unit)))
            best = float("inf")
            for _ in range(ns.repeat):
                start = time.perf_counter()
                record = read_error_file(path)
                best = min(best, time.perf_counter() - start)
            assert record is not None and (record.truncated or record.parse_error)
            print(f"{unit!r:<22} {best * 1000:7.1f} ms (best of {ns.repeat})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
