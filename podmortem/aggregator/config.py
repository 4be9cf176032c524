"""Aggregator settings, read in one place: flags override environment, environment overrides defaults.

Two groups, each a table of `podmortem.settings.Setting` rows: the aggregator's own (`SETTINGS`) and
how it talks to Kubernetes (`KUBE_SETTINGS`, read into `KubeSettings`, which groups them by concern:
`ClientBudget`, `ConditionWrites`, `NodeActions`, `LeaderElection`). A default is written once, as a
row's text; the dataclasses parse their defaults from it. `podmortem aggregator --help` and the README's
Aggregator table show them (tests/unit/test_readme.py holds the two together).

Fixed limits (each refusal is logged and counted in `podmortem_limit_hits_total{limit}`; nothing already
held is dropped): 50 events/s per stream with a burst of 500 (`event_rate`: the stream ends
RESOURCE_EXHAUSTED, the sidecar resends what was not acked), 65,536 members per job
(`members_per_job`), 256 events per member (`member_events`), 1,000 namespaces with jobs held
(`namespaces`), 1,000 open incidents (`open_incidents`: a job failing beyond it keeps its events and
opens when a place is free), a `register` within 30 s of a stream's start, 4 MiB per message, 10,000
jobs remembered (the oldest decided ones are forgotten first). `metrics.LIMITS` names them for the metric.

Without `--kube` (local runs, the demo) nothing listens beyond loopback unless asked: an open port
would let anyone who reaches it feed incidents. `--shutdown-grace` must stay below the pod's
terminationGracePeriodSeconds (chart default 30).

Verdict files are written 0600 by default: a verdict carries error messages, tracebacks and log
excerpts of every watched namespace's jobs, which may hold paths, host names or secrets a training
script printed, and the aggregator reads them on behalf of many teams. `--verdict-file-mode 0640`
(with the directory's group set for the readers, e.g. a log shipper's) or `0644` opens them to others.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from podmortem import settings
from podmortem.core.conditions import PERMANENT_CONFIDENCE
from podmortem.core.finite import finite
from podmortem.core.model import MAX_WORLD_SIZE
from podmortem.core.repeats import DEFAULT_LIMIT
from podmortem.settings import Setting

MAX_PORT = 65535
# Without --kube nothing listens beyond loopback unless asked.
LOOPBACK_LISTEN, LOOPBACK_METRICS = "127.0.0.1:50051", "127.0.0.1:9090"
CLUSTER_LISTEN, CLUSTER_METRICS = "0.0.0.0:50051", "0.0.0.0:9090"
AUTH_MODES = ("tokenreview", "none")
# Modes a verdict file may have: the owner reads and writes; its group, or everyone, may read.
VERDICT_FILE_MODES = ("0600", "0640", "0644")


class ConfigError(ValueError):
    """A setting has a value we cannot use; the message says which and why."""


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "listen",
        "--listen",
        "PODMORTEM_LISTEN",
        "gRPC address host:port (port 0 = any free port); a port in use is refused",
        shown=f"{LOOPBACK_LISTEN}; {CLUSTER_LISTEN} with --kube",
    ),
    Setting(
        "metrics_listen",
        "--metrics-listen",
        "PODMORTEM_METRICS_LISTEN",
        "Prometheus /metrics address; '' disables",
        shown=f"{LOOPBACK_METRICS}; {CLUSTER_METRICS} with --kube",
    ),
    Setting(
        "verdict_dir",
        "--verdict-dir",
        "PODMORTEM_VERDICT_DIR",
        "one JSON verdict file per incident here; '' disables",
        default="./podmortem-verdicts",
    ),
    Setting(
        "verdict_file_mode",
        "--verdict-file-mode",
        "PODMORTEM_VERDICT_FILE_MODE",
        "verdict files' mode: 0640 lets the directory's group read them, 0644 everyone",
        default="0600",
        choices=VERDICT_FILE_MODES,
    ),
    Setting(
        "world_size",
        "--world-size",
        "PODMORTEM_WORLD_SIZE",
        "expected pods per job when neither the job nor the sidecars say",
    ),
    Setting(
        "quorum_timeout",
        "--quorum-timeout",
        "PODMORTEM_QUORUM_TIMEOUT",
        "seconds an open incident waits for silent members",
        default="60",
    ),
    Setting("rules", "--rules", "PODMORTEM_RULES", "rules file extending the classification rules", shown="built-in"),
    Setting("ready_file", "--ready-file", "PODMORTEM_READY_FILE", "written with host:port once serving"),
    Setting(
        "shutdown_grace",
        "--shutdown-grace",
        "PODMORTEM_SHUTDOWN_GRACE",
        "seconds to drain streams and publish on SIGTERM (keep below terminationGracePeriodSeconds)",
        default="20",
    ),
    Setting("log_level", "--log-level", "PODMORTEM_LOG_LEVEL", "logging level", default="INFO"),
    Setting(
        "state_dir",
        "--state-dir",
        "PODMORTEM_STATE_DIR",
        "commit every registration and event to SQLite here before acknowledging it; replayed at start",
        shown="memory only",
    ),
    Setting(
        "permanent_confidence",
        "--permanent-confidence",
        "PODMORTEM_PERMANENT_CONFIDENCE",
        "podmortem.io/PermanentFailure on a pod only at this verdict confidence (0.01-1); below it "
        "RetryableFailure or none: never give up on a guess",
        default=f"{PERMANENT_CONFIDENCE:g}",
    ),
    Setting(
        "peer_wait",
        "--peer-wait",
        "PODMORTEM_PEER_WAIT",
        "seconds a held pod that failed on its own waits for its peers' first evidence before its condition "
        "is decided (within its sidecar's hold)",
        default="5",
    ),
    Setting(
        "max_open_per_job",
        "--max-open-incidents-per-job",
        "PODMORTEM_MAX_OPEN_INCIDENTS_PER_JOB",
        "incidents open at once for one job's attempts; more wait, their events kept, and are counted in "
        "podmortem_limit_hits_total",
        default="4",
    ),
    Setting(
        "max_open_per_namespace",
        "--max-open-incidents-per-namespace",
        "PODMORTEM_MAX_OPEN_INCIDENTS_PER_NAMESPACE",
        "incidents open at once in one namespace; more wait likewise",
        default="100",
    ),
    Setting(
        "repeat_limit",
        "--repeat-limit",
        "PODMORTEM_REPEAT_LIMIT",
        "a retryable root cause with the same signature on this many attempts of a job in a row is marked "
        "podmortem.io/PermanentFailure (reason RepeatedFailure) and stops the job; 0: off. A job's "
        "annotation podmortem.io/repeat-limit overrides it",
        default=str(DEFAULT_LIMIT),
    ),
    Setting(
        "auth",
        "--auth",
        "PODMORTEM_AUTH",
        "who may stream: tokenreview (each sidecar's projected token, checked with the API) or none",
        shown="tokenreview with --kube, else none",
        choices=AUTH_MODES,
    ),
    Setting("tls_cert", "--tls-cert", "PODMORTEM_TLS_CERT", "serve gRPC over TLS with this PEM certificate (chain)"),
    Setting("tls_key", "--tls-key", "PODMORTEM_TLS_KEY", "the PEM private key of --tls-cert"),
)


def _row(table: tuple[Setting, ...], dest: str) -> Setting:
    return next(s for s in table if s.dest == dest)


def _default(table: tuple[Setting, ...], dest: str) -> str:
    """A setting's default text: the one place a default is written (the dataclasses below parse it)."""
    default = _row(table, dest).default
    if default is None:
        raise LookupError(f"setting {dest!r} has no default text")
    return default


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(name: str, text: str) -> float:
    """Seconds from '604800', '90m', '36h' or '7d'; ConfigError naming the setting otherwise."""
    text = text.strip().lower()
    unit = _UNITS.get(text[-1:], 0.0)
    number = text[:-1] if unit else text
    try:
        value = finite(float(number) * (unit or 1.0), name)
    except ValueError:
        raise ConfigError(f"{name} = {text!r} is not a duration (seconds, or a number with s, m, h or d)") from None
    if value <= 0:
        raise ConfigError(f"{name} = {text!r}: must be > 0")
    return value


