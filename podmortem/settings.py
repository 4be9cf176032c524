"""The command line: settings read as Kubernetes hands them over, and argparse's help without `shutil`.

Settings: one environment variable per setting (the downward API, the chart, the webhook), each with a
flag that overrides it for local runs. Shared by the sidecar and the webhook: a table of `Setting`s gives
both the flags (`add_arguments`) and the raw text per setting (`read`); what the text means (types,
ranges, defaults) stays with each component's own config module.

`HelpFormatter`: argparse's `HelpFormatter` imports `shutil` for the terminal width whenever no width is
given, and argparse builds a formatter for every `add_argument` (to check the argument can be formatted),
so every command line parsed imports it; `shutil` imports `bz2` and `lzma`: ~0.7 MiB of RSS in the
sidecar, which runs in every training pod and never prints help there. The width comes from the same
places `shutil.get_terminal_size` looks (`COLUMNS`, then the terminal on stdout, else 80).

Standard library only: the sidecar imports this in every training pod.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    dest: str  # the config field it fills
    flag: str
    env: str
    help: str
    required: bool = False

    @property
    def name(self) -> str:
        """How errors name it: the variable first (what an operator sets), then the flag."""
        return f"{self.env} (or {self.flag})"


def add_arguments(parser: argparse.ArgumentParser, settings: Iterable[Setting], title: str) -> None:
    """One flag per setting. Defaults are None so that an absent flag falls back to the environment."""
    group = parser.add_argument_group(f"{title} (each flag overrides its environment variable)")
    for s in settings:
        group.add_argument(s.flag, dest=s.dest, default=None, metavar=s.env, help=f"{s.help} [env {s.env}]")


def read(settings: Iterable[Setting], env: Mapping[str, str], ns: argparse.Namespace | None = None) -> dict[str, str]:
    """The text given for each setting, stripped: the flag if given, else the environment variable.
    Settings given neither way are absent; one given as empty text is present and empty."""
    raw: dict[str, str] = {}
    for s in settings:
        flag = getattr(ns, s.dest, None) if ns is not None else None
        value = flag if flag is not None else env.get(s.env)
        if value is not None:
            raw[s.dest] = str(value).strip()
    return raw


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
