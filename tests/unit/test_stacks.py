"""Stack text read into frames (podmortem.core.stacks).

faulthandler's and the traceback's texts here are made by the interpreter itself (a child process that
really blocks, then really gets SIGTERM); py-spy's is written from its documented `dump` format (py-spy is
the sidecar's dependency, not the engine's).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from podmortem.core.model import Frame
from podmortem.core.stacks import (
    MAX_STACK_TEXT,
    dumps_in_log,
    in_collective,
    is_user_frame,
    parse_one,
    parse_stacks,
    user_frame,
)

_SCRIPT = textwrap.dedent(
    """
    import faulthandler, signal, sys, threading, time
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)

    def prefetch():
        time.sleep(600)

    def load_batch():
        print("ready", flush=True)
        threading.Event().wait()

    def main():
        threading.Thread(target=prefetch, daemon=True).start()
        load_batch()

    main()
    """
)


def _sigterm_stack(tmp_path: Path) -> str:
    """What a worker whose faulthandler is registered for SIGTERM prints when torn down (real)."""
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)  # the helper thread is in its sleep
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    return err


def test_faulthandler_sigterm_dump_is_one_process_with_two_threads(tmp_path: Path) -> None:
    text = _sigterm_stack(tmp_path)
    dumps = parse_stacks(text)
    assert len(dumps) == 1 and dumps[0].format == "faulthandler"
    dump = dumps[0]
    assert len(dump.threads) == 2
    main = dump.main_thread()
    assert main is not None and main.current
    assert [f.function for f in main.frames] == ["wait", "wait", "load_batch", "main", "<module>"]
    frame = user_frame(dump)
    assert frame is not None and frame.function == "load_batch" and frame.file == str(tmp_path / "train.py")
    assert frame.line == _SCRIPT.splitlines().index("    threading.Event().wait()") + 1
    assert not in_collective(dump)


def test_two_workers_in_one_log_are_told_apart(tmp_path: Path) -> None:
    one = _sigterm_stack(tmp_path)
    log = "I1127 some log line\n" + one + "[rank0]: RuntimeError: Timed out waiting 6000ms\n" + one + "done\n"
    dumps = dumps_in_log(log)
    assert len(dumps) == 2
    assert all(d.rank is None for d in dumps)


def test_prefixed_dumps_keep_their_rank_even_when_interleaved(tmp_path: Path) -> None:
    one = _sigterm_stack(tmp_path).splitlines()
    a = [f"[rank3]: {line}" for line in one]
    b = [f"[default1]:{line}" for line in one]
    mixed = [x for pair in zip(a, b, strict=True) for x in pair]
    summary = "  rank      : 5 (local_rank: 1)\n"
    dumps = dumps_in_log("\n".join(mixed) + "\n" + summary)
    assert sorted((d.rank, d.local_rank) for d in dumps) == [(3, None), (5, 1)]
    for d in dumps:
        f = user_frame(d)
        assert f is not None and f.function == "load_batch"


def test_a_log_without_a_dump_costs_nothing() -> None:
    assert dumps_in_log('[rank0]: Traceback (most recent call last):\n  File "x.py", line 1, in f\n') == []


def test_python_traceback_read_innermost_first(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("def step():\n    raise ValueError('x')\n\ndef main():\n    step()\n\nmain()\n")
    err = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False).stderr
    dump = parse_one(err)
    assert dump is not None and dump.format == "traceback"
    assert user_frame(dump) == Frame(str(script), 2, "step")


PY_SPY = """Process 4242: python -m train --steps 10
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    wait (threading.py:320)
    wait (threading.py:622)
    load_batch (/app/train.py:211)
    main (/app/train.py:240)
    <module> (/app/train.py:260)
Thread 4250 (idle): "pin_memory"
    select (selectors.py:415)
    _worker_loop (torch/utils/data/_utils/pin_memory.py:52)
"""


def test_py_spy_dump() -> None:
    dump = parse_one(PY_SPY)
    assert dump is not None and dump.format == "py-spy" and len(dump.threads) == 2
    assert user_frame(dump) == Frame("/app/train.py", 211, "load_batch")


DIST = "/usr/lib/python3/dist-packages"
SITE = "/opt/venv/lib/python3.11/site-packages"
IN_DATALOADER = (
    ("/usr/lib/python3.11/selectors.py", 415, "select"),
    ("/usr/lib/python3.11/multiprocessing/queues.py", 113, "get"),
    (f"{DIST}/torch/utils/data/dataloader.py", 1133, "_try_get_data"),
    (f"{DIST}/torch/utils/data/dataloader.py", 1295, "_next_data"),
    ("/app/train.py", 88, "train_epoch"),
)
IN_ALL_REDUCE = (
    (f"{SITE}/torch/distributed/distributed_c10d.py", 3252, "all_reduce"),
    (f"{SITE}/torch/distributed/c10d_logger.py", 83, "wrapper"),
    ("/app/train.py", 50, "step"),
)


@pytest.mark.parametrize(
    ("frames", "collective", "user"),
    [
        (IN_DATALOADER, False, Frame("/app/train.py", 88, "train_epoch")),  # the user's loop is blamed
        (IN_ALL_REDUCE, True, Frame("/app/train.py", 50, "step")),
    ],
)
def test_in_a_collective_or_not(frames: tuple[tuple[str, int, str], ...], collective: bool, user: Frame) -> None:
    body = "".join(f'  File "{f}", line {n} in {fn}\n' for f, n, fn in (*frames, ("/app/train.py", 120, "<module>")))
    dump = parse_one("Current thread 0x00007f00 (most recent call first):\n" + body)
    assert dump is not None and in_collective(dump) is collective
    assert user_frame(dump) == user


def test_library_frames() -> None:
    assert not is_user_frame(Frame("/usr/lib/python3.11/threading.py", 1, "wait"))
    assert not is_user_frame(Frame("/x/site-packages/torch/distributed/run.py", 1, "main"))
    assert not is_user_frame(Frame("<frozen runpy>", 198, "_run_module_as_main"))
    assert is_user_frame(Frame("/app/train.py", 1, "main"))
    assert is_user_frame(Frame("train.py", 1, "main"))


def test_hostile_text_is_bounded() -> None:
    frame = '  File "/app/t.py", line 1 in f\n'
    text = "Current thread 0x1 (most recent call first):\n" + frame * (MAX_STACK_TEXT // len(frame) + 10_000)
    started = time.monotonic()
    dumps = parse_stacks(text)
    assert time.monotonic() - started < 5
    assert all(len(t.frames) <= 256 for d in dumps for t in d.threads)
    assert parse_stacks("garbage\n\x00\nThread (most recent call first):\n") == []