@dataclass(frozen=True)
class AggregatorConfig:
    """The aggregator's own settings (`SETTINGS`, read by `load`); the defaults are the table's."""

    listen: str = CLUSTER_LISTEN
    metrics_listen: str = CLUSTER_METRICS
    verdict_dir: str = _default(SETTINGS, "verdict_dir")
    verdict_file_mode: int = int(_default(SETTINGS, "verdict_file_mode"), 8)
    world_size: int | None = None
    quorum_timeout: float = float(_default(SETTINGS, "quorum_timeout"))
    rules: str = ""
    ready_file: str = ""
    shutdown_grace: float = float(_default(SETTINGS, "shutdown_grace"))
    log_level: str = _default(SETTINGS, "log_level")
    auth: str = "none"  # "tokenreview" (the default with --kube) or "none"
    tls_cert: str = ""
    tls_key: str = ""
    state_dir: str = ""  # "": incidents live in memory only
    permanent_confidence: float = PERMANENT_CONFIDENCE
    # Of the peers' first evidence, the most a member that failed on its own waits for; the root usually
    # ends a second or more before its victims.
    peer_wait: float = float(_default(SETTINGS, "peer_wait"))
    # Incidents open at once for one job (its attempts) and for one namespace: a pod that registers attempt
    # after attempt, or a tenant's many jobs, wait for a place rather than crowd out everyone else's
    # incidents (the book's limits beside aggregator.intake's).
    max_open_per_job: int = int(_default(SETTINGS, "max_open_per_job"))
    max_open_per_namespace: int = int(_default(SETTINGS, "max_open_per_namespace"))
    repeat_limit: int = DEFAULT_LIMIT


