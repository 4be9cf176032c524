"""Python stacks as text, read into frames: where a worker was, and whether it was waiting in a collective.

Three formats reach us, all as text:

- **faulthandler** (`faulthandler.dump_traceback`, a worker's SIGTERM handler, torch's control-plane
  `dump_traceback`): blocks headed `Thread 0x00007f... (most recent call first):`, `Current thread 0x...
  (most recent call first):` or `Stack (most recent call first):`, then `  File "train.py", line 12 in f`,
  innermost first, one block per thread and a blank line between;
- **py-spy dump**: `Thread 4242 (idle): "MainThread"` then `    f (train.py:12)`, innermost first;
- **a Python traceback**: `Traceback (most recent call last):` then `  File "train.py", line 12, in f`,
  outermost first (read reversed).

A log tail may carry faulthandler dumps of several workers of a pod (each worker's SIGTERM at the agent's
teardown), with the launcher's line prefix (`[rank3]:`, torchrun's `--tee` `[default1]:`, a template such as
`[3]:`) or none. `dumps_in_log` separates them by prefix, then where one process's dump ends (after the
program's own thread, which faulthandler prints last, or at a second `Current thread`).

The frame that says where a worker stopped is the innermost frame of *its user's code*: not the
interpreter's library (threading, selectors, queue, multiprocessing...), not torch or another installed
package (site-packages), not the launcher. `user_frame` picks it from the thread that runs the program
(the one whose stack holds `<module>`, else the current one).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from podmortem.core.model import Frame

MAX_STACK_TEXT = 256 * 1024  # a longer text is read from its tail (bounded work on hostile input)
MAX_FRAMES = 256  # per thread; faulthandler itself stops at 100

_FH_HEADER = re.compile(
    r"^(?:(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[([^\]]*)\])? |(Stack) )\(most recent call first\):\s*$"
)
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?\?\?) in (.*?)\s*$')
_TB_HEADER = re.compile(r"^Traceback \(most recent call last\):\s*$")
_TB_FRAME = re.compile(r'^\s+File "(.*)", line (\d+), in (.*?)\s*$')
_SPY_HEADER = re.compile(r'^Thread (0x[0-9a-fA-F]+|\d+) \((\w+)(?:; [^)]*)?\)(?:: "(.*)")?\s*$')
_SPY_FRAME = re.compile(r"^\s{4}(\S.*?) \((.+?):(\d+)\)\s*$")
# Line prefixes of launchers: [rank3]: (torch, global rank), [default1]: / [trainer0]: (torchrun --tee, role and
# local rank), [3]: (a TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE of "[${rank}]:").
_PREFIX = re.compile(r"^\[(?:(rank)(\d{1,7})|([A-Za-z_][\w-]{0,40}?)(\d{1,7})|(\d{1,7}))\]:\s?")
# torch's failure summary pairs a worker's global and local rank: "rank      : 3 (local_rank: 1)".
_RANK_PAIR = re.compile(r"rank\s*:\s*(\d{1,7})\s*\(local_rank:\s*(\d{1,7})\)")


@dataclass(frozen=True)
class ThreadStack:
    frames: tuple[Frame, ...]  # innermost first
    name: str = ""  # "MainThread" (py-spy), the thread id (faulthandler)
    current: bool = False  # faulthandler's "Current thread": the one that handled the signal

    @property
    def runs_program(self) -> bool:
        """This thread runs the program itself (its stack holds the script's or module's top level)."""
        return self.name == "MainThread" or any(f.function == "<module>" for f in self.frames)


@dataclass(frozen=True)
class StackDump:
    """The stacks of one process at one moment (or one traceback)."""

    threads: tuple[ThreadStack, ...]
    format: str  # faulthandler | py-spy | traceback
    rank: int | None = None  # global rank, from a line prefix that names it
    local_rank: int | None = None  # from a launcher's role prefix ([default1]:)
    text: str = ""  # the dump's own lines (prefixes removed)

    def main_thread(self) -> ThreadStack | None:
        for pick in (
            lambda t: t.runs_program,
            lambda t: t.current,
            lambda t: bool(t.frames),
        ):
            for t in self.threads:
                if pick(t):
                    return t
        return None


def _frame(file: str, line: str, function: str) -> Frame:
    return Frame(file, int(line) if line.isdigit() else None, function)


def parse_stacks(text: str) -> list[StackDump]:
    """Every stack dump in `text`, in order (faulthandler, py-spy and tracebacks; see the module docstring).

    A faulthandler dump is a run of thread blocks; another process's dump starts after the block of the
    program's own thread (printed last) or at a second "Current thread" (each process prints one).
    """
    if len(text) > MAX_STACK_TEXT:
        text = text[-MAX_STACK_TEXT:]
    dumps: list[StackDump] = []
    threads: list[ThreadStack] = []
    lines: list[str] = []
    fmt = ""
    cur: tuple[str, bool, str] | None = None  # (name, current, format) of the thread being read
    frames: list[Frame] = []

    def close_thread() -> None:
        nonlocal cur, frames
        if cur is not None:
            name, current, kind = cur
            ordered = frames[::-1] if kind == "traceback" else frames
            threads.append(ThreadStack(tuple(ordered[:MAX_FRAMES]), name, current))
        cur, frames = None, []

    def close_dump() -> None:
        nonlocal threads, lines, fmt
        close_thread()
        if threads:
            dumps.append(StackDump(tuple(threads), fmt, text="\n".join(lines)))
        threads, lines, fmt = [], [], ""

    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if m := _FH_HEADER.match(line):
            current = m.group(1) == "Current thread" or m.group(4) == "Stack"
            close_thread()
            # A process prints its threads newest first, its main thread (the program's) last, and exactly one
            # of them as "Current thread": a new header after either starts another process's dump.
            if (
                fmt != "faulthandler"
                or m.group(4)
                or (current and any(t.current for t in threads))
                or any(t.runs_program for t in threads)
            ):
                close_dump()
            fmt = "faulthandler"
            cur = (m.group(2) or "", current, "faulthandler")
        elif _TB_HEADER.match(line):
            close_dump()
            fmt, cur = "traceback", ("", True, "traceback")
        elif m := _SPY_HEADER.match(line):
            if fmt != "py-spy":
                close_dump()
            close_thread()
            fmt = "py-spy"
            cur = (m.group(3) or m.group(1), False, "py-spy")
        elif cur is not None and (m := (_SPY_FRAME if cur[2] == "py-spy" else _FH_FRAME).match(line)):
            if cur[2] == "py-spy":
                frames.append(_frame(m.group(2), m.group(3), m.group(1)))
            else:
                frames.append(_frame(m.group(1), m.group(2), m.group(3)))
        elif cur is not None and cur[2] == "traceback" and (m := _TB_FRAME.match(line)):
            frames.append(_frame(m.group(1), m.group(2), m.group(3)))
        elif cur is not None and _continues(cur[2], line):
            pass  # source lines of a traceback, py-spy's locals and native frames, faulthandler's "..."
        elif cur is not None and not line.strip():
            close_thread()
            if fmt == "traceback":
                close_dump()
            continue
        else:
            if cur is not None or threads:
                close_dump()
            continue
        lines.append(line)
    close_dump()
    return dumps


def _continues(kind: str, line: str) -> bool:
    if kind == "traceback":
        return line.startswith("    ") or line.lstrip().startswith(("^", "~"))
    if kind == "py-spy":
        return line.startswith(("        ", "    0x", "    ")) and bool(line.strip())
    return line.strip() in ("...", "<no Python frame>")


def _split_prefix(line: str) -> tuple[tuple[str, int] | None, str]:
    m = _PREFIX.match(line)
    if m is None:
        return None, line
    if m.group(1):
        return ("rank", int(m.group(2))), line[m.end() :]
    if m.group(3):
        return ("local", int(m.group(4))), line[m.end() :]
    return ("rank", int(m.group(5))), line[m.end() :]


def dumps_in_log(text: str) -> list[StackDump]:
    """The faulthandler dumps in a pod's log tail, each with the rank its line prefix names (if any).

    Lines are first sorted by their launcher prefix, so that workers writing at the same moment stay
    apart; a local rank is turned into a global one with torch's own pairing in the failure summary.
    """
    if "(most recent call first)" not in text:  # the cheap test: most logs hold no dump
        return []
    if len(text) > MAX_STACK_TEXT:
        text = text[-MAX_STACK_TEXT:]
    streams: dict[tuple[str, int] | None, list[str]] = {}
    for line in text.splitlines():
        key, body = _split_prefix(line)
        streams.setdefault(key, []).append(body)
    local_to_global: dict[int, int] = {}
    for g, loc in _RANK_PAIR.findall(text):
        local_to_global.setdefault(int(loc), int(g))
    out: list[StackDump] = []
    for key, lines in streams.items():
        for dump in parse_stacks("\n".join(lines)):
            if dump.format != "faulthandler":
                continue
            if key is not None and key[0] == "rank":
                out.append(StackDump(dump.threads, dump.format, rank=key[1], text=dump.text))
            elif key is not None:
                out.append(
                    StackDump(dump.threads, dump.format, local_to_global.get(key[1]), local_rank=key[1], text=dump.text)
                )
            else:
                out.append(dump)
    return out


def tracebacks_in_log(text: str) -> dict[int, StackDump]:
    """The last Python traceback each rank printed with torch's `[rankN]:` prefix (where it was when it raised)."""
    if "]: Traceback (most recent call last):" not in text:  # the cheap test
        return {}
    if len(text) > MAX_STACK_TEXT:
        text = text[-MAX_STACK_TEXT:]
    streams: dict[int, list[str]] = {}
    for line in text.splitlines():
        key, body = _split_prefix(line)
        if key is not None and key[0] == "rank":
            streams.setdefault(key[1], []).append(body)
    out: dict[int, StackDump] = {}
    for rank, lines in streams.items():
        tbs = [d for d in parse_stacks("\n".join(lines)) if d.format == "traceback"]
        if tbs:
            out[rank] = StackDump(tbs[-1].threads, "traceback", rank=rank, text=tbs[-1].text)
    return out


