"""How often the best-effort capture at the first timeout wins the race against the teardown.

When a collective times out, the first worker to raise ends, its agent SIGTERMs the pod's other workers
within its monitor interval (0.1 s), and every other pod's ranks time out at the same moment: the stuck
rank is usually gone before anyone asks it anything. The aggregator asks every sidecar to capture as soon
as the first timeout reaches it (`aggregator.stalls`, trigger `first_timeout`). This runs real torchrun
hang jobs in the local harness (a real sidecar per pod, the real aggregator) with stall detection off and
a workload that serves torch's worker control plane, and counts the runs in which that capture carried
the stuck rank's stack (the aggregator's log says which ranks each capture holds stacks of), and the runs
whose final verdict named the stuck rank (by any path: the SIGTERM stack in the log tail also names it).

    python -m bench.capture_race [--rounds 5] [--pods 3] [--nproc 1] [--fail-local-rank 0]

Each round is a whole job (tens of seconds on two cores). Run it alone and report the load (`uptime`).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from podmortem.local.harness import JobSpec, LocalJob

CAPTURE_LINE = re.compile(r"capture \S+ \((\w+)\) from \S+: \d+ worker\(s\), stacks of rank\(s\) \[([\d, ]*)\]")


def stacks_by_trigger(aggregator_log: Path) -> dict[str, set[int]]:
    """trigger -> the global ranks whose stack a capture of that trigger carried (the aggregator's log)."""
    out: dict[str, set[int]] = {}
    for trigger, ranks in CAPTURE_LINE.findall(aggregator_log.read_text(errors="replace")):
        out.setdefault(trigger, set()).update(int(r) for r in ranks.split(",") if r.strip())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pods", type=int, default=3)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--fail-local-rank", type=int, default=0)
    p.add_argument("--pg-timeout", type=float, default=8.0)
    args = p.parse_args(argv)
    won = named = done = 0
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="podmortem-race-") as tmp:
            spec = JobSpec(
                fault="hang",
                pods=args.pods,
                nproc=args.nproc,
                fail_local_rank=args.fail_local_rank,
                pg_timeout=args.pg_timeout,
                capture="cooperative",
                workdir=tmp,
                deadline=240.0,
            )
            result = LocalJob(spec).run()
            if result.error:
                print(f"round {r}: {result.error}")
                continue
            stacks = stacks_by_trigger(Path(tmp) / "aggregator.log")
            verdict = result.verdict or {}
            hang = verdict.get("hang") or {}
            got = result.fail_rank in stacks.get("first_timeout", set())
            right = verdict.get("global_rank") == result.fail_rank
            done += 1
            won += got
            named += right
            print(
                f"round {r}: first_timeout capture stacks of ranks {sorted(stacks.get('first_timeout', set()))} "
                f"(stuck rank {result.fail_rank}: {'won' if got else 'lost'}); verdict rank "
                f"{verdict.get('global_rank')} via {hang.get('path')}",
                flush=True,
            )
    print(
        f"{args.pods} pods x {args.nproc}: the first_timeout capture held the stuck rank's stack in {won}/{done} runs; "
        f"the verdict named the stuck rank in {named}/{done}"
    )
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