# The largest --repeat-limit (and podmortem.io/repeat-limit): a job's history keeps MAX_ATTEMPTS attempts.
MAX_REPEAT_LIMIT = 8

# -- Kubernetes ---------------------------------------------------------------------------------

# Training pods are found by label; a selector cannot say "this label OR that one", so one watch each.
DEFAULT_POD_SELECTORS: tuple[str, ...] = (
    "training.kubeflow.org/job-name",  # Kubeflow PyTorchJob (training-operator v1)
    "batch.kubernetes.io/job-completion-index",  # indexed batch Jobs, and so JobSet and TrainJob v2
)
PUBLISH_TARGETS = frozenset({"annotations", "condition", "events", "pod-conditions"})
MAX_POD_LOG_BYTES = 1 << 20


KUBE_SETTINGS: tuple[Setting, ...] = (
    Setting("kube", "--kube", "PODMORTEM_KUBE", "watch training pods and publish verdicts to Kubernetes", switch=True),
    Setting("kubeconfig", "--kubeconfig", "KUBECONFIG", "kubeconfig file", shown="in-cluster, else ~/.kube/config"),
    Setting("kube_context", "--kube-context", "PODMORTEM_KUBE_CONTEXT", "kubeconfig context", shown="current"),
    Setting(
        "namespaces",
        "--namespaces",
        "PODMORTEM_NAMESPACES",
        "comma-separated namespaces to watch (a Role per namespace suffices)",
        shown="all",
    ),
    Setting(
        "pod_selector",
        "--pod-selector",
        "PODMORTEM_POD_SELECTORS",
        "label selector of training pods, repeatable",
        shown="Kubeflow and indexed-Job labels",
        repeat=";",
    ),
    Setting(
        "kube_publish",
        "--kube-publish",
        "PODMORTEM_KUBE_PUBLISH",
        "what to write: a comma-separated subset of annotations,condition,events,pod-conditions, or none",
        default=",".join(sorted(PUBLISH_TARGETS)),
    ),
    Setting("kube_qps", "--kube-qps", "PODMORTEM_KUBE_QPS", "client-side rate limit, requests/s", default="20"),
    Setting("kube_burst", "--kube-burst", "PODMORTEM_KUBE_BURST", "client-side burst", default="40"),
    Setting(
        "condition_qps",
        "--condition-qps",
        "PODMORTEM_CONDITION_QPS",
        "pod conditions' own client-side rate limit, requests/s (one per failed pod, while its sidecar holds it)",
        default="400",
    ),
    Setting(
        "condition_burst",
        "--condition-burst",
        "PODMORTEM_CONDITION_BURST",
        "pod conditions' own client-side burst",
        default="400",
    ),
    Setting(
        "pod_log_bytes",
        "--pod-log-bytes",
        "PODMORTEM_POD_LOG_BYTES",
        "log tail the pod watch reads of a failed pod no sidecar spoke for; 0 never reads logs",
        default="65536",
    ),
    Setting(
        "node_actions",
        "--node-actions",
        "PODMORTEM_NODE_ACTIONS",
        "record each hardware root cause on its node and mark a node that keeps failing; off needs no node RBAC",
        default="on",
        choices=("on", "off"),
    ),
    Setting(
        "suspect_node_threshold",
        "--suspect-node-threshold",
        "PODMORTEM_SUSPECT_NODE_THRESHOLD",
        "hardware root causes within the window that mark a node podmortem.io/SuspectHardware",
        default="2",
    ),
    Setting(
        "suspect_node_window",
        "--suspect-node-window",
        "PODMORTEM_SUSPECT_NODE_WINDOW",
        "how far back they count (seconds, or with s/m/h/d)",
        default="7d",
    ),
    Setting(
        "suspect_node_taint",
        "--suspect-node-taint",
        "PODMORTEM_SUSPECT_NODE_TAINT",
        "also taint a suspect node podmortem.io/suspect-hardware:NoSchedule",
        switch=True,
    ),
    Setting(
        "suspect_node_min_jobs",
        "--suspect-node-min-jobs",
        "PODMORTEM_SUSPECT_NODE_MIN_JOBS",
        "different jobs those faults must come from (a job counts once per node, whatever its attempts and pods)",
        default="2",
    ),
    Setting(
        "suspect_node_min_namespaces",
        "--suspect-node-min-namespaces",
        "PODMORTEM_SUSPECT_NODE_MIN_NAMESPACES",
        "different namespaces they must come from (2: no single tenant can mark a node)",
        default="1",
    ),
    Setting(
        "node_faults_per_namespace",
        "--node-faults-per-namespace",
        "PODMORTEM_NODE_FAULTS_PER_NAMESPACE",
        "hardware faults one namespace may record on nodes per hour; more are refused and counted",
        default="4",
    ),
    Setting(
        "leader_elect",
        "--leader-elect",
        "PODMORTEM_LEADER_ELECT",
        "two replicas: serve only while holding the Lease --lease-name in --lease-namespace",
        switch=True,
    ),
    Setting("lease_name", "--lease-name", "PODMORTEM_LEASE_NAME", "the Lease's name", default="podmortem-aggregator"),
    Setting(
        "lease_namespace",
        "--lease-namespace",
        "POD_NAMESPACE",
        "the Lease's namespace (downward API)",
        default="default",
    ),
    Setting(
        "reporting_instance",
        "--instance-name",
        "POD_NAME",
        "this replica's name in Events and the Lease (downward API)",
        shown="the host name",
    ),
)


