"""What the book keeps of a log tail (`intake.retained_text`): bounded, and kept as it is when it comes
back from the state file."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.properties import examples

from podmortem.aggregator.intake import HEAD_LINE_BYTES, first_log_line, retained_text

XID = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
LINES = [
    b"[rank0]: step 12 loss 1.234 lr 3e-4\n",
    b"I1121 14:00:00.000000 1 torch/distributed/run.py:1] starting\n",
    f"[rank0]: {XID}\n".encode(),
    "[rank0]: done \U0001f3d6\ufe0f progress \u2588\u2588\u2588\n".encode(),  # an emoji (4 bytes) + its selector
    b"\xff\xfe garbage \xc3 not utf-8 \x80\x80\n",  # each stray byte decodes to U+FFFD (3 bytes)
    b"\x80" * 100 + b"\n",
    b"RuntimeError: Connection closed by peer [10.0.0.1]:29500\n",
    b"x" * 3000 + b" NCCL WARN NET/IB : Got completion with error 12 " + b"y" * 3000 + b"\n",  # one long line
]


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=80), st.sampled_from([2048, 4096, 16 << 10]))
@example([b"\x80" * 100 + b"\n"] * 40, 2048)  # cut, and the kept part grows past `keep` when decoded
@example([b"\x80" * 100 + b"\n"] * 15, 2048)  # within `keep` as bytes, not once decoded
def test_what_is_kept_fits_and_is_kept_unchanged_when_it_comes_back(lines: list[bytes], keep: int) -> None:
    data = b"".join(lines)
    text, cut = retained_text(data, keep)
    assert cut == (text != retained_text(data, 1 << 30)[0])  # cut exactly when something was left out
    assert len(text.encode()) <= keep
    assert retained_text(text.encode(), keep) == (text, False)


def test_the_end_and_the_line_a_rule_names_are_kept() -> None:
    chatter = "".join(f"[rank1]: step {i} loss 1.{i % 97:02d}\n" for i in range(4000))
    data = f"[rank1]: {XID}\n{chatter}exiting\n".encode()
    text, cut = retained_text(data)
    assert cut and text.startswith(f"[rank1]: {XID}\n[... ") and text.endswith("step 3999 loss 1.22\nexiting\n")
    assert len(text.encode()) <= 16 << 10


def test_a_rule_in_a_very_long_line_is_kept_with_what_is_around_it() -> None:
    line = b"a" * 50_000 + XID.encode() + b"b" * 50_000 + b"\n"
    hit = first_log_line(line)
    assert XID in hit and len(hit) <= HEAD_LINE_BYTES
