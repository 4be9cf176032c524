"""The sidecar's activity detector across a silent start-up: progress seen at a quiet look is reported,
even when the container is silent again by then, so that the aggregator sees the real stall as new."""

from __future__ import annotations

from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar.activity import ActivityDetector


async def test_progress_between_two_quiet_looks_is_reported_then_quiet_again() -> None:
    now = [1000.0]
    output: list[float | None] = [None]
    sent: list[pb.Event] = []

    async def last_output() -> float | None:
        return output[0]

    detector = ActivityDetector(4.0, sent.append, last_output=last_output, clock=lambda: now[0], quiet_poll=10.0)
    now[0] = 1005.0  # a silent start-up: quiet
    await detector.step()
    assert [e.activity.quiet for e in sent] == [True]
    output[0] = 1006.0  # the first steps print, then it hangs
    now[0] = 1015.0  # the next quiet look: silent again for 9 s
    await detector.step()
    assert [e.activity.quiet for e in sent] == [True, False, True]
    assert sent[2].activity.last_progress.seconds == 1006
    now[0] = 1025.0
    await detector.step()
    assert len(sent) == 3  # nothing moved: nothing more to say