# Where is a frame's code from? Its file's path says.
_LIBRARY = re.compile(
    r"(?:^|/)(?:site-packages|dist-packages)/"  # an installed package: torch, numpy, the launcher's
    r"|(?:^|/)lib/python\d\.\d+/"  # the interpreter's own library
    r"|^<frozen |^<string>$|^<stdin>$"
)
# Installed code a job ships inside its own tree (a vendored torch, a source checkout of it).
_TORCH = re.compile(r"(?:^|/)torch/(?:distributed|nn/parallel|utils/data|autograd|_tensor\.py)")


# py-spy shortens a file name to its module path ("threading.py", "torch/utils/data/dataloader.py"): a relative name
# whose top package is the interpreter's own or one of the frameworks a training job runs on is library code.
_LIBRARY_TOPS = frozenset(sys.stdlib_module_names) | {
    "torch",
    "torchvision",
    "torchaudio",
    "numpy",
    "accelerate",
    "deepspeed",
    "lightning",
    "pytorch_lightning",
    "transformers",
    "megatron",
}


def is_user_frame(frame: Frame) -> bool:
    """Code of the job's own (not the interpreter's library, not an installed package such as torch)."""
    path = frame.file.replace("\\", "/")
    if _LIBRARY.search(path) or _TORCH.search(path):
        return False
    if path.startswith("/"):
        return True
    return path.split("/", 1)[0].removesuffix(".py") not in _LIBRARY_TOPS


