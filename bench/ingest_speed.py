"""The aggregator's own work per burst, in process: W members' messages through `IncidentBook`.

    python -m bench.ingest_speed [--pods 1024] [--tail-kib 64] [--repeat 3] [--profile]

The same messages as bench/burst.py (a register, an error file, a 64 KiB log tail of real torchrun lines
and a termination per member), serialized once and parsed from bytes as the server receives them, then
registered and ingested into a book that decides at quorum (inline, no worker thread). Prints the CPU
time (best of --repeat) per member: the part of bench/burst.py's aggregator CPU that is podmortem's own
code rather than gRPC's. `--profile` prints cProfile's top functions of one more run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time

from prometheus_client import CollectorRegistry

from bench.common import GLOO, T0, corpus_note, log_tail
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.incidents import IncidentBook
from podmortem.aggregator.metrics import Metrics
from podmortem.core.engine import decide
from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb


def messages(pods: int, tail_kib: int) -> list[tuple[bytes, list[bytes]]]:
    tail = log_tail(tail_kib)
    out = []
    for pod in range(pods):
        reg = pb.Register(
            job=pb.JobRef(namespace="bench", name="burst"), pod=f"w-{pod}", world_size_hint=pods, attempt="0"
        )
        reg.rank = pod
        message = "ValueError: bad label 7" if pod == 0 else GLOO
        events = [
            make_event(error_to_pb(ErrorRecord(message, message.split(":")[0], timestamp=T0 + (pod > 0))), f"{pod}/e"),
            make_event(pb.LogTail(text=tail.encode(), truncated=True), f"{pod}/log"),
            make_event(termination_to_pb(Termination(exit_code=1, reason="Error", finished_at=T0 + 2.0)), f"{pod}/t"),
        ]
        out.append(
            (
                pb.SidecarMessage(register=reg).SerializeToString(),
                [pb.SidecarMessage(event=e).SerializeToString() for e in events],
            )
        )
    return out


async def run(wire: list[tuple[bytes, list[bytes]]], profile: cProfile.Profile | None = None) -> tuple[float, str]:
    published: list[Decision] = []
    book = IncidentBook(decide, published.append, metrics=Metrics(CollectorRegistry()), offload_members=1 << 30)
    start = time.process_time()
    if profile is not None:
        profile.enable()
    for reg, events in wire:
        key = book.register(pb.SidecarMessage.FromString(reg).register)
        for data in events:
            book.ingest(key, pb.SidecarMessage.FromString(data).event, from_sidecar=True)
        book.disconnected(key)
    if profile is not None:
        profile.disable()
    spent = time.process_time() - start
    return spent, (published[-1].verdict.pod or "") if published else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=1024)
    ap.add_argument("--tail-kib", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ns = ap.parse_args(argv)
    wire = messages(ns.pods, ns.tail_kib)
    runs = [asyncio.run(run(wire)) for _ in range(ns.repeat)]
    best = min(spent for spent, _ in runs)
    root = runs[-1][1]
    if root != "w-0":
        print(f"wrong root: {root!r}", file=sys.stderr)
        return 1
    print(
        f"ingest W={ns.pods} ({ns.tail_kib} KiB tails, {corpus_note()}), register + 3 events a member, "
        "decided at quorum: "
        f"best {best:.3f} s CPU of {ns.repeat} = {best / ns.pods * 1e6:.0f} us a member"
    )
    if ns.profile:
        profile = cProfile.Profile()
        asyncio.run(run(wire, profile))
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
