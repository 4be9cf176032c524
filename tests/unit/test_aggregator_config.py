"""Aggregator settings: flags > environment > defaults; loopback unless it runs in a cluster (--kube)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from podmortem.aggregator import config


def _ns(*args: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    return parser.parse_args(list(args))


def test_local_runs_listen_on_loopback_only() -> None:
    c = config.load(_ns(), env={})
    assert c.listen == "127.0.0.1:50051" and c.metrics_listen == "127.0.0.1:9090"


def test_in_a_cluster_every_interface_is_the_default() -> None:
    c = config.load(_ns(), env={}, kube=True)
    assert c.listen == "0.0.0.0:50051" and c.metrics_listen == "0.0.0.0:9090"


def test_an_explicit_address_wins_either_way() -> None:
    assert config.load(_ns("--listen", "0.0.0.0:7000"), env={}).listen == "0.0.0.0:7000"
    assert config.load(_ns(), env={"PODMORTEM_LISTEN": "10.1.2.3:7001"}, kube=False).listen == "10.1.2.3:7001"
    assert config.load(_ns("--listen", "127.0.0.1:0"), env={"PODMORTEM_LISTEN": "x:1"}, kube=True).listen == (
        "127.0.0.1:0"
    )


def test_a_bad_address_is_a_clear_error() -> None:
    with pytest.raises(config.ConfigError, match="listen"):
        config.load(_ns("--listen", "nowhere"), env={})


def test_verdict_files_are_private_unless_the_operator_opens_them() -> None:
    assert config.load(_ns(), env={}).verdict_file_mode == 0o600
    assert config.load(_ns("--verdict-file-mode", "0640"), env={}).verdict_file_mode == 0o640
    assert config.load(_ns(), env={"PODMORTEM_VERDICT_FILE_MODE": "644"}).verdict_file_mode == 0o644
    with pytest.raises(config.ConfigError, match="PODMORTEM_VERDICT_FILE_MODE"):
        config.load(_ns("--verdict-file-mode", "0666"), env={})  # others may not write verdicts


def test_node_action_settings() -> None:
    from podmortem.aggregator.config import duration, load_kube_settings

    default = load_kube_settings(argparse.Namespace(), {})
    assert (default.nodes.enabled, default.nodes.threshold, default.nodes.taint) == (True, 2, False)
    assert default.nodes.window == 7 * 86400
    bounds = (default.nodes.min_jobs, default.nodes.min_namespaces, default.nodes.per_namespace_per_hour)
    assert bounds == (2, 1, 4)
    strict = {"PODMORTEM_SUSPECT_NODE_MIN_NAMESPACES": "2", "PODMORTEM_NODE_FAULTS_PER_NAMESPACE": "1"}
    s = load_kube_settings(argparse.Namespace(), strict)
    assert (s.nodes.min_namespaces, s.nodes.per_namespace_per_hour) == (2, 1)
    env = {
        "PODMORTEM_NODE_ACTIONS": "off",
        "PODMORTEM_SUSPECT_NODE_THRESHOLD": "3",
        "PODMORTEM_SUSPECT_NODE_WINDOW": "36h",
        "PODMORTEM_SUSPECT_NODE_TAINT": "1",
    }
    s = load_kube_settings(argparse.Namespace(), env)
    assert (s.nodes.enabled, s.nodes.threshold, s.nodes.window, s.nodes.taint) == (
        False,
        3,
        36 * 3600,
        True,
    )
    flags = argparse.Namespace(node_actions="on", suspect_node_window="90m")
    assert load_kube_settings(flags, env).nodes.enabled and load_kube_settings(flags, env).nodes.window == 5400
    assert duration("w", "604800") == 604800
    for bad in ({"PODMORTEM_NODE_ACTIONS": "maybe"}, {"PODMORTEM_SUSPECT_NODE_WINDOW": "7x"},
                {"PODMORTEM_SUSPECT_NODE_WINDOW": "0d"}, {"PODMORTEM_SUSPECT_NODE_THRESHOLD": "0"},
                {"PODMORTEM_SUSPECT_NODE_MIN_JOBS": "0"}, {"PODMORTEM_NODE_FAULTS_PER_NAMESPACE": "-1"},
                {"PODMORTEM_SUSPECT_NODE_MIN_NAMESPACES": "two"}):  # fmt: skip
        with pytest.raises(ValueError):
            load_kube_settings(argparse.Namespace(), bad)


def test_a_port_out_of_range_is_refused_not_replaced() -> None:
    for flag in ("--listen", "--metrics-listen"):
        with pytest.raises(config.ConfigError, match=r"port 99999 is not between 0 and 65535"):
            config.load(_ns(flag, "127.0.0.1:99999"), env={})
    assert config.load(_ns("--listen", "127.0.0.1:65535"), env={}).listen == "127.0.0.1:65535"


def test_an_unknown_log_level_is_a_setting_error() -> None:
    with pytest.raises(config.ConfigError, match=r"--log-level.*'LOUD' is not a logging level"):
        config.load(_ns("--log-level", "LOUD"), env={})
    assert config.load(_ns(), env={"PODMORTEM_LOG_LEVEL": "debug"}).log_level == "DEBUG"


def test_a_directory_that_cannot_be_written_is_refused_at_start(tmp_path: Path) -> None:
    plain = tmp_path / "a-file"
    plain.write_text("not a directory\n")
    with pytest.raises(config.ConfigError, match=r"--verdict-dir.*is not a directory"):
        config.writable_directory(config.setting_name("verdict_dir"), str(plain))
    with pytest.raises(config.ConfigError, match=r"--state-dir.*cannot be written"):
        config.writable_directory(config.setting_name("state_dir"), str(plain / "below"))
    config.writable_directory(config.setting_name("state_dir"), str(tmp_path / "new" / "state"))  # created
    assert (tmp_path / "new" / "state").is_dir() and not any((tmp_path / "new" / "state").iterdir())


@pytest.mark.parametrize("flag", ["--verdict-dir", "--state-dir"])
def test_the_aggregator_refuses_an_unwritable_directory_before_serving(tmp_path: Path, flag: str) -> None:
    plain = tmp_path / "a-file"
    plain.write_text("not a directory\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "podmortem.cli",
            "aggregator",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            flag,
            str(plain),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"{flag}" in done.stderr and "is not a directory" in done.stderr
    assert "starting empty" not in done.stderr and "Traceback" not in done.stderr
    assert plain.read_text() == "not a directory\n"  # nothing lost, nothing moved aside
