"""The sidecar's outbox: every event kept, in order, deduplicated, until acknowledged."""

from __future__ import annotations

import asyncio

import pytest
from support.events import error_event, run_ended

from podmortem.core.model import Termination
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar.outbox import Outbox, describe


def log_event(n: int, size: int = 1000) -> pb.Event:
    return wire.make_event(pb.LogTail(text=b"x" * size), f"pod/log_tail/{n}")


def ids(events: list[pb.Event]) -> list[str]:
    return [e.id for e in events]


def test_keeps_events_in_order_until_acked() -> None:
    box = Outbox()
    events = [run_ended(i) for i in range(5)]
    for e in events:
        assert box.put(e)
    assert ids(box.pending()) == ids(events)
    acked = box.ack([events[1].id, events[3].id, "unknown"])
    assert ids(acked) == [events[1].id, events[3].id]
    assert ids(box.pending()) == [events[0].id, events[2].id, events[4].id]
    assert len(box) == 3


def test_deduplicates_pending_and_acknowledged_ids() -> None:
    box = Outbox()
    e = error_event(1)
    assert box.put(e)
    assert not box.put(error_event(1))  # same content, same id
    box.ack([e.id])
    assert not box.put(error_event(1))  # already acknowledged: not sent again
    assert len(box) == 0


def test_event_without_id_is_refused() -> None:
    with pytest.raises(ValueError):
        Outbox().put(pb.Event())


def test_after_gives_events_newer_than_a_sequence_number() -> None:
    box = Outbox()
    box.put(run_ended(1))
    seq = box.last_seq
    box.put(run_ended(2))
    assert [e.termination.restart_count for _, e in box.after(seq)] == [2]
    assert [s for s, _ in box.after(0)] == [1, 2]


def test_bound_collapses_log_tails_keeping_the_newest() -> None:
    box = Outbox(max_events=3)
    box.put(error_event(1))
    for n in range(4):
        box.put(log_event(n))
    assert ids(box.pending()) == [error_event(1).id, "pod/log_tail/2", "pod/log_tail/3"]
    assert box.dropped == 2


def test_bound_in_bytes_drops_old_log_tails() -> None:
    box = Outbox(max_bytes=5000)
    for n in range(8):
        box.put(log_event(n, size=1000))
    assert box.size_bytes <= 5000
    assert box.pending()[-1].id == "pod/log_tail/7"


def test_failure_events_are_never_dropped(caplog: pytest.LogCaptureFixture) -> None:
    box = Outbox(max_events=2)
    box.put(log_event(0))
    events = [run_ended(i) for i in range(5)]
    for e in events:
        box.put(e)
    term = wire.make_event(wire.termination_to_pb(Termination(exit_code=1)), "pod/termination/final")
    box.put(term)
    # The log tail is the newest droppable one, so it stays; every failure event stays too.
    assert ids(box.pending()) == ["pod/log_tail/0", *ids(events), term.id]
    assert "failure events are never dropped" in caplog.text
    assert caplog.text.count("over its bound of") == 1  # warned once, not per event


async def test_wait_beyond_and_wait_empty() -> None:
    box = Outbox()
    waiter = asyncio.create_task(box.wait_beyond(0))
    await asyncio.sleep(0)
    assert not waiter.done()
    e = error_event(1)
    box.put(e)
    await waiter
    empty = asyncio.create_task(box.wait_empty())
    await asyncio.sleep(0)
    assert not empty.done()
    box.ack([e.id])
    await empty
    await box.wait_empty()  # already empty: returns at once


def test_describe_is_one_readable_line() -> None:
    assert describe(error_event(7)).startswith("error file 'ValueError: 7' (timestamp 7)")
    term = wire.make_event(wire.termination_to_pb(Termination(exit_code=137, signal=9, reason="OOMKilled")), "t")
    assert describe(term) == "termination exit 137 signal 9 reason OOMKilled (run 0) [id t]"
    bad = wire.make_event(pb.ErrorFile(parse_error="empty file", size_bytes=0), "b")
    assert describe(bad) == "unparsable error file (empty file, 0 bytes) [id b]"
    assert "\n" not in describe(log_event(1))


def test_redeliver_gives_acknowledged_events_again_once() -> None:
    box = Outbox()
    for n in range(3):
        box.put(run_ended(n))
    box.put(log_event(1))
    box.put(log_event(2))
    box.ack([e.id for e in box.pending()])
    assert len(box) == 0
    # A restarted aggregator: every failure event again, and only the newest log tail.
    assert box.redeliver() == 4
    assert ids(box.pending()) == [run_ended(n).id for n in range(3)] + [log_event(2).id]
    box.ack([e.id for e in box.pending()])
    assert box.redeliver() == 4  # kept again after the second acknowledgement
    assert box.put(run_ended(0)) is False  # still known: not a new event


def test_an_error_file_rewritten_while_the_aggregator_is_away_keeps_first_and_newest() -> None:
    # The agent rewrites its error file over and over and nobody acknowledges: memory stays bounded,
    # and what the verdict reads is kept — the first version (the earliest failure) and the newest.
    box = Outbox()
    versions = [error_event(n) for n in range(1000)]
    for e in versions:
        box.put(e)
    assert ids(box.pending()) == [versions[0].id, versions[-1].id]
    assert box.size_bytes == versions[0].ByteSize() + versions[-1].ByteSize()


def test_redelivery_keeps_the_first_and_newest_of_each_kind_past_its_bound() -> None:
    # 458 acknowledged events with a history bound of 256: the pod's earliest failure must survive.
    box = Outbox(max_events=256)
    first = error_event(0)
    box.put(first)
    box.ack([first.id])
    for n in range(1, 458):
        e = run_ended(n) if n % 2 else log_event(n)
        box.put(e)
        box.ack([e.id])
    assert box.redeliver() <= 256
    kept = ids(box.pending())
    assert first.id in kept and run_ended(457).id in kept and run_ended(1).id in kept
