"""Settings read as Kubernetes hands them over: one environment variable per setting (the downward API,
the chart, the webhook), each with a command-line flag that overrides it for local runs.

Shared by the sidecar and the webhook: a table of `Setting`s gives both the flags (`add_arguments`) and
the raw text per setting (`read`); what the text means (types, ranges, defaults) stays with each
component's own config module. Standard library only: the sidecar imports it in every training pod.
"""

from __future__ import annotations

import argparse
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
