"""Fuzz the three ways untrusted bytes reach podmortem — the error-file parser, the bundle loader and the
engine — with atheris (coverage-guided, libFuzzer), and report crashes and slow inputs.

    python -m bench.fuzz --target errorfile --runs 600000
    python -m bench.fuzz --target bundle --runs 150000
    python -m bench.fuzz --target engine --runs 250000
    python -m bench.fuzz --target wire --runs 1000000
    python -m bench.fuzz --smoke          # every target briefly (CI)

* errorfile: any bytes as an error file (`errorfile.parse_bytes`), and split as the head and tail of an
  error file over the 1 MiB limit (`errorfile._salvage`); each must return a record, never raise.
* bundle: a one-pod bundle whose pod.json, log.txt and error.json are made of the input (mutated real
  samples from tests/ and the dev corpus); `load_bundle` may refuse it only with `BundleError`, and
  whatever it accepts `engine.decide` must decide.
* engine: an incident of 1-6 members built field by field from the input (hostile numbers, real and
  random log lines, any exit code, signal, phase, condition, and captures: stacks, and Flight Recorder
  summaries of any int64 numbers that `FRSummary.from_json` accepts, for the hang matcher); `decide`
  must return a verdict whose pod is a member or None and whose confidence is in [0, 1].
* wire: one sidecar stream of every message the proto has (register, events of each payload — the hang
  ones too: `Activity`, `Capture` with its workers' stacks and Flight Recorder summaries — clock probes
  and estimates, holds), its numbers hostile (NaN, infinities, huge or negative times and nanos, int64
  extremes, a summary's numbers beyond int64 or not numbers JSON allows) or its bytes mutated, through the
  aggregator's real `CollectorService.Report` (its incident book, hold desk and stall desk, which sends
  `CaptureRequest`s back on the stream); a `CaptureRequest` of the same numbers through the sidecar's
  real `StreamClient` and `Capturer` (an empty capture dir), whose answer joins the stream; and a clock
  reply of the same numbers through the sidecar's clock filter. A stream may end only with a gRPC status
  (INVALID_ARGUMENT, RESOURCE_EXHAUSTED). A stall is an input after which the event loop's timer heap
  holds a deadline that is not finite, or whose stream takes over 2 s; the run counts stalls and fails on
  the first.

An exception other than the documented refusal is a crash: libFuzzer stops and writes the input to
crash-*. Each input is timed; the run prints the count, the slowest input and how many took over
100 ms (with instrumentation on: the uninstrumented code is faster).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import atheris

from bench.common import DEV_CORPUS, REPO, corpus_dir

# --retime runs saved inputs on the code as it is, without the coverage instrumentation.
with contextlib.nullcontext() if "--retime" in sys.argv else atheris.instrument_imports(include=["podmortem"]):
    from podmortem.aggregator.holding import HoldDesk
    from podmortem.aggregator.incidents import IncidentBook
    from podmortem.aggregator.running import make_decide
    from podmortem.aggregator.server import CollectorService
    from podmortem.aggregator.stalls import StallDesk
    from podmortem.core import engine, errorfile
    from podmortem.core.flightrecorder import FlightRecorderError, FRSummary
    from podmortem.core.model import Condition, ErrorRecord, Incident, JobRef, Member, Termination, WorkerCapture
    from podmortem.offline.bundle import BundleError, load_bundle
    from podmortem.protocol.v1 import collector_pb2 as pb
    from podmortem.protocol.wire import check_capture_event, clock_estimate
    from podmortem.sidecar.capture import Capturer
    from podmortem.sidecar.outbox import Outbox
    from podmortem.sidecar.stream import ClockFilter, StreamClient, clock_sample

SLOW = 0.100
SEED_LINES = [
    "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.11]:4455",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "[rank3]:[E ProcessGroupNCCL.cpp:563] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7)",
    "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 0 (pid: 77)",
    "Root Cause (first observed failure):",
    "  exitcode  : -11 (pid: 4242)",
    "  rank      : 1 (local_rank: 1)",
    "  time      : 2026-11-21_15:06:10",
    "E1121 15:06:10.123456 140 torch/distributed/elastic/multiprocessing/api.py:832] failed (exitcode: 1)",
    "host:1234:5678 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with error 12",
    "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    "ValueError: bad label 7 in batch 1234",
    "Segmentation fault (core dumped)",
    "Killed",
]
STATE: dict[str, Any] = {
    "stalls": 0,
    "runs": 0,
    "total": 0,
    "slowest": 0.0,
    "slow": 0,
    "target": "",
    "started": time.monotonic(),
}


def _report() -> None:
    took = time.monotonic() - STATE["started"]
    print(
        f"fuzz {STATE['target']}: {STATE['runs']} inputs in {took:.0f} s, crashes 0, stalls {STATE['stalls']}, "
        f"slowest {STATE['slowest'] * 1000:.1f} ms, over {SLOW * 1000:.0f} ms: {STATE['slow']}",
        flush=True,
    )


def _timed(fn: Any, data: bytes) -> None:
    t0 = time.perf_counter()
    fn(data)
    took = time.perf_counter() - t0
    STATE["runs"] += 1
    STATE["slowest"] = max(STATE["slowest"], took)
    if took > SLOW:
        STATE["slow"] += 1
        kept = STATE["slow_dir"] / f"slow-{STATE['slow']:04d}"  # for --retime
        kept.write_bytes(data)
        print(f"slow input ({took * 1000:.0f} ms, kept as {kept}): {data[:200]!r}", file=sys.stderr, flush=True)
    if STATE["runs"] == STATE["total"]:
        _report()  # libFuzzer exits the process after the last run: no atexit
        # Nothing to look at again: the scratch goes (a crash exits before this, and keeps its input there).
        if not STATE["slow"]:
            shutil.rmtree(STATE["slow_dir"], ignore_errors=True)


# -- targets --------------------------------------------------------------------------------------


def fuzz_errorfile(data: bytes) -> None:
    record = errorfile.parse_bytes(data)
    assert isinstance(record, ErrorRecord)
    # The same bytes as the head and tail an over-1-MiB file is salvaged from (split where a byte says).
    cut = data[0] * len(data) // 256 if data else 0
    salvaged = errorfile._salvage(data[:cut], data[cut:], errorfile.MAX_FILE_BYTES + len(data))
    assert isinstance(salvaged, ErrorRecord)


def _text(fdp: atheris.FuzzedDataProvider, lines: int = 6) -> str:
    out = []
    for _ in range(fdp.ConsumeIntInRange(0, lines)):
        if fdp.ConsumeBool():
            out.append(SEED_LINES[fdp.ConsumeIntInRange(0, len(SEED_LINES) - 1)])
        else:
            out.append(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 120)))
    return "\n".join(out)


def _number(fdp: atheris.FuzzedDataProvider) -> float | None:
    pick = int(fdp.ConsumeIntInRange(0, 5))
    choices: list[float | None] = [
        None,
        math.inf,
        -math.inf,
        math.nan,
        float(fdp.ConsumeFloat()),
        float(fdp.ConsumeInt(8)),
    ]
    return choices[pick]


def _int(fdp: atheris.FuzzedDataProvider) -> int | None:
    return None if fdp.ConsumeBool() else fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 9))


def _member(fdp: atheris.FuzzedDataProvider, i: int) -> Member:
    error = None
    if fdp.ConsumeBool():
        message = _text(fdp, 3)
        error = ErrorRecord(
            message=message,
            exception_type=errorfile.exception_type_of(message),
            traceback=_text(fdp, 3),
            timestamp=_int(fdp),
            error_code=_int(fdp),
            parse_error="" if fdp.ConsumeBool() else "broken",
        )
    termination = None
    if fdp.ConsumeBool():
        termination = Termination(
            exit_code=_int(fdp),
            signal=_int(fdp),
            reason=["Error", "OOMKilled", "Completed", "ContainerStatusUnknown", "", "x"][fdp.ConsumeIntInRange(0, 5)],
            message=_text(fdp, 2),
            started_at=_number(fdp),
            finished_at=_number(fdp),
            restart_count=fdp.ConsumeIntInRange(0, 5),
        )
    conditions: tuple[Condition, ...] = ()
    if fdp.ConsumeBool():
        reason = ["PreemptionByScheduler", "DeletionByTaintManager", "EvictionByEvictionAPI", "x"][
            fdp.ConsumeIntInRange(0, 3)
        ]
        conditions = (Condition("DisruptionTarget", "True", reason, _text(fdp, 1), _number(fdp)),)
    captures = []
    for _ in range(fdp.ConsumeIntInRange(0, 2) if fdp.ConsumeBool() else 0):
        summary = None
        if fdp.ConsumeBool():
            try:  # what reaches the engine has passed the wire's (or a bundle's) validation
                summary = FRSummary.from_json(_summary(fdp))
            except FlightRecorderError:
                pass
        captures.append(
            WorkerCapture(
                path=["control_plane", "py_spy", "fr_file", "sigterm_stack"][fdp.ConsumeIntInRange(0, 3)],
                global_rank=fdp.ConsumeIntInRange(0, 5) if fdp.ConsumeBool() else _int(fdp),
                stack=[STACK, "", _text(fdp, 6)][fdp.ConsumeIntInRange(0, 2)],
                flight_recorder=summary,
                note=_text(fdp, 1) if fdp.ConsumeBool() else "",
                trigger=TRIGGERS[fdp.ConsumeIntInRange(0, len(TRIGGERS) - 1)],
                captured_at=_number(fdp),
            )
        )
    return Member(
        pod=f"p-{i}",
        namespace="ns",
        node=f"n-{fdp.ConsumeIntInRange(0, 3)}",
        rank=_int(fdp),
        pod_ip=f"10.0.0.{fdp.ConsumeIntInRange(0, 300)}",
        phase=["", "Running", "Failed", "Succeeded", "Unknown"][fdp.ConsumeIntInRange(0, 4)],
        phase_reason=["", "NodeLost", "Deleted", "Evicted"][fdp.ConsumeIntInRange(0, 3)],
        running=fdp.ConsumeBool(),
        error=error,
        termination=termination,
        conditions=conditions,
        deleted_at=_number(fdp),
        log_tail=_text(fdp, 12),
        error_observed_at=_number(fdp),
        termination_observed_at=_number(fdp),
        clock_offset=_number(fdp),
        clock_round_trip=_number(fdp),
        captures=tuple(captures),
    )


def _check(incident: Incident) -> None:
    verdict = engine.decide(incident)
    pods = {m.pod for m in incident.members}
    assert verdict.pod is None or verdict.pod in pods, verdict.pod
    assert 0.0 <= verdict.confidence <= 1.0, verdict.confidence


def fuzz_engine(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    members = tuple(_member(fdp, i) for i in range(fdp.ConsumeIntInRange(1, 6)))
    _check(Incident(job=JobRef("ns", "job"), world_size=fdp.ConsumeIntInRange(0, 10), members=members))


BUNDLE_DIR = Path()  # the bundle target's files: `bundle/` in the run's scratch directory (run_target)
BUNDLE_FILES = ("pod.json", "log.txt", "error.json")
SPLIT = b"\n--8<--\n"  # between the files of one bundle input (in the dictionary too)
INCIDENT_JSON = json.dumps({"job": {"namespace": "ns", "name": "job", "kind": "PyTorchJob"}, "world_size": 1})


def fuzz_bundle(data: bytes) -> None:
    """The input is a flags byte, then the pod's files separated by SPLIT: bit i of the flags keeps file i
    (else it is absent); bit 7 makes the first part incident.json instead (otherwise a valid one)."""
    flags, parts = (data[0], data[1:].split(SPLIT)) if data else (0, [])
    (BUNDLE_DIR / "incident.json").write_bytes(parts.pop(0) if flags & 0x80 and parts else INCIDENT_JSON.encode())
    pod = BUNDLE_DIR / "pods" / "p-0"
    pod.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(BUNDLE_FILES):
        path = pod / name
        if flags & (1 << i):
            path.write_bytes(parts[i] if i < len(parts) else b"")
        else:
            path.unlink(missing_ok=True)
    try:
        incident = load_bundle(BUNDLE_DIR)
    except BundleError:
        return
    _check(incident)


class _Aborted(Exception):
    """A stream the servicer ended with a status (grpc's `context.abort` raises likewise)."""


class _Context:
    """The servicer context a stream without authentication uses: its metadata and `abort`."""

    def invocation_metadata(self) -> tuple[()]:
        return ()

    async def abort(self, code: Any, details: str = "") -> None:
        raise _Aborted(code, details)


_INT64 = (0, 1, -1, 2**31 - 1, -(2**31), 2**62, 2**63 - 1, -(2**63), 253_402_300_800, -62_135_596_801, 10**9)


def _int64(fdp: atheris.FuzzedDataProvider) -> int:
    return _INT64[fdp.ConsumeIntInRange(0, len(_INT64) - 1)] if fdp.ConsumeBool() else fdp.ConsumeInt(8)


def _timestamp(fdp: atheris.FuzzedDataProvider, ts: Any) -> None:
    if fdp.ConsumeBool():
        ts.seconds = _int64(fdp)
        ts.nanos = fdp.ConsumeInt(4)


def _float(fdp: atheris.FuzzedDataProvider) -> float:
    number = _number(fdp)
    return 0.0 if number is None else number


def _event(fdp: atheris.FuzzedDataProvider, i: int) -> Any:
    event = pb.Event(id=f"e{fdp.ConsumeIntInRange(0, 3)}-{i}", monotonic_ns=_int64(fdp))
    _timestamp(fdp, event.wall_time)
    kind = fdp.ConsumeIntInRange(0, 6)
    if kind == 0:
        err = event.error_file
        err.message = _text(fdp, 2)
        if fdp.ConsumeBool():
            err.timestamp = _int64(fdp)
        if fdp.ConsumeBool():
            err.error_code = fdp.ConsumeInt(4)
        err.size_bytes = _int64(fdp)
    elif kind == 1:
        term = event.termination
        if fdp.ConsumeBool():
            term.exit_code = fdp.ConsumeInt(4)
        if fdp.ConsumeBool():
            term.signal = fdp.ConsumeInt(4)
        term.reason = ["Error", "OOMKilled", "Completed", ""][fdp.ConsumeIntInRange(0, 3)]
        term.restart_count = fdp.ConsumeInt(4)
        _timestamp(fdp, term.started_at)
        _timestamp(fdp, term.finished_at)
    elif kind == 2:
        cond = event.condition
        cond.type, cond.status = "DisruptionTarget", "True"
        cond.reason = ["PreemptionByScheduler", "DeletionByTaintManager", "x"][fdp.ConsumeIntInRange(0, 2)]
        _timestamp(fdp, cond.last_transition_time)
    elif kind == 3:
        event.deletion.phase = ["Failed", "Unknown", "Running", ""][fdp.ConsumeIntInRange(0, 3)]
        _timestamp(fdp, event.deletion.deletion_timestamp)
    elif kind == 4:
        event.log_tail.text = _text(fdp, 4).encode("utf-8", "surrogatepass")
    elif kind == 5:
        event.activity.quiet = fdp.ConsumeBool()
        event.activity.quiet_seconds = _float(fdp)
        _timestamp(fdp, event.activity.last_progress)
    else:
        _capture(fdp, event.capture)
    return event


STACK = (
    "Thread 0x00007f3a2b7fe640 (most recent call first):\n"
    '  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 2501 in all_reduce\n'
    '  File "/workspace/train.py", line 42 in step\n'
    '  File "/workspace/train.py", line 80 in <module>\n'
)
TRIGGERS = ["stall", "first_timeout", "teardown", "", "x"]
PATHS = ["control_plane", "py_spy", "fr_file", "", "sigterm_stack"]
OPS = ["nccl:all_reduce", "gloo:broadcast", "nccl:send", "", "x" * 600]
STATES = ["scheduled", "started", "completed", "", "x"]
# A summary's numbers as JSON text: int64 extremes, beyond them, floats where ints belong, and the
# constants JSON does not allow (Python's json writes them; `FRSummary.from_json` must refuse them).
_JSON_NUMBERS = ("0", "-1", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
                 "1e999", "-1e999", "NaN", "Infinity", "0.5", "-0.0", "null", "true", "\"7\"")  # fmt: skip


def _json_number(fdp: atheris.FuzzedDataProvider) -> str:
    if fdp.ConsumeBool():
        return _JSON_NUMBERS[fdp.ConsumeIntInRange(0, len(_JSON_NUMBERS) - 1)]
    return str(_int64(fdp))


def _small_or_int64(fdp: atheris.FuzzedDataProvider) -> str:
    """Ranks and sequence numbers that agree across members (small), or any int64."""
    return str(fdp.ConsumeIntInRange(-1, 8) if fdp.ConsumeBool() else _int64(fdp))


def _summary(fdp: atheris.FuzzedDataProvider) -> str:
    """A Flight Recorder summary's JSON, shaped as `FRSummary.to_json` writes it: its numbers small or any
    int64 (ones the reader accepts, for the matcher to chew on) or, half the time, hostile (ones it must
    refuse)."""
    n = _json_number if fdp.ConsumeBool() else _small_or_int64
    groups = []
    for g in range(fdp.ConsumeIntInRange(0, 2)):
        ranks = ",".join(n(fdp) if fdp.ConsumeBool() else str(r) for r in range(fdp.ConsumeIntInRange(0, 4)))
        groups.append(
            (
                f'"{g}":{{"last_enqueued":{n(fdp)},"last_started":{n(fdp)},"last_completed":{n(fdp)}}}',
                f'"{g}":{{"name":"{g}","desc":"default_pg","ranks":[{ranks}]}}',
            )
        )
    entries = []
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        op = json.dumps(OPS[fdp.ConsumeIntInRange(0, len(OPS) - 1)])
        state = json.dumps(STATES[fdp.ConsumeIntInRange(0, 3) if fdp.ConsumeIntInRange(0, 7) else 4])
        entries.append(
            f'{{"pg_id":"{fdp.ConsumeIntInRange(0, 2)}","seq":{n(fdp)},"op":{op},"state":{state},'
            f'"input_sizes":[[{n(fdp)},{n(fdp)}]],"output_sizes":[[{n(fdp)}]],"input_dtypes":["Float"],'
            f'"output_dtypes":["Float"],"frames":[{{"file":"train.py","line":{n(fdp)},"function":"step"}}],'
            f'"time_created_ns":{n(fdp)},"timeout_ms":{n(fdp)},"is_p2p":{"true" if fdp.ConsumeBool() else "false"}}}'
        )
    source = ["json", "pickle", "x"][fdp.ConsumeIntInRange(0, 1) if fdp.ConsumeIntInRange(0, 7) else 2]
    return (
        f'{{"version":{n(fdp) if fdp.ConsumeIntInRange(0, 7) == 0 else "1"},"rank":{n(fdp)},"source":"{source}",'
        f'"truncated":false,"note":"","pg_status":{{{",".join(s for s, _ in groups)}}},'
        f'"pg_config":{{{",".join(c for _, c in groups)}}},"entries":[{",".join(entries)}]}}'
    )


def _capture(fdp: atheris.FuzzedDataProvider, capture: Any) -> None:
    """A `Capture`: its trigger, id and workers any (an unknown path, over 64 workers, texts over their
    bounds), their ranks int32 extremes, their stacks and Flight Recorder summaries hostile."""
    capture.request_id = ["", "ns:job-0/stall/1", "ns:job-1/first_timeout/2", "r" * 200][fdp.ConsumeIntInRange(0, 3)]
    capture.trigger = TRIGGERS[fdp.ConsumeIntInRange(0, len(TRIGGERS) - 1)]
    capture.note = _text(fdp, 1)
    count = 65 if fdp.ConsumeIntInRange(0, 15) == 0 else fdp.ConsumeIntInRange(0, 3)
    for _ in range(count):
        w = capture.workers.add()
        # Mostly a known path and a stack within bounds: one bad worker refuses the whole capture.
        w.path = (
            PATHS[fdp.ConsumeIntInRange(0, 2)] if fdp.ConsumeIntInRange(0, 3) else PATHS[fdp.ConsumeIntInRange(3, 4)]
        )
        if fdp.ConsumeBool():
            w.global_rank = fdp.ConsumeInt(4)
        if fdp.ConsumeBool():
            w.local_rank = fdp.ConsumeInt(4)
        pick = fdp.ConsumeIntInRange(0, 7)
        w.stack = [STACK, "", _text(fdp, 6), STACK * 400][min(pick, 2) if pick < 7 else 3]
        if fdp.ConsumeBool():
            w.flight_recorder = _summary(fdp)
        w.note = _text(fdp, 1)
        w.pid = fdp.ConsumeInt(4)


def _capture_request(fdp: atheris.FuzzedDataProvider) -> Any:
    # Mostly a new id (an id answered before gets no second answer), else none, one over its bound, any text.
    pick = fdp.ConsumeIntInRange(0, 5)
    request_id = f"ns:job-0/stall/{WIRE['inputs']}" if pick > 2 else ["", "x" * 200, _text(fdp, 1)][pick]
    trigger = TRIGGERS[fdp.ConsumeIntInRange(0, len(TRIGGERS) - 1)]
    return pb.CaptureRequest(request_id=request_id, trigger=trigger, timeout_seconds=_float(fdp))


def _message(fdp: atheris.FuzzedDataProvider, i: int) -> Any:
    kind = fdp.ConsumeIntInRange(0, 4)
    if kind == 0:
        return pb.SidecarMessage(event=_event(fdp, i))
    if kind == 1:
        probe = pb.ClockProbe(seq=_int64(fdp))
        _timestamp(fdp, probe.t1)
        return pb.SidecarMessage(clock_probe=probe)
    if kind == 2:
        estimate = pb.ClockEstimate(offset_ns=_int64(fdp), round_trip_ns=_int64(fdp), samples=fdp.ConsumeInt(4))
        return pb.SidecarMessage(clock_estimate=estimate)
    if kind == 3:
        return pb.SidecarMessage(hold=pb.Hold(seq=_int64(fdp), timeout_seconds=_float(fdp)))
    return pb.SidecarMessage(register=pb.Register(pod="again"))


def _register(fdp: atheris.FuzzedDataProvider) -> Any:
    reg = pb.Register(
        job=pb.JobRef(namespace="ns", name=f"job-{fdp.ConsumeIntInRange(0, 7)}"),
        pod=f"p-{fdp.ConsumeIntInRange(0, 3)}",
        attempt=["", "0", "1"][fdp.ConsumeIntInRange(0, 2)],
        holds=fdp.ConsumeBool(),
        captures=fdp.ConsumeBool(),
    )
    for name in ("world_size_hint", "rank", "replica_index"):
        if fdp.ConsumeBool():
            setattr(reg, name, fdp.ConsumeInt(4))
    return reg


WIRE: dict[str, Any] = {"loop": None, "service": None, "inputs": 0, "capturer": None, "client": None}


def _service() -> Any:
    """The aggregator's servicer over a fresh book, hold desk and stall desk, and the sidecar's capturer
    and stream client (every 1,000 inputs: what they hold is bounded by their own limits, not by a fuzz
    run's length). The stall desk asks and waits for no time (`capture_wait` 0): its rounds end, and
    provisional verdicts are decided, on the loop's next turn."""
    old = WIRE["service"]
    if old is not None:
        for key in old.book.open_incidents():
            timer = old.book._jobs[key].timer
            if timer is not None:
                timer.cancel()

    async def nowhere(namespace: str, pod: str, condition: Any) -> None:
        return None

    decide = make_decide()
    book = IncidentBook(decide, lambda d: None, quorum_timeout=3600.0, max_jobs=64)
    desk = HoldDesk(book, decide, nowhere, peer_wait=0.0, verified=lambda key: True)
    stalls = StallDesk(book, capture_wait=0.0, resume_grace=0.0, rejoin_delay=0.0)
    WIRE["service"] = CollectorService(book, holds=desk, register_deadline=1.0, stalls=stalls)
    WIRE["capturer"] = Capturer(BUNDLE_DIR / "capture", "ns/p-0", worker_timeout=0.05)
    client = StreamClient("127.0.0.1:1", pb.Register(pod="p-0"), Outbox())  # never connects: its handler only
    answered: list[Any] = []
    client.on_capture_request = answered.append
    WIRE["client"], WIRE["answered"] = client, answered
    return WIRE["service"]


async def _answer(request: Any) -> Any:
    """The sidecar's side of a `CaptureRequest`: its stream's check, then its capturer's answer (None
    when the request was refused or answered before). The answer must be within the proto's bounds."""
    WIRE["answered"].clear()
    WIRE["client"]._on_capture_request(request)
    if not WIRE["answered"]:
        return None
    event = await WIRE["capturer"].answer(WIRE["answered"][0])
    if event is not None:
        check_capture_event(event)
    return event


async def _stream(service: Any, messages: list[Any]) -> None:
    async def requests() -> Any:
        for msg in messages:
            yield msg

    try:
        async for _ in service.Report(requests(), _Context()):
            pass
    except _Aborted:
        pass


def _stalled(loop: asyncio.AbstractEventLoop, took: float) -> bool:
    heap = loop._scheduled  # type: ignore[attr-defined]
    return took > 2.0 or not all(math.isfinite(handle.when()) for handle in heap)


def fuzz_wire(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    if WIRE["loop"] is None:
        WIRE["loop"] = asyncio.new_event_loop()
        logging.disable(logging.WARNING)  # each refusal is logged: a million lines would be the run's cost
    loop = WIRE["loop"]
    if WIRE["inputs"] % 1000 == 0:
        _service()
    WIRE["inputs"] += 1
    if fdp.ConsumeBool():  # bytes as they come off the wire, mutated
        msg = pb.SidecarMessage()
        try:
            msg.ParseFromString(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 512)))
        except Exception:  # protobuf's DecodeError: grpc refuses such a message before the servicer
            return
        messages = [pb.SidecarMessage(register=_register(fdp)), msg]
    else:
        messages = [pb.SidecarMessage(register=_register(fdp))]
        messages += [_message(fdp, i) for i in range(fdp.ConsumeIntInRange(1, 6))]
    t0 = time.perf_counter()
    if fdp.ConsumeBool():  # the sidecar answers a capture request of hostile numbers; the answer joins the stream
        answer = loop.run_until_complete(_answer(_capture_request(fdp)))
        if answer is not None:
            messages.append(pb.SidecarMessage(event=answer))
    loop.run_until_complete(_stream(WIRE["service"], messages))
    if _stalled(loop, time.perf_counter() - t0):
        STATE["stalls"] += 1
        raise AssertionError(f"stall: {messages}")
    # The sidecar's side: a clock reply of the same numbers, through its filter, to an estimate.
    clock = ClockFilter()
    clock.add(clock_sample(_int64(fdp), _int64(fdp), _int64(fdp), _int64(fdp)))
    if (estimate := clock.estimate()) is not None:
        assert clock_estimate(estimate) is not None


