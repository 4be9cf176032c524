"""The hold desk on the Kubernetes emulator: who may write a pod's condition, and that it is written once.

The real incident book, hold desk and Kubernetes writer against the emulator; holds are asked of the desk
directly (the gRPC side is tests/e2e/test_conditions_kube.py). A member's membership is verified once
the pod watch placed its pod in the job (`pod_seen`); conditions are written only for verified members,
only while the replica may act (holds the Lease), once, and a condition found on the pod counts as
written (an aggregator restarted between two holds).
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import NS, make_kube, seed_pytorchjob

from podmortem.aggregator.decisions import Term
from podmortem.aggregator.holding import HoldDesk
from podmortem.aggregator.incidents import IncidentBook, MemberKey
from podmortem.aggregator.kube.podconditions import PodConditionWriter
from podmortem.aggregator.metrics import Metrics
from podmortem.aggregator.running import make_decide
from podmortem.core.model import ErrorRecord, Termination
from podmortem.core.podstatus import snapshot
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb

GLOO = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [10.0.0.11]:29500"


def register(book: IncidentBook, pod: str) -> MemberKey:
    reg = pb.Register(job=pb.JobRef(namespace=NS, name="mixtral-cpt", kind="PyTorchJob"), pod=pod, holds=True)
    return book.register(reg)


def failed(book: IncidentBook, key: MemberKey, message: str) -> None:
    book.ingest(
        key, make_event(error_to_pb(ErrorRecord(message=message, exception_type="RuntimeError")), f"{key.pod}/e")
    )
    book.ingest(key, make_event(termination_to_pb(Termination(exit_code=1, reason="Error")), f"{key.pod}/t"))


def patches(api: EmulatorHandle) -> list[str]:
    return [path for method, path in api.requests() if method == "PATCH" and path.endswith("/status")]


async def desk_for(api: EmulatorHandle, tmp_path: Path, **kwargs: Any) -> tuple[IncidentBook, HoldDesk, Any]:
    kube = make_kube(api, tmp_path)
    book = IncidentBook(make_decide(), lambda d: None, quorum_timeout=600)
    desk = HoldDesk(book, make_decide(), PodConditionWriter(kube).write, peer_wait=0.5, **kwargs)
    return book, desk, kube


async def test_written_once_for_a_verified_member(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    _, pods = seed_pytorchjob(kube_api, workers=2)
    book, desk, kube = await desk_for(kube_api, tmp_path)
    keys = [register(book, p) for p in pods]
    for key in keys:
        desk.pod_seen(key, snapshot(kube_api.get(PODS, NS, key.pod) or {}))  # the pod watch: membership verified
    failed(book, keys[0], GLOO)
    first = await desk.hold(keys[0], pb.Hold(seq=1, timeout_seconds=5))
    again = await desk.hold(keys[0], pb.Hold(seq=2, timeout_seconds=5))  # a reconnect: the same answer
    kube.close()
    assert (first.outcome, first.condition_type) == (pb.HoldReply.WRITTEN, "podmortem.io/Victim")
    assert (again.seq, again.outcome, again.condition_type) == (2, pb.HoldReply.WRITTEN, "podmortem.io/Victim")
    assert len(patches(kube_api)) == 1  # never rewritten
    conditions = (kube_api.get(PODS, NS, pods[0]) or {})["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["podmortem.io/Victim"]


async def test_not_written_for_a_member_the_api_did_not_place_in_the_job(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    # A pod registers as a member of a job the pod watch never placed it in (the notebook attack).
    _, pods = seed_pytorchjob(kube_api, workers=2)
    book, desk, kube = await desk_for(kube_api, tmp_path)
    root, key = register(book, pods[1]), register(book, pods[0])
    failed(book, root, "ValueError: label 7 out of range")
    failed(book, key, GLOO)
    reply = await desk.hold(key, pb.Hold(seq=1, timeout_seconds=5))
    kube.close()
    assert reply.outcome == pb.HoldReply.NOT_WRITTEN and "not verified" in reply.detail
    assert patches(kube_api) == []


class Switch:
    """A fence this test turns, as a `LeaderElector` does: this replica holds the Lease while `leading`."""

    def __init__(self, leading: bool) -> None:
        self.leading = leading

    async def confirm(self) -> Term | None:
        return Term("replica-a", 1) if self.leading else None

    def may_act(self) -> bool:
        return self.leading


async def test_not_written_by_a_replica_that_may_not_act(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    _, pods = seed_pytorchjob(kube_api, workers=2)
    lease = Switch(leading=False)
    book, desk, kube = await desk_for(kube_api, tmp_path, fence=lease)
    keys = [register(book, p) for p in pods]
    for key in keys:
        desk.pod_seen(key, snapshot(kube_api.get(PODS, NS, key.pod) or {}))
    failed(book, keys[0], GLOO)
    refused = await desk.hold(keys[0], pb.Hold(seq=1, timeout_seconds=5))
    assert refused.outcome == pb.HoldReply.NOT_WRITTEN and "Lease" in refused.detail
    assert patches(kube_api) == []
    lease.leading = True  # the Lease again: a later hold of the same pod may write it
    written = await desk.hold(keys[0], pb.Hold(seq=2, timeout_seconds=5))
    kube.close()
    assert written.outcome == pb.HoldReply.WRITTEN


async def hold_with_a_victim_on(
    kube_api: EmulatorHandle, tmp_path: Path, marked: int, root: str, **kwargs: Any
) -> pb.HoldReply:
    """Two workers, the pod of worker `marked` already carrying podmortem.io/Victim; worker 1 fails with
    `root`, worker 0 with a gloo echo; the reply to worker `marked`'s hold."""
    _, pods = seed_pytorchjob(kube_api, workers=2)
    victim = {"type": "podmortem.io/Victim", "status": "True", "reason": "Victim", "message": "earlier"}
    kube_api.change(PODS, NS, pods[marked], {"status": {"conditions": [victim]}})
    book, desk, kube = await desk_for(kube_api, tmp_path, **kwargs)
    keys = [register(book, p) for p in pods]
    for key in keys:
        desk.pod_seen(key, snapshot(kube_api.get(PODS, NS, key.pod) or {}))
    failed(book, keys[1], root)
    failed(book, keys[0], GLOO)
    reply = await desk.hold(keys[marked], pb.Hold(seq=1, timeout_seconds=5))
    kube.close()
    return reply


