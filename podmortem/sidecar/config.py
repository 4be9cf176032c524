"""The sidecar's settings: read once, from the environment first and command-line flags over it.

The sidecar runs as a container next to the training container, so it is configured the way a
Kubernetes container is: the downward API and the training operator put facts in environment
variables (POD_NAME, PET_NODE_RANK, ...), and flags exist for local runs and for overriding. Every
setting is read here, in `from_env_and_args`, into one frozen `Settings`; nothing else in the sidecar
reads the environment. A missing required setting or a malformed number is a `ConfigError` that names
every problem at once.

Settings (flag > environment variable > default) are the rows of `_SETTINGS` below: `podmortem sidecar
--help` and the README's Sidecar table show them (tests/unit/test_readme.py holds the two together).

The token file defaults to `/var/run/secrets/podmortem.io/serviceaccount/token` when it exists (audience
`podmortem`).

`auto` pod source: `file` when a pod status file is given, else `api` when running in a pod
(`KUBERNETES_SERVICE_HOST` is set) or given a kubeconfig, else `none` (the error file is then all the
sidecar reports). The `api` source finds the API server as the aggregator does
(`podmortem.sidecar.kubeconfig`): the kubeconfig when given, else in-cluster, else `~/.kube/config`.
`--force-polling` (`PODMORTEM_FORCE_POLLING=1`) switches file watching from inotify to a stat every 0.5 s, for
filesystems whose changes inotify does not see (some network mounts); without inotify at all (not
Linux, no watches left) the sidecar polls on its own and says so in its log.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podmortem import settings
from podmortem.core.finite import finite
from podmortem.settings import Setting

POD_SOURCES = ("file", "api", "none")
# Keeps a LogTail event far below gRPC's 4 MiB message limit.
MAX_LOG_TAIL_BYTES = 1 << 20
# Where the injection webhook mounts the pod's projected token (audience podmortem).
DEFAULT_TOKEN_FILE = Path("/var/run/secrets/podmortem.io/serviceaccount/token")
# Read by the file watchers too (`watcher.force_polling_from_env`) when not handed a choice.
FORCE_POLLING = Setting(
    "force_polling",
    "--force-polling",
    "PODMORTEM_FORCE_POLLING",
    "watch files by a stat every 0.5 s instead of inotify (network mounts whose changes inotify misses)",
    switch=True,
)


class ConfigError(ValueError):
    """The settings are incomplete or malformed; the message lists every problem."""


@dataclass(frozen=True)
class Settings:
    pod_name: str
    namespace: str
    error_file: Path
    aggregator: str
    pod_uid: str = ""
    node_name: str = ""
    pod_ip: str = ""
    job_name: str = ""
    job_kind: str = ""
    job_uid: str = ""
    replica_type: str = ""
    replica_index: int | None = None
    rank: int | None = None
    world_size: int | None = None
    attempt: str = ""
    pod_source: str = "none"  # "file", "api" or "none" ("auto" is resolved when reading)
    pod_status_file: Path | None = None
    log_file: Path | None = None
    log_tail_bytes: int = 64 << 10
    container: str | None = None
    settle_seconds: float = 2.0
    flush_timeout: float = 10.0
    hold_timeout: float = 15.0
    clock_probe_interval: float = 30.0
    log_level: str = "INFO"
    token_file: Path | None = None
    tls_ca: Path | None = None
    tls_ca_pem: str = ""  # the CA bundle itself (PEM text), when not given as a file
    kubeconfig: str = ""  # one path or several joined by ':' (as KUBECONFIG has them)
    kube_context: str = ""
    force_polling: bool = False
    capture_dir: Path | None = None
    stall_after: float = 0.0  # seconds; 0 = no stall detection
    pyspy: bool = False

    @property
    def pod_key(self) -> str:
        """The prefix of this pod's event ids: the uid when known (as `wire.events_from_snapshot` does)."""
        return self.pod_uid or f"{self.namespace}/{self.pod_name}"


