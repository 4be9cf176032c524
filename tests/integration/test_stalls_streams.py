"""Capture requests over real gRPC streams: the aggregator writes a `CaptureRequest` onto the streams its
sidecars already have when every member went quiet, publishes a provisional verdict file once they
answered, keeps the stall's first moment however often it asks again, and keeps the activity, captures
and the stall's verdict in its state file across a restart, after which that verdict ends as a live
one does (or is withdrawn when nothing of the job comes back)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from support.common import eventually
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import JOB, NS, make_kube, seed_pytorchjob, terminated
from support.streams import STACK, T0, Sidecar, answer, quiet

from podmortem.aggregator.config import AggregatorConfig, KubeSettings
from podmortem.aggregator.incidents import MemberKey
from podmortem.aggregator.kube.leader import LeaderElector, LeaseTimings
from podmortem.aggregator.running import Aggregator
from podmortem.protocol.v1 import collector_pb2 as pb


def serving(
    tmp_path: Path, clock: Callable[[], float] = time.time, kube: KubeSettings | None = None, **desk: float
) -> Aggregator:
    """An aggregator with a verdict directory and a state file under `tmp_path` (not started), watching pods
    with `kube`. `desk`: the stall desk's timings, set before `start` takes up the stalls the state file kept."""
    config = AggregatorConfig(
        listen="127.0.0.1:0",
        metrics_listen="",
        verdict_dir=str(tmp_path / "verdicts"),
        state_dir=str(tmp_path / "state"),
    )
    agg = Aggregator(config, registry=CollectorRegistry(), clock=clock, kube_settings=kube)
    for name, value in desk.items():
        assert hasattr(agg.stalls, name), name
        setattr(agg.stalls, name, value)
    return agg


@contextlib.asynccontextmanager
async def running(agg: Aggregator) -> AsyncIterator[Aggregator]:
    await agg.start()
    try:
        yield agg
    finally:
        await agg.stop(grace=1)


@pytest.fixture
async def aggregator(tmp_path: Path) -> AsyncIterator[Aggregator]:
    async with running(serving(tmp_path)) as agg:
        yield agg


def verdict(tmp_path: Path) -> dict[str, Any]:
    """The job's one verdict file, as last written (every revision replaces it)."""
    [path] = (tmp_path / "verdicts").glob("*.json")
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


async def test_a_stalled_job_is_asked_over_its_streams_and_gets_a_provisional_verdict(
    aggregator: Aggregator, tmp_path: Path
) -> None:
    sidecars = [Sidecar(aggregator.port, f"llm-worker-{i}", i) for i in range(2)]
    try:
        for s in sidecars:
            registered = await s.register()
            assert registered.captures
        await sidecars[0].send(quiet("llm-worker-0"))
        await sidecars[1].send(quiet("llm-worker-1"))
        # Both streams get the request, pushed by the aggregator on its own (nothing was asked).
        requests = [await s.request() for s in sidecars]
        assert {r.trigger for r in requests} == {"stall"} and requests[0].request_id == requests[1].request_id
        for i, s in enumerate(sidecars):
            await s.send(answer(f"llm-worker-{i}", requests[i], i))
        files = tmp_path / "verdicts"
        await eventually(lambda: any(files.glob("*.json")), "a provisional verdict file")
        [path] = files.glob("*.json")
        doc = json.loads(path.read_text())
        assert (doc["provisional"], doc["final"], doc["closed_by"]) == (True, False, "stall")
        assert doc["incident"]["opened_at"] is None
        assert doc["incident"]["stalled_at"] <= doc["decided_at"]  # first seen, then asked: the page draws it
        category = doc["verdict"]["category"] or "none"
        sample = aggregator.metrics.registry.get_sample_value
        assert sample("podmortem_provisional_verdicts_total", {"category": category}) == 1
        assert sample("podmortem_capture_requests_total", {"trigger": "stall"}) == 2
    finally:
        for s in sidecars:
            await s.close()
    # Durable: a restarted aggregator replays the activity and the captures into its book.
    await aggregator.stop(grace=1)
    again = Aggregator(
        AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir="", state_dir=str(tmp_path / "state")),
        registry=CollectorRegistry(),
    )
    await again.start()
    try:
        job = ("ml", "llm", "0")
        assert again.book.stalled(job)
        incident = again.book.incident(job)
        assert incident is not None
        stacks = {m.pod: [c.stack for c in m.captures] for m in incident.members}
        assert stacks == {"llm-worker-0": [""], "llm-worker-1": [STACK]}
    finally:
        await again.stop(grace=1)


