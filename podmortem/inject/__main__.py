"""`python -m podmortem.inject DIR`: copy the start-up hook (sitecustomize.py) into DIR (created if needed)."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m podmortem.inject DIR", file=sys.stderr)
        return 2
    target = Path(argv[0])
    target.mkdir(parents=True, exist_ok=True)
    hook = resources.files("podmortem.inject").joinpath("sitecustomize.py").read_bytes()
    tmp = target / ".sitecustomize.py.tmp"
    tmp.write_bytes(hook)
    tmp.chmod(0o644)
    tmp.replace(target / "sitecustomize.py")
    print(f"podmortem: start-up hook written to {target / 'sitecustomize.py'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
