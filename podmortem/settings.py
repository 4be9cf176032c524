"""Every command's settings, and the one place that reads the environment.

A command's settings are tables of `Setting`s, one table per group (the aggregator's own, its
Kubernetes group, the sidecar's, the webhook's, the demo's). A row gives everything about one
setting: its flag, its environment variable (the downward API, the chart and the webhook set those),
its default, whether it is required, and its help. From the tables come both the flags
(`add_arguments`: `--help` shows each default, `(required)` and `[env VAR]`) and the text given per
setting (`read`: the flag if given, else the variable, else the default). What the text means (types,
ranges, cross-checks) stays with each component's config module, which names the setting in its
errors (`Setting.name`). Adding a setting is one row in its table. The README's tables are checked
against `--help` by tests/unit/test_readme.py.

Variables that are not settings but facts set by the platform (a pod's `KUBERNETES_SERVICE_HOST`,
torchrun's `RANK`, the terminal's `COLUMNS`) are read here too, through `platform`, and each is
listed in `PLATFORM` with who sets it. No other module reads `os.environ`; the local harness gets a
copy for its child processes from `environment`.

`HelpFormatter`: argparse's `HelpFormatter` imports `shutil` for the terminal width whenever no width
is given, and argparse builds a formatter for every `add_argument`, so every command line parsed
imports it; `shutil` imports `bz2` and `lzma`: ~0.7 MiB of RSS in the sidecar, which runs in every
training pod and never prints help there (bench/sidecar_rss.py). The width comes from the same places
`shutil.get_terminal_size` looks (`COLUMNS`, then the terminal on stdout, else 80).

Standard library only: the sidecar imports this in every training pod.
"""

from __future__ import annotations

import argparse
import logging
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
    default: str | None = None  # the text used when neither the flag nor the variable is given
    shown: str = ""  # how --help states the default when it is not one fixed text ("in-cluster, else ...")
    switch: bool = False  # a flag without a value: given means "1" (the variable takes 1/true/yes/on)
    repeat: str = ""  # a repeatable flag; its variable joins the values with this separator
    choices: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """How errors name it: the variable first (what an operator sets), then the flag."""
        return f"{self.env} (or {self.flag})"

    @property
    def default_text(self) -> str:
        """The default as --help and the README state it ("" when there is none)."""
        return self.shown or (self.default if self.default else "")

    def help_text(self) -> str:
        parts = [self.help]  # choices are in the metavar
        if self.required:
            parts.append("(required)")
        elif self.default_text:
            parts.append(f"(default {self.default_text})")
        env = f"{self.env}=1" if self.switch else self.env
        if self.repeat:
            env += f", {self.repeat!r}-separated"
        return " ".join(parts).replace("%", "%%") + f" [env {env}]"


TRUE = frozenset({"1", "true", "yes", "on"})


def add_arguments(parser: argparse.ArgumentParser, settings: Iterable[Setting], title: str) -> None:
    """One flag per setting, in a group titled `title`. Flags default to None, so that an absent flag
    falls back to the environment and then to the setting's default (`read`)."""
    group = parser.add_argument_group(f"{title} (each flag overrides its environment variable)")
    for s in settings:
        if s.switch:
            group.add_argument(s.flag, dest=s.dest, action="store_const", const="1", default=None, help=s.help_text())
        elif s.repeat:
            group.add_argument(s.flag, dest=s.dest, action="append", default=None, metavar="VALUE", help=s.help_text())
        else:
            metavar = "{" + ",".join(s.choices) + "}" if s.choices else s.env
            group.add_argument(s.flag, dest=s.dest, default=None, metavar=metavar, help=s.help_text())


def read(
    settings: Iterable[Setting], env: Mapping[str, str] | None = None, ns: argparse.Namespace | None = None
) -> dict[str, str]:
    """The text given for each setting, stripped: the flag if given, else the environment variable (the
    process's own when `env` is None), else the default. Settings given no way and without a default are
    absent; one given as empty text is present and empty. A repeated flag's values are joined with its
    separator, as the variable holds them."""
    env = os.environ if env is None else env
    raw: dict[str, str] = {}
    for s in settings:
        flag = getattr(ns, s.dest, None) if ns is not None else None
        if isinstance(flag, list):
            flag = s.repeat.join(str(v) for v in flag)
        value = flag if flag is not None else env.get(s.env)
        if value is None:
            value = s.default
        if value is not None:
            raw[s.dest] = str(value).strip()
    return raw


def is_true(text: str | None) -> bool:
    """A switch's text: 1, true, yes or on (any case)."""
    return (text or "").strip().lower() in TRUE


def log_level(text: str | None) -> str | None:
    """A logging level's name, upper case ('' means INFO); None when `text` names no level."""
    level = (text or "INFO").strip().upper()
    return level if isinstance(logging.getLevelName(level), int) else None


# Environment variables read that are no one's setting: facts the platform sets, and who sets them.
PLATFORM: dict[str, str] = {
    "KUBERNETES_SERVICE_HOST": "the kubelet, in every pod: running in a cluster; the API server's address",
    "KUBERNETES_SERVICE_PORT": "the kubelet, in every pod: the API server's port",
    "COLUMNS": "the shell: the terminal width for --help",
    "XDG_CACHE_HOME": "the desktop: where the demo builds its clock shim (default ~/.cache)",
    "CC": "the user: the C compiler for the demo's clock shim (default gcc, else cc)",
    "RANK": "torchrun, in each worker: the global rank (demo workload)",
    "WORLD_SIZE": "torchrun, in each worker: the number of workers (demo workload)",
    "LOCAL_WORLD_SIZE": "torchrun, in each worker: the workers of this node (demo workload)",
    "TORCHELASTIC_ERROR_FILE": "torchrun, in each worker: where the worker's error goes (demo workload)",
    "PODMORTEM_CAPTURE_DIR": "the podmortem webhook or harness, in the training container: where the sidecar "
    "looks for workers' control-plane sockets and Flight Recorder dumps (demo workload)",
    "TORCH_WORKER_SERVER_SOCKET": "the user or the demo workload: torch's worker control-plane socket",
    "PODMORTEM_HARNESS_TORCH": "tests: 0 runs the local harness without torch",
    "PODMORTEM_WORKLOAD_FALLBACK": "tests: 1 makes the demo workload fall back as it does without torch",
    "PODMORTEM_WORKLOAD_COOPERATE": "the local harness: 0 makes the demo workload a script that does nothing for "
    "hang capture (no control plane, no faulthandler), to run the other capture paths or none",
}


def platform(name: str) -> str | None:
    """One of the `PLATFORM` variables (KeyError for a name not listed there: list it first)."""
    if name not in PLATFORM:
        raise KeyError(f"{name} is not a listed platform variable (podmortem.settings.PLATFORM)")
    return os.environ.get(name)


def environment() -> dict[str, str]:
    """A copy of this process's environment, for the child processes the local harness starts."""
    return dict(os.environ)


def terminal_columns() -> int:
    try:
        columns = int(platform("COLUMNS") or "0")
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