async def test_a_condition_found_on_the_pod_is_not_written_again(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    # Written by an aggregator before its restart: this one finds it on the pod, decides the same, and answers
    # from it.
    reply = await hold_with_a_victim_on(kube_api, tmp_path, 0, "ValueError: label 7 out of range")
    assert (reply.outcome, reply.condition_type) == (pb.HoldReply.WRITTEN, "podmortem.io/Victim")
    assert patches(kube_api) == []


async def test_a_forged_condition_that_disagrees_is_never_called_ours(
    kube_api: EmulatorHandle, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Someone with pods/status rights marks the root a Victim (its failure would not count against the
    # Job's retry budget). The desk decides otherwise: the hold is not answered "written", nothing is written
    # beside it, and the forgery is logged and counted.
    metrics = Metrics(CollectorRegistry())
    ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    reply = await hold_with_a_victim_on(kube_api, tmp_path, 1, ecc, metrics=metrics)
    assert reply.outcome == pb.HoldReply.NOT_WRITTEN and "did not write" in reply.detail
    assert patches(kube_api) == []
    assert metrics.registry.get_sample_value("podmortem_foreign_conditions_total", {"type": "Victim"}) == 1.0
    assert "which podmortem did not write" in caplog.text


async def test_a_failed_write_is_not_written_and_a_later_hold_tries_again(
    kube_api: EmulatorHandle, tmp_path: Path
) -> None:
    _, pods = seed_pytorchjob(kube_api, workers=2)
    book, desk, kube = await desk_for(kube_api, tmp_path)
    keys = [register(book, p) for p in pods]
    for key in keys:
        desk.pod_seen(key, snapshot(kube_api.get(PODS, NS, key.pod) or {}))
    failed(book, keys[0], GLOO)
    kube_api.fail(403, 1, methods=("PATCH",), plural="pods", subresource="status")  # forbidden: permanent
    refused = await desk.hold(keys[0], pb.Hold(seq=1, timeout_seconds=5))
    assert refused.outcome == pb.HoldReply.NOT_WRITTEN and "write failed" in refused.detail
    written = await asyncio.wait_for(desk.hold(keys[0], pb.Hold(seq=2, timeout_seconds=5)), 30)
    kube.close()
    assert written.outcome == pb.HoldReply.WRITTEN


async def test_a_pod_being_deleted_and_not_held_gets_none(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    # The Job controller deletes the pods after FailJob (or a JobSet restarts): it has acted already, and a
    # big job torn down at once must not cost a write per pod. Nor is a later hold answered with one.
    _, pods = seed_pytorchjob(kube_api, workers=2)
    book, desk, kube = await desk_for(kube_api, tmp_path)
    keys = [register(book, p) for p in pods]
    failed(book, keys[1], "ValueError: label 7 out of range")
    failed(book, keys[0], GLOO)
    for key in keys:
        pod = kube_api.get(PODS, NS, key.pod) or {}
        pod["metadata"]["deletionTimestamp"] = "2026-11-25T19:00:00Z"
        pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 143}}
        desk.pod_seen(key, snapshot(pod))
    await desk.settle()
    reply = await desk.hold(keys[0], pb.Hold(seq=1, timeout_seconds=5))
    kube.close()
    assert reply.outcome == pb.HoldReply.NOT_WRITTEN and "deleted" in reply.detail
    assert patches(kube_api) == []


async def decisions_for_holds_apart(decide_seconds: float, apart: float, victims: int = 5) -> int:
    """How many verdicts the desk computes for `victims` echoes holding one after another, `apart` seconds
    of loop time between them, when one decision takes `decide_seconds` (by the desk's timer)."""
    calls = []
    engine = make_decide()
    readings = itertools.count()

    def counted_decide(incident: Any) -> Any:
        calls.append(1)
        return engine(incident)

    def timer() -> float:  # read before and after each decision: `decide_seconds` apart
        i = next(readings)
        return (i // 2) * 10.0 + (i % 2) * decide_seconds

    async def nowhere(namespace: str, pod: str, condition: Any) -> None:
        return None

    book = IncidentBook(make_decide(), lambda d: None, quorum_timeout=600)
    desk = HoldDesk(book, counted_decide, nowhere, peer_wait=0.5, timer=timer)
    keys = [register(book, f"w-{i}") for i in range(victims + 1)]
    for key in keys:
        desk.pod_seen(key, snapshot({"metadata": {"name": key.pod, "namespace": NS}, "status": {"phase": "Running"}}))
    failed(book, keys[0], "ValueError: label 7 out of range")
    for key in keys[1:]:
        failed(book, key, GLOO)
    for key in keys[1:]:
        reply = await desk.hold(key, pb.Hold(seq=1, timeout_seconds=15))
        assert reply.condition_type == "podmortem.io/Victim"
        await asyncio.sleep(apart)
    return len(calls)


@pytest.mark.looptime
async def test_a_member_that_makes_the_engine_fail_is_set_aside_as_the_book_does() -> None:
    # The desk runs the engine as the book does (`Deciding.safe_decide`): a member whose data makes it fail
    # is set aside and the others' conditions are still decided, not lost with the exception.
    engine = make_decide()

    def fragile(incident: Any) -> Any:
        if any(m.error is not None and "poison" in m.error.message for m in incident.members):
            raise ValueError("the engine choked on a member")
        return engine(incident)

    async def nowhere(namespace: str, pod: str, condition: Any) -> None:
        return None

    book = IncidentBook(make_decide(), lambda d: None, quorum_timeout=600)
    desk = HoldDesk(book, fragile, nowhere, peer_wait=0.5)
    keys = [register(book, f"w-{i}") for i in range(4)]
    for key in keys:
        desk.pod_seen(key, snapshot({"metadata": {"name": key.pod, "namespace": NS}, "status": {"phase": "Running"}}))
    failed(book, keys[0], "ValueError: label 7 out of range")
    failed(book, keys[1], "RuntimeError: poison")
    for key in keys[2:]:
        failed(book, key, GLOO)
    reply = await desk.hold(keys[2], pb.Hold(seq=1, timeout_seconds=15))
    assert reply.outcome == pb.HoldReply.WRITTEN and reply.condition_type == "podmortem.io/Victim"


@pytest.mark.looptime
async def test_a_verdict_that_takes_long_to_decide_serves_holds_for_longer() -> None:
    # Victims holding 0.3 s apart: a quick decision is made again for each (it is reused for 0.25 s); one
    # that takes 0.15 s is reused for three times as long (0.45 s), so a 4,096-member job's holds do not
    # keep the engine busy.
    assert await decisions_for_holds_apart(0.01, 0.3) == 5
    assert await decisions_for_holds_apart(0.15, 0.3) == 3


async def test_a_pod_the_watch_shows_terminal_gets_no_condition(kube_api: EmulatorHandle, tmp_path: Path) -> None:
    # The root holds and waits for its peers; its pod turns Failed meanwhile (its sidecar's hold ran out, or
    # it re-sent a hold with a full budget after an aggregator restart). The Job controller has acted on the
    # pod as it was: the condition decided afterwards is never written, nor by a later hold.
    _, pods = seed_pytorchjob(kube_api, workers=3)
    book, desk, kube = await desk_for(kube_api, tmp_path)
    keys = [register(book, p) for p in pods]
    for key in keys:
        desk.pod_seen(key, snapshot(kube_api.get(PODS, NS, key.pod) or {}))
        desk.registered(key, holds=True)
    root = keys[1]
    failed(book, root, "RuntimeError: CUDA error: uncorrectable ECC error encountered")  # retryable
    failed(book, keys[0], GLOO)  # a victim; keys[2] says nothing yet, so the root waits for it
    holding = asyncio.get_running_loop().create_task(desk.hold(root, pb.Hold(seq=1, timeout_seconds=5)))
    await asyncio.sleep(0.1)
    ended = kube_api.get(PODS, NS, root.pod) or {}
    ended["status"]["phase"] = "Failed"
    desk.pod_seen(root, snapshot(ended))
    reply = await asyncio.wait_for(holding, 30)
    again = await desk.hold(root, pb.Hold(seq=2, timeout_seconds=5))
    kube.close()
    assert reply.outcome == pb.HoldReply.NOT_WRITTEN and "terminal" in reply.detail
    assert again.outcome == pb.HoldReply.NOT_WRITTEN
    assert patches(kube_api) == []
