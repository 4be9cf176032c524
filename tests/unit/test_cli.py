"""The `podmortem` command: subcommands, help, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from podmortem import cli


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podmortem.cli", *args], capture_output=True, text=True, timeout=60)


def test_help_names_every_subcommand() -> None:
    result = run("--help")
    assert result.returncode == 0
    for name in ("sidecar", "aggregator", "analyze", "demo", "policy"):
        assert name in result.stdout


def test_no_subcommand_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "podmortem demo" in capsys.readouterr().out


def test_unknown_subcommand_is_a_usage_error() -> None:
    result = run("frobnicate")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


@pytest.mark.parametrize("name", ["sidecar", "aggregator", "analyze", "demo", "policy"])
def test_each_subcommand_has_help(name: str) -> None:
    result = run(name, "--help")
    assert result.returncode == 0, result.stderr
    assert f"podmortem {name}" in result.stdout


def test_aggregator_rejects_bad_settings_without_traceback(tmp_path: Path) -> None:
    result = run("aggregator", "--quorum-timeout", "soon")
    assert result.returncode == 2
    assert "quorum-timeout" in result.stderr
    assert "Traceback" not in result.stderr
    bad_rules = tmp_path / "rules.json"
    bad_rules.write_text("{not json")
    result = run("aggregator", "--rules", str(bad_rules))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("columns", [60, 160])
def test_help_is_wrapped_to_the_terminal_width(columns: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The help formatter finds the width without shutil (podmortem.settings), where shutil would: COLUMNS."""
    import argparse

    from podmortem.settings import HelpFormatter

    monkeypatch.setenv("COLUMNS", str(columns))
    parser = argparse.ArgumentParser(prog="p", formatter_class=HelpFormatter)
    parser.add_argument("--flag", help=" ".join(["word"] * 100))
    lengths = [len(line) for line in parser.format_help().splitlines()]
    assert columns - 10 < max(lengths) <= columns


def test_help_width_without_columns_or_terminal_is_80(monkeypatch: pytest.MonkeyPatch) -> None:
    from podmortem.settings import terminal_columns

    monkeypatch.delenv("COLUMNS", raising=False)
    code = "from podmortem.settings import terminal_columns; print(terminal_columns())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "80"  # stdout is a pipe here
    monkeypatch.setenv("COLUMNS", "junk")
    assert terminal_columns() > 0