def _kube_default(dest: str) -> str:
    return _default(KUBE_SETTINGS, dest)


@dataclass(frozen=True)
class ClientBudget:
    """The API client's pace and patience (`--kube-qps`, `--kube-burst`; the rest fixed)."""

    qps: float = float(_kube_default("kube_qps"))
    burst: int = int(_kube_default("kube_burst"))
    retries: int = 6
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    request_timeout: float = 30.0
    watch_timeout: int = 300  # server-side timeoutSeconds of one watch request


@dataclass(frozen=True)
class ConditionWrites:
    """Pod conditions' own client-side budget (`kube.podconditions`, `--condition-qps`, `--condition-burst`):
    a 4,096-pod job's conditions within the sidecar's default 15 s hold, and never ahead of the verdict's
    publishers."""

    qps: float = float(_kube_default("condition_qps"))
    burst: int = int(_kube_default("condition_burst"))


@dataclass(frozen=True)
class NodeActions:
    """What the aggregator does to nodes (podmortem.aggregator.kube.nodes; `--node-actions`,
    `--suspect-node-*`, `--node-faults-per-namespace`): hardware root causes recorded on their node; a node
    with `threshold` of them within `window` seconds is marked (tainted only if asked). How far a tenant's
    text is trusted with nodes: a node is marked only on faults from `min_jobs` different jobs and
    `min_namespaces` namespaces, and one namespace records at most `per_namespace_per_hour` faults an hour."""

    enabled: bool = _kube_default("node_actions") == "on"
    threshold: int = int(_kube_default("suspect_node_threshold"))
    window: float = duration("suspect_node_window", _kube_default("suspect_node_window"))
    taint: bool = False
    min_jobs: int = int(_kube_default("suspect_node_min_jobs"))
    min_namespaces: int = int(_kube_default("suspect_node_min_namespaces"))
    per_namespace_per_hour: int = int(_kube_default("node_faults_per_namespace"))


