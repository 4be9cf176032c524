"""The capture and activity messages at the wire: built within the proto's bounds, refused outside them."""

import math

import pytest

from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb


def test_activity_round_trips_through_an_event() -> None:
    event = wire.make_event(wire.activity_to_pb(True, 301.5, last_progress=1_700_000_000.25))
    back = pb.Event.FromString(event.SerializeToString())
    assert back.WhichOneof("payload") == "activity"
    assert back.activity.quiet and back.activity.quiet_seconds == 301.5
    assert wire.from_ts(back.activity.last_progress) == pytest.approx(1_700_000_000.25)
    wire.check_capture_event(back)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1.0])
def test_non_finite_or_negative_floats_are_refused(bad: float) -> None:
    with pytest.raises(wire.WireError, match="finite"):
        wire.activity_to_pb(True, bad)
    with pytest.raises(wire.WireError, match="finite"):
        wire.activity_to_pb(True, 1.0, last_progress=bad)
    with pytest.raises(wire.WireError, match="finite"):
        wire.capture_request_to_pb("r1", "stall", bad)
    # And from a peer that did not use the builders.
    with pytest.raises(wire.WireError, match="quiet_seconds"):
        wire.check_capture_event(wire.make_event(pb.Activity(quiet=True, quiet_seconds=bad)))
    with pytest.raises(wire.WireError, match="timeout_seconds"):
        wire.check_capture_request(pb.CaptureRequest(request_id="r", trigger="stall", timeout_seconds=bad))


def test_capture_request_needs_an_id_and_a_known_trigger() -> None:
    assert wire.capture_request_to_pb("r1", "first_timeout", 5.0).timeout_seconds == 5.0
    with pytest.raises(wire.WireError, match="request_id is empty"):
        wire.capture_request_to_pb("", "stall")
    with pytest.raises(wire.WireError, match="trigger"):
        wire.capture_request_to_pb("r1", "teardown")  # the sidecar's own trigger, never requested


def test_worker_capture_keeps_the_stack_tail_and_says_it_cut() -> None:
    stack = "é" * 40_000 + "\nFile train.py, line 12 in load_batch"
    w = wire.worker_capture_to_pb("control_plane", local_rank=1, global_rank=3, stack=stack, pid=42)
    assert len(w.stack.encode()) <= wire.STACK_LIMIT
    assert w.stack.endswith("line 12 in load_batch")
    assert "cut at 32 KiB" in w.note
    assert (w.local_rank, w.global_rank, w.pid) == (1, 3, 42)
    assert not pb.WorkerCapture(path="py_spy").HasField("global_rank")


def test_a_flight_recorder_summary_over_its_bound_is_refused_not_cut() -> None:
    with pytest.raises(wire.WireError, match="flight_recorder"):
        wire.worker_capture_to_pb("fr_file", flight_recorder="x" * (wire.FLIGHT_RECORDER_LIMIT + 1))


def test_capture_bounds_workers_and_refuses_unknown_paths() -> None:
    workers = [wire.worker_capture_to_pb("py_spy", local_rank=i) for i in range(wire.MAX_WORKERS + 3)]
    c = wire.capture_to_pb("r1", "stall", workers)
    assert len(c.workers) == wire.MAX_WORKERS and "3 worker capture(s) left out" in c.note
    with pytest.raises(wire.WireError, match="path"):
        wire.worker_capture_to_pb("gdb")
    with pytest.raises(wire.WireError, match="trigger"):
        wire.capture_to_pb("r1", "whenever", [])
    hostile = pb.Capture(trigger="stall", workers=[pb.WorkerCapture(path="py_spy", stack="x" * (wire.STACK_LIMIT + 1))])
    with pytest.raises(wire.WireError, match=r"WorkerCapture\.stack"):
        wire.check_capture_event(wire.make_event(hostile))


def test_registration_negotiates_captures() -> None:
    reg = pb.Register(pod="p", holds=True, captures=True)
    assert pb.Register.FromString(reg.SerializeToString()).captures
    assert not pb.Registered.FromString(pb.Registered(aggregator_id="a").SerializeToString()).captures
    msg = pb.AggregatorMessage(capture_request=wire.capture_request_to_pb("r9", "stall", 10.0))
    assert pb.AggregatorMessage.FromString(msg.SerializeToString()).WhichOneof("body") == "capture_request"
