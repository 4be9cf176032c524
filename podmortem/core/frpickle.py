"""The restricted pickle interpreter that reads Flight Recorder dumps: never `pickle.loads`, never a call.

A pickle is a program for a stack machine; this module runs the part of it that builds plain values (dicts,
lists, tuples, str, bytes, int, float, bool, None) from `pickletools.genops`, and refuses every opcode that
would import a name or call anything (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, EXT*,
PERSID, ...) with a `FlightRecorderError` that names it. No byte of the input is handed to `pickle.loads`
or `pickle.Unpickler`. MARK works as in CPython's unpickler: it opens a new stack frame (a MARK is never a
value), and DICT/LIST/TUPLE/SETITEMS/APPENDS/POP_MARK close it.

Two ways to run it:

- `restricted_loads` builds the whole value (for small inputs, and the reference the streaming reader is
  tested against).
- `stream_loads` reads a dump in memory bounded by what is kept of it, not by its size. A first pass over
  the opcodes counts, for each memo slot, how many GETs read it; the second pass memoises only those slots
  and forgets each after its last GET. The root dict keeps only the keys the caller names. A list created
  as the root's `entries` value is a `Sink`: each of its items is handed to the caller's `Consumer` as soon
  as it is finished, and then dropped (only what `Consumer.compact` returns is kept, in the memo, when a
  later GET reads it). An item is finished when a dict or a list is pushed right above it in the items'
  frame (an unhashable value can be neither its key nor, with it as key, a value: nothing a pickler
  writes changes it after that), or when APPEND/APPENDS takes it. A pickle that changes an item after
  that point, or closes the items' frame by anything but APPENDS (only a hand-made one can), is refused
  as malformed.
"""

from __future__ import annotations

import io
import pickletools
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, Protocol

# The largest dump read at all (pickle or JSON).
MAX_DUMP_BYTES = 32 * 1024 * 1024
# The most memo slots a dump may read back with GET: torch memoises each distinct string and stack frame,
# a few thousand in a ring of 2,000 entries; each live slot holds one small value.
MAX_MEMO_REFS = 1 << 16


class FlightRecorderError(ValueError):
    """A dump or summary that cannot be read: refused (unsafe), truncated, too large or malformed."""


# Opcodes that import a name or call something: never executed, the whole dump is refused.
_UNSAFE = frozenset(
    {
        "GLOBAL",
        "STACK_GLOBAL",
        "REDUCE",
        "BUILD",
        "INST",
        "OBJ",
        "NEWOBJ",
        "NEWOBJ_EX",
        "EXT1",
        "EXT2",
        "EXT4",
        "PERSID",
        "BINPERSID",
        "NEXT_BUFFER",
        "READONLY_BUFFER",
    }
)
_PUSH_VALUE = frozenset(
    {
        "INT",
        "BININT",
        "BININT1",
        "BININT2",
        "LONG",
        "LONG1",
        "LONG4",
        "FLOAT",
        "BINFLOAT",
        "STRING",
        "BINSTRING",
        "SHORT_BINSTRING",
        "UNICODE",
        "BINUNICODE",
        "SHORT_BINUNICODE",
        "BINUNICODE8",
        "BINBYTES",
        "SHORT_BINBYTES",
        "BINBYTES8",
        "BYTEARRAY8",
    }
)
_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


class Consumer(Protocol):
    """What a `Sink` hands its items to."""

    def compact(self, item: Any) -> Any:
        """What is kept of a finished item (called again on its own result: return that unchanged)."""

    def add(self, item: Any) -> None:
        """One item appended to the list, as `compact` returned it."""


class Sink:
    """Stands for the root's `entries` list while streaming: its items go to `consumer`, not into a list."""

    __slots__ = ("consumer",)
    __hash__ = None  # type: ignore[assignment]  # a list is unhashable: so is what stands for one

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer


class _Limited(io.RawIOBase):
    """A binary file read up to `left` bytes: what lies beyond is not read (a file still growing)."""

    def __init__(self, f: IO[bytes], left: int) -> None:
        super().__init__()
        self.f, self.left = f, left

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.f.read(min(len(buffer), self.left))
        buffer[: len(data)] = data
        self.left -= len(data)
        return len(data)


class _Chunks:
    """`f`'s first `size` bytes, read in chunks of 64 KiB; no `tell` (genops would ask it at each opcode)."""

    __slots__ = ("read", "readline")

    def __init__(self, f: IO[bytes], size: int) -> None:
        buffered = io.BufferedReader(_Limited(f, size), buffer_size=1 << 16)
        self.read, self.readline = buffered.read, buffered.readline


def _ops(f: Any) -> Iterator[tuple[str, Any]]:
    try:
        for op, arg, _pos in pickletools.genops(f):
            yield op.name, arg
    except ValueError as e:  # genops: "pickle exhausted before seeing STOP", bad opcode bytes
        raise FlightRecorderError(f"not a complete pickle ({e}): truncated or corrupt") from None


