"""The README against the commands: each Configuration table against its command's real `--help`, the
layout against the package's modules, the verdict file's field list against a real verdict file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
README = (REPO / "README.md").read_text()

# README section (### title) -> the command line whose --help it documents.
COMMANDS = {
    "Aggregator": ["podmortem.cli", "aggregator"],
    "Sidecar": ["podmortem.cli", "sidecar"],
    "Webhook": ["podmortem.cli", "webhook"],
    "Demo": ["podmortem.cli", "demo"],
    "Offline analysis": ["podmortem.cli", "analyze"],
    "kubectl plugin": ["podmortem.kubectl_plugin", "explain"],
}


def section(title: str) -> str:
    match = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^##)", README, flags=re.M | re.S)
    assert match, f"README has no section '### {title}'"
    return match.group(1)


def readme_rows(title: str) -> dict[str, tuple[str, str]]:
    """flag -> (variable, default) of every settings table row in a README section."""
    rows: dict[str, tuple[str, str]] = {}
    for line in section(title).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`--"):
            continue
        flag = re.match(r"`(--[a-z-]+)`", cells[0])
        env = re.match(r"`([A-Z_]+)(=1)?`", cells[1])
        assert flag and env, line
        default = cells[2].replace("`", "")
        assert flag.group(1) not in rows, f"{title}: {flag.group(1)} documented twice"
        rows[flag.group(1)] = (env.group(1), "" if default == "—" else default)
    return rows


def help_rows(argv: list[str]) -> dict[str, tuple[str, str]]:
    """flag -> (variable, default) as the command's own --help prints them (one line per option)."""
    done = subprocess.run(
        [sys.executable, "-m", *argv, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "1000", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    options: list[str] = []  # one entry per option: its line and the help lines below it, joined
    for line in done.stdout.splitlines():
        if re.match(r"^  -", line):
            options.append(line)
        elif options and line.startswith("      "):
            options[-1] += "  " + line.strip()
    rows: dict[str, tuple[str, str]] = {}
    for option in options:
        m = re.match(r"^\s+(?:-\w, )?(--[a-z-]+)(?: \S+)?\s{2,}(.*)\[env ([A-Z_]+)(?:=1)?", option)
        if not m:
            continue
        text = m.group(2)
        default = "required" if "(required)" in text else ""
        if found := re.search(r"\(default (.*)\)\s*$", text.strip()):
            default = found.group(1)
        rows[m.group(1)] = (m.group(3), default)
    return rows


@pytest.mark.parametrize("title", list(COMMANDS))
def test_each_readme_settings_table_is_the_commands_help(title: str) -> None:
    documented, actual = readme_rows(title), help_rows(COMMANDS[title])
    assert actual, f"no settings in {' '.join(COMMANDS[title])} --help"
    assert set(documented) == set(actual), (
        f"{title}: in --help only {sorted(set(actual) - set(documented))}, "
        f"in the README only {sorted(set(documented) - set(actual))}"
    )
    for flag, (env, default) in actual.items():
        assert documented[flag] == (env, default), f"{title} {flag}: README {documented[flag]}, --help {(env, default)}"


def test_sidecar_help_shows_defaults_and_required_flags() -> None:
    rows = help_rows(COMMANDS["Sidecar"])
    assert {f for f, (_, d) in rows.items() if d == "required"} == {
        "--pod-name",
        "--namespace",
        "--error-file",
        "--aggregator",
    }
    assert rows["--flush-timeout"][1] == "10" and rows["--pod-source"][1] == "auto"
    assert rows["--tls-ca-pem"][0] == "PODMORTEM_TLS_CA_PEM"


def test_every_demo_fault_is_explained() -> None:
    from podmortem.local.faults import FAULTS

    text = section("Demo")
    for name, fault in FAULTS.items():
        assert re.search(rf"^\| `{name}` \| {re.escape(fault.text)} \| `{fault.category}`", text, flags=re.M), name


def test_layout_names_every_module() -> None:
    """Every module of the package is named in the Layout section, under its folder's entry."""
    block = re.search(r"```\n(podmortem/.*?)```", section_of("Layout"), flags=re.S)
    assert block
    entries: dict[str, str] = {}  # "podmortem/x/" -> its text (to the next entry)
    for part in re.split(r"^(?=podmortem/)", block.group(1), flags=re.M):
        head = part.split()[0] if part.strip() else ""
        entries[head if head.endswith("/") else "podmortem/"] = entries.get("podmortem/", "") + part
    package = REPO / "podmortem"
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if path.name == "__init__.py" or rel.parts[:2] == ("protocol", "v1"):
            continue
        text = entries.get(f"podmortem/{rel.parts[0]}/" if len(rel.parts) > 1 else "podmortem/", "")
        if len(rel.parts) == 1:
            named = re.search(rf"\b{path.stem}\.py\b", text)
        elif len(rel.parts) == 2:
            named = re.search(rf"(?<![/{{])\b{path.stem}\b", text)
        else:  # a sub-folder, named as sub/{a, b}
            sub = re.search(rf"{rel.parts[1]}/\{{([^}}]*)\}}", text)
            named = sub and re.search(rf"\b{path.stem}\b", sub.group(1))
        if not named:
            missing.append(str(rel))
    assert not missing, f"README Layout misses {missing}"


def section_of(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, flags=re.M | re.S)
    assert match, title
    return match.group(1)


def test_the_metrics_list_is_what_the_aggregator_exposes() -> None:
    """Both ways: every metric the README lists is registered, and every one registered is listed."""
    from prometheus_client import CollectorRegistry

    from podmortem.aggregator.metrics import Metrics

    registry = CollectorRegistry()
    Metrics(registry)
    exposed = {m.name + ("_total" if m.type == "counter" else "") for m in registry.collect()}
    listed = set(re.findall(r"`(podmortem_[a-z_]+)", section("Aggregator")))
    assert not listed - exposed, f"the README lists metrics that do not exist: {sorted(listed - exposed)}"
    assert not exposed - listed, f"the README's metrics list lacks: {sorted(exposed - listed)}"
