"""Late events after a verdict must cost linear time (they once re-decided at super-linear cost).

An `IncidentBook` with the real engine decides a job of `--pods` members (quorum); then N distinct late
events arrive, as fast as the loop takes them, in one of two shapes:

* chatty: one member sends N distinct error-file versions (each a new id, a new message);
* members: N pods the book had not heard from register late, each with its own error file.

For each N it prints the time of the N ingests (the ack path), the engine calls they caused (late
events are coalesced into one revision per `revise_delay`; a revision with the same answer is not
published again), the time spent in those calls, and the cost per event. Linear means the per-event
figures stay flat as N doubles.

    python -m bench.late_events [--counts 500,1000,2000] [--pods 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import IncidentBook
from podmortem.aggregator.running import make_decide
from podmortem.core.model import ErrorRecord, Incident, Termination, Verdict
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb

JOB = pb.JobRef(namespace="ml", name="late", kind="PyTorchJob")
GLOO_PEER = "RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.11]:4455"


def error(message: str, ts: int, event_id: str) -> pb.Event:
    rec = ErrorRecord(message=message, exception_type=message.split(":")[0], timestamp=ts)
    return make_event(error_to_pb(rec), event_id, wall=ts + 0.5)


def ended(at: float, event_id: str) -> pb.Event:
    term = Termination(exit_code=1, reason="Error", started_at=at - 60, finished_at=at)
    return make_event(termination_to_pb(term), event_id, wall=at + 0.2)


async def one(n: int, pods: int, shape: str) -> tuple[float, int, float]:
    """(seconds of the n ingests, engine calls after the first verdict, seconds spent in them)."""
    decide = make_decide()
    spent, calls = [0.0], [0]

    def timed(incident: Incident) -> Verdict:
        t0 = time.perf_counter()
        try:
            return decide(incident)
        finally:
            spent[0] += time.perf_counter() - t0
            calls[0] += 1

    decisions: list[Decision] = []
    book = IncidentBook(timed, decisions.append, quorum_timeout=600, default_world_size=pods)
    keys = [book.register(pb.Register(job=JOB, pod=f"w-{r}", rank=r, attempt="0")) for r in range(pods)]
    for r, key in enumerate(keys):
        message = "ValueError: bad label 7 in batch 1234" if r == 1 else GLOO_PEER
        book.ingest(key, error(message, 1_800_000_000 + r, f"w-{r}/error"), from_sidecar=True)
        book.ingest(key, ended(1_800_000_010 + r, f"w-{r}/end"), from_sidecar=True)
    assert len(decisions) == 1 and decisions[0].verdict.pod == "w-1", decisions
    spent[0], calls[0] = 0.0, 0
    t0 = time.perf_counter()
    if shape == "chatty":
        for i in range(n):
            book.ingest(keys[2], error(f"RuntimeError: late {i}", 1_800_000_100 + i, f"late-{i}"), from_sidecar=True)
    else:
        for i in range(n):
            key = book.register(pb.Register(job=JOB, pod=f"late-{i}", rank=pods + i, attempt="0"))
            book.ingest(key, error(GLOO_PEER, 1_800_000_100 + i, f"late-{i}/error"), from_sidecar=True)
    ingest = time.perf_counter() - t0
    await asyncio.sleep(book.revise_delay + 0.2)
    await book.settle()
    assert decisions[-1].verdict.pod == "w-1", decisions[-1].verdict
    return ingest, calls[0], spent[0]


async def main_async(args: argparse.Namespace) -> None:
    print(f"late events after a verdict, W={args.pods}, best of {args.repeat}; load {os.getloadavg()[0]:.2f}")
    print("shape   N      ingest total  per event   engine calls    decide total  per event")
    for shape in ("chatty", "members"):
        for n in args.counts:
            runs = [await one(n, args.pods, shape) for _ in range(args.repeat)]
            ingest = min(r[0] for r in runs)
            decided = max(r[1] for r in runs)
            spent = min(r[2] for r in runs)
            print(
                f"{shape:7} {n:5}  {ingest * 1000:9.1f} ms  {ingest / n * 1e6:6.1f} us  {decided:14}"
                f"  {spent * 1000:9.1f} ms  {spent / n * 1e6:6.1f} us"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--counts", default="500,1000,2000", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--pods", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    asyncio.run(main_async(ap.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
