"""Aggregator settings, read in one place: flags override environment, environment overrides defaults.

| flag               | env                          | default        | meaning                                        |
|--------------------|------------------------------|----------------|------------------------------------------------|
| --listen           | PODMORTEM_LISTEN             | 127.0.0.1:50051 | gRPC address (host:port; port 0 = any) (*)     |
| --metrics-listen   | PODMORTEM_METRICS_LISTEN     | 127.0.0.1:9090 | Prometheus /metrics address; "" disables (*)   |
| --verdict-dir      | PODMORTEM_VERDICT_DIR        | ./podmortem-verdicts | one JSON file per incident; "" disables  |
| --world-size       | PODMORTEM_WORLD_SIZE         | (none)         | expected pods per job when nothing else says   |
| --quorum-timeout   | PODMORTEM_QUORUM_TIMEOUT     | 60             | seconds an incident waits for silent members   |
| --rules            | PODMORTEM_RULES              | (built-in)     | rules file extending the engine's rules        |
| --ready-file       | PODMORTEM_READY_FILE         | (none)         | written with "host:port" once serving          |
| --shutdown-grace   | PODMORTEM_SHUTDOWN_GRACE     | 20             | seconds to finish streams and publish on stop  |
| --log-level        | PODMORTEM_LOG_LEVEL          | INFO           |                                                |
| --state-dir        | PODMORTEM_STATE_DIR          | "" (memory)    | acked events kept (SQLite), replayed at start  |
| --permanent-confidence | PODMORTEM_PERMANENT_CONFIDENCE | 0.9      | PermanentFailure only at this confidence       |
| --peer-wait        | PODMORTEM_PEER_WAIT          | 5              | held own failure waits this long for peers     |

Fixed limits (each refusal is logged and counted in `podmortem_limit_hits_total{limit}`; nothing already
held is dropped): 50 events/s per stream with a burst of 500 (`event_rate`: the stream ends
RESOURCE_EXHAUSTED, the sidecar resends what was not acked), 65,536 members per job
(`members_per_job`), 1,000 namespaces with jobs held (`namespaces`), 1,000 open incidents
(`open_incidents`: a job failing beyond it keeps its events and opens when a place is free), a
`register` within 30 s of a stream's start, 4 MiB per message, 10,000 jobs remembered (the oldest
decided ones are forgotten first).

(*) 0.0.0.0 with `--kube`. Without it (local runs, the demo) nothing listens beyond loopback unless
asked: an open port would let anyone who reaches it feed incidents. `--shutdown-grace` must stay
below the pod's terminationGracePeriodSeconds (chart default 30).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass

# Without --kube nothing listens beyond loopback unless asked.
LOOPBACK_LISTEN, LOOPBACK_METRICS = "127.0.0.1:50051", "127.0.0.1:9090"


class ConfigError(ValueError):
    """A setting has a value we cannot use; the message says which and why."""


@dataclass(frozen=True)
class AggregatorConfig:
    listen: str = "0.0.0.0:50051"
    metrics_listen: str = "0.0.0.0:9090"
    verdict_dir: str = "podmortem-verdicts"
    world_size: int | None = None
    quorum_timeout: float = 60.0
    rules: str = ""
    ready_file: str = ""
    shutdown_grace: float = 20.0
    log_level: str = "INFO"
    auth: str = "none"  # "tokenreview" (the default with --kube) or "none"
    tls_cert: str = ""
    tls_key: str = ""
    state_dir: str = ""  # "": incidents live in memory only
    permanent_confidence: float = 0.9  # podmortem.core.conditions.PERMANENT_CONFIDENCE
    peer_wait: float = 5.0  # podmortem.aggregator.holding.PEER_WAIT


_ENV = {
    "listen": "PODMORTEM_LISTEN",
    "metrics_listen": "PODMORTEM_METRICS_LISTEN",
    "verdict_dir": "PODMORTEM_VERDICT_DIR",
    "world_size": "PODMORTEM_WORLD_SIZE",
    "quorum_timeout": "PODMORTEM_QUORUM_TIMEOUT",
    "rules": "PODMORTEM_RULES",
    "ready_file": "PODMORTEM_READY_FILE",
    "shutdown_grace": "PODMORTEM_SHUTDOWN_GRACE",
    "log_level": "PODMORTEM_LOG_LEVEL",
    "auth": "PODMORTEM_AUTH",
    "tls_cert": "PODMORTEM_TLS_CERT",
    "tls_key": "PODMORTEM_TLS_KEY",
    "state_dir": "PODMORTEM_STATE_DIR",
    "permanent_confidence": "PODMORTEM_PERMANENT_CONFIDENCE",
    "peer_wait": "PODMORTEM_PEER_WAIT",
}
AUTH_MODES = ("tokenreview", "none")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = AggregatorConfig()
    parser.add_argument(
        "--listen",
        help=f"gRPC address host:port (env PODMORTEM_LISTEN, default {LOOPBACK_LISTEN}; {d.listen} with --kube)",
    )
    parser.add_argument(
        "--metrics-listen",
        help=f"Prometheus /metrics address; '' disables (default {LOOPBACK_METRICS}; {d.metrics_listen} with --kube)",
    )
    parser.add_argument(
        "--verdict-dir", help=f"write one JSON verdict per incident here; '' disables (default ./{d.verdict_dir})"
    )
    parser.add_argument("--world-size", help="expected pods per job when neither the job nor the sidecars say")
    parser.add_argument(
        "--quorum-timeout", help=f"seconds an incident waits for silent members (default {d.quorum_timeout:g})"
    )
    parser.add_argument("--rules", help="rules file extending/overriding the built-in classification rules")
    parser.add_argument("--ready-file", help="write 'host:port' here once serving (for scripts and tests)")
    parser.add_argument(
        "--shutdown-grace", help=f"seconds to drain streams and publish on SIGTERM (default {d.shutdown_grace:g})"
    )
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING (default INFO)")
    parser.add_argument(
        "--auth",
        choices=AUTH_MODES,
        help="who may stream: tokenreview (each sidecar's projected token, checked with the API; the default "
        "with --kube, which refuses to run without it unless 'none' is given) or none (default without --kube)",
    )
    parser.add_argument("--tls-cert", help="serve gRPC over TLS with this PEM certificate (chain)")
    parser.add_argument("--tls-key", help="the PEM private key of --tls-cert")
    parser.add_argument(
        "--state-dir",
        help="keep every acknowledged event here (SQLite) and replay it after a restart; default: memory only",
    )
    parser.add_argument(
        "--permanent-confidence",
        help=f"write podmortem.io/PermanentFailure on a pod only when the verdict's confidence reaches this "
        f"(0-1, default {d.permanent_confidence:g}); below it RetryableFailure or no condition",
    )
    parser.add_argument(
        "--peer-wait",
        help=f"seconds a held pod that failed on its own waits for its peers' first evidence before its condition "
        f"is decided, within the sidecar's hold (default {d.peer_wait:g})",
    )
    # Name each flag's environment variable in --help (the chart's env is checked against it).
    for action in parser._actions:
        var = _ENV.get(action.dest)
        if var and action.help and var not in action.help:
            action.help += f" [env {var}]"


def _positive(name: str, raw: str, kind: type[int] | type[float]) -> int | float:
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}: {raw!r} is not a number") from None
    if value <= 0:
        raise ConfigError(f"{name}: must be > 0, got {raw!r}")
    return value


def load(ns: argparse.Namespace, env: Mapping[str, str] | None = None, kube: bool = False) -> AggregatorConfig:
    """The settings; unset addresses default to every interface with `kube` (in a cluster), else loopback."""
    env = os.environ if env is None else env
    raw: dict[str, str] = {}
    for field, var in _ENV.items():
        flag = getattr(ns, field, None)
        if flag is not None:
            raw[field] = str(flag)
        elif var in env:
            raw[field] = env[var]
    d = AggregatorConfig()
    if not kube:
        d = AggregatorConfig(listen=LOOPBACK_LISTEN, metrics_listen=LOOPBACK_METRICS)
    world = raw.get("world_size")
    auth = raw.get("auth") or ("tokenreview" if kube else "none")
    if auth not in AUTH_MODES:
        raise ConfigError(f"auth: {auth!r} is not one of {', '.join(AUTH_MODES)}")
    if auth == "tokenreview" and not kube:
        raise ConfigError("auth: tokenreview needs --kube (the API server reviews the tokens)")
    tls_cert, tls_key = raw.get("tls_cert", ""), raw.get("tls_key", "")
    if bool(tls_cert) != bool(tls_key):
        raise ConfigError("tls-cert and tls-key go together")
    return AggregatorConfig(
        auth=auth,
        tls_cert=tls_cert,
        tls_key=tls_key,
        listen=_address("listen", raw.get("listen", d.listen)),
        metrics_listen=_address("metrics-listen", raw.get("metrics_listen", d.metrics_listen), allow_empty=True),
        verdict_dir=raw.get("verdict_dir", d.verdict_dir),
        world_size=int(_positive("world-size", world, int)) if world else None,
        quorum_timeout=float(_positive("quorum-timeout", raw.get("quorum_timeout", str(d.quorum_timeout)), float)),
        rules=raw.get("rules", d.rules),
        ready_file=raw.get("ready_file", d.ready_file),
        shutdown_grace=float(_positive("shutdown-grace", raw.get("shutdown_grace", str(d.shutdown_grace)), float)),
        log_level=raw.get("log_level", d.log_level).upper(),
        state_dir=raw.get("state_dir", d.state_dir),
        permanent_confidence=_fraction("permanent-confidence", raw.get("permanent_confidence"), d.permanent_confidence),
        peer_wait=_seconds("peer-wait", raw.get("peer_wait"), d.peer_wait),
    )


def _fraction(name: str, raw: str | None, default: float) -> float:
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: {raw!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise ConfigError(f"{name}: must be above 0 and at most 1, got {raw!r}")
    return value


def _seconds(name: str, raw: str | None, default: float) -> float:
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: {raw!r} is not a number") from None
    if not 0.0 <= value < 3600:
        raise ConfigError(f"{name}: must be between 0 and 3600 seconds, got {raw!r}")
    return value


def _address(name: str, value: str, allow_empty: bool = False) -> str:
    if not value and allow_empty:
        return ""
    _, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"{name}: expected host:port, got {value!r}")
    return value


def split_address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)
