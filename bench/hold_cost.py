"""What the hold costs: the extra seconds a failed pod stays non-terminal while its sidecar waits for its condition.

Plays jobs failing in the kubelet's order on the Kubernetes emulator (tests/support/kubelet_order.py:
error file, container exit, SIGTERM to the native sidecar, the status 0.5 s later; the pod turns Failed
once its sidecar exited) with real sidecar processes and the real aggregator: a user_code root and its
victims, which end 1 s after it. Each round runs the same job twice, with the hold (the default
--hold-timeout) and without it (--hold-timeout 0, as an older sidecar), and prints for every failed pod:

* held: the seconds its sidecar waited for the aggregator's answer (its own log: 'held N s');
* SIGTERM -> exit: when the pod could turn terminal, with and without the hold; their difference is the
  hold's cost to the Job controller (replacement pods wait for a terminal pod under a podFailurePolicy).

p50 and max per role (the root waits for its peers' first evidence; a victim is decided at once), and
whether each pod got the condition it should (exit 1 otherwise).

    python -m bench.hold_cost [--rounds 3] [--pods 4] [--json]

Uses the test emulator (kmock, the dev extra). Run it alone and report the load (`uptime`) with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.kube_emulator import JOBS, PODS, running_emulator
from support.kube_objects import NS, indexed_job, indexed_pod
from support.kubelet_order import our_condition, run_incident

HELD = re.compile(r"\(held ([0-9.]+)s\)")


async def one_round(index: int, pods: int, hold: bool) -> list[dict[str, Any]]:
    with running_emulator() as api, tempfile.TemporaryDirectory(prefix="podmortem-hold-") as tmp:
        job = api.put(JOBS, indexed_job(f"train-{index}", pods))
        seeded = [api.put(PODS, indexed_pod(job, i)) for i in range(pods)]
        root = 1 % pods
        timeouts = None if hold else dict.fromkeys(range(pods), "0")
        _, sidecars = await run_incident(api, Path(tmp), seeded, root=root, hold_timeouts=timeouts)
        out = []
        for i, s in enumerate(sidecars):
            held = next((float(m.group(1)) for line in s.lines if (m := HELD.search(line))), None)
            condition = our_condition(api.get(PODS, NS, s.pod)) or {}
            expected = "podmortem.io/PermanentFailure" if i == root else "podmortem.io/Victim"
            out.append(
                {
                    "pod": s.pod,
                    "role": "root" if i == root else "victim",
                    "hold": hold,
                    "exit_code": s.code,
                    "sigterm_to_exit_s": round(s.exited_at - s.sigterm_at, 3),
                    "held_s": held,
                    "condition": condition.get("type"),
                    "right": s.code == 0 and (condition.get("type") == expected if hold else True),
                }
            )
        return out


def quantiles(values: list[float]) -> str:
    if not values:
        return "-"
    return f"p50 {statistics.median(values):.2f} s, max {max(values):.2f} s (n={len(values)})"


async def main_async(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for hold in (True, False):
            rows += await one_round(r * 2 + int(not hold), args.pods, hold)
    if args.json:
        print(json.dumps(rows, indent=2))
    print(f"hold cost: {args.rounds} round(s) of a {args.pods}-pod indexed Job, user_code root, victims 1 s later")
    for role in ("root", "victim"):
        held = [x["held_s"] for x in rows if x["role"] == role and x["hold"] and x["held_s"] is not None]
        with_hold = [x["sigterm_to_exit_s"] for x in rows if x["role"] == role and x["hold"]]
        without = [x["sigterm_to_exit_s"] for x in rows if x["role"] == role and not x["hold"]]
        extra = [a - b for a, b in zip(sorted(with_hold), sorted(without), strict=False)]
        print(f"  {role:6}  held (sidecar's wait)       {quantiles(held)}")
        print(f"  {role:6}  SIGTERM -> exit, with hold  {quantiles(with_hold)}")
        print(f"  {role:6}  SIGTERM -> exit, no hold    {quantiles(without)}")
        print(f"  {role:6}  extra non-terminal seconds  {quantiles(extra)}")
    wrong = [x for x in rows if not x["right"]]
    print(f"conditions right: {len(rows) - len(wrong)}/{len(rows)}")
    for x in wrong:
        print(f"  WRONG: {x}")
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