@dataclass(frozen=True)
class LeaderElection:
    """Two or more replicas: only the holder of this Lease serves (podmortem.aggregator.kube.leader;
    `--leader-elect`, `--lease-name`, `--lease-namespace`)."""

    enabled: bool = False
    lease_name: str = _kube_default("lease_name")
    lease_namespace: str = _kube_default("lease_namespace")


@dataclass(frozen=True)
class KubeSettings:
    """How the aggregator talks to Kubernetes (`KUBE_SETTINGS`, read by `load_kube_settings`): what it
    watches and writes here, each other concern in its own group."""

    enabled: bool = False
    kubeconfig: str | None = None  # None: in-cluster when KUBERNETES_SERVICE_HOST is set, else ~/.kube/config
    context: str | None = None
    namespaces: tuple[str, ...] = ()  # () = every namespace (needs a ClusterRole)
    pod_selectors: tuple[str, ...] = DEFAULT_POD_SELECTORS
    publish: frozenset[str] = PUBLISH_TARGETS
    # The pod watch reads a failed container's log tail (this many bytes; 0: never) for members whose
    # sidecar sent none and whose termination carries no message.
    pod_log_bytes: int = int(_kube_default("pod_log_bytes"))
    reporting_instance: str = os.uname().nodename  # this replica in Events and the Lease
    client: ClientBudget = ClientBudget()
    conditions: ConditionWrites = ConditionWrites()
    nodes: NodeActions = NodeActions()
    leader: LeaderElection = LeaderElection()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    settings.add_arguments(parser, SETTINGS, "aggregator settings")


def add_kube_arguments(parser: argparse.ArgumentParser) -> None:
    settings.add_arguments(parser, KUBE_SETTINGS, "Kubernetes")


def _number(name: str, raw: str, kind: type[int] | type[float], low: float, high: float | None = None) -> float:
    try:
        value = kind(raw)
        finite(value, name)  # "nan" and "inf" parse as floats and pass every comparison below
    except ValueError:
        raise ConfigError(f"{name} = {raw!r} is not a finite number") from None
    if value < low or (high is not None and value > high):
        bounds = f">= {_plain(low)}" if high is None else f"between {_plain(low)} and {_plain(high)}"
        raise ConfigError(f"{name} = {raw!r}: must be {bounds}")
    return value


