"""Chaos: the aggregator SIGKILLed at random points of incidents, with durable state (--state-dir).

Each cycle is one failing job of W pods reported over real gRPC streams, as sidecars do in the normal
order: the root's sidecar reports its error file and termination first and exits (its stream closes),
then the victims' sidecars, in random order. The aggregator process (real, `podmortem aggregator
--state-dir`) is SIGKILLed at a random point — before any report, between two of them, or after the
last — and started again on the same state directory; the pods that had not reported yet report to
the new process. A long quorum timeout means a verdict can only come from quorum, i.e. from every
member's events having survived. Per cycle it checks: every event sent was acknowledged (delivered),
the job got exactly one final verdict (one decision logged as final, revision 1), and it names the
root pod with category user_code.

    python bench/chaos.py [--cycles 100] [--pods 3] [--seed 1]

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
from pathlib import Path

import grpc

from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.v1 import collector_pb2_grpc as pb_grpc

GLOO_PEER = "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.11]:4455"
VERDICT_LINE = re.compile(r"verdict for (\S+) attempt .*\[revision (\d+), (\w+), (\d+)/(\d+) reported\]")


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
    for _ in range(50):  # the aggregator may be starting: retry as the sidecar does
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


def decisions(log: Path, job_key: str) -> list[tuple[int, str, bool]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        m = VERDICT_LINE.search(line)
        if m and m.group(1) == job_key:
            out.append((int(m.group(2)), m.group(3), int(m.group(4)) >= int(m.group(5))))
    return out


async def cycle(agg: Aggregator, i: int, pods: int, rng: random.Random) -> tuple[int, int, str]:
    """One job through one SIGKILL. (events sent, events acked, problem or "")."""
    job = f"chaos-{i}"
    names = [f"{job}-worker-{r}" for r in range(pods)]
    root = rng.randrange(pods)
    order = [root, *rng.sample([r for r in range(pods) if r != root], pods - 1)]
    kill_after = rng.randint(0, pods)  # reports that reach the first process
    sent = acked = 0
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
    if kill_after == pods:
        agg.kill()
        agg.start()
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
        return sent, acked, f"cycle {i}: no final verdict (kill after {kill_after})"
    await asyncio.sleep(0.2)
    finals = [d for d in decisions(agg.log, f"chaos/{job}") if d[2]]
    want = {"pod": names[root], "category": "user_code", "retryable": False}
    if doc.get("root_cause") != want:
        return sent, acked, f"cycle {i}: verdict {doc.get('root_cause')} != {want} (kill after {kill_after})"
    if len({rev for rev, _, _ in finals}) != 1 or doc.get("revision") != 1:
        return sent, acked, f"cycle {i}: final revisions {finals} (kill after {kill_after})"
    return sent, acked, ""


async def main_async(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="podmortem-chaos-"))
    agg = Aggregator(workdir, free_port())
    agg.start()
    sent = acked = 0
    problems: list[str] = []
    started = time.monotonic()
    try:
        for i in range(args.cycles):
            s, a, problem = await cycle(agg, i, args.pods, rng)
            sent, acked = sent + s, acked + a
            if problem:
                problems.append(problem)
    finally:
        agg.stop()
    right = args.cycles - len(problems)
    print(f"cycles: {args.cycles} (W={args.pods}, one SIGKILL each), {time.monotonic() - started:.1f} s")
    print(f"events sent: {sent}, acknowledged (delivered): {acked}")
    print(f"cycles with exactly one final verdict naming the root: {right}/{args.cycles}")
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
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
