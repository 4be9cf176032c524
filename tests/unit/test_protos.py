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


@hypothesis.settings(max_examples=500, deadline=None)
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


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(st.binary(max_size=64))
def test_a_log_tail_that_is_not_utf8_is_read_without_error(data: bytes) -> None:
    """Bytes that are not UTF-8 (a broken or hostile sender) are read, not refused: `utf8` makes them
    valid for the wire, and `tail_text` reads them whatever they are."""
    from podmortem.protocol.wire import tail_text, utf8

    valid = utf8(data)
    assert valid.decode("utf-8") == data.decode("utf-8", "replace")
    assert isinstance(tail_text(data), str)
    assert tail_text(valid) == tail_text(valid.decode().encode())