TARGETS = {"errorfile": fuzz_errorfile, "engine": fuzz_engine, "bundle": fuzz_bundle, "wire": fuzz_wire}


def _compact(path: Path) -> bytes:
    """A seed part that fits the input size: JSON re-written compactly, a log as its last 2 KB."""
    if not path.is_file():
        return b""
    data = path.read_bytes()
    if path.suffix == ".json":
        return json.dumps(json.loads(data), separators=(",", ":")).encode()
    return data[-2048:]


def _seeds(target: str, directory: Path) -> None:
    """Real inputs to start from: error files, pod.json files and logs of the dev corpus and tests."""
    corpus = corpus_dir()
    found: list[Path] = []
    for pattern in ("**/error.json", "**/pod.json", "**/log.txt"):
        found.extend(sorted(corpus.glob(pattern))[:40])
        found.extend([p for p in sorted((REPO / "tests").glob(pattern)) if DEV_CORPUS not in p.parents][:20])
    for i, path in enumerate(found):
        try:
            (directory / f"seed-{i}").write_bytes(path.read_bytes()[:16384])
        except OSError:
            continue
    if target == "bundle":  # whole pods of the dev corpus, in the target's layout
        for i, pod in enumerate(sorted(corpus.glob("*/pods/*"))[:60]):
            parts = [_compact(pod / name) for name in BUNDLE_FILES]
            flags = sum(1 << k for k, name in enumerate(BUNDLE_FILES) if (pod / name).is_file())
            (directory / f"pod-{i}").write_bytes(bytes([flags]) + SPLIT.join(parts))
    for i, line in enumerate(SEED_LINES):
        (directory / f"line-{i}").write_bytes(line.encode())
    doc = {"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "tb", "timestamp": "1e999"}}}
    (directory / "hostile").write_text(json.dumps(doc))
    (directory / "deep").write_text('{"message":' * 700 + "[" * 1000)  # json recurses per level


# Words of the formats (libFuzzer -dict): mutations that insert them reach far more of the parsers than
# byte flips alone (the error-file target's coverage: 58 edges without, see docs/reliability.md).
DICTIONARY = [
    '"message"', '"extraInfo"', '"py_callstack"', '"timestamp"', '"errorCode"', '"metadata"', '"name"',
    '"namespace"', '"uid"', '"labels"', '"annotations"', '"ownerReferences"', '"spec"', '"nodeName"',
    '"status"', '"phase"', '"reason"', '"conditions"', '"type"', '"DisruptionTarget"', '"containerStatuses"',
    '"initContainerStatuses"', '"state"', '"lastState"', '"terminated"', '"running"', '"exitCode"',
    '"signal"', '"startedAt"', '"finishedAt"', '"restartCount"', '"deletionTimestamp"', '"OOMKilled"',
    '"Failed"', '"NodeLost"', '"2026-11-21T15:06:10Z"', "1e999", "-1e999", "9223372036854775808",
    "-9223372036854775809", "NaN", "Infinity", "-Infinity", "null", "true", "false", "[[[[[[[[", "\\u0000",
    "\\ud800", "Traceback (most recent call last):", "exitcode  : -9", "Connection closed by peer",
    "\n--8<--\n",
]  # fmt: skip


def _dictionary(path: Path) -> None:
    """libFuzzer's format: one quoted word a line; quotes, backslashes and non-printable bytes as \\xHH."""

    def quoted(word: str) -> str:
        return "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\x{c:02X}" for c in word.encode())

    path.write_text("".join(f'"{quoted(word)}"\n' for word in DICTIONARY))


