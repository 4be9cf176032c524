"""Pod conditions' writes against the emulator: their order, their own budget, and writes given up.

A large job fails all at once and its conditions are written while each pod's sidecar holds it
(`podmortem.aggregator.kube.podconditions`). These tests hold what the operator relies on then: the
condition a `podFailurePolicy` acts on (a member's own failure) is not queued behind the echoes'; the
verdict's publishers, on the shared client, do not wait for a queue of conditions; a write whose hold ran
out before it started is never sent. The rate limits are tiny and the clock is the loop's (looptime), so
the queues are long in loop time and the tests take none.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from support.kube_emulator import PODS, PYTORCHJOBS, EmulatorHandle
from support.kube_objects import JOB, NS, make_kube, seed_pytorchjob

from podmortem.aggregator import config
from podmortem.aggregator.config import AggregatorConfig, ConditionWrites, ConfigError, KubeSettings
from podmortem.aggregator.kube.podconditions import PodConditionWriter
from podmortem.aggregator.running import Aggregator
from podmortem.core.conditions import PodCondition
from podmortem.core.names import PERMANENT, VICTIM
from podmortem.k8s.objects import resource_path


def victim(pod: str) -> PodCondition:
    return PodCondition(pod, VICTIM, "Victim", "its peer closed the connection")


def condition_patches(api: EmulatorHandle) -> list[str]:
    """The pods whose status was patched, in the order the API received the patches."""
    return [p.split("/pods/")[1].split("/")[0] for m, p in api.requests() if m == "PATCH" and p.endswith("/status")]


@pytest.mark.looptime
async def test_a_member_s_own_failure_is_written_before_queued_echoes(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    _, pods = seed_pytorchjob(kube_api, workers=6)
    kube = make_kube(kube_api, tmp_path, qps=1, burst=1)
    writer = PodConditionWriter(kube, workers=1)
    echoes = [asyncio.create_task(writer.write(NS, pod, victim(pod))) for pod in pods[1:]]
    await asyncio.sleep(0.5)  # the first echo's write is under way, the other four wait
    root = PodCondition(pods[0], PERMANENT, "UserCode", "ValueError: label 7 out of range")
    await asyncio.gather(writer.write(NS, pods[0], root), *echoes)
    kube.close()
    order = condition_patches(kube_api)
    assert sorted(order) == sorted(pods)
    assert order[:2] == [pods[1], pods[0]]  # after the one write under way, before every echo that waited
    assert [c["type"] for c in (kube_api.get(PODS, NS, pods[0]) or {})["status"]["conditions"]] == [PERMANENT]


@pytest.mark.looptime
async def test_a_write_given_up_before_it_started_is_never_sent(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    _, pods = seed_pytorchjob(kube_api, workers=3)
    kube = make_kube(kube_api, tmp_path, qps=1, burst=1)
    writer = PodConditionWriter(kube, workers=1)
    writes = [asyncio.create_task(writer.write(NS, pod, victim(pod))) for pod in pods]
    await asyncio.sleep(0.5)
    writes[2].cancel()  # its sidecar's hold ran out: the pod turns terminal without a condition
    await asyncio.gather(*writes, return_exceptions=True)
    await asyncio.sleep(5)  # the worker had every chance to send it
    kube.close()
    assert condition_patches(kube_api) == pods[:2]
    assert not (kube_api.get(PODS, NS, pods[2]) or {}).get("status", {}).get("conditions")


@pytest.mark.looptime
async def test_the_verdict_s_writes_do_not_wait_for_a_queue_of_conditions(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    _, pods = seed_pytorchjob(kube_api, workers=4)
    settings = KubeSettings(
        enabled=True,
        kubeconfig=str(kube_api.kubeconfig(tmp_path / "kubeconfig", NS)),
        namespaces=(NS,),
        conditions=ConditionWrites(qps=1, burst=1),
    )
    agg = Aggregator(
        AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir=""),
        registry=CollectorRegistry(),
        kube_settings=settings,
    )
    # 60 conditions waiting: more than the shared client's burst (40), a minute at the conditions' 1/s.
    queued = [asyncio.create_task(agg.condition_writer.write(NS, pods[i % 4], victim(pods[i % 4]))) for i in range(60)]
    await asyncio.sleep(0.5)
    assert agg._kube is not None
    loop = asyncio.get_running_loop()
    start = loop.time()
    job = resource_path("kubeflow.org/v1", "pytorchjobs", NS, JOB)
    body = {"metadata": {"annotations": {"podmortem.io/verdict": "{}"}}}
    await agg._kube.request("PATCH", job, body=body, content_type="application/merge-patch+json")  # a publisher's
    took = loop.time() - start
    for task in queued:
        task.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    await agg.stop(grace=1)
    assert took < 1.0  # on the fake clock: not behind the conditions (a minute) nor the shared burst's tail
    assert len(condition_patches(kube_api)) <= 3  # the conditions went at their own pace meanwhile
    assert "podmortem.io/verdict" in (kube_api.get(PYTORCHJOBS, NS, JOB) or {})["metadata"]["annotations"]


def test_the_conditions_budget_defaults_and_its_settings() -> None:
    parser = argparse.ArgumentParser()
    config.add_kube_arguments(parser)
    defaults = config.load_kube_settings(parser.parse_args([]), {})
    assert (defaults.conditions.qps, defaults.conditions.burst) == (400, 400)  # as the README's table says
    assert (defaults.client.qps, defaults.client.burst) == (20, 40)  # the shared client's stays as it was
    env = {"PODMORTEM_CONDITION_QPS": "50", "PODMORTEM_CONDITION_BURST": "10"}
    from_env = config.load_kube_settings(parser.parse_args([]), env)
    assert (from_env.conditions.qps, from_env.conditions.burst) == (50, 10)
    flags = config.load_kube_settings(parser.parse_args(["--condition-qps", "7"]), env)
    assert flags.conditions.qps == 7  # flags over the environment
    with pytest.raises(ConfigError, match="--condition-qps"):
        config.load_kube_settings(parser.parse_args(["--condition-qps", "0"]), {})
    with pytest.raises(ConfigError, match="--condition-burst"):
        config.load_kube_settings(parser.parse_args(["--condition-burst", "x"]), {})
