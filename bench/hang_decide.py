"""How long the engine takes to decide a hang from captures: W members, each with a Flight Recorder summary.

    python -m bench.hang_decide [--members 4,256,4096] [--repeat 3]

Builds a job of W one-worker pods after a stall capture: every rank's Flight Recorder summary (64 entries
of the default group, as the sidecar sends them) and its stack; rank W//2 never entered the last
all_reduce and sits in `load_batch`. The summaries arrive as the wire's JSON and are read back with
`FRSummary.from_json` (the aggregator's cost), then `engine.decide` runs on the provisional incident.
Prints both times per W, best of `--repeat`; the verdict must name rank W//2.
"""

from __future__ import annotations

import argparse
import sys
import time

from podmortem.core.engine import decide
from podmortem.core.flightrecorder import FRSummary, summarize
from podmortem.core.model import Incident, JobRef, Member, WorkerCapture

WAITING = """Thread 0x00007f0000000001 (most recent call first):
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/app/train.py", line 120 in step
  File "/app/train.py", line 300 in <module>
"""
LOADING = """Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/app/train.py", line 211 in load_batch
  File "/app/train.py", line 118 in step
  File "/app/train.py", line 300 in <module>
"""


def _summary_json(rank: int, last: int) -> str:
    entries = [
        {
            "pg_id": 0,
            "process_group": ["0", "default_pg"],
            "collective_seq_id": seq,
            "profiling_name": "nccl:all_reduce",
            "input_sizes": [[4096, 1024]],
            "output_sizes": [[4096, 1024]],
            "input_dtypes": ["BFloat16"],
            "output_dtypes": ["BFloat16"],
            "state": "completed" if seq < last else "started",
            "frames": [{"name": "step", "filename": "/app/train.py", "line": 120}],
            "timeout_ms": 600000,
        }
        for seq in range(last - 63, last + 1)
    ]
    status = {
        "0": {"last_enqueued_collective": last, "last_started_collective": last, "last_completed_collective": 4811}
    }
    return summarize({"entries": entries, "pg_status": status}, source="json", rank=rank).to_json()


def build(w: int) -> tuple[list[str], Incident]:
    stuck = w // 2
    wire = [_summary_json(r, 4811 if r == stuck else 4812) for r in range(w)]
    members = tuple(Member(pod=f"llm-{r}", rank=r, running=True, phase="Running") for r in range(w))
    return wire, Incident(JobRef("ml", "llm", "PyTorchJob"), w, members, provisional=True)


def run(w: int, repeat: int) -> tuple[float, float]:
    wire, incident = build(w)
    read_best = decide_best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        members = tuple(
            Member(
                pod=m.pod,
                rank=m.rank,
                running=True,
                phase="Running",
                captures=(
                    WorkerCapture(
                        "control_plane",
                        global_rank=r,
                        stack=LOADING if r == w // 2 else WAITING,
                        flight_recorder=FRSummary.from_json(wire[r]),
                    ),
                ),
            )
            for r, m in enumerate(incident.members)
        )
        t1 = time.perf_counter()
        verdict = decide(Incident(incident.job, w, members, provisional=True))
        t2 = time.perf_counter()
        assert verdict.global_rank == w // 2 and verdict.hang is not None, verdict.summary
        read_best, decide_best = min(read_best, t1 - t0), min(decide_best, t2 - t1)
    return read_best, decide_best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--members", default="4,256,4096")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    for w in (int(x) for x in args.members.split(",")):
        read, dec = run(w, args.repeat)
        print(f"W={w}: read {w} summaries {read * 1000:.1f} ms, decide {dec * 1000:.1f} ms (best of {args.repeat})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