def _plain(bound: float) -> str:
    """A bound as the user would type it: 1048576, not 1.04858e+06."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def setting_name(dest: str) -> str:
    """How an aggregator setting is named in an error: its flag and its variable."""
    return _name(SETTINGS, dest)


def _name(table: tuple[Setting, ...], dest: str) -> str:
    return _row(table, dest).name


def load(ns: argparse.Namespace, env: Mapping[str, str] | None = None, kube: bool = False) -> AggregatorConfig:
    """The settings (`env` None: the process's environment); unset addresses default to every interface
    with `kube` (in a cluster), else loopback."""
    raw = settings.read(SETTINGS, env, ns)

    def name(dest: str) -> str:
        return _name(SETTINGS, dest)

    auth = raw.get("auth") or ("tokenreview" if kube else "none")
    if auth not in AUTH_MODES:
        raise ConfigError(f"{name('auth')} = {auth!r} is not one of {', '.join(AUTH_MODES)}")
    if auth == "tokenreview" and not kube:
        raise ConfigError(f"{name('auth')} = tokenreview needs --kube (the API server reviews the tokens)")
    tls_cert, tls_key = raw.get("tls_cert", ""), raw.get("tls_key", "")
    if bool(tls_cert) != bool(tls_key):
        raise ConfigError(f"{name('tls_cert')} and {name('tls_key')} go together")
    mode = raw["verdict_file_mode"]
    if mode not in VERDICT_FILE_MODES and f"0{mode}" not in VERDICT_FILE_MODES:
        raise ConfigError(f"{name('verdict_file_mode')} = {mode!r} is not one of {', '.join(VERDICT_FILE_MODES)}")
    level = settings.log_level(raw["log_level"])
    if level is None:
        raise ConfigError(f"{name('log_level')} = {raw['log_level']!r} is not a logging level")
    world = raw.get("world_size")
    return AggregatorConfig(
        auth=auth,
        tls_cert=tls_cert,
        tls_key=tls_key,
        listen=_address(name("listen"), raw.get("listen") or (CLUSTER_LISTEN if kube else LOOPBACK_LISTEN)),
        metrics_listen=_address(
            name("metrics_listen"),
            raw.get("metrics_listen", CLUSTER_METRICS if kube else LOOPBACK_METRICS),
            allow_empty=True,
        ),
        verdict_dir=raw["verdict_dir"],
        verdict_file_mode=int(mode, 8),
        world_size=int(_number(name("world_size"), world, int, 1, MAX_WORLD_SIZE)) if world else None,
        quorum_timeout=_positive(name("quorum_timeout"), raw["quorum_timeout"]),
        rules=raw.get("rules", ""),
        ready_file=raw.get("ready_file", ""),
        shutdown_grace=_positive(name("shutdown_grace"), raw["shutdown_grace"]),
        log_level=level,
        state_dir=raw.get("state_dir", ""),
        permanent_confidence=_number(name("permanent_confidence"), raw["permanent_confidence"], float, 0.01, 1.0),
        peer_wait=_number(name("peer_wait"), raw["peer_wait"], float, 0.0, 3600.0),
        max_open_per_job=int(_number(name("max_open_per_job"), raw["max_open_per_job"], int, 1)),
        max_open_per_namespace=int(_number(name("max_open_per_namespace"), raw["max_open_per_namespace"], int, 1)),
        repeat_limit=int(_number(name("repeat_limit"), raw["repeat_limit"], int, 0, MAX_REPEAT_LIMIT)),
    )


def _positive(name: str, raw: str) -> float:
    value = _number(name, raw, float, 0)
    if value <= 0:
        raise ConfigError(f"{name} = {raw!r}: must be > 0")
    return value


def load_kube_settings(ns: argparse.Namespace, env: Mapping[str, str] | None = None) -> KubeSettings:
    """Flags > environment (`env` None: the process's) > defaults. Raises ConfigError naming the setting."""
    raw = settings.read(KUBE_SETTINGS, env, ns)

    def name(dest: str) -> str:
        return _name(KUBE_SETTINGS, dest)

    publish = raw["kube_publish"]
    targets = frozenset(t.strip() for t in publish.split(",") if t.strip() and t.strip() != "none")
    if unknown := targets - PUBLISH_TARGETS:
        raise ConfigError(f"{name('kube_publish')}: unknown target(s) {sorted(unknown)}; use {sorted(PUBLISH_TARGETS)}")
    qps = _positive(name("kube_qps"), raw["kube_qps"])
    burst = int(_number(name("kube_burst"), raw["kube_burst"], int, 1))
    condition_qps = _positive(name("condition_qps"), raw["condition_qps"])
    condition_burst = int(_number(name("condition_burst"), raw["condition_burst"], int, 1))
    pod_log_bytes = int(_number(name("pod_log_bytes"), raw["pod_log_bytes"], int, 0, MAX_POD_LOG_BYTES))
    selectors = tuple(s.strip() for s in raw.get("pod_selector", "").split(";") if s.strip())
    node_actions = raw["node_actions"].lower()
    if node_actions not in ("on", "off"):
        raise ConfigError(f"{name('node_actions')} = {node_actions!r} is not on or off")
    return KubeSettings(
        enabled=settings.is_true(raw.get("kube")),
        kubeconfig=raw.get("kubeconfig") or None,
        context=raw.get("kube_context") or None,
        namespaces=tuple(n.strip() for n in raw.get("namespaces", "").split(",") if n.strip()),
        pod_selectors=selectors or DEFAULT_POD_SELECTORS,
        publish=targets,
        pod_log_bytes=pod_log_bytes,
        reporting_instance=raw.get("reporting_instance") or KubeSettings.reporting_instance,
        client=ClientBudget(qps=qps, burst=burst),
        conditions=ConditionWrites(qps=condition_qps, burst=condition_burst),
        nodes=NodeActions(
            enabled=node_actions == "on",
            threshold=int(_number(name("suspect_node_threshold"), raw["suspect_node_threshold"], int, 1)),
            window=duration(name("suspect_node_window"), raw["suspect_node_window"]),
            taint=settings.is_true(raw.get("suspect_node_taint")),
            min_jobs=int(_number(name("suspect_node_min_jobs"), raw["suspect_node_min_jobs"], int, 1)),
            min_namespaces=int(
                _number(name("suspect_node_min_namespaces"), raw["suspect_node_min_namespaces"], int, 1)
            ),
            per_namespace_per_hour=int(
                _number(name("node_faults_per_namespace"), raw["node_faults_per_namespace"], int, 1)
            ),
        ),
        leader=LeaderElection(
            enabled=settings.is_true(raw.get("leader_elect")),
            lease_name=raw["lease_name"] or LeaderElection.lease_name,
            lease_namespace=raw["lease_namespace"] or LeaderElection.lease_namespace,
        ),
    )


def writable_directory(name: str, path: str) -> None:
    """Refuse, at start-up, a directory the aggregator could not write later (a plain file in its place, a
    read-only mount, no permission): creates it when missing and writes a probe file into it. Raises
    ConfigError naming the setting, so that nothing is lost after a start that looked fine."""
    where = Path(path)
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=where):
            pass
    except FileExistsError:
        raise ConfigError(f"{name} = {path!r} is not a directory") from None
    except OSError as exc:
        raise ConfigError(f"{name} = {path!r} cannot be written: {exc.strerror or exc}") from None


def in_cluster() -> bool:
    """Is this process in a pod (the kubelet sets KUBERNETES_SERVICE_HOST)?"""
    return bool(settings.platform("KUBERNETES_SERVICE_HOST"))


def _address(name: str, value: str, allow_empty: bool = False) -> str:
    if not value and allow_empty:
        return ""
    _, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"{name}: expected host:port, got {value!r}")
    if not 0 <= int(port) <= MAX_PORT:
        raise ConfigError(f"{name}: port {port} is not between 0 and {MAX_PORT} (0 = any free port)")
    return value


def split_address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)
