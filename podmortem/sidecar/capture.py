"""Evidence of a hang, taken from the training workers of this pod while they still run (or found after).

When a job hangs, the rank that stopped is usually gone before anyone asks it where it stopped: the
first rank to time out ends, its torchrun agent tears the pod's other workers down, and every other pod's
ranks time out at the same moment. So the aggregator asks every sidecar to capture *before* the timeout
(a `CaptureRequest` when the whole job went quiet, or at the first timeout), and the sidecar answers with
one `Capture` event through the outbox (acknowledged, resent) holding what each local worker said,
through whichever of these paths the pod has:

* **The worker control plane** (`control_plane`): a worker run under torch's
  `torch.distributed.elastic.control_plane.worker_main()` with `TORCH_WORKER_SERVER_SOCKET` set serves
  HTTP/1.1 on that unix socket (torch's C++ `_WorkerServer`): `POST /handler/<name>` for `dump_traceback`
  (every thread's Python stack, faulthandler's format), `fr_trace_json` (the Flight Recorder as JSON),
  `pyspy_dump` and `ping`; `GET /handler/` lists them. The sockets are
  `$PODMORTEM_CAPTURE_DIR/worker-<RANK>.sock` (RANK = global rank). No torch here: the sidecar speaks the
  protocol itself (`http1`).
* **py-spy** (`py_spy`, opt-in: `PODMORTEM_PYSPY`): `py-spy dump --pid` on each worker process. It needs
  the pod's process namespace shared with the sidecar (`shareProcessNamespace`) and ptrace
  (`SYS_PTRACE`); the workers are the python processes whose environment has `LOCAL_RANK` (torchrun sets
  it for each worker; its agent has none), the top one of each rank (a DataLoader worker inherits its
  rank's environment). With a capture dir, a worker is a process whose environment names that same
  `PODMORTEM_CAPTURE_DIR` (the webhook sets it on the training container): another is not this pod's (the
  local harness runs every pod on one host, and a process namespace may hold more than the pod's).
  py-spy is asked for a worker the control plane did not answer for.
* **Flight Recorder dump files** (`fr_file`): NCCL writes `$PODMORTEM_CAPTURE_DIR/fr-<rank>` on a
  collective timeout (the webhook points `TORCH_FR_DUMP_TEMP_FILE` there). A dump is a pickle, read only
  by the restricted unpickler of `podmortem.core.flightrecorder` (`summarize_pickle`: plain containers
  and scalars, anything else refused and said in `note`); what leaves the pod is its summary, never the
  pickle. Each file's version is sent once; the files found after the training container ended go out in
  a capture of the sidecar's own (trigger `teardown`).

Bounds: one worker's capture (all its paths) is cut off at `worker_timeout` (2 s) and says so in its
`note`; a stack keeps its last 32 KiB, a Flight Recorder summary fits 64 KiB (fewer entries first; the
wire refuses more); a control-plane answer over `MAX_READ_BYTES` (2 MiB) or a dump file over
`FR_FILE_MAX_BYTES` (32 MiB, streamed: memory bounded by its summary) is not read; at most `max_captures`
requests per job attempt get workers captured (later ones are answered with a note); a request id
already answered is not captured again. Workers are captured concurrently, so a request takes about
`worker_timeout` however many workers the pod runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar import http1

logger = logging.getLogger(__name__)

WORKER_TIMEOUT = 2.0
# The most read of one control-plane answer; more is not read at all (said in `note`). An `fr_trace_json`
# answer is parsed whole (about 6 times its size while summarised: `bench/fr_memory.py --json`), so this
# bound keeps a capture within the sidecar's memory limit.
MAX_READ_BYTES = 2 << 20
# The most read of one Flight Recorder dump file (more is not read: said in `note`), the reader's own bound
# (`flightrecorder.MAX_DUMP_BYTES`). A dump is streamed from the file in 64 KiB chunks and summarised entry
# by entry, in about 1 MiB whatever its size (`bench/fr_memory.py`).
FR_FILE_MAX_BYTES = 32 << 20
STACK_READ_BYTES = 1 << 20  # a stack answer is read up to this, then its last 32 KiB kept
MAX_CAPTURES = 8  # per job attempt
MAX_WORKERS = wire.MAX_WORKERS
_SOCKET = re.compile(r"worker-(\d{1,7})\.sock")
_FR_FILE = re.compile(r"fr-(\d{1,7})")
_ENV_BYTES = 256 << 10  # a process environment larger than this is not read


class CaptureError(Exception):
    """One path of one worker did not answer (the message goes into the worker's `note`)."""


@dataclass(frozen=True)
class Worker:
    """A training worker of this pod, as found by its socket, its process, or both."""

    global_rank: int | None
    local_rank: int | None = None
    pid: int = 0
    socket: Path | None = None


@dataclass
class Capturer:
    """Answers capture requests for one pod (see the module docstring)."""

    capture_dir: Path | None
    pod_key: str
    pyspy: bool = False
    pyspy_binary: str | None = None  # found on PATH (or beside this Python) when None
    worker_timeout: float = WORKER_TIMEOUT
    max_captures: int = MAX_CAPTURES
    proc: Path = Path("/proc")
    answered: set[str] = field(default_factory=set)
    captures: int = 0  # with workers, this attempt
    _fr_sent: dict[str, tuple[int, int]] = field(default_factory=dict)  # file name -> (size, mtime_ns) sent

    def new_attempt(self) -> None:
        """A new job attempt (the training container restarted): the count starts again."""
        self.captures = 0

    async def answer(self, request: pb.CaptureRequest) -> pb.Event | None:
        """The `Capture` event answering `request`; None for a request already answered."""
        if request.request_id in self.answered:
            return None
        self.answered.add(request.request_id)
        trigger = request.trigger if request.trigger in wire.REQUEST_TRIGGERS else "stall"
        if self.captures >= self.max_captures:
            capture = wire.capture_to_pb(
                request.request_id, trigger, [], note=f"capture limit reached ({self.max_captures} this attempt)"
            )
        else:
            self.captures += 1
            budget = request.timeout_seconds if request.timeout_seconds > 0 else self.worker_timeout + 1.0
            capture = await self.capture(request.request_id, trigger, budget)
        return wire.make_event(capture, f"{self.pod_key}/capture/{request.request_id}")

    async def teardown(self) -> pb.Event | None:
        """A capture of the sidecar's own with the Flight Recorder files not sent yet; None when none."""
        workers = await self._fr_files()
        if not workers:
            return None
        capture = wire.capture_to_pb("", "teardown", workers)
        digest = wire.sha256(capture.SerializeToString()).hexdigest()[:20]
        return wire.make_event(capture, f"{self.pod_key}/capture/teardown/{digest}")

    async def capture(self, request_id: str, trigger: str, budget: float) -> pb.Capture:
        """Every local worker through every path it has, concurrently, each cut at `worker_timeout`."""
        workers = self.find_workers()
        notes: list[str] = []
        results: list[pb.WorkerCapture] = []
        try:
            async with asyncio.timeout(max(budget, 0.1)):
                done = await asyncio.gather(*(self._worker(w) for w in workers[:MAX_WORKERS]))
                results.extend(r for r in done if r is not None)
                results.extend(await self._fr_files())
        except TimeoutError:
            notes.append(f"capture cut at its {budget:g} s budget")
        if not workers and not results:
            notes.append(self.no_path())
        return wire.capture_to_pb(request_id, trigger, results, note="; ".join(notes))

    def no_path(self) -> str:
        """Why no worker could be captured, for the capture's `note`."""
        why = []
        if self.capture_dir is None:
            why.append("no capture dir")
        else:
            why.append(f"no control-plane socket in {self.capture_dir}")
        why.append("py-spy on but no worker process visible" if self.pyspy else "py-spy off")
        return "no capture path: " + ", ".join(why)

    async def completed(self) -> tuple[tuple[int, str, int | None], ...] | None:
        """Each local worker's last completed collective per process group (rank, group, seq), from its
        control plane's Flight Recorder; None when no worker answered (the activity detector's sample)."""
        sockets = self._sockets()
        if not sockets:
            return None
        from podmortem.core import flightrecorder

        async def one(rank: int, sock: Path) -> list[tuple[int, str, int | None]] | None:
            try:
                async with asyncio.timeout(self.worker_timeout):
                    data = await self._ask(sock, "fr_trace_json", MAX_READ_BYTES)
                summary = flightrecorder.summarize_json(data, rank=rank, max_entries=1)
            except (CaptureError, OSError, TimeoutError, flightrecorder.FlightRecorderError):
                return None
            return [(rank, pg, s.last_completed) for pg, s in sorted(summary.pg_status.items())]

        answers = [a for a in await asyncio.gather(*(one(r, s) for r, s in sockets[:MAX_WORKERS])) if a is not None]
        return tuple(x for a in answers for x in a) if answers else None

    # -- finding the workers --

    def find_workers(self) -> list[Worker]:
        """This pod's workers: by control-plane socket, and by process when py-spy is on."""
        by_rank: dict[int | None, Worker] = {}
        for rank, sock in self._sockets():
            by_rank[rank] = Worker(global_rank=rank, socket=sock)
        if self.pyspy:
            for proc in self._processes():
                known = by_rank.get(proc.global_rank)
                if known is not None and proc.global_rank is not None:
                    by_rank[proc.global_rank] = Worker(proc.global_rank, proc.local_rank, proc.pid, known.socket)
                else:
                    by_rank[proc.global_rank if proc.global_rank is not None else -proc.pid] = proc
        return sorted(by_rank.values(), key=lambda w: (w.global_rank is None, w.global_rank or 0, w.pid))

    def _sockets(self) -> list[tuple[int, Path]]:
        if self.capture_dir is None:
            return []
        try:
            names = os.listdir(self.capture_dir)
        except OSError:
            return []
        found = [(int(m.group(1)), self.capture_dir / n) for n in names if (m := _SOCKET.fullmatch(n))]
        return sorted(found)

    def _processes(self) -> list[Worker]:
        """Python processes whose environment has LOCAL_RANK: the top one of each RANK."""
        found: dict[int, tuple[int | None, int | None, int]] = {}  # pid -> (rank, local rank, ppid)
        me = os.getpid()
        try:
            pids = [int(p) for p in os.listdir(self.proc) if p.isdigit()]
        except OSError:
            return []
        for pid in pids:
            if pid == me:
                continue
            env = _environ(self.proc / str(pid) / "environ")
            if env is None or "LOCAL_RANK" not in env:
                continue
            theirs = env.get("PODMORTEM_CAPTURE_DIR")
            if self.capture_dir is not None and (not theirs or Path(theirs) != self.capture_dir):
                # Another pod's worker, or no pod's: the webhook gives this pod's training container the
                # sidecar's capture dir, and the local harness runs every pod (and other jobs) on one host.
                continue
            found[pid] = (_int(env.get("RANK")), _int(env.get("LOCAL_RANK")), _ppid(self.proc / str(pid) / "stat"))
        workers = []
        for pid, (rank, local, ppid) in found.items():
            parent = found.get(ppid)
            if parent is not None and parent[0] == rank:
                continue  # a DataLoader worker (or other child) of a worker: its parent is the worker
            workers.append(Worker(global_rank=rank, local_rank=local, pid=pid))
        return workers

    # -- the paths --

    async def _worker(self, worker: Worker) -> pb.WorkerCapture | None:
        """One worker, all its paths, cut at `worker_timeout`."""
        notes: list[str] = []
        stack, fr, path = "", "", ""
        try:
            async with asyncio.timeout(self.worker_timeout):
                if worker.socket is not None:
                    path = "control_plane"
                    try:
                        stack = (await self._ask(worker.socket, "dump_traceback", STACK_READ_BYTES, tail=True)).decode(
                            "utf-8", "replace"
                        )
                    except (CaptureError, OSError) as exc:
                        notes.append(f"dump_traceback: {_why(exc)}")
                    try:
                        fr = await self._fr_json(worker)
                    except (CaptureError, OSError) as exc:
                        notes.append(f"fr_trace_json: {_why(exc)}")
                if not stack and self.pyspy and worker.pid:
                    path = "py_spy"
                    stack = await self._pyspy(worker.pid)
        except TimeoutError:
            notes.append(f"timed out after {self.worker_timeout:g} s")
        except (CaptureError, OSError) as exc:
            notes.append(f"py-spy: {_why(exc)}")
        if not path:
            return None
        return wire.worker_capture_to_pb(
            path,
            local_rank=worker.local_rank,
            global_rank=worker.global_rank,
            stack=stack,
            flight_recorder=fr,
            note="; ".join(notes),
            pid=worker.pid,
        )

    async def _ask(self, socket: Path, handler: str, limit: int, tail: bool = False) -> bytes:
        """POST /handler/<handler> on a worker's control-plane socket; the answer's body (`limit` bytes at
        most, or its last `limit` with `tail`)."""
        reader, writer = await asyncio.open_unix_connection(str(socket), limit=1 << 16)
        head = [f"POST /handler/{handler} HTTP/1.1", "Host: localhost", "Content-Length: 0", "Connection: close"]
        response = await http1.send(reader, writer, head, self.worker_timeout, CaptureError)
        try:
            if tail:  # keep the end of a long answer: a stack's innermost frames are last
                kept = b""
                async for chunk in http1.chunks(response, self.worker_timeout, 1 << 62, CaptureError):
                    kept = (kept + chunk)[-limit:]
                body = kept
            else:
                body = await http1.body(response, self.worker_timeout, limit, CaptureError)
        finally:
            response.close()
        if response.status != 200:
            raise CaptureError(f"answered {response.status}: {body[:200].decode('utf-8', 'replace').strip()}")
        return body

    async def _fr_json(self, worker: Worker) -> str:
        """The worker's Flight Recorder (`fr_trace_json`) as a summary's JSON; "" when it has none."""
        assert worker.socket is not None
        data = await self._ask(worker.socket, "fr_trace_json", MAX_READ_BYTES)
        from podmortem.core import flightrecorder  # only when capturing: pickletools and re are not free

        try:
            summary = flightrecorder.summarize_json(data, rank=worker.global_rank)
        except flightrecorder.FlightRecorderError as exc:
            raise CaptureError(f"refused: {exc}") from None
        return _fitting(summary)

    async def _pyspy(self, pid: int) -> str:
        binary = self.pyspy_binary or find_pyspy()
        if binary is None:
            raise CaptureError("py-spy not found")
        proc = await asyncio.create_subprocess_exec(
            binary,
            "dump",
            "--pid",
            str(pid),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await proc.communicate()
        except BaseException:  # cut off (the worker's timeout) or cancelled: py-spy must not outlive us
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(BaseException):
                await asyncio.shield(proc.wait())
            raise
        if proc.returncode != 0:
            raise CaptureError(f"py-spy exited {proc.returncode}: {err[-300:].decode('utf-8', 'replace').strip()}")
        return out[-STACK_READ_BYTES:].decode("utf-8", "replace")

    async def _fr_files(self) -> list[pb.WorkerCapture]:
        """Flight Recorder dump files not sent yet (in this version), as summaries."""
        if self.capture_dir is None:
            return []
        try:
            names = sorted(os.listdir(self.capture_dir))
        except OSError:
            return []
        out: list[pb.WorkerCapture] = []
        read: dict[str, tuple[int, int]] = {}
        for name in names:
            m = _FR_FILE.fullmatch(name)
            if m is None:
                continue
            if len(out) >= MAX_WORKERS:
                break  # the rest wait for the next capture (what one Capture holds at most)
            path = self.capture_dir / name
            try:
                st = path.stat()
            except OSError:
                continue
            version = (st.st_size, st.st_mtime_ns)
            if self._fr_sent.get(name) == version:
                continue
            rank = int(m.group(1))
            out.append(await asyncio.to_thread(_fr_file, path, rank, st.st_size))
            read[name] = version
        # Counted as sent only once all are read: a capture cut at its budget while reading one (a big dump)
        # drops what it read before, and the next capture (or the teardown's) reads those again.
        self._fr_sent.update(read)
        return out


def _fr_file(path: Path, rank: int, size: int) -> pb.WorkerCapture:
    """One dump file as a WorkerCapture: its summary, or a note saying why there is none."""
    if size > FR_FILE_MAX_BYTES:
        return wire.worker_capture_to_pb(
            "fr_file",
            global_rank=rank,
            note=f"{path.name} is {size} bytes, over the {FR_FILE_MAX_BYTES >> 20} MiB read bound: not read",
        )
    from podmortem.core import flightrecorder

    try:
        with path.open("rb") as f:  # a file still growing is read to `size`, and refused as truncated
            summary = flightrecorder.summarize_pickle_file(f, size, rank=rank)
    except OSError as exc:
        return wire.worker_capture_to_pb("fr_file", global_rank=rank, note=f"cannot read {path.name}: {_why(exc)}")
    except flightrecorder.FlightRecorderError as exc:
        return wire.worker_capture_to_pb("fr_file", global_rank=rank, note=f"refused {path.name}: {exc}")
    return wire.worker_capture_to_pb("fr_file", global_rank=rank, flight_recorder=_fitting(summary))


def _fitting(summary: object) -> str:
    """A summary's JSON within the wire's bound (the summariser cuts to fit; a summary that still does not
    is dropped, and the caller's note says so)."""
    text = summary.to_json()  # type: ignore[attr-defined]
    if len(text.encode()) > wire.FLIGHT_RECORDER_LIMIT:
        raise CaptureError(f"Flight Recorder summary over {wire.FLIGHT_RECORDER_LIMIT >> 10} KiB: left out")
    return text  # type: ignore[no-any-return]


def find_pyspy(path: str | None = None) -> str | None:
    """The py-spy binary: on PATH, else beside this Python (the package installs it in the same bin)."""
    dirs = (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep)
    for d in [*dirs, os.path.dirname(sys.executable)]:
        candidate = os.path.join(d, "py-spy")
        if d and os.access(candidate, os.X_OK):
            return candidate
    return None


def _environ(path: Path) -> dict[str, str] | None:
    """A process's environment (None when it cannot be read: gone, or not ours to read)."""
    try:
        with path.open("rb") as f:
            data = f.read(_ENV_BYTES)
    except OSError:
        return None
    out = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def _ppid(stat: Path) -> int:
    """The parent pid from /proc/<pid>/stat (after the command name, which may hold spaces)."""
    try:
        text = stat.read_text()
        return int(text[text.rindex(")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().lstrip("-").isdigit() else None


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc) or type(exc).__name__
