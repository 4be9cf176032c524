"""Webhook settings: flag > environment > default, and every bad value named at once."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from podmortem.webhook import config
from podmortem.webhook.config import ConfigError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_three_flags_are_enough_and_defaults_fill_the_rest() -> None:
    cfg = config.load(parse("--listen", "127.0.0.1:9443", "--tls-cert", "c.pem", "--tls-key", "k.pem"), {})
    assert (cfg.listen, cfg.tls_cert, cfg.tls_key) == ("127.0.0.1:9443", Path("c.pem"), Path("k.pem"))
    assert cfg.metrics_listen == "0.0.0.0:9091"
    assert cfg.injection.native_sidecars is True
    assert cfg.injection.image.startswith("ghcr.io/podmortem/podmortem:")
    assert (cfg.injection.memory_limit, cfg.injection.cpu_limit) == ("128Mi", "")


def test_flag_wins_over_environment_which_wins_over_default() -> None:
    env = {
        "PODMORTEM_WEBHOOK_TLS_CERT": "env.crt",
        "PODMORTEM_WEBHOOK_TLS_KEY": "env.key",
        "PODMORTEM_AGGREGATOR": "agg.env:1",
        "PODMORTEM_NATIVE_SIDECARS": "false",
        "PODMORTEM_SIDECAR_MEMORY_LIMIT": "80Mi",
        "PODMORTEM_TOKEN_EXPIRATION": "7200",
    }
    cfg = config.load(parse("--aggregator", "agg.flag:2", "--sidecar-memory-limit", "96Mi"), env)
    assert cfg.tls_cert == Path("env.crt")
    assert cfg.injection.aggregator == "agg.flag:2"
    assert cfg.injection.memory_limit == "96Mi"
    assert cfg.injection.native_sidecars is False
    assert cfg.injection.token_expiration_seconds == 7200


def test_every_problem_is_reported_at_once() -> None:
    env = {
        "PODMORTEM_WEBHOOK_LISTEN": "nowhere",
        "PODMORTEM_SIDECAR_CPU_REQUEST": "lots",
        "PODMORTEM_TOKEN_EXPIRATION": "60",
        "PODMORTEM_SIDECAR_IMAGE_PULL_POLICY": "Sometimes",
        "PODMORTEM_ERROR_DIR": "relative",
        "PODMORTEM_LOG_LEVEL": "LOUD",
    }
    with pytest.raises(ConfigError) as err:
        config.load(None, env)
    text = str(err.value)
    for expected in (
        "PODMORTEM_WEBHOOK_TLS_CERT (or --tls-cert) is required",
        "PODMORTEM_WEBHOOK_TLS_KEY (or --tls-key) is required",
        "'nowhere' is not host:port",
        "'lots' is not a Kubernetes quantity",
        "'60' is not a whole number >= 600",
        "'Sometimes' is not one of Always, IfNotPresent, Never",
        "'relative' must be an absolute directory",
        "'LOUD' is not a logging level",
    ):
        assert expected in text


def test_the_sidecar_ca_is_read_from_its_file(tmp_path: Path) -> None:
    good = tmp_path / "ca.crt"
    good.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    base = {"PODMORTEM_WEBHOOK_TLS_CERT": "c", "PODMORTEM_WEBHOOK_TLS_KEY": "k"}
    cfg = config.with_sidecar_ca(config.load(None, {**base, "PODMORTEM_SIDECAR_TLS_CA": str(good)}))
    assert cfg.injection.tls_ca_pem == good.read_text()
    assert config.with_sidecar_ca(config.load(None, base)).injection.tls_ca_pem == ""
    (tmp_path / "not-pem").write_text("hello")
    for bad, expected in ((tmp_path / "missing", "cannot read it"), (tmp_path / "not-pem", "holds no PEM")):
        loaded = config.load(None, {**base, "PODMORTEM_SIDECAR_TLS_CA": str(bad)})
        with pytest.raises(ConfigError, match=expected):
            config.with_sidecar_ca(loaded)


@pytest.mark.parametrize("value", ["-3", "soon", "inf", "nan"])
def test_a_hold_timeout_that_is_not_seconds_is_refused(value: str) -> None:
    env = {"PODMORTEM_WEBHOOK_TLS_CERT": "c", "PODMORTEM_WEBHOOK_TLS_KEY": "k", "PODMORTEM_SIDECAR_HOLD_TIMEOUT": value}
    with pytest.raises(ConfigError, match="PODMORTEM_SIDECAR_HOLD_TIMEOUT"):
        config.load(None, env)
    assert config.load(None, {**env, "PODMORTEM_SIDECAR_HOLD_TIMEOUT": "7.5"}).injection.hold_timeout == "7.5"
