"""The aggregator reading failed pods' logs itself (kube/logs.py), as documented: the `--pod-log-bytes`
bound and its 0 (never read logs), at most `MAX_CONCURRENT` (8) reads at once, and what the settings
refuse. Real pod watch, official client, the API emulator; the stand-in engine only names who ended."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.common import eventually
from support.kube_emulator import PODS, EmulatorHandle
from support.kube_objects import NS, make_kube, seed_pytorchjob, terminated

from podmortem.aggregator.config import KubeSettings
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import IncidentBook
from podmortem.aggregator.kube.logs import MAX_CONCURRENT
from podmortem.aggregator.kube.podwatch import PodWatch
from podmortem.core.model import Incident, Verdict
from podmortem.k8s.backoff import Backoff

JOB = "mixtral-cpt"


def who_ended(incident: Incident) -> Verdict:
    return Verdict(pod=incident.members[0].pod, category=None, retryable=None, summary="ended")


@dataclass
class Watching:
    watch: PodWatch
    book: IncidentBook
    decisions: list[Decision]

    def incident(self) -> Incident | None:
        return self.book.incident((NS, JOB, ""))


@pytest.fixture
async def watching(kube_api: EmulatorHandle, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Watching]:
    """A pod watch with `--pod-log-bytes` = the test's parameter."""
    kube = make_kube(kube_api, tmp_path)
    decisions: list[Decision] = []
    book = IncidentBook(who_ended, decisions.append, quorum_timeout=600)
    settings = KubeSettings(
        namespaces=(NS,), pod_selectors=("training.kubeflow.org/job-name",), pod_log_bytes=request.param
    )
    watch = PodWatch(kube, book, settings, backoff=Backoff(0.001, 0.01, jitter=0))
    task = asyncio.create_task(watch.run())
    try:
        yield Watching(watch, book, decisions)
    finally:
        kube_api.hold_logs(False)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        kube.close()


def log_reads(api: EmulatorHandle) -> list[str]:
    return [path for _, path in api.requests() if "/log?" in path]


@pytest.mark.parametrize("watching", [1000], indirect=True)
async def test_a_log_tail_is_bounded_by_pod_log_bytes(kube_api: EmulatorHandle, watching: Watching) -> None:
    _, pods = seed_pytorchjob(kube_api, workers=1)
    kube_api.set_log(NS, pods[0], "pytorch", "".join(f"[rank0]: step {i} loss 1.{i:04d}\n" for i in range(5000)))
    await eventually(lambda: watching.incident() is not None, "the member known")
    kube_api.change(PODS, NS, pods[0], terminated(1))
    await eventually(lambda: watching.decisions, "a verdict")
    [member] = watching.decisions[0].incident.members
    tail = member.log_tail.encode()
    assert 0 < len(tail) <= 1000, len(tail)
    assert member.log_tail.endswith("[rank0]: step 4999 loss 1.4999\n")
    assert member.log_tail.startswith("[rank0]: step ")  # cut at a line start
    # On the wire too: whole lines within a bounded size. The API keeps the first limitBytes of the lines
    # tailLines selects, so an answer that fills the bound is asked again for fewer lines.
    reads = log_reads(kube_api)
    assert reads and all("limitBytes=4000" in read for read in reads)
    assert "tailLines=2000" in reads[0] and len(reads) <= 6


@pytest.mark.parametrize("watching", [0], indirect=True)
async def test_pod_log_bytes_0_never_reads_a_log(kube_api: EmulatorHandle, watching: Watching) -> None:
    _, pods = seed_pytorchjob(kube_api, workers=2)
    for pod in pods:
        kube_api.set_log(NS, pod, "pytorch", "[rank0]: ValueError: bad label\n")
    await eventually(lambda: watching.incident() is not None, "the members known")
    for pod in pods:
        kube_api.change(PODS, NS, pod, terminated(1))
    # The verdict is the signal: a member's log is read before its termination is ingested, so by now
    # any read would have been made.
    await eventually(lambda: watching.decisions, "a verdict")
    assert log_reads(kube_api) == []
    assert all(m.log_tail == "" for m in watching.decisions[0].incident.members)


@pytest.mark.parametrize("watching", [4096], indirect=True)
async def test_at_most_8_log_reads_at_once(kube_api: EmulatorHandle, watching: Watching) -> None:
    workers = MAX_CONCURRENT + 4
    _, pods = seed_pytorchjob(kube_api, workers=workers)
    for pod in pods:
        kube_api.set_log(NS, pod, "pytorch", f"[rank0]: RuntimeError: {pod} failed\n")
    await eventually(lambda: watching.incident() is not None, "the members known")
    observed = watching.watch.observed
    kube_api.hold_logs()
    for pod in pods:
        kube_api.change(PODS, NS, pod, terminated(1))
    # Every termination seen: each pod's read was queued as its termination was observed, and one turn
    # of the loop later every queued read has run up to the limit (the signal, not a wait).
    await eventually(lambda: watching.watch.observed >= observed + workers, "every termination seen")
    await asyncio.sleep(0)
    logs = watching.watch.logs
    assert logs is not None
    await eventually(lambda: kube_api.emulator.log_readers > 0, "reads reaching the API")
    assert logs.reads == MAX_CONCURRENT  # the others wait for a slot
    assert kube_api.emulator.log_readers <= MAX_CONCURRENT
    assert watching.decisions == []  # quorum waits for the logs
    kube_api.hold_logs(False)
    await eventually(lambda: watching.decisions, "a verdict")
    assert logs.reads == workers and len(log_reads(kube_api)) == workers
    assert all(m.log_tail for m in watching.decisions[0].incident.members)


@pytest.mark.parametrize("value", ["-1", "1048577"])
def test_the_aggregator_refuses_pod_log_bytes_out_of_bounds(value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "podmortem.cli", "aggregator", "--pod-log-bytes", value],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "(or --pod-log-bytes) = " in done.stderr and "must be between 0 and 1048576" in done.stderr
