"""Numbers from outside: NaN, infinities and times a protobuf Timestamp may not hold are refused where the
wire or a flag brings them in (`podmortem.core.finite`, `podmortem.protocol.wire`), never kept.

The hold desk's case is the one that did harm: a NaN hold timeout became a NaN deadline in the event
loop's timer heap, and another job's hold was answered after its own timeout.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from podmortem.aggregator import config as aggregator_config
from podmortem.aggregator.config import ConfigError, duration
from podmortem.aggregator.holding import HoldDesk
from podmortem.aggregator.incidents import IncidentBook, MemberKey
from podmortem.aggregator.metrics import Metrics
from podmortem.aggregator.running import make_decide
from podmortem.core.finite import MAX_TIMESTAMP, finite, finite_or_none, valid_timestamp
from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import (
    clock_estimate,
    error_to_pb,
    hold_seconds,
    make_event,
    sanitized,
    termination_to_pb,
)
from podmortem.sidecar import config as sidecar_config

NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("value", [*NON_FINITE, "1", None, True, 10**400])
def test_finite_refuses_what_is_not_a_finite_number(value: Any) -> None:
    assert finite_or_none(value) is None
    with pytest.raises(ValueError, match="not a finite number"):
        finite(value, "x")


def test_finite_keeps_numbers() -> None:
    assert finite(3, "x") == 3.0 and finite_or_none(-2.5) == -2.5


@pytest.mark.parametrize("seconds", [*NON_FINITE, -1.0])
def test_a_hold_timeout_that_is_not_a_finite_number_is_refused(seconds: float) -> None:
    assert hold_seconds(pb.Hold(seq=1, timeout_seconds=seconds)) is None
    assert hold_seconds(pb.Hold(seq=1, timeout_seconds=14.5)) == 14.5


def test_an_implausible_clock_estimate_is_refused() -> None:
    assert clock_estimate(pb.ClockEstimate(offset_ns=2_000_000, round_trip_ns=1_000_000)) == (0.002, 0.001)
    assert clock_estimate(pb.ClockEstimate(offset_ns=2**63 - 1, round_trip_ns=1)) is None
    assert clock_estimate(pb.ClockEstimate(offset_ns=0, round_trip_ns=-5)) is None


def test_times_a_timestamp_may_not_hold_are_dropped_and_the_event_kept() -> None:
    event = make_event(termination_to_pb(Termination(exit_code=1, reason="Error", finished_at=100.0)), "t")
    event.wall_time.seconds = 2**62
    event.termination.started_at.nanos = -1
    kept, dropped = sanitized(event)
    assert dropped == ("wall_time", "termination.started_at")
    assert not kept.HasField("wall_time") and not kept.termination.HasField("started_at")
    assert kept.termination.finished_at.seconds == 100 and kept.termination.exit_code == 1
    assert event.HasField("wall_time")  # the caller's message is not changed
    error = make_event(error_to_pb(ErrorRecord(message="x", timestamp=MAX_TIMESTAMP + 1)), "e")
    assert sanitized(error)[1] == ("error_file.timestamp",)
    fine = make_event(error_to_pb(ErrorRecord(message="x", timestamp=1_700_000_000)), "f")
    assert sanitized(fine) == (fine, ())
    assert valid_timestamp(MAX_TIMESTAMP, 999_999_999) and not valid_timestamp(0, 10**9)
    # An Activity's last progress too: its nanos out of range passed `check_activity` (a finite sum >= 0).
    quiet = make_event(pb.Activity(quiet=True, quiet_seconds=30.0), "a")
    quiet.activity.last_progress.seconds, quiet.activity.last_progress.nanos = 100, -1
    kept, dropped = sanitized(quiet)
    assert dropped == ("activity.last_progress",) and not kept.activity.HasField("last_progress")
    assert kept.activity.quiet and kept.activity.quiet_seconds == 30.0


def test_the_book_drops_a_bad_time_and_counts_it() -> None:
    metrics = Metrics(CollectorRegistry())
    book = IncidentBook(make_decide(), lambda d: None, metrics=metrics)
    key = book.register(pb.Register(job=pb.JobRef(namespace="ns", name="j"), pod="p"))
    event = make_event(pb.LogTail(text=b"hello"), "l")
    event.wall_time.nanos = 2_000_000_000
    book.ingest(key, event)
    assert metrics.registry.get_sample_value("podmortem_values_refused_total", {"field": "timestamp"}) == 1.0
    member = book.member(key)
    assert member is not None and member.log_tail == "hello"


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "NaN"])
def test_flags_refuse_non_finite_numbers(text: str) -> None:
    with pytest.raises(ConfigError, match="not a finite number"):
        aggregator_config._number("--quorum-timeout", text, float, 0)
    with pytest.raises(ConfigError):
        duration("--suspect-node-window", text)
    with pytest.raises(ValueError, match="not a finite number"):
        sidecar_config._convert("hold_timeout", text)


def _register(book: IncidentBook, job: str, pod: str) -> MemberKey:
    return book.register(pb.Register(job=pb.JobRef(namespace="ns", name=job), pod=pod, holds=True))


def _failed(book: IncidentBook, key: MemberKey, message: str) -> None:
    book.ingest(key, make_event(error_to_pb(ErrorRecord(message=message, exception_type="ValueError")), "e"))
    book.ingest(key, make_event(termination_to_pb(Termination(exit_code=1, reason="Error")), "t"))


@pytest.mark.looptime
async def test_a_nan_hold_does_not_delay_another_jobs_hold() -> None:
    # Job a's pod holds with a NaN timeout; a second later job b's root holds for 10 s and waits its peer
    # wait (5 s) for peers that never report (so do a's: its hold stays open). b is decided at the peer
    # wait, within its own hold (an undecided hold is answered NOT_WRITTEN at its timeout), and a's hold is
    # refused at once.
    metrics = Metrics(CollectorRegistry())
    book = IncidentBook(make_decide(), lambda d: None, quorum_timeout=600, metrics=metrics)

    async def write(namespace: str, pod: str, condition: Any) -> None:
        return None

    desk = HoldDesk(book, make_decide(), write, peer_wait=5.0, verified=lambda key: True, metrics=metrics)
    a, b = _register(book, "a", "a-0"), _register(book, "b", "b-0")
    _register(book, "a", "a-1"), _register(book, "b", "b-1")
    _failed(book, a, "ValueError: a")
    _failed(book, b, "ValueError: label 7 out of range")
    loop = asyncio.get_running_loop()
    held = loop.create_task(desk.hold(a, pb.Hold(seq=1, timeout_seconds=math.nan)))
    await asyncio.sleep(1)
    start = loop.time()
    reply = await desk.hold(b, pb.Hold(seq=1, timeout_seconds=10))
    took = loop.time() - start
    assert reply.outcome == pb.HoldReply.NO_CONDITION  # decided (a lone root, its peers silent), not timed out
    assert 5.0 <= took < 6.0, took
    assert all(math.isfinite(handle.when()) for handle in loop._scheduled)  # type: ignore[attr-defined]
    refused = await held
    assert refused.outcome == pb.HoldReply.NOT_WRITTEN and "finite" in refused.detail
    assert metrics.registry.get_sample_value("podmortem_values_refused_total", {"field": "hold_timeout"}) == 1.0
