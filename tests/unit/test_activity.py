"""The activity detector: quiet after S without progress, active when it moves again, on change only."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar.activity import ActivityDetector

S = 300.0


class Pod:
    """The clock, the container's last output and its collectives' progress, as the test sets them."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.output: float | None = None
        self.collectives: object | None = None
        self.samples = 0
        self.events: list[pb.Event] = []

    async def last_output(self) -> float | None:
        return self.output

    async def completed(self) -> object | None:
        self.samples += 1
        return self.collectives

    def detector(self, *, control_plane: bool = False, **kwargs: object) -> ActivityDetector:
        completed: Callable[[], Awaitable[object | None]] | None = self.completed if control_plane else None
        return ActivityDetector(
            S,
            self.events.append,
            last_output=self.last_output,
            completed=completed,
            clock=lambda: self.now,
            pod_key="u1",
            **kwargs,  # type: ignore[arg-type]
        )

    @property
    def said(self) -> list[bool]:
        return [e.activity.quiet for e in self.events]


async def test_quiet_once_after_s_without_output_then_active_when_it_moves() -> None:
    pod = Pod()
    d = pod.detector()
    start = pod.now
    assert await d.step() == start + S  # the next moment it could be quiet: no look before
    pod.now += S - 1
    await d.step()
    assert pod.said == []
    pod.now += 1
    wake = await d.step()
    assert pod.said == [True] and wake == pod.now + min(S, 10.0)
    for _ in range(5):  # on change only
        pod.now += 10
        await d.step()
    assert pod.said == [True]
    quiet = pod.events[0]
    assert quiet.id.startswith("u1/activity/") and quiet.activity.quiet_seconds == S
    assert wire.from_ts(quiet.activity.last_progress) == start
    pod.output = pod.now - 5  # printed again, 5 s ago
    await d.step()
    assert pod.said == [True, False]
    assert pod.events[1].activity.quiet_seconds == 0.0
    assert wire.from_ts(pod.events[1].activity.last_progress) == pod.now - 5
    assert len({e.id for e in pod.events}) == 2


async def test_a_job_that_prints_is_looked_at_once_per_s() -> None:
    pod = Pod()
    d = pod.detector(control_plane=True)
    for _ in range(10):
        pod.output = pod.now
        wake = await d.step()
        assert wake == pod.output + S / 2  # the collectives' first sample is due at S/2 ...
        pod.now = wake - 1
    assert pod.samples == 0 and pod.said == []  # ... but a job that prints is never asked


async def test_collectives_completing_while_the_log_is_silent_keep_it_active() -> None:
    pod = Pod()
    d = pod.detector(control_plane=True)
    pod.collectives = ("rank0", "pg0", 4)
    pod.now += S / 2
    assert await d.step() == pod.now + S / 2  # first sample taken; the next at S
    assert pod.samples == 1
    pod.collectives = ("rank0", "pg0", 5)  # one more completed
    pod.now += S / 2
    await d.step()
    assert pod.said == [] and d.progress == pod.now
    pod.now += S / 2
    await d.step()
    pod.now += S / 2  # nothing completed since: quiet, exactly S after the last completion seen
    await d.step()
    assert pod.said == [True]
    pod.collectives = ("rank0", "pg0", 6)
    pod.now += 10
    await d.step()
    assert pod.said == [True, False]


async def test_without_an_answer_from_the_control_plane_the_log_decides() -> None:
    pod = Pod()
    d = pod.detector(control_plane=True)  # pod.collectives stays None: no worker answered
    pod.now += S
    await d.step()
    assert pod.said == [True]


@pytest.mark.looptime
async def test_run_sleeps_until_the_moment_that_matters_and_stops_when_the_container_ended() -> None:
    loop = asyncio.get_running_loop()
    pod = Pod()
    ended = False
    d = ActivityDetector(S, pod.events.append, last_output=pod.last_output, clock=loop.time, ended=lambda: ended)
    task = asyncio.create_task(d.run())
    await asyncio.sleep(S - 1)
    assert d.looks == 1 and pod.said == []  # one look at the start, none until S
    await asyncio.sleep(2)
    assert d.looks == 2 and pod.said == [True]
    await asyncio.sleep(10)
    assert d.looks == 3  # while quiet: a look every 10 s
    ended = True
    await asyncio.sleep(10)
    assert task.done() and task.result() is None
    assert pod.said == [True]


def test_a_stall_after_must_be_positive() -> None:
    with pytest.raises(ValueError, match="stall_after"):
        ActivityDetector(0, print)
