"""The webhook's settings, read in one place: a flag wins over its environment variable, which wins over the default.

Only `--tls-cert` and `--tls-key` have no default, so `podmortem webhook --listen HOST:PORT --tls-cert FILE
--tls-key FILE` starts it; the chart sets every other one through the environment.

The settings are the rows of `_SERVER` and `_INJECTION` below (flag, variable, default, meaning): see
`podmortem webhook --help` or the README's Webhook table (tests/unit/test_readme.py holds them together).

A malformed value is a `ConfigError` naming every problem at once.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from podmortem import settings
from podmortem.core.finite import finite
from podmortem.settings import Setting
from podmortem.webhook import mutation
from podmortem.webhook.mutation import Injection


class ConfigError(ValueError):
    """The settings are incomplete or malformed; the message lists every problem."""


def _version() -> str:
    try:
        return importlib.metadata.version("podmortem")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


@dataclass(frozen=True)
class WebhookConfig:
    tls_cert: Path
    tls_key: Path
    listen: str = "0.0.0.0:8443"
    metrics_listen: str = "0.0.0.0:9091"
    shutdown_grace: float = 5.0
    log_level: str = "INFO"
    injection: Injection = field(default_factory=Injection)
    sidecar_tls_ca: Path | None = None  # read into `injection.tls_ca_pem` at start-up


# Server settings, then the injection's (dest = an `Injection` field; defaults are Injection's).
_D = Injection()
_SERVER: tuple[Setting, ...] = (
    Setting("listen", "--listen", "PODMORTEM_WEBHOOK_LISTEN", "HTTPS address host:port", default="0.0.0.0:8443"),
    Setting("tls_cert", "--tls-cert", "PODMORTEM_WEBHOOK_TLS_CERT", "PEM serving certificate (chain)", required=True),
    Setting("tls_key", "--tls-key", "PODMORTEM_WEBHOOK_TLS_KEY", "its PEM private key", required=True),
    Setting(
        "metrics_listen",
        "--metrics-listen",
        "PODMORTEM_WEBHOOK_METRICS_LISTEN",
        "plain-HTTP /metrics address; '' disables",
        default="0.0.0.0:9091",
    ),
    Setting(
        "shutdown_grace",
        "--shutdown-grace",
        "PODMORTEM_WEBHOOK_SHUTDOWN_GRACE",
        "seconds to finish open requests on SIGTERM",
        default="5",
    ),
    Setting("log_level", "--log-level", "PODMORTEM_LOG_LEVEL", "logging level", default="INFO"),
)
_INJECTION: tuple[Setting, ...] = (
    Setting(
        "aggregator",
        "--aggregator",
        "PODMORTEM_AGGREGATOR",
        "aggregator gRPC host:port the sidecars dial",
        shown=_D.aggregator,
    ),
    Setting(
        "image",
        "--sidecar-image",
        "PODMORTEM_SIDECAR_IMAGE",
        "the sidecar's image",
        shown="ghcr.io/podmortem/podmortem:VERSION",
    ),
    Setting(
        "image_pull_policy",
        "--sidecar-image-pull-policy",
        "PODMORTEM_SIDECAR_IMAGE_PULL_POLICY",
        "the sidecar's imagePullPolicy",
        shown=_D.image_pull_policy,
        choices=("Always", "IfNotPresent", "Never"),
    ),
    Setting(
        "native_sidecars",
        "--native-sidecars",
        "PODMORTEM_NATIVE_SIDECARS",
        "true: init container with restartPolicy Always (Kubernetes >= 1.29); false: regular container",
        shown="true",
    ),
    Setting(
        "cpu_request",
        "--sidecar-cpu-request",
        "PODMORTEM_SIDECAR_CPU_REQUEST",
        "sidecar CPU request",
        shown=_D.cpu_request,
    ),
    Setting(
        "memory_request",
        "--sidecar-memory-request",
        "PODMORTEM_SIDECAR_MEMORY_REQUEST",
        "sidecar memory request",
        shown=_D.memory_request,
    ),
    Setting(
        "cpu_limit",
        "--sidecar-cpu-limit",
        "PODMORTEM_SIDECAR_CPU_LIMIT",
        "sidecar CPU limit; '' for none (a limit throttles the report on a busy node)",
        shown='""',
    ),
    Setting(
        "memory_limit",
        "--sidecar-memory-limit",
        "PODMORTEM_SIDECAR_MEMORY_LIMIT",
        "sidecar memory limit (its budget is 40 MiB RSS)",
        shown=_D.memory_limit,
    ),
    Setting(
        "run_as_user",
        "--sidecar-run-as-user",
        "PODMORTEM_SIDECAR_RUN_AS_USER",
        "the sidecar's uid and gid (the image's non-root user)",
        shown=str(_D.run_as_user),
    ),
    Setting(
        "error_dir",
        "--error-dir",
        "PODMORTEM_ERROR_DIR",
        "the shared volume's mount when the pod sets no error file",
        shown=_D.error_dir,
    ),
    Setting(
        "token_audience",
        "--token-audience",
        "PODMORTEM_TOKEN_AUDIENCE",
        "audience of the sidecar's projected token",
        shown=_D.token_audience,
    ),
    Setting(
        "tls_ca_pem",
        "--sidecar-tls-ca",
        "PODMORTEM_SIDECAR_TLS_CA",
        "PEM file: the CA of the aggregator's gRPC certificate, handed to each sidecar (TLS)",
        shown="plain gRPC",
    ),
    Setting(
        "jobset_max_restarts",
        "--jobset-max-restarts",
        "PODMORTEM_JOBSET_MAX_RESTARTS",
        "maxRestarts of the failurePolicy added to an opted-in JobSet (docs/retries.md)",
        shown=str(_D.jobset_max_restarts),
    ),
    Setting(
        "hold_timeout",
        "--sidecar-hold-timeout",
        "PODMORTEM_SIDECAR_HOLD_TIMEOUT",
        "seconds a sidecar holds its failed pod for its condition; '' = the sidecar's default, 0 never holds",
        shown='""',
    ),
    Setting(
        "stall_after",
        "--sidecar-stall-after",
        "PODMORTEM_SIDECAR_STALL_AFTER",
        "a sidecar's stall-after (300, 90s, 5m, 1h) when the pod has no podmortem.io/stall-after; '' = off",
        shown='""',
    ),
    Setting(
        "python_hook",
        "--sidecar-python-hook",
        "PODMORTEM_SIDECAR_PYTHON_HOOK",
        "true: put podmortem's start-up hook (sitecustomize) on the training container's PYTHONPATH "
        "(a pod's podmortem.io/python-hook annotation overrides)",
        shown="false",
    ),
    Setting(
        "pyspy",
        "--sidecar-pyspy",
        "PODMORTEM_SIDECAR_PYSPY",
        "true: shareProcessNamespace and a root sidecar with SYS_PTRACE, for py-spy dumps of hung workers",
        shown="false",
    ),
    Setting(
        "token_expiration_seconds",
        "--token-expiration",
        "PODMORTEM_TOKEN_EXPIRATION",
        "projected token lifetime in seconds (>= 600)",
        shown=str(_D.token_expiration_seconds),
    ),
)
SETTINGS = _SERVER + _INJECTION

_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per setting (an absent flag falls back to the environment)."""
    settings.add_arguments(parser, SETTINGS, "webhook settings")


