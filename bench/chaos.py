"""Chaos: the aggregator SIGKILLed at random points of incidents, with durable state (--state-dir).

Each cycle is one failing job of W pods reported over real gRPC streams, as sidecars do in the normal
order: the root's sidecar reports its error file and termination first and exits (its stream closes),
then the victims' sidecars, in random order. The aggregator process (real, `podmortem aggregator
--state-dir`) is SIGKILLed at a random point — before any report, between two of them, or after the
last — and started again on the same state directory; the pods that had not reported yet report to
the new process. With `--mid-stream` the SIGKILL is instead fired by a timer at a random moment of the
cycle, while the streams run: it can land between an event's arrival and its commit or its ack, or
between the verdict and the state's forgetting the job; a stream cut short is opened again and sends
every event again, as the sidecar does. A long quorum timeout means a verdict can only come from quorum, i.e. from every
member's events having survived. Per cycle it checks: every event sent was acknowledged (delivered),
the job got exactly one final verdict (revision 1; every final decision logged names the same root
and category), and it names the root pod with category user_code. A kill between the verdict and the
state's forgetting the job makes the restarted process decide the replayed job again and publish the
same verdict (same incident id and revision) once more: publishing is at least once, and the
Kubernetes publishers skip an incident#revision an object already shows; such cycles are counted.

    python -m bench.chaos [--cycles 100] [--pods 3] [--seed 1] [--mid-stream]

Prints the totals and exits 1 if any cycle failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc

GLOO_PEER = "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.11]:4455"
VERDICT_LINE = re.compile(
    r"verdict for (\S+) attempt .*\[revision (\d+), (\w+), (\d+)/(\d+) reported\]: pod (\S+) .*? — (\w+), retryable"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Aggregator:
    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir, self.port = workdir, port
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "aggregator.log"

    def start(self) -> None:
        ready = self.workdir / "ready"
        ready.unlink(missing_ok=True)
        args = [
            sys.executable, "-m", "podmortem.cli", "aggregator", "--listen", f"127.0.0.1:{self.port}",
            "--metrics-listen", "", "--verdict-dir", str(self.workdir / "verdicts"), "--quorum-timeout", "600",
            "--state-dir", str(self.workdir / "state"), "--ready-file", str(ready), "--log-level", "WARNING",
        ]  # fmt: skip
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the aggregator did not start; see {self.log}")
            time.sleep(0.02)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def pod_events(job: str, pod: str, root: bool, at: int) -> list[pb.Event]:
    message = "ValueError: bad label 7 in batch 1234" if root else GLOO_PEER
    rec = ErrorRecord(message=message, exception_type=message.split(":")[0], timestamp=at)
    term = Termination(exit_code=1, reason="Error", finished_at=float(at))
    key = f"{job}/{pod}"
    return [
        wire.make_event(wire.error_to_pb(rec), wire.error_event_id(key, rec)),
        wire.make_event(wire.termination_to_pb(term), f"{key}/termination/0"),
    ]


async def report(port: int, reg: pb.Register, events: list[pb.Event]) -> int:
    """One sidecar's stream: register, each event until acked, close. The number of events acked."""
    acked: set[str] = set()
    for _ in range(300):  # the aggregator may be starting: retry as the sidecar does
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = pb_grpc.CollectorStub(channel).Report()  # type: ignore[no-untyped-call]
                await call.write(pb.SidecarMessage(register=reg))
                await call.read()
                for event in events:
                    await call.write(pb.SidecarMessage(event=event))
                    reply = await call.read()
                    acked.update(reply.ack.event_ids)
                await call.done_writing()
            return len(acked)
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.1)
    return len(acked)


