"""The shared flag > environment reading of the sidecar's and the webhook's settings."""

from __future__ import annotations

import argparse

from podmortem import settings
from podmortem.settings import Setting

TABLE = (
    Setting("pod_name", "--pod-name", "POD_NAME", "this pod", required=True),
    Setting("aggregator", "--aggregator", "PODMORTEM_AGGREGATOR", "where to report"),
    Setting("log_level", "--log-level", "PODMORTEM_LOG_LEVEL", "logging level"),
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, TABLE, "test settings")
    return parser.parse_args(argv)


def test_a_flag_wins_over_its_variable_and_text_is_stripped() -> None:
    env = {"POD_NAME": " from-env ", "PODMORTEM_AGGREGATOR": "agg:50051"}
    assert settings.read(TABLE, env, parse("--pod-name", "from-flag")) == {
        "pod_name": "from-flag",
        "aggregator": "agg:50051",
    }
    assert settings.read(TABLE, env) == {"pod_name": "from-env", "aggregator": "agg:50051"}


def test_absent_is_not_empty() -> None:
    # An empty variable is given (and may mean "disable"); a missing one falls to the component's default.
    assert settings.read(TABLE, {"PODMORTEM_LOG_LEVEL": ""}, parse()) == {"log_level": ""}


def test_help_names_each_variable_and_errors_name_both() -> None:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser, TABLE, "test settings")
    text = parser.format_help()
    assert all(f"[env {s.env}]" in text for s in TABLE)
    assert TABLE[0].name == "POD_NAME (or --pod-name)"