def _unsafe_name(op: str, arg: Any, recent: Sequence[Any]) -> str:
    if op in ("GLOBAL", "INST") and isinstance(arg, str):
        return arg.replace(" ", ".")
    if op == "STACK_GLOBAL":
        names = [x for x in recent[-2:] if isinstance(x, str)]
        if len(names) == 2:
            return ".".join(names)
    return "a callable"


def _as(value: Any, kind: type) -> Any:
    if not isinstance(value, kind):
        raise FlightRecorderError(f"malformed pickle: expected a {kind.__name__}, found {type(value).__name__}")
    return value


def _too_big(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise FlightRecorderError(f"dump is {size} bytes, above the {max_bytes}-byte bound: not read")


def restricted_loads(data: bytes, *, max_bytes: int = MAX_DUMP_BYTES) -> Any:
    """The plain value a pickle describes, all of it built (see the module docstring).

    Raises `FlightRecorderError` for any opcode that would import or call (naming the global it names), for
    a truncated or corrupt stream, and for input above `max_bytes`.
    """
    _too_big(len(data), max_bytes)
    return _Machine(None, None, frozenset()).run(_ops(data))


def stream_loads(
    f: IO[bytes],
    size: int,
    consumer: Callable[[], Consumer],
    root_keys: frozenset[str],
    *,
    max_bytes: int = MAX_DUMP_BYTES,
) -> Any:
    """The root a pickle of `size` bytes in the seekable `f` describes, read in bounded memory (see the
    module docstring): only `root_keys` kept, the root's `entries` a `Sink` whose items went to a new
    `consumer()`. The same refusals as `restricted_loads`."""
    _too_big(size, max_bytes)
    start = f.tell()
    refs = _references(_ops(_Chunks(f, size)))
    f.seek(start)
    return _Machine(refs, consumer, root_keys).run(_ops(_Chunks(f, size)))


def _references(ops: Iterator[tuple[str, Any]]) -> dict[int, int]:
    """Memo slot -> how many GETs read it (the first pass of `stream_loads`)."""
    refs: dict[int, int] = {}
    for op, arg in ops:
        if op in _GETS:
            slot = int(arg)
            refs[slot] = refs.get(slot, 0) + 1
            if len(refs) > MAX_MEMO_REFS:
                raise FlightRecorderError(f"refused: the pickle reads back more than {MAX_MEMO_REFS} memo slots")
    return refs


class _Machine:
    """One run of the interpreter. `refs` None: build everything, memoise every slot (`restricted_loads`)."""

    def __init__(
        self, refs: dict[int, int] | None, consumer: Callable[[], Consumer] | None, root_keys: frozenset[str]
    ) -> None:
        self.refs = refs
        self.consumer = consumer
        self.root_keys = root_keys
        self.stack: list[Any] = []
        self.frames: list[list[Any]] = []  # the stacks below each open MARK
        self.memo: dict[int, Any] = {}
        self.memoized = 0  # MEMOIZE's next slot
        self.puts = False
        self.entry_slots: dict[int, list[int]] = {}  # id of an unfinished item -> memo slots holding it
        self.handed: set[int] = set()  # ids of the frames whose first items went to their Sink already

    def run(self, ops: Iterator[tuple[str, Any]]) -> Any:
        try:
            return self._run(ops)
        except FlightRecorderError:
            raise
        except (IndexError, KeyError, TypeError, ValueError) as e:  # empty stack, unknown slot, unhashable key
            raise FlightRecorderError(f"malformed pickle: {type(e).__name__}: {e}") from None

    def _run(self, ops: Iterator[tuple[str, Any]]) -> Any:
        recent: list[Any] = []  # the last values pushed, to name what a STACK_GLOBAL would have imported
        for op, arg in ops:
            stack = self.stack
            if op in _PUSH_VALUE:
                value = bytes(arg) if op == "BYTEARRAY8" else arg
                stack.append(value)
                recent = [*recent[-1:], value]
            elif op in _UNSAFE:
                raise FlightRecorderError(
                    f"refused: the pickle calls or imports {_unsafe_name(op, arg, recent)} ({op}); "
                    "a Flight Recorder dump holds only plain values"
                )
            elif op in _GETS:
                self._push(self._get(int(arg)))
            elif op in _PUTS:
                if self.memoized:
                    raise FlightRecorderError("malformed pickle: both PUT and MEMOIZE (no pickler writes that)")
                self.puts = True
                self._put(int(arg))
            elif op == "MEMOIZE":
                if self.puts:
                    raise FlightRecorderError("malformed pickle: both PUT and MEMOIZE (no pickler writes that)")
                self.memoized += 1
                self._put(self.memoized - 1)
            elif op in ("PROTO", "FRAME"):
                continue
            elif op == "STOP":
                if len(stack) != 1 or self.frames:
                    raise FlightRecorderError("malformed pickle: stack not single at STOP")
                return stack.pop()
            elif op == "MARK":
                self.frames.append(stack)
                self.stack = []
            elif op == "NONE":
                stack.append(None)
            elif op in ("NEWTRUE", "NEWFALSE"):
                stack.append(op == "NEWTRUE")
            elif op == "EMPTY_DICT":
                self._push({})
            elif op == "EMPTY_LIST":
                self._push(self._new_list())
            elif op == "EMPTY_TUPLE":
                stack.append(())
            elif op == "DICT":
                items = self._pop_mark(op)
                self._push(dict(zip(items[::2], items[1::2], strict=True)))
            elif op == "LIST":
                items = self._pop_mark(op)
                self._push(items if items else self._new_list())
            elif op == "TUPLE":
                items = self._pop_mark(op)
                self.stack.append(tuple(items))
            elif op in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(op[-1])
                if len(stack) < n:
                    raise FlightRecorderError(f"malformed pickle: {op} on a stack of {len(stack)}")
                items = stack[-n:]
                del stack[-n:]
                stack.append(tuple(items))
            elif op == "APPEND":
                value = stack.pop()
                self._extend(stack[-1], [value])
            elif op == "APPENDS":
                items = self._pop_mark(op)
                self._extend(self.stack[-1], items)
            elif op == "SETITEM":
                value = stack.pop()
                key = stack.pop()
                self._setitems(stack, [key, value])
            elif op == "SETITEMS":
                items = self._pop_mark(op)
                self._setitems(self.stack, items)
            elif op == "POP":
                if stack:
                    stack.pop()
                else:
                    self._pop_mark(op)
            elif op == "POP_MARK":
                self._pop_mark(op)
            elif op == "DUP":
                self._push(stack[-1])
            else:  # sets, frozensets and anything newer: not in a Flight Recorder dump
                raise FlightRecorderError(f"refused: pickle opcode {op} is not used by Flight Recorder dumps")
        raise FlightRecorderError("not a complete pickle: no STOP (truncated)")

    def _pop_mark(self, op: str) -> list[Any]:
        if not self.frames:
            raise FlightRecorderError("malformed pickle: no MARK")
        items = self.stack
        if id(items) in self.handed:
            self.handed.discard(id(items))
            if op != "APPENDS":
                raise FlightRecorderError(f"malformed pickle: entries closed by {op} (no pickler writes that)")
        self.stack = self.frames.pop()
        return items

    def _sink_frame(self) -> Sink | None:
        """The Sink whose items the current frame holds (the value below the frame's MARK), if any."""
        if self.refs is None or not self.frames or not self.frames[-1]:
            return None
        owner = self.frames[-1][-1]
        return owner if type(owner) is Sink else None

    def _push(self, value: Any) -> None:
        stack = self.stack
        if stack and type(stack[-1]) is dict and type(value) in (dict, list, Sink):
            sink = self._sink_frame()
            if sink is not None and not any(type(x) is list for x in stack):
                # The items below are finished (module docstring; a list could still be appended to): handed
                # over in order, and dropped from the frame, which the APPENDS that closes it then skips.
                for item in stack:
                    sink.consumer.add(self._compact(sink, item))
                stack.clear()
                self.handed.add(id(stack))
        stack.append(value)

    def _compact(self, sink: Sink, item: Any) -> Any:
        kept = sink.consumer.compact(item)
        for slot in self.entry_slots.pop(id(item), ()):
            if self.memo.get(slot) is item:
                self.memo[slot] = kept
        return kept

    def _new_list(self) -> list[Any] | Sink:
        """A new empty list; a `Sink` when it is the value of the root's "entries" (streaming only)."""
        if self.consumer is None:
            return []
        stack, frames = self.stack, self.frames
        in_root_batch = len(frames) == 1 and len(frames[0]) == 1 and type(frames[0][0]) is dict and len(stack) % 2 == 1
        root_setitem = not frames and len(stack) == 2 and type(stack[0]) is dict
        if (in_root_batch or root_setitem) and stack[-1] == "entries":
            return Sink(self.consumer())
        return []

    def _get(self, slot: int) -> Any:
        value = self.memo[slot]
        if self.refs is not None:
            left = self.refs[slot] - 1
            if left:
                self.refs[slot] = left
            else:  # its last reader: forgotten
                del self.refs[slot], self.memo[slot]
        return value

    def _put(self, slot: int) -> None:
        value = self.stack[-1]
        if self.refs is not None and slot not in self.refs:
            return  # never read back: not kept
        self.memo[slot] = value
        if type(value) is dict and self._sink_frame() is not None:
            self.entry_slots.setdefault(id(value), []).append(slot)

    def _extend(self, target: Any, items: list[Any]) -> None:
        if type(target) is Sink:
            for item in items:
                target.consumer.add(self._compact(target, item))
        else:
            _as(target, list).extend(items)

    def _setitems(self, stack: list[Any], items: list[Any]) -> None:
        target = _as(stack[-1], dict)
        pairs = zip(items[::2], items[1::2], strict=True)
        if self.refs is not None and len(stack) == 1 and not self.frames:  # the root: only the keys asked for
            for k, v in pairs:
                if k in self.root_keys:  # an unhashable key raises TypeError here, as when kept
                    target[k] = v
        else:
            for k, v in pairs:
                target[k] = v
