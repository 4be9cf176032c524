"""Sidecar settings: environment first, flags over it, every problem named at once."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from podmortem.sidecar import config
from podmortem.sidecar.config import ConfigError, Settings

BASE_ENV = {
    "POD_NAME": "job-worker-1",
    "POD_NAMESPACE": "team-a",
    "TORCHELASTIC_ERROR_FILE": "/tmp/podmortem/error.json",
    "PODMORTEM_AGGREGATOR": "podmortem.podmortem-system:9000",
}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    return parser.parse_args(argv)


def test_minimal_environment() -> None:
    s = config.from_env_and_args(BASE_ENV, parse([]))
    assert s == Settings(
        pod_name="job-worker-1",
        namespace="team-a",
        error_file=Path("/tmp/podmortem/error.json"),
        aggregator="podmortem.podmortem-system:9000",
    )
    assert s.pod_key == "team-a/job-worker-1"
    assert s.rank is None and s.world_size is None and s.pod_status_file is None


def test_full_environment() -> None:
    env = {
        **BASE_ENV,
        "POD_UID": "u-1",
        "NODE_NAME": "node-3",
        "POD_IP": "10.0.0.7",
        "PODMORTEM_JOB_NAME": "job",
        "PODMORTEM_JOB_KIND": "PyTorchJob",
        "PODMORTEM_JOB_UID": "j-1",
        "PODMORTEM_REPLICA_TYPE": "worker",
        "PODMORTEM_REPLICA_INDEX": "1",
        "PET_NODE_RANK": "2",
        "PET_NNODES": "4",
        "PODMORTEM_ATTEMPT": "3",
        "PODMORTEM_POD_STATUS_FILE": "/run/pod.json",
        "PODMORTEM_LOG_FILE": "/run/log.txt",
        "PODMORTEM_LOG_TAIL_BYTES": "1024",
        "PODMORTEM_CONTAINER": "pytorch",
        "PODMORTEM_SETTLE_SECONDS": "0.5",
        "PODMORTEM_FLUSH_TIMEOUT": "3",
        "PODMORTEM_CLOCK_PROBE_INTERVAL": "5",
        "PODMORTEM_LOG_LEVEL": "debug",
    }
    s = config.from_env_and_args(env, parse([]))
    assert (s.pod_uid, s.node_name, s.pod_ip) == ("u-1", "node-3", "10.0.0.7")
    assert (s.job_name, s.job_kind, s.job_uid) == ("job", "PyTorchJob", "j-1")
    assert (s.replica_type, s.replica_index, s.rank, s.world_size, s.attempt) == ("worker", 1, 2, 4, "3")
    assert s.pod_status_file == Path("/run/pod.json") and s.log_file == Path("/run/log.txt")
    assert (s.log_tail_bytes, s.container) == (1024, "pytorch")
    assert (s.settle_seconds, s.flush_timeout, s.clock_probe_interval) == (0.5, 3.0, 5.0)
    assert s.log_level == "DEBUG"
    assert s.pod_key == "u-1"


def test_flags_override_environment() -> None:
    ns = parse(["--pod-name", "other", "--rank", "0", "--flush-timeout", "1.5", "--error-file", "e.json"])
    s = config.from_env_and_args({**BASE_ENV, "PET_NODE_RANK": "5"}, ns)
    assert (s.pod_name, s.rank, s.flush_timeout, s.error_file) == ("other", 0, 1.5, Path("e.json"))


def test_flags_alone_are_enough() -> None:
    ns = parse(["--pod-name", "p", "--namespace", "n", "--error-file", "/e", "--aggregator", "127.0.0.1:1"])
    assert config.from_env_and_args({}, ns).aggregator == "127.0.0.1:1"


def test_missing_required_settings_are_all_named() -> None:
    with pytest.raises(ConfigError) as err:
        config.from_env_and_args({"POD_NAMESPACE": "n"}, parse([]))
    text = str(err.value)
    for name in ("POD_NAME", "TORCHELASTIC_ERROR_FILE", "PODMORTEM_AGGREGATOR"):
        assert name in text
    assert "POD_NAMESPACE" not in text


def test_empty_value_counts_as_missing() -> None:
    with pytest.raises(ConfigError, match="POD_NAME"):
        config.from_env_and_args({**BASE_ENV, "POD_NAME": "  "})


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"PET_NODE_RANK": "two"}, "PET_NODE_RANK"),
        ({"PODMORTEM_REPLICA_INDEX": "1.5"}, "PODMORTEM_REPLICA_INDEX"),
        ({"PODMORTEM_FLUSH_TIMEOUT": "-1"}, "PODMORTEM_FLUSH_TIMEOUT"),
        ({"PODMORTEM_LOG_TAIL_BYTES": str(2 << 20)}, "PODMORTEM_LOG_TAIL_BYTES"),
        ({"PODMORTEM_AGGREGATOR": "no-port"}, "PODMORTEM_AGGREGATOR"),
        ({"PODMORTEM_LOG_LEVEL": "LOUD"}, "PODMORTEM_LOG_LEVEL"),
        ({"PET_NNODES": "x:y"}, "PET_NNODES"),
        ({"PODMORTEM_POD_SOURCE": "etcd"}, "PODMORTEM_POD_SOURCE"),
        ({"PODMORTEM_POD_SOURCE": "file"}, "needs PODMORTEM_POD_STATUS_FILE"),
    ],
)
def test_malformed_values(env: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        config.from_env_and_args({**BASE_ENV, **env})


@pytest.mark.parametrize(("text", "size"), [("4", 4), ("4:4", 4), ("2:4", None)])
def test_world_size_from_pet_nnodes(text: str, size: int | None) -> None:
    assert config.from_env_and_args({**BASE_ENV, "PET_NNODES": text}).world_size == size


@pytest.mark.parametrize("address", ["host:9000", "10.0.0.1:9000", "[::1]:9000", "dns:///svc:9000", "unix:/s"])
def test_aggregator_addresses(address: str) -> None:
    assert config.from_env_and_args({**BASE_ENV, "PODMORTEM_AGGREGATOR": address}).aggregator == address


def test_every_setting_has_a_flag() -> None:
    # The README's Sidecar table is held against --help by tests/unit/test_readme.py.
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    fields = {f for f in Settings.__dataclass_fields__}
    assert {a.dest for a in parser._actions if a.dest != "help"} == fields
