"""kube.Kube: error translation, retries, rate limit, settings; and the whole path book -> queue -> cluster.

A bad day for the API server: 20% of writes fail with 409/429/500 and watches are cut, while the real
aggregator (pod watch + publishers) decides several jobs. Each incident must still be visible exactly
once: one verdict annotation naming the root, one PodmortemRootCause condition, one Warning Event per
object — no duplicate, no loss.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from support.common import eventually
from support.kube_emulator import PODS, PYTORCHJOBS, EmulatorHandle
from support.kube_objects import (
    CONTROLLER_CONDITIONS,
    NS,
    make_kube,
    pytorchjob,
    seed_pytorchjob,
    terminated,
    training_pod,
)

from podmortem.aggregator import config as settings_mod
from podmortem.aggregator.config import AggregatorConfig, ClientBudget, KubeSettings
from podmortem.aggregator.incidents import IncidentBook
from podmortem.aggregator.kube import client as k
from podmortem.aggregator.kube.podwatch import PodWatch
from podmortem.aggregator.kube.publish import kube_publishers
from podmortem.aggregator.publishing import PublishQueue
from podmortem.aggregator.running import Aggregator
from podmortem.core.engine import decide
from podmortem.core.names import PUBLISHED_ANNOTATION, ROOT_CAUSE_CONDITION, VERDICT_ANNOTATION
from podmortem.k8s import errors
from podmortem.k8s.backoff import Backoff
from podmortem.k8s.objects import resource_path

POD_PATH = resource_path("v1", "pods", NS, "mixtral-cpt-worker-0")


async def test_permanent_errors_are_raised_at_once(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    seed_pytorchjob(kube_api)
    kube = make_kube(kube_api, tmp_path)
    with pytest.raises(errors.NotFoundError):
        await kube.get(resource_path("v1", "pods", NS, "nope"))
    kube_api.fail(403, 1, methods=("PATCH",))
    calls = kube.calls
    with pytest.raises(errors.ForbiddenError) as forbidden:
        await kube.request("PATCH", POD_PATH, body={}, content_type="application/merge-patch+json")
    assert kube.calls == calls + 1 and isinstance(forbidden.value, errors.PermanentError)
    with pytest.raises(errors.AlreadyExistsError):
        await kube.request("POST", resource_path("v1", "pods", NS), body={"metadata": {"name": "mixtral-cpt-worker-0"}})
    stale = {"metadata": {"resourceVersion": "1"}}
    with pytest.raises(errors.ConflictError):  # a precondition conflict is the caller's to resolve
        await kube.request("PATCH", POD_PATH, body=stale, content_type="application/merge-patch+json")
    kube.close()


async def test_temporary_errors_are_retried_then_given_up(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    seed_pytorchjob(kube_api)
    kube = make_kube(kube_api, tmp_path, retries=3)
    kube_api.fail(503, 2, methods=("GET",))
    assert (await kube.get(POD_PATH))["metadata"]["name"] == "mixtral-cpt-worker-0"
    kube_api.fail(500, 100, methods=("GET",))
    calls = kube.calls
    with pytest.raises(errors.TemporaryError) as exc:
        await kube.get(POD_PATH)
    assert exc.value.status == 500 and kube.calls == calls + 4  # 1 + 3 retries
    kube.close()


async def test_a_refused_connection_is_temporary(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        '{"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],'
        ' "users": [{"name": "u", "user": {"token": "t"}}], "contexts": [{"name": "x", "context": {"cluster": "c",'
        ' "user": "u"}}], "current-context": "x"}'
    )
    kube = k.Kube(
        k.load_configuration(settings_mod.KubeSettings(kubeconfig=str(config))),
        retries=1,
        backoff=Backoff(0.001, 0.001),
    )
    with pytest.raises(errors.TemporaryError) as exc:
        await kube.get("/api/v1/pods")
    assert exc.value.status == 0
    kube.close()


def test_translate() -> None:
    assert isinstance(errors.translate(409, "AlreadyExists"), errors.AlreadyExistsError)
    assert isinstance(errors.translate(409, "Conflict"), errors.ConflictError)
    assert isinstance(errors.translate(410, "Expired"), errors.GoneError)
    assert isinstance(errors.translate(422), errors.InvalidError)
    assert (
        isinstance(errors.translate(429, retry_after=2), errors.TemporaryError)
        and errors.translate(429, retry_after=2).retry_after == 2
    )
    assert isinstance(errors.translate(504), errors.TemporaryError)
    assert isinstance(errors.translate(418), errors.PermanentError)


@pytest.mark.looptime
async def test_the_rate_limit_lets_a_burst_through_then_paces() -> None:
    loop = asyncio.get_running_loop()
    limiter = k.RateLimiter(qps=10, burst=5)
    start = loop.time()
    for _ in range(5):
        await limiter.acquire()
    assert loop.time() == start  # the burst: no wait
    for _ in range(10):
        await limiter.acquire()
    assert loop.time() - start == pytest.approx(1.0)  # then 10 per second
    await asyncio.sleep(10)  # idle refills up to the burst, not more
    mark = loop.time()
    for _ in range(6):
        await limiter.acquire()
    assert loop.time() - mark == pytest.approx(0.1)


@pytest.mark.looptime
async def test_a_429_is_retried_after_its_retry_after_not_the_backoff(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    seed_pytorchjob(kube_api)
    # A backoff of 1,000 s: a client that ignored Retry-After would wait that long (on the fake clock).
    kube = make_kube(kube_api, tmp_path, backoff=Backoff(1000, 1000, jitter=0))
    kube_api.fail(429, 1, methods=("GET",), retry_after=7)
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert (await kube.get(POD_PATH))["metadata"]["name"] == "mixtral-cpt-worker-0"
    # The loop clock is fake (looptime): it moved by the 7 s slept, and by the real time the two HTTP calls
    # took (looptime steps with threads); 1,000 s is the backoff's. It cannot flake short of 990 s calls.
    assert 7 <= loop.time() - start < 1000
    assert kube.calls == 2
    kube.close()


def test_the_rate_limit_defaults_are_20_per_second_in_bursts_of_40() -> None:
    parser = argparse.ArgumentParser()
    settings_mod.add_kube_arguments(parser)
    settings = settings_mod.load_kube_settings(parser.parse_args([]), {})
    assert (settings.client.qps, settings.client.burst) == (20, 40)  # as the README's table says


@pytest.mark.looptime
async def test_a_client_from_default_settings_paces_as_documented(tmp_path: Path, kube_api: EmulatorHandle) -> None:
    kube = k.Kube.from_settings(settings_mod.KubeSettings(kubeconfig=str(kube_api.kubeconfig(tmp_path / "config"))))
    loop = asyncio.get_running_loop()
    start = loop.time()
    for _ in range(40):
        await kube.limiter.acquire()
    assert loop.time() == start  # a burst of 40 at once
    for _ in range(20):
        await kube.limiter.acquire()
    assert loop.time() - start == pytest.approx(1.0)  # then 20 a second
    kube.close()


def test_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff(initial=0.5, maximum=4, jitter=0)
    assert [backoff.delay(n) for n in range(6)] == [0.5, 1, 2, 4, 4, 4]
    jittered = Backoff(initial=1, maximum=10, jitter=0.2)
    assert all(0.8 <= jittered.delay(0) <= 1.2 for _ in range(100))


def test_settings_from_flags_and_environment() -> None:
    parser = argparse.ArgumentParser()
    settings_mod.add_kube_arguments(parser)
    env = {"PODMORTEM_KUBE": "1", "PODMORTEM_NAMESPACES": "a, b", "PODMORTEM_POD_SELECTORS": "x=1,y;z"}
    s = settings_mod.load_kube_settings(parser.parse_args([]), env)
    assert s.enabled and s.namespaces == ("a", "b") and s.pod_selectors == ("x=1,y", "z")
    assert s.publish == settings_mod.PUBLISH_TARGETS and s.kubeconfig is None
    s = settings_mod.load_kube_settings(
        parser.parse_args(
            ["--namespaces", "c", "--kube-publish", "annotations", "--kubeconfig", "/k", "--kube-qps", "5"]
        ),
        env,
    )
    assert (
        s.namespaces == ("c",)
        and s.publish == frozenset({"annotations"})
        and s.kubeconfig == "/k"
        and s.client.qps == 5
    )
    assert not settings_mod.load_kube_settings(parser.parse_args([]), {}).enabled
    assert settings_mod.load_kube_settings(parser.parse_args(["--kube-publish", "none"]), {}).publish == frozenset()
    with pytest.raises(ValueError):
        settings_mod.load_kube_settings(parser.parse_args(["--kube-publish", "annotations,slack"]), {})


async def test_book_to_cluster_with_the_real_engine(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    """A pod fails, the others are torn down: the watch feeds the book, the engine decides, the cluster shows it."""
    seed_pytorchjob(kube_api, workers=3)
    kube = make_kube(kube_api, tmp_path)
    queue = PublishQueue(kube_publishers(settings_mod.KubeSettings(), kube))
    book = IncidentBook(decide, queue.submit, quorum_timeout=600)
    settings = settings_mod.KubeSettings(namespaces=(NS,))
    tasks = [asyncio.create_task(PodWatch(kube, book, settings).run()), asyncio.create_task(queue.run())]
    try:
        await eventually(lambda: kube_api.emulator.open_watches == 2, "both selectors watched")
        kube_api.change(PODS, NS, "mixtral-cpt-worker-2", terminated(137, "OOMKilled"))
        for name in ("mixtral-cpt-worker-0", "mixtral-cpt-worker-1"):
            kube_api.change(PODS, NS, name, terminated(143))

        def published() -> dict[str, str] | None:
            job = kube_api.get(PYTORCHJOBS, NS, "mixtral-cpt")
            annotations = (job or {}).get("metadata", {}).get("annotations") or {}
            return annotations if PUBLISHED_ANNOTATION in annotations else None

        annotations = await eventually(published, "the verdict published on the job")
        assert annotations[PUBLISHED_ANNOTATION] == "kubeflow-user:mixtral-cpt#1"  # namespace:name, no attempt known
        assert "mixtral-cpt-worker-2" in annotations["podmortem.io/summary"]
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        kube.close()


async def test_a_watch_left_early_never_blocks_the_next_request(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    """A watch abandoned at any point must not hand its connection — still streaming — to the pool."""
    seed_pytorchjob(kube_api)
    kube = make_kube(kube_api, tmp_path, request_timeout=2, retries=0)
    for round_ in range(20):
        streams = [
            kube.watch("/api/v1/pods", {"labelSelector": s})
            for s in ("none-has-this", "training.kubeflow.org/job-name")
        ]
        tasks = [asyncio.create_task(anext(s)) for s in streams]
        for _ in range(round_ % 4):
            await asyncio.sleep(0.005)  # leave before, while and after it connects
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in streams:
            await s.aclose()
        for _ in range(3):  # a request pipelined behind a live watch would time out here
            pod = await kube.get(POD_PATH)
            assert pod["metadata"]["name"] == "mixtral-cpt-worker-0"
    kube.close()


JOBS = [f"job-{i}" for i in range(4)]
ROOT_MESSAGE = (
    'Traceback (most recent call last):\n  File "train.py", line 9\n'
    "AttributeError: 'NoneType' object has no attribute 'loss'"
)
VICTIM_MESSAGE = "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.11]:4455"


def published(api: EmulatorHandle, job: str) -> bool:
    stored = api.get(PYTORCHJOBS, NS, job) or {}
    conditions = (stored.get("status") or {}).get("conditions") or []
    return PUBLISHED_ANNOTATION in (stored.get("metadata") or {}).get("annotations", {}) and any(
        c["type"] == ROOT_CAUSE_CONDITION for c in conditions
    )


async def test_every_incident_is_visible_exactly_once_through_api_faults(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    roots = {}
    for i, name in enumerate(JOBS):
        job = kube_api.put(PYTORCHJOBS, pytorchjob(name=name, workers=3))
        for w in range(3):
            kube_api.put(PODS, training_pod(job, w))
        roots[name] = f"{name}-worker-{i % 3}"
    # ~20% of writes fail (seeded: the same run every time): 409 Conflict where a write is against a version
    # (PUT/PATCH; a create can only conflict by already existing), 429 and 500 on any.
    kube_api.fail(409, 100_000, methods=("PUT", "PATCH"), probability=0.08)
    for status in (429, 500):
        kube_api.fail(status, 100_000, methods=("POST", "PUT", "PATCH"), probability=0.09)
    settings = KubeSettings(
        enabled=True, kubeconfig=str(kube_api.kubeconfig(tmp_path / "kubeconfig", NS)), namespaces=(NS,),
        reporting_instance="podmortem-aggregator-0", client=ClientBudget(backoff_initial=0.01, backoff_max=0.05),
    )  # fmt: skip
    agg = Aggregator(
        AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir="", quorum_timeout=600),
        registry=CollectorRegistry(), kube_settings=settings,
    )  # fmt: skip
    await agg.start()
    try:
        await eventually(lambda: kube_api.emulator.open_watches >= 1, "watching")
        for name in JOBS:
            for w in range(3):
                pod = f"{name}-worker-{w}"
                if pod != roots[name]:  # the victims' kubelets report first, a second earlier
                    kube_api.change(
                        PODS, NS, pod, terminated(1, message=VICTIM_MESSAGE, finished="2026-11-21T15:06:09Z")
                    )
            kube_api.break_watches()  # the watch is cut mid-incident: resumed from its last version
            kube_api.change(PODS, NS, roots[name], terminated(1, message=ROOT_MESSAGE))
        await eventually(lambda: all(published(kube_api, j) for j in JOBS), "every verdict published", within=60)
    finally:
        # The stop path drains the publish queue (retries included): anything still retrying lands
        # before it returns. The grace bounds a hang; it is no timing assertion.
        await agg.stop(grace=30)

    served = sum(f.served for f in kube_api.emulator.faults)
    writes = sum(1 for method, _ in kube_api.requests() if method in ("POST", "PUT", "PATCH"))
    assert served >= 5 and 0.1 < served / writes < 0.35, (served, writes)  # the bad day happened
    events = Counter(
        (e["involvedObject"]["kind"], e["involvedObject"]["name"])
        for e in kube_api.list("v1/events", NS)
        if e["type"] == "Warning"
    )
    for name in JOBS:
        stored = kube_api.get(PYTORCHJOBS, NS, name)
        assert stored is not None
        verdict = json.loads(stored["metadata"]["annotations"][VERDICT_ANNOTATION])
        assert (verdict["pod"], verdict["category"], verdict["revision"]) == (roots[name], "user_code", 1)
        conditions = stored["status"]["conditions"]
        assert conditions[: len(CONTROLLER_CONDITIONS)] == CONTROLLER_CONDITIONS
        assert [c["type"] for c in conditions].count(ROOT_CAUSE_CONDITION) == 1
        root_pod = kube_api.get(PODS, NS, roots[name])
        assert root_pod is not None and root_pod["metadata"]["annotations"][VERDICT_ANNOTATION]
        assert events[("PyTorchJob", name)] == 1 and events[("Pod", roots[name])] == 1
    assert sum(events.values()) == 2 * len(JOBS)