def _paths(work: Path, seeds: Path) -> list[str]:
    return [f"-artifact_prefix={work}/", f"-dict={work / 'words.dict'}", str(seeds)]


def run_target(target: str, runs: int) -> int:
    work = Path(tempfile.mkdtemp(prefix=f"podmortem-fuzz-{target}-"))
    seeds = work / "seeds"
    seeds.mkdir()
    _seeds(target, seeds)
    _dictionary(work / "words.dict")
    STATE["target"], STATE["total"] = target, runs
    STATE["slow_dir"] = work
    global BUNDLE_DIR
    BUNDLE_DIR = work / "bundle"
    BUNDLE_DIR.mkdir()
    (BUNDLE_DIR / "capture").mkdir()  # the wire target's capturer: an empty capture dir (no worker answers)
    fn = TARGETS[target]
    engine.decide(Incident(JobRef("ns", "warm-up"), 1, (Member(pod="p", log_tail=SEED_LINES[0]),)))  # compiles rules
    atheris.Setup(
        [sys.argv[0], f"-runs={runs}", "-max_len=8192", "-rss_limit_mb=4096", *_paths(work, seeds)],
        lambda data: _timed(fn, data),
    )
    atheris.Fuzz()
    return 0


def retime(target: str, paths: list[Path]) -> int:
    """Each input run 5 times on the uninstrumented code: the best and the worst time."""
    fn = TARGETS[target]
    engine.decide(Incident(JobRef("ns", "warm-up"), 1, (Member(pod="p", log_tail=SEED_LINES[0]),)))
    worst = 0.0
    for path in paths:
        data = path.read_bytes()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn(data)
            times.append(time.perf_counter() - t0)
        worst = max(worst, min(times))
        print(f"{path.name}: {len(data)} bytes, best {min(times) * 1000:.1f} ms, worst {max(times) * 1000:.1f} ms")
    print(f"retimed {len(paths)} input(s) uninstrumented: slowest best-of-5 {worst * 1000:.1f} ms")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", choices=sorted(TARGETS))
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--smoke", action="store_true", help="each target for 2,000 inputs, in child processes")
    ap.add_argument("--retime", nargs="+", type=Path, help="time saved inputs (slow-*, crash-*) uninstrumented")
    args = ap.parse_args()
    if args.retime:
        if args.target is None:
            ap.error("--retime needs --target")
        return retime(args.target, args.retime)
    if args.smoke or args.target is None:
        runs = 2_000 if args.smoke else args.runs
        code = 0
        for target in sorted(TARGETS):
            done = subprocess.run(
                [sys.executable, "-m", "bench.fuzz", "--target", target, "--runs", str(runs)],
                cwd=REPO,
                capture_output=True,
                text=True,
                env=dict(os.environ),
                check=False,
            )
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("fuzz ")]
            print(lines[-1] if lines else f"fuzz {target}: FAILED\n{done.stderr[-3000:]}", flush=True)
            code = code or done.returncode
        return code
    return run_target(args.target, args.runs)


if __name__ == "__main__":
    sys.exit(main())