async def test_a_sidecar_that_does_not_answer_captures_gets_no_request(aggregator: Aggregator) -> None:
    plain, capturing = (
        Sidecar(aggregator.port, "llm-worker-0", 0, captures=False),
        Sidecar(aggregator.port, "llm-worker-1", 1),
    )
    try:
        await plain.register()
        await capturing.register()
        await plain.send(quiet("llm-worker-0"))
        await capturing.send(quiet("llm-worker-1"))
        assert (await capturing.request()).trigger == "stall"
        await plain.call.done_writing()
        reply = await asyncio.wait_for(plain.call.read(), 5)
        assert reply is grpc.aio.EOF  # its stream ends with nothing pushed on it
    finally:
        await capturing.close()
        await plain.channel.close()


async def test_a_stall_asked_again_within_the_grace_keeps_the_moment_it_was_first_seen(tmp_path: Path) -> None:
    # The job moves and is quiet again within the grace (a silent start-up, then the hang): its sidecars are
    # asked again, and every provisional verdict on that stall says when it was first seen, not when a round
    # of captures came back. The aggregator's clock is the test's: each moment is exact.
    now = [time.time()]
    async with running(serving(tmp_path, clock=lambda: now[0])) as agg:
        sidecars = [Sidecar(agg.port, f"llm-worker-{i}", i) for i in range(2)]
        try:
            for s in sidecars:
                await s.register()
            seen = now[0]
            for i, s in enumerate(sidecars):
                await s.send(quiet(f"llm-worker-{i}"))
            requests = [await s.request() for s in sidecars]
            now[0] += 5  # the captures take a while
            for i, s in enumerate(sidecars):
                await s.send(answer(f"llm-worker-{i}", requests[i], i))
            await eventually(lambda: any((tmp_path / "verdicts").glob("*.json")), "the stall's verdict")
            first = verdict(tmp_path)
            assert (first["closed_by"], first["revision"], first["decided_at"]) == ("stall", 1, seen + 5)
            now[0] += 2
            await sidecars[0].send(quiet("llm-worker-0", n=2, quiet=False))  # moves ...
            await sidecars[0].send(quiet("llm-worker-0", n=3))  # ... and is quiet again, within the grace
            again = [await s.request() for s in sidecars]
            assert [r.request_id for r in again] == ["ml:llm:0/stall/2"] * 2
            now[0] += 5
            for i, s in enumerate(sidecars):
                await s.send(answer(f"llm-worker-{i}", again[i], i, n=2))
            await eventually(lambda: verdict(tmp_path)["revision"] == 2, "the second round's verdict")
            second = verdict(tmp_path)
            assert (second["closed_by"], second["decided_at"]) == ("stall", seen + 12)
            assert second["incident"]["stalled_at"] == first["incident"]["stalled_at"]  # asking again moves nothing
            assert first["incident"]["stalled_at"] == seen  # when every member was seen quiet
            assert agg.metrics.registry.get_sample_value("podmortem_stall_false_alarms_total") == 0
        finally:
            for s in sidecars:
                await s.close()