def _seconds(value: str) -> bool:
    try:
        return 0 <= finite(float(value), "seconds")
    except ValueError:
        return False


def _address(value: str) -> bool:
    _, sep, port = value.rpartition(":")
    return bool(sep and port.isdigit() and int(port) < 65536)


def load(ns: argparse.Namespace | None, env: Mapping[str, str] | None = None) -> WebhookConfig:
    """The settings: flag > variable (the process's environment when `env` is None) > default."""
    raw = settings.read(SETTINGS, env, ns)
    problems: list[str] = []

    def name(dest: str) -> str:
        return next(x for x in SETTINGS if x.dest == dest).name

    for dest in ("tls_cert", "tls_key"):
        if not raw.get(dest):
            problems.append(f"{name(dest)} is required")
    listen = raw.get("listen") or WebhookConfig.listen
    if not _address(listen):
        problems.append(f"{name('listen')} = {listen!r} is not host:port")
    metrics_listen = raw.get("metrics_listen", WebhookConfig.metrics_listen)
    if metrics_listen and not _address(metrics_listen):
        problems.append(f"{name('metrics_listen')} = {metrics_listen!r} is not host:port")
    grace = WebhookConfig.shutdown_grace
    if raw.get("shutdown_grace"):
        try:
            grace = finite(float(raw["shutdown_grace"]), "shutdown_grace")
            if grace < 0:
                raise ValueError
        except ValueError:
            problems.append(f"{name('shutdown_grace')} = {raw['shutdown_grace']!r} is not a number >= 0")
    level = settings.log_level(raw.get("log_level"))
    if level is None:
        problems.append(f"{name('log_level')} = {raw.get('log_level')!r} is not a logging level")

    defaults = Injection(image=f"ghcr.io/podmortem/podmortem:{_version()}", version=_version())
    inj: dict[str, object] = {f.name: getattr(defaults, f.name) for f in fields(Injection)}
    for s in _INJECTION:
        if s.dest not in raw:
            continue
        value = raw[s.dest]
        if s.dest in ("native_sidecars", "python_hook", "pyspy"):
            if value.lower() not in ("true", "false"):
                problems.append(f"{name(s.dest)} = {value!r} is not true or false")
            inj[s.dest] = value.lower() == "true"
        elif s.dest == "stall_after":
            seconds = mutation.stall_seconds(value) if value else ""
            if seconds is None:
                problems.append(f"{name(s.dest)} = {value!r} is not a duration (300, 90s, 5m, 1h)")
            inj[s.dest] = seconds or ""
        elif s.dest in ("token_expiration_seconds", "run_as_user", "jobset_max_restarts"):
            low = {"token_expiration_seconds": 600, "run_as_user": 1, "jobset_max_restarts": 0}[s.dest]
            if not value.isdigit() or int(value) < low:
                problems.append(f"{name(s.dest)} = {value!r} is not a whole number >= {low}")
            else:
                inj[s.dest] = int(value)
        elif s.dest in ("cpu_request", "memory_request", "cpu_limit", "memory_limit"):
            if value and not _QUANTITY.match(value):
                problems.append(f"{name(s.dest)} = {value!r} is not a Kubernetes quantity")
            inj[s.dest] = value
        elif s.dest == "hold_timeout":
            if value and not _seconds(value):
                problems.append(f"{name(s.dest)} = {value!r} is not a number of seconds >= 0")
            inj[s.dest] = value
        elif s.dest == "tls_ca_pem":
            continue  # a file, read at start-up (`with_sidecar_ca`)
        elif s.dest == "image_pull_policy" and value not in _PULL_POLICIES:
            problems.append(f"{name(s.dest)} = {value!r} is not one of {', '.join(_PULL_POLICIES)}")
        elif s.dest == "aggregator" and not _address(value):
            problems.append(f"{name(s.dest)} = {value!r} is not host:port")
        elif s.dest == "error_dir" and (not value.startswith("/") or value.rstrip("/") == ""):
            problems.append(f"{name(s.dest)} = {value!r} must be an absolute directory other than /")
        elif s.dest in ("image", "token_audience") and not value:
            problems.append(f"{name(s.dest)} must not be empty")
        else:
            inj[s.dest] = value
    if problems:
        raise ConfigError("invalid webhook settings:\n  - " + "\n  - ".join(problems))
    return WebhookConfig(
        sidecar_tls_ca=Path(raw["tls_ca_pem"]) if raw.get("tls_ca_pem") else None,
        tls_cert=Path(raw["tls_cert"]),
        tls_key=Path(raw["tls_key"]),
        listen=listen,
        metrics_listen=metrics_listen,
        shutdown_grace=grace,
        log_level=level or "INFO",
        injection=Injection(**inj),  # type: ignore[arg-type]
    )


def with_sidecar_ca(config: WebhookConfig) -> WebhookConfig:
    """The settings with the aggregator's CA (--sidecar-tls-ca) read, to be injected into every sidecar."""
    path = config.sidecar_tls_ca
    if path is None:
        return config
    try:
        pem = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"PODMORTEM_SIDECAR_TLS_CA (or --sidecar-tls-ca) = {str(path)!r}: cannot read it ({exc})"
        ) from None
    if "-----BEGIN CERTIFICATE-----" not in pem:
        raise ConfigError(f"PODMORTEM_SIDECAR_TLS_CA (or --sidecar-tls-ca) = {str(path)!r} holds no PEM certificate")
    return replace(config, injection=replace(config.injection, tls_ca_pem=pem.strip() + "\n"))


def split_address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)
