"""argparse's help formatter without `import shutil`.

argparse's `HelpFormatter` imports `shutil` for the terminal width whenever no width is given, and
argparse builds a formatter for every `add_argument` (to check the argument can be formatted), so
every command line parsed imports it; `shutil` imports `bz2` and `lzma`: ~0.7 MiB of RSS in the
sidecar, which runs in every training pod and never prints help there. The width comes from the
same places `shutil.get_terminal_size` looks (`COLUMNS`, then the terminal on stdout, else 80).
"""

from __future__ import annotations

import argparse
import os
import sys


def terminal_columns() -> int:
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class HelpFormatter(argparse.HelpFormatter):
    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, terminal_columns() - 2 if width is None else width)