def decisions(log: Path, job_key: str) -> list[tuple[int, str, bool, str, str]]:
    """Every verdict logged on the job: (revision, closed_by, final, pod, category)."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = VERDICT_LINE.search(line)
        if m and m.group(1) == job_key:
            final = int(m.group(4)) >= int(m.group(5))
            out.append((int(m.group(2)), m.group(3), final, m.group(6), m.group(7)))
    return out


@dataclass
class Outcome:
    sent: int
    acked: int
    problem: str  # "" when the cycle was right
    took: float | None  # how long the reports took when the kill did not fall among them
    republished: int = 0  # the same final verdict published again by the restarted process


def restart(agg: Aggregator) -> None:
    agg.kill()
    agg.start()


async def cycle(agg: Aggregator, i: int, pods: int, rng: random.Random, kill_at: float | None = None) -> Outcome:
    """One job through one SIGKILL. `kill_at`: the SIGKILL comes from a timer that many seconds after
    the first report starts, instead of between reports."""
    job = f"chaos-{i}"
    names = [f"{job}-worker-{r}" for r in range(pods)]
    root = rng.randrange(pods)
    order = [root, *rng.sample([r for r in range(pods) if r != root], pods - 1)]
    kill_after = rng.randint(0, pods) if kill_at is None else -1  # reports that reach the first process
    killer = None
    if kill_at is not None:

        async def kill_later(delay: float) -> None:
            await asyncio.sleep(delay)
            await asyncio.to_thread(restart, agg)

        killer = asyncio.create_task(kill_later(kill_at))
    sent = acked = 0
    t0 = time.monotonic()
    for n, r in enumerate(order):
        if n == kill_after:
            agg.kill()
            agg.start()
        reg = pb.Register(
            job=pb.JobRef(namespace="chaos", name=job, kind="PyTorchJob"),
            pod=names[r],
            rank=r,
            world_size_hint=pods,
            session_id=f"{job}-{r}",
        )
        events = pod_events(job, names[r], r == root, 1_800_000_000 + 10 * i + (1 if r == root else 0))
        sent += len(events)
        acked += await report(agg.port, reg, events)
    took = None if killer is not None and killer.done() else time.monotonic() - t0
    if kill_after == pods:
        agg.kill()
        agg.start()
    if killer is not None:
        await killer
    verdict_file = agg.workdir / "verdicts" / f"chaos_{job}.json"
    deadline = time.monotonic() + 30
    doc: dict[str, object] = {}
    while time.monotonic() < deadline:
        if verdict_file.exists():
            doc = json.loads(verdict_file.read_text())
            if doc.get("final"):
                break
        await asyncio.sleep(0.05)
    if not doc.get("final"):
        return Outcome(sent, acked, f"cycle {i}: no final verdict (kill after {kill_after})", took)
    await asyncio.sleep(0.2)
    finals = [d for d in decisions(agg.log, f"chaos/{job}") if d[2]]
    # The same final verdict logged again by the restarted process: the kill fell between the decision
    # and the state's forgetting the job, so the replayed job was decided again (same data, same
    # answer, same revision: at-least-once, and the Kubernetes publishers skip an incident#revision
    # they already show). A second *different* final verdict would be a failure.
    one = {(rev, pod, category) for rev, _, _, pod, category in finals} == {(1, names[root], "user_code")}
    want = {"pod": names[root], "category": "user_code", "retryable": False}
    when = f"kill after {kill_after}" if kill_at is None else f"kill at {kill_at * 1000:.0f} ms"
    if doc.get("root_cause") != want:
        return Outcome(sent, acked, f"cycle {i}: verdict {doc.get('root_cause')} != {want} ({when})", took)
    if not one or doc.get("revision") != 1:
        return Outcome(sent, acked, f"cycle {i}: final decisions logged {finals} ({when})", took)
    return Outcome(sent, acked, "", took, republished=len(finals) - 1)


async def main_async(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="podmortem-chaos-"))
    agg = Aggregator(workdir, free_port())
    agg.start()
    sent = acked = 0
    problems: list[str] = []
    started = time.monotonic()
    span = 0.1  # how long the reports of a cycle take (a running mean): the timer's range
    after = 0  # kills that fired once every report was done (the verdict's window)
    republished = 0  # cycles whose one final verdict was published again after the restart
    try:
        for i in range(args.cycles):
            kill_at = rng.uniform(0, 1.2 * span) if args.mid_stream else None
            out = await cycle(agg, i, args.pods, rng, kill_at)
            s, a, problem = out.sent, out.acked, out.problem
            republished += out.republished > 0
            if out.took is not None:  # the kill came after the last report (or between reports)
                after += 1
                span = 0.8 * span + 0.2 * out.took
            sent, acked = sent + s, acked + a
            if problem:
                problems.append(problem)
    finally:
        agg.stop()
        if not problems:  # a wrong cycle keeps the aggregator's log and state to look at
            shutil.rmtree(workdir, ignore_errors=True)
    right = args.cycles - len(problems)
    how = "at a random moment (timer)" if args.mid_stream else "between reports"
    print(f"cycles: {args.cycles} (W={args.pods}, one SIGKILL each, {how}), {time.monotonic() - started:.1f} s")
    if args.mid_stream:
        print(f"kills among the streams: {args.cycles - after}, after the last report: {after}")
    print(f"events sent: {sent}, acknowledged (delivered): {acked}")
    print(f"cycles with exactly one final verdict naming the root: {right}/{args.cycles}")
    print(f"  of which the same verdict (incident, revision 1) was published again after the restart: {republished}")
    for p in problems[:20]:
        print("  " + p)
    if problems:
        print(f"kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if not problems and sent == acked else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--pods", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mid-stream", action="store_true", help="SIGKILL by a timer while the streams run")
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