async def test_a_stall_whose_captures_were_out_at_a_restart_keeps_the_moment_its_members_went_quiet(
    tmp_path: Path,
) -> None:
    # The aggregator stops while its capture round is out: nothing was published, and the state file kept
    # the members' quiet activity. Restarted, it asks again once the sidecars are back, and the verdict says
    # when the stall began (the last member's quiet activity, sent at T0), not when it was asked again.
    async with running(serving(tmp_path)) as agg:
        sidecars = [Sidecar(agg.port, f"llm-worker-{i}", i) for i in range(2)]
        try:
            for s in sidecars:
                await s.register()
            for i, s in enumerate(sidecars):
                await s.send(quiet(f"llm-worker-{i}"))
            assert [(await s.request()).request_id for s in sidecars] == ["ml:llm:0/stall/1"] * 2
        finally:
            for s in sidecars:
                await s.close()
    assert not any((tmp_path / "verdicts").glob("*.json"))
    async with running(serving(tmp_path, rejoin_delay=0.2)) as agg:
        sidecars = [Sidecar(agg.port, f"llm-worker-{i}", i) for i in range(2)]
        try:
            for s in sidecars:
                await s.register()
            requests = [await s.request() for s in sidecars]
            for i, s in enumerate(sidecars):
                await s.send(answer(f"llm-worker-{i}", requests[i], i, n=2))
            await eventually(lambda: any((tmp_path / "verdicts").glob("*.json")), "the stall's verdict")
        finally:
            for s in sidecars:
                await s.close()
        doc = verdict(tmp_path)
        assert (doc["closed_by"], doc["incident"]["stalled_at"]) == ("stall", T0)


def job_sidecars(port: int, captures: bool = True) -> list[Sidecar]:
    """The sidecars of the emulator's two-worker PyTorchJob (`seed_pytorchjob`)."""
    sidecars = [Sidecar(port, f"{JOB}-worker-{i}", i, captures=captures) for i in range(2)]
    for i, s in enumerate(sidecars):
        job = pb.JobRef(namespace=NS, name=JOB, kind="PyTorchJob")
        s.reg = pb.Register(job=job, pod=f"{JOB}-worker-{i}", rank=i, world_size_hint=2, captures=captures)
    return sidecars


async def stalled(sidecars: list[Sidecar], tmp_path: Path) -> dict[str, Any]:
    """The sidecars register and go quiet; those that answer captures answer the request that brings. The
    stall's provisional verdict file, once published."""
    for s in sidecars:
        await s.register()
    for s in sidecars:
        await s.send(quiet(s.reg.pod))
    for i, s in enumerate(sidecars):
        if s.reg.captures:
            await s.send(answer(s.reg.pod, await s.request(), i))
    await eventually(lambda: any((tmp_path / "verdicts").glob("*.json")), "the stall's verdict")
    stall = verdict(tmp_path)
    assert (stall["closed_by"], stall["provisional"]) == ("stall", True)
    return stall


async def stall_kept(tmp_path: Path, captures: bool, kube_job: bool = False) -> dict[str, Any]:
    """A first aggregator publishes a stall's provisional verdict (with `captures` false, nobody is asked:
    the verdict comes at once) and stops; its state file keeps it. The verdict file, as published.
    `kube_job`: the sidecars are the pods of the emulator's PyTorchJob (`job_sidecars`), not ml/llm."""
    async with running(serving(tmp_path)) as agg:
        if kube_job:
            sidecars = job_sidecars(agg.port, captures)
        else:
            sidecars = [Sidecar(agg.port, f"llm-worker-{i}", i, captures=captures) for i in range(2)]
        try:
            return await stalled(sidecars, tmp_path)
        finally:
            for s in sidecars:
                await s.close()


async def test_a_restored_stall_whose_sidecars_answer_no_captures_is_withdrawn_once_the_job_moves(
    tmp_path: Path,
) -> None:
    # The sidecars answer no capture requests (none is asked, before or after the restart): the stall
    # verdict the state file kept still ends as a live one does, withdrawn once the job moved and did not
    # fail within the grace.
    stall = await stall_kept(tmp_path, captures=False)
    async with running(serving(tmp_path, resume_grace=0.5)) as agg:
        assert agg.book.stall_published(("ml", "llm", "0"))
        sidecars = [Sidecar(agg.port, f"llm-worker-{i}", i, captures=False) for i in range(2)]
        try:
            for s in sidecars:
                await s.register()
            await sidecars[1].send(quiet("llm-worker-1", n=2, quiet=False))
            await eventually(lambda: verdict(tmp_path)["closed_by"] == "resumed", "the stall withdrawn")
        finally:
            for s in sidecars:
                await s.close()
        doc = verdict(tmp_path)
        assert (doc["revision"], doc["provisional"], doc["incident"]["stalled_at"]) == (2, True, None)
        assert stall["incident"]["stalled_at"] is not None
        assert "made progress again" in doc["verdict"]["summary"]
        assert agg.metrics.registry.get_sample_value("podmortem_stall_false_alarms_total") == 1