_SETTINGS: tuple[Setting, ...] = (
    Setting("pod_name", "--pod-name", "POD_NAME", "this pod's name (downward API)", required=True),
    Setting("namespace", "--namespace", "POD_NAMESPACE", "this pod's namespace (downward API)", required=True),
    Setting("pod_uid", "--pod-uid", "POD_UID", "this pod's uid (downward API)", shown='""'),
    Setting(
        "node_name",
        "--node-name",
        "NODE_NAME",
        "the node the pod runs on (downward API)",
        shown='the pod file\'s spec.nodeName, else ""',
    ),
    Setting("pod_ip", "--pod-ip", "POD_IP", "the pod's IP address (downward API)", shown='""'),
    Setting("error_file", "--error-file", "TORCHELASTIC_ERROR_FILE", "the TorchElastic error file", required=True),
    Setting("aggregator", "--aggregator", "PODMORTEM_AGGREGATOR", "aggregator gRPC address host:port", required=True),
    Setting(
        "job_name", "--job-name", "PODMORTEM_JOB_NAME", "the job the pod belongs to", shown="from the pod's labels"
    ),
    Setting(
        "job_kind", "--job-kind", "PODMORTEM_JOB_KIND", "the job's kind (PyTorchJob, Job, JobSet, TrainJob)", shown='""'
    ),
    Setting("job_uid", "--job-uid", "PODMORTEM_JOB_UID", "the job's uid", shown='""'),
    Setting(
        "replica_type",
        "--replica-type",
        "PODMORTEM_REPLICA_TYPE",
        "replica type, e.g. master or worker",
        shown="unknown",
    ),
    Setting(
        "replica_index", "--replica-index", "PODMORTEM_REPLICA_INDEX", "index within the replica type", shown="unknown"
    ),
    Setting("rank", "--rank", "PET_NODE_RANK", "torchrun node rank", shown="unknown"),
    Setting(
        "world_size", "--world-size", "PET_NNODES", "number of pods (torchrun nodes), N or min:max", shown="unknown"
    ),
    Setting(
        "attempt",
        "--attempt",
        "PODMORTEM_ATTEMPT",
        "the job's attempt; incidents are kept per job and attempt",
        shown="derived (see README)",
    ),
    Setting(
        "pod_source",
        "--pod-source",
        "PODMORTEM_POD_SOURCE",
        "where the pod status comes from",
        default="auto",
        choices=("auto", *POD_SOURCES),
    ),
    Setting("pod_status_file", "--pod-status-file", "PODMORTEM_POD_STATUS_FILE", "local runs: pod JSON file to watch"),
    Setting("log_file", "--log-file", "PODMORTEM_LOG_FILE", "local runs: the training container's log"),
    Setting(
        "log_tail_bytes",
        "--log-tail-bytes",
        "PODMORTEM_LOG_TAIL_BYTES",
        "bytes of log tail to send (at most 1 MiB)",
        default="65536",
    ),
    Setting(
        "container",
        "--container",
        "PODMORTEM_CONTAINER",
        "the training container's name",
        shown="first not named podmortem*",
    ),
    Setting(
        "settle_seconds",
        "--settle-seconds",
        "PODMORTEM_SETTLE_SECONDS",
        "an unparsable error file is reported once unchanged this long",
        default="2",
    ),
    Setting(
        "flush_timeout",
        "--flush-timeout",
        "PODMORTEM_FLUSH_TIMEOUT",
        "on SIGTERM, seconds to wait for every ack",
        default="10",
    ),
    Setting(
        "hold_timeout",
        "--hold-timeout",
        "PODMORTEM_HOLD_TIMEOUT",
        "after a failed training container, seconds (from the SIGTERM, the flush included) to hold the pod "
        "until the aggregator confirms its podmortem.io/* condition; capped below the pod's grace period, "
        "skipped when the pod is being deleted; 0 never holds",
        default="15",
    ),
    Setting(
        "clock_probe_interval",
        "--clock-probe-interval",
        "PODMORTEM_CLOCK_PROBE_INTERVAL",
        "seconds between clock probes",
        default="30",
    ),
    Setting("log_level", "--log-level", "PODMORTEM_LOG_LEVEL", "logging level", default="INFO"),
    Setting(
        "token_file",
        "--token-file",
        "PODMORTEM_TOKEN_FILE",
        "this pod's projected token for the aggregator",
        shown=f"{DEFAULT_TOKEN_FILE} when present",
    ),
    Setting(
        "tls_ca",
        "--tls-ca",
        "PODMORTEM_TLS_CA",
        "PEM CA bundle file: speak TLS to the aggregator and verify it",
        shown="plain gRPC",
    ),
    Setting(
        "tls_ca_pem",
        "--tls-ca-pem",
        "PODMORTEM_TLS_CA_PEM",
        "the same CA bundle as PEM text (the webhook injects it)",
        shown="plain gRPC",
    ),
    Setting(
        "kubeconfig",
        "--kubeconfig",
        "KUBECONFIG",
        "the api pod source outside a pod: kubeconfig file(s)",
        shown="in-cluster, else ~/.kube/config",
    ),
    Setting(
        "kube_context", "--kube-context", "PODMORTEM_KUBE_CONTEXT", "the kubeconfig context to use", shown="current"
    ),
    FORCE_POLLING,
    Setting(
        "capture_dir",
        "--capture-dir",
        "PODMORTEM_CAPTURE_DIR",
        "hang evidence: the dir of the workers' control-plane sockets (worker-<RANK>.sock) and Flight "
        "Recorder dumps (fr-<rank>), shared with the training container",
        shown="none",
    ),
    Setting(
        "stall_after",
        "--stall-after",
        "PODMORTEM_STALL_AFTER",
        "seconds without log output (or completed collective) after which the training container is "
        "reported quiet; 0 = off",
        default="0",
    ),
    Setting(
        "pyspy",
        "--pyspy",
        "PODMORTEM_PYSPY",
        "on a capture request, py-spy dump the worker processes (needs a shared process namespace and SYS_PTRACE)",
        switch=True,
    ),
)
# What the environment/flag text becomes, per field (str fields need no entry).
_INT_FIELDS = {"replica_index", "rank", "log_tail_bytes"}
_FLOAT_FIELDS = {"settle_seconds", "flush_timeout", "hold_timeout", "clock_probe_interval", "stall_after"}
_PATH_FIELDS = {"error_file", "pod_status_file", "log_file", "token_file", "tls_ca", "capture_dir"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting (an absent flag falls back to the environment)."""
    settings.add_arguments(parser, _SETTINGS, "sidecar settings")


def _parse_world_size(text: str) -> int | None:
    """'4' -> 4; '4:4' -> 4; '2:4' (elastic, the size is not known up front) -> None."""
    lo, sep, hi = text.partition(":")
    if not sep:
        return int(lo)
    low, high = int(lo), int(hi)
    return low if low == high else None


def _convert(name: str, text: str) -> Any:
    if name == "world_size":
        return _parse_world_size(text)
    if name in _INT_FIELDS:
        return int(text)
    if name in _FLOAT_FIELDS:
        value = finite(float(text), name)  # NaN would pass the check below, and make a timer that never fires
        if value < 0:
            raise ValueError("must not be negative")
        return value
    if name in _PATH_FIELDS:
        return Path(text)
    if name in ("force_polling", "pyspy"):
        return settings.is_true(text)
    return text


def from_env_and_args(env: Mapping[str, str] | None = None, ns: argparse.Namespace | None = None) -> Settings:
    """Build the settings: a flag given on the command line wins over its environment variable (the
    process's environment when `env` is None), which wins over the default."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    given = settings.read(_SETTINGS, env, ns)
    for s in _SETTINGS:
        raw = given.get(s.dest)
        if not raw:
            if s.required:
                problems.append(f"{s.name} is required: {s.help}")
            continue
        try:
            values[s.dest] = _convert(s.dest, raw)
        except ValueError as exc:
            problems.append(f"{s.name} = {raw!r} is not valid: {exc}")
    level = settings.log_level(str(values.get("log_level", "INFO")))
    if level is None:
        problems.append(f"PODMORTEM_LOG_LEVEL (or --log-level) = {values.get('log_level')!r} is not a logging level")
    values["log_level"] = level or "INFO"
    if not 0 <= values.get("log_tail_bytes", 0) <= MAX_LOG_TAIL_BYTES:
        problems.append(f"PODMORTEM_LOG_TAIL_BYTES (or --log-tail-bytes) must be between 0 and {MAX_LOG_TAIL_BYTES}")
    source = str(values.get("pod_source", "auto")).lower()
    if source == "auto":
        in_pod = env.get("KUBERNETES_SERVICE_HOST") if env is not None else settings.platform("KUBERNETES_SERVICE_HOST")
        in_cluster_or_told = in_pod or "kubeconfig" in values
        source = "file" if "pod_status_file" in values else "api" if in_cluster_or_told else "none"
    if source not in POD_SOURCES:
        problems.append(
            f"PODMORTEM_POD_SOURCE (or --pod-source) = {source!r} is not one of auto, {', '.join(POD_SOURCES)}"
        )
    elif source == "file" and "pod_status_file" not in values:
        problems.append("PODMORTEM_POD_SOURCE=file needs PODMORTEM_POD_STATUS_FILE (or --pod-status-file)")
    values["pod_source"] = source
    aggregator = values.get("aggregator", "")
    if aggregator and not _looks_like_address(aggregator):
        problems.append(f"PODMORTEM_AGGREGATOR (or --aggregator) = {aggregator!r} is not host:port")
    if "token_file" not in values and DEFAULT_TOKEN_FILE.is_file():
        values["token_file"] = DEFAULT_TOKEN_FILE
    ca = values.get("tls_ca")
    if ca is not None and not Path(ca).is_file():
        problems.append(f"PODMORTEM_TLS_CA (or --tls-ca) = {str(ca)!r}: no such file")
    pem = values.get("tls_ca_pem", "")
    if pem and "-----BEGIN CERTIFICATE-----" not in pem:
        problems.append("PODMORTEM_TLS_CA_PEM (or --tls-ca-pem) holds no PEM certificate")
    if problems:
        raise ConfigError("invalid sidecar settings:\n  - " + "\n  - ".join(problems))
    return Settings(**values)


def _looks_like_address(value: str) -> bool:
    if value.startswith(("unix:", "dns:", "ipv4:", "ipv6:")):
        return True
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit())
