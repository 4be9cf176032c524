"""The wire (podmortem.protocol): its generated code and the messages built on it.

The checked-in generated protobuf code must match protos/ (regenerate with `make proto`).

The capture and activity messages at the wire: built within the proto's bounds, refused outside them.
"""

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st
from support.properties import examples

from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_fresh() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_stale_code_is_detected(tmp_path: Path) -> None:
    # Work on a copy so the check itself is shown to fail on a changed contract.
    import shutil

    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "protos", copy / "protos")
    shutil.copytree(ROOT / "podmortem" / "protocol" / "v1", copy / "podmortem" / "protocol" / "v1")
    shutil.copytree(ROOT / "scripts", copy / "scripts")
    proto = next((copy / "protos").rglob("collector.proto"))
    text = proto.read_text().replace("string aggregator_id = 1;", "string aggregator_id = 1;\n  string x = 2;")
    proto.write_text(text)
    result = subprocess.run(
        [sys.executable, str(copy / "scripts" / "gen_protos.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "stale" in result.stderr


def test_a_log_tail_is_folded_compactly() -> None:
    import sys

    from podmortem.protocol.wire import compact_text

    tail = "RuntimeError: Connection closed by peer. GLHF! 🏖️\n" + "step 5 loss 1.35\n" * 4000
    kept = compact_text(tail)
    assert kept == tail.replace("🏖️", "?")
    assert sys.getsizeof(kept) < sys.getsizeof(tail) * 0.3  # 1 byte a character instead of 4
    assert compact_text("plain ascii") == "plain ascii" and compact_text("") == ""
    # Text in other scripts is kept as it is (2 bytes a character is its price).
    assert compact_text("错误: 显存不足 │ ok") == "错误: 显存不足 │ ok"


@hypothesis.settings(max_examples=examples(500), deadline=None)
@hypothesis.given(
    st.text(
        st.one_of(
            st.characters(),  # anything, lone surrogates included
            st.sampled_from(["🏖", "\ufe0f", "\ufe0e", "\u200d", "\U0010ffff", "\U00020000", "é", "\ud83c"]),
        )
    )
)
def test_compact_text_is_the_character_rule(text: str) -> None:
    """compact_text works on UTF-8 bytes; the result is the rule it states, applied to characters."""
    from podmortem.protocol.wire import compact_text

    expected = "".join("?" if ord(c) > 0xFFFF else "" if c in "\ufe0f\ufe0e\u200d" else c for c in text)
    assert compact_text(text) == expected


@hypothesis.settings(max_examples=examples(500), deadline=None)
@hypothesis.given(
    st.text(
        st.one_of(
            st.characters(exclude_categories=["Cs"]),  # what UTF-8 can carry
            st.sampled_from(["🏖", "\ufe0f", "\ufe0e", "\u200d", "\U0010ffff", "\U00020000", "é", "\n"]),
        )
    )
)
def test_a_log_tails_bytes_are_folded_by_the_same_rule(text: str) -> None:
    """`tail_text` (the aggregator's and the bundle's path, from bytes) follows `compact_text`'s rule,
    applied to characters; `utf8` leaves valid UTF-8 as it is."""
    from podmortem.protocol.wire import tail_text, utf8

    expected = "".join("?" if ord(c) > 0xFFFF else "" if c in "\ufe0f\ufe0e\u200d" else c for c in text)
    data = text.encode()
    assert tail_text(data) == expected
    assert utf8(data) is data


@hypothesis.settings(max_examples=examples(300), deadline=None)
@hypothesis.given(st.binary(max_size=64))
def test_a_log_tail_that_is_not_utf8_is_read_without_error(data: bytes) -> None:
    """Bytes that are not UTF-8 (a broken or hostile sender) are read, not refused: `utf8` makes them
    valid for the wire, and `tail_text` reads them whatever they are."""
    from podmortem.protocol.wire import tail_text, utf8

    valid = utf8(data)
    assert valid.decode("utf-8") == data.decode("utf-8", "replace")
    assert isinstance(tail_text(data), str)
    assert tail_text(valid) == tail_text(valid.decode().encode())


# The contract as released before the hold (tests/fixtures/protos/collector-before-hold.proto): an older
# sidecar or aggregator speaks it. Its generated code runs in a process of its own (its descriptors carry
# the same names as ours).
OLD_PEER = r"""
import base64, json, sys
sys.path.insert(0, sys.argv[1])
import collector_before_hold_pb2 as old

given = json.loads(sys.stdin.read())
if "log_tail" in given:  # a log tail, each way
    tail = old.SidecarMessage.FromString(base64.b64decode(given["log_tail"]))
    sent = old.SidecarMessage(event=old.Event(id="t", log_tail=old.LogTail(text=given["old_text"])))
    print(json.dumps({
        "text": tail.event.log_tail.text,
        "sent": base64.b64encode(sent.SerializeToString()).decode(),
    }))
    sys.exit(0)
hold = old.SidecarMessage.FromString(base64.b64decode(given["hold"]))
registered = old.AggregatorMessage.FromString(base64.b64decode(given["registered"]))
reply = old.AggregatorMessage.FromString(base64.b64decode(given["hold_reply"]))
register = old.SidecarMessage(register=old.Register(pod="p", job=old.JobRef(namespace="ns", name="j")))
print(json.dumps({
    "hold_body": hold.WhichOneof("body"),
    "registered_id": registered.registered.aggregator_id,
    "reply_body": reply.WhichOneof("body"),
    "register": base64.b64encode(register.SerializeToString()).decode(),
    "registered": base64.b64encode(old.AggregatorMessage(
        registered=old.Registered(aggregator_id="old")).SerializeToString()).decode(),
}))
"""


def _old_peer(tmp_path: Path, given: dict[str, str]) -> dict[str, Any]:
    """Run OLD_PEER on `given` (its messages base64-encoded); what it printed."""
    import json
    from importlib import resources

    from grpc_tools import protoc

    src = tmp_path / "src"
    src.mkdir()
    (src / "collector_before_hold.proto").write_text(
        (ROOT / "tests/fixtures/protos/collector-before-hold.proto").read_text()
    )
    out = tmp_path / "out"
    out.mkdir()
    well_known = str(resources.files("grpc_tools") / "_proto")
    assert (
        protoc.main(["protoc", f"-I{src}", f"-I{well_known}", f"--python_out={out}", "collector_before_hold.proto"])
        == 0
    )
    done = subprocess.run(
        [sys.executable, "-c", OLD_PEER, str(out)], input=json.dumps(given), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    seen: dict[str, Any] = json.loads(done.stdout)
    return seen


def test_a_log_tail_as_bytes_is_the_string_peers_from_before_send_and_read(tmp_path: Path) -> None:
    """`LogTail.text` became `bytes` (the aggregator reads tails without decoding them): UTF-8 text is
    the same on the wire both ways, so an older sidecar and an older aggregator still interoperate."""
    import base64

    from podmortem.protocol.v1 import collector_pb2 as pb

    text = "GLHF! 🏖️ é ok\n"
    ours = pb.SidecarMessage(event=pb.Event(id="t", log_tail=pb.LogTail(text=text.encode())))
    seen = _old_peer(
        tmp_path, {"log_tail": base64.b64encode(ours.SerializeToString()).decode(), "old_text": "错误 🏖️\n"}
    )
    assert seen["text"] == text  # an older aggregator reads the same str
    theirs = pb.SidecarMessage.FromString(base64.b64decode(seen["sent"]))
    assert theirs.event.log_tail.text == "错误 🏖️\n".encode()  # an older sidecar's tail, as UTF-8 bytes


def test_peers_from_before_the_hold_ignore_it_and_are_told_apart(tmp_path: Path) -> None:
    import base64

    from podmortem.protocol.v1 import collector_pb2 as pb

    new = {
        "hold": pb.SidecarMessage(hold=pb.Hold(seq=1, timeout_seconds=15)),
        "registered": pb.AggregatorMessage(registered=pb.Registered(aggregator_id="new", holds=True)),
        "hold_reply": pb.AggregatorMessage(hold_reply=pb.HoldReply(seq=1, outcome=pb.HoldReply.WRITTEN)),
    }
    given = {k: base64.b64encode(m.SerializeToString()).decode() for k, m in new.items()}
    seen = _old_peer(tmp_path, given)
    # An older aggregator reads a hold as a message with no body it knows: its loop skips it.
    assert seen["hold_body"] is None
    # An older sidecar registers as usual and never sees a hold reply (none is sent to it; one would be skipped).
    assert seen["registered_id"] == "new" and seen["reply_body"] is None
    # ... and we tell them apart: an older sidecar does not hold, an older aggregator does not answer holds.
    register = pb.SidecarMessage.FromString(base64.b64decode(seen["register"]))
    assert register.WhichOneof("body") == "register" and register.register.holds is False
    registered = pb.AggregatorMessage.FromString(base64.b64decode(seen["registered"]))
    assert registered.registered.holds is False


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