async def test_a_restored_stall_of_which_nothing_comes_back_is_withdrawn_unconfirmed(tmp_path: Path) -> None:
    # The job's pods were deleted while the aggregator was down: no sidecar reconnects, and no pod watch
    # sees one. The stall verdict the state file kept does not stay for ever: withdrawn at the rejoin wait.
    await stall_kept(tmp_path, captures=True)
    async with running(serving(tmp_path, rejoin_wait=1.0)) as agg:
        await eventually(lambda: verdict(tmp_path)["closed_by"] == "resumed", "the stall withdrawn")
        doc = verdict(tmp_path)
        assert (doc["revision"], doc["incident"]["stalled_at"]) == (2, None)
        assert "nothing of the job was heard within 1 s" in doc["verdict"]["summary"]
        assert agg.metrics.registry.get_sample_value("podmortem_stall_false_alarms_total") == 0


async def test_a_restored_stall_whose_pods_the_pod_watch_sees_running_stays_until_it_ends(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # No sidecar comes back, but the pod watch (against the API emulator) sees the job's pods running: the
    # stall may well go on, so its verdict stays past the rejoin wait, and ends as a live one does: here the
    # pods are deleted (a failure), and the verdict on it still says when the job stalled.
    seed_pytorchjob(kube_api, workers=2)
    stall = await stall_kept(tmp_path, captures=False, kube_job=True)
    job = (NS, JOB, "")
    async with running(serving(tmp_path, kube=watching(kube_api, tmp_path), rejoin_wait=1.0)) as agg:
        pods = [MemberKey(job, f"{JOB}-worker-{i}") for i in range(2)]
        await eventually(lambda: all(agg.book.is_watched(k) for k in pods), "the pods seen by the pod watch")
        await asyncio.sleep(1.5)  # past the rejoin wait
        assert (verdict(tmp_path)["closed_by"], verdict(tmp_path)["revision"]) == ("stall", 1)
        for i in range(2):
            kube_api.remove(PODS, NS, f"{JOB}-worker-{i}")
        await eventually(lambda: verdict(tmp_path)["final"], "the verdict on the deleted pods")
        doc = verdict(tmp_path)
        assert (doc["closed_by"], doc["provisional"]) == ("quorum", False)
        assert doc["incident"]["stalled_at"] == stall["incident"]["stalled_at"] is not None


async def test_a_restored_stall_is_not_withdrawn_while_its_aggregator_stands_by(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # Under leader election a standby replica replays the state file but hears no sidecar (its streams are
    # refused): its wait for the job to be heard from starts once it leads.
    await stall_kept(tmp_path, captures=False)
    kube = make_kube(kube_api, tmp_path)
    timings = LeaseTimings(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)
    other = LeaderElector(kube, NS, "podmortem-aggregator", "other", timings)
    assert await other.acquire()
    holding = asyncio.create_task(other.hold())
    agg = serving(tmp_path, rejoin_wait=0.5)
    standby = asyncio.create_task(agg.start(LeaderElector(kube, NS, "podmortem-aggregator", "me", timings)))
    try:
        await asyncio.sleep(1.5)  # three rejoin waits, standing by
        assert not standby.done() and agg.book.stall_published(("ml", "llm", "0"))
        holding.cancel()
        await asyncio.gather(holding, return_exceptions=True)
        await other.release()
        assert await asyncio.wait_for(standby, 10)  # it leads: nothing of the job is heard within the wait
        await eventually(lambda: verdict(tmp_path)["closed_by"] == "resumed", "the stall withdrawn")
    finally:
        holding.cancel()
        if standby.done() and not standby.cancelled() and standby.exception() is None:
            await agg.stop(grace=1)
        else:
            standby.cancel()
            await asyncio.gather(standby, return_exceptions=True)
        kube.close()


def watching(kube_api: EmulatorHandle, tmp_path: Path) -> KubeSettings:
    """The aggregator's pod watch on the emulator's namespace (publishing nothing to the API)."""
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig", NS)
    return KubeSettings(enabled=True, kubeconfig=str(kubeconfig), namespaces=(NS,), publish=frozenset())


def completed() -> dict[str, Any]:
    """A pod status whose training container exited 0 (the pod Succeeded)."""
    patch = terminated(0, "Completed")
    patch["status"]["phase"] = "Succeeded"
    return patch


@contextlib.asynccontextmanager
async def watched_stall(agg: Aggregator, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The emulator job's sidecars stall, its provisional verdict out, and the pod watch saw both pods: that
    verdict file. The sidecars stay connected, saying nothing more, until the block ends."""
    sidecars = job_sidecars(agg.port)
    try:
        stall = await stalled(sidecars, tmp_path)
        pods = [MemberKey((NS, JOB, ""), s.reg.pod) for s in sidecars]
        await eventually(lambda: all(agg.book.is_watched(k) for k in pods), "the pods seen by the pod watch")
        yield stall
    finally:
        for s in sidecars:
            await s.close()


async def test_a_stalled_job_whose_pods_all_complete_has_its_provisional_verdict_withdrawn(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # Every member quiet, the stall's verdict out; then both pods complete (a long silent last step) and the
    # sidecars, still connected, say nothing more: the pod watch's word ends the stall. The job was not hung.
    seed_pytorchjob(kube_api, workers=2)
    async with running(serving(tmp_path, kube=watching(kube_api, tmp_path))) as agg:
        async with watched_stall(agg, tmp_path) as stall:
            kube_api.change(PODS, NS, f"{JOB}-worker-0", completed())
            await asyncio.sleep(0.5)
            assert verdict(tmp_path)["closed_by"] == "stall"  # one pod still runs
            kube_api.change(PODS, NS, f"{JOB}-worker-1", completed())
            await eventually(lambda: verdict(tmp_path)["closed_by"] == "resumed", "the stall withdrawn")
        doc = verdict(tmp_path)
        assert (doc["revision"], doc["provisional"], doc["incident"]["stalled_at"]) == (2, True, None)
        assert stall["incident"]["stalled_at"] is not None
        assert "every member of the job ended successfully" in doc["verdict"]["summary"]
        assert agg.metrics.registry.get_sample_value("podmortem_stall_false_alarms_total") == 1


async def test_a_stalled_job_whose_pods_fail_gets_the_verdict_on_the_failure(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # The same stall, but the pods end with a failure: no withdrawal, the verdict on it replaces the stall's.
    seed_pytorchjob(kube_api, workers=2)
    async with running(serving(tmp_path, kube=watching(kube_api, tmp_path))) as agg:
        async with watched_stall(agg, tmp_path) as stall:
            for i in range(2):
                kube_api.change(PODS, NS, f"{JOB}-worker-{i}", terminated(1))
        await eventually(lambda: verdict(tmp_path)["final"], "the verdict on the failure")
        doc = verdict(tmp_path)
        assert (doc["closed_by"], doc["revision"], doc["provisional"]) == ("quorum", 2, False)
        assert doc["incident"]["stalled_at"] == stall["incident"]["stalled_at"] is not None
        assert agg.metrics.registry.get_sample_value("podmortem_stall_false_alarms_total") == 0


async def test_a_restored_stall_whose_pods_completed_meanwhile_is_withdrawn_once_the_pod_watch_sees_them(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # The pods completed while the aggregator was down: the restarted one's pod watch lists them ended, and
    # the stall's verdict is withdrawn then, as a false alarm, not after the rejoin wait as unconfirmed.
    seed_pytorchjob(kube_api, workers=2)
    await stall_kept(tmp_path, captures=False, kube_job=True)
    for i in range(2):
        kube_api.change(PODS, NS, f"{JOB}-worker-{i}", completed())
    async with running(serving(tmp_path, kube=watching(kube_api, tmp_path), rejoin_wait=600.0)) as agg:
        await eventually(lambda: verdict(tmp_path)["closed_by"] == "resumed", "the stall withdrawn")
        doc = verdict(tmp_path)
        assert "every member of the job ended successfully" in doc["verdict"]["summary"]
        assert agg.metrics.registry.get_sample_value("podmortem_stall_false_alarms_total") == 1