def user_frame(dump: StackDump) -> Frame | None:
    """The innermost frame of the user's code in the thread that runs the program."""
    thread = dump.main_thread()
    if thread is None:
        return None
    return next((f for f in thread.frames if is_user_frame(f)), None)


# Frames that mean "waiting in a collective": torch.distributed's API (c10d, DDP, FSDP, the elastic store) and
# autograd's backward (where DDP's gradient all_reduce runs).
_COLLECTIVE_FILE = re.compile(r"(?:^|/)torch/(?:distributed/|nn/parallel/distributed\.py)")
_LAUNCHER = re.compile(r"(?:^|/)torch/distributed/(?:elastic/|run\.py|launch)")
_BACKWARD = re.compile(r"(?:^|/)torch/(?:autograd/__init__\.py|_tensor\.py|autograd/graph\.py)$")


def in_collective(dump: StackDump) -> bool:
    """The program's thread is inside torch.distributed (a collective, a barrier, a store wait) or in
    autograd's backward (DDP's all_reduce). A collective called on a process-group object directly
    (`pg.allreduce(...).wait()`) leaves no Python frame of torch: such a wait is seen only by comparing
    ranks (`podmortem.core.hangs`)."""
    thread = dump.main_thread()
    if thread is None:
        return False
    for f in thread.frames:  # what the user's innermost frame called (a launcher's wrapper further out is not it)
        if is_user_frame(f):
            return False
        if (_COLLECTIVE_FILE.search(f.file) and not _LAUNCHER.search(f.file)) or _BACKWARD.search(f.file):
            return True
    return False


def parse_one(text: str) -> StackDump | None:
    """The stack dump a capture holds (its first; a capture is one worker's)."""
    dumps = parse_stacks(text)
    return dumps[0] if dumps else None


def same_place(a: Sequence[Frame], b: Sequence[Frame]) -> bool:
    return [(f.file, f.line) for f in a] == [(f.file, f.line) for f in b]
