"""The checked-in generated protobuf code must match protos/ (regenerate with `make proto`)."""

import subprocess
import sys
from pathlib import Path

import hypothesis
from hypothesis import strategies as st

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


@hypothesis.settings(max_examples=500, deadline=None)
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


# The contract as released before the hold (tests/fixtures/protos/collector-before-hold.proto): an older
# sidecar or aggregator speaks it. Its generated code runs in a process of its own (its descriptors carry
# the same names as ours).
OLD_PEER = r"""
import base64, json, sys
sys.path.insert(0, sys.argv[1])
import collector_before_hold_pb2 as old

given = json.loads(sys.stdin.read())
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


def test_peers_from_before_the_hold_ignore_it_and_are_told_apart(tmp_path: Path) -> None:
    import base64
    import json
    from importlib import resources

    from grpc_tools import protoc

    from podmortem.protocol.v1 import collector_pb2 as pb

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
    new = {
        "hold": pb.SidecarMessage(hold=pb.Hold(seq=1, timeout_seconds=15)),
        "registered": pb.AggregatorMessage(registered=pb.Registered(aggregator_id="new", holds=True)),
        "hold_reply": pb.AggregatorMessage(hold_reply=pb.HoldReply(seq=1, outcome=pb.HoldReply.WRITTEN)),
    }
    given = {k: base64.b64encode(m.SerializeToString()).decode() for k, m in new.items()}
    done = subprocess.run(
        [sys.executable, "-c", OLD_PEER, str(out)], input=json.dumps(given), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # An older aggregator reads a hold as a message with no body it knows: its loop skips it.
    assert seen["hold_body"] is None
    # An older sidecar registers as usual and never sees a hold reply (none is sent to it; one would be skipped).
    assert seen["registered_id"] == "new" and seen["reply_body"] is None
    # ... and we tell them apart: an older sidecar does not hold, an older aggregator does not answer holds.
    register = pb.SidecarMessage.FromString(base64.b64decode(seen["register"]))
    assert register.WhichOneof("body") == "register" and register.register.holds is False
    registered = pb.AggregatorMessage.FromString(base64.b64decode(seen["registered"]))
    assert registered.registered.holds is False
