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
    python -m bench.hold_cost --desk 1024,4096     # the hold desk alone: W pods holding at once

`--desk` measures the desk's own work for a large job in process: W members registered and placed by a
pod watch, one root raising, W-1 victims echoing; every victim holds at once; the write goes nowhere (no
API: the client's rate limit is the bound there, see docs/kubernetes.md). It prints the seconds until
every hold was answered and the CPU the process spent, to show the desk stays linear in W.

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
import time
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


async def desk_only(pods: int) -> tuple[float, float, int]:
    """(seconds until every hold was answered, CPU seconds, victims answered Victim) for `pods` members."""
    from podmortem.aggregator.holding import HoldDesk
    from podmortem.aggregator.incidents import IncidentBook
    from podmortem.aggregator.running import make_decide
    from podmortem.core.model import ErrorRecord, Termination
    from podmortem.protocol.v1 import collector_pb2 as pb
    from podmortem.protocol.wire import error_to_pb, make_event, termination_to_pb

    async def nowhere(namespace: str, pod: str, condition: Any) -> None:
        return None

    book = IncidentBook(make_decide(), lambda d: None, quorum_timeout=600)
    desk = HoldDesk(book, make_decide(), nowhere, peer_wait=5.0)
    keys = []
    for i in range(pods):
        reg = pb.Register(job=pb.JobRef(namespace=NS, name="big", kind="Job"), pod=f"big-{i}", holds=True)
        reg.world_size_hint = pods
        key = book.register(reg)
        desk.pod_seen(key, {"metadata": {"name": key.pod, "namespace": NS}, "status": {"phase": "Running"}})
        keys.append(key)
    cpu0, t0 = time.process_time(), time.monotonic()
    for i, key in enumerate(keys):
        text = "ValueError: label 7" if i == 0 else "RuntimeError: Connection closed by peer [10.0.0.1]:29500"
        book.ingest(
            key, make_event(error_to_pb(ErrorRecord(message=text, exception_type=text.split(":")[0])), f"{i}/e")
        )
        book.ingest(key, make_event(termination_to_pb(Termination(exit_code=1, reason="Error")), f"{i}/t"))
    replies = await asyncio.gather(*(desk.hold(k, pb.Hold(seq=1, timeout_seconds=15)) for k in keys))
    victims = sum(r.condition_type == "podmortem.io/Victim" for r in replies)
    return time.monotonic() - t0, time.process_time() - cpu0, victims


async def main_async(args: argparse.Namespace) -> int:
    if args.desk:
        failures = 0
        for w in (int(x) for x in args.desk.split(",")):
            took, cpu, marked = await desk_only(w)
            failures += marked != w - 1
            print(f"desk W={w}: every hold answered in {took:.2f} s, CPU {cpu:.2f} s, victims {marked}/{w - 1}")
        return 1 if failures else 0
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
    parser.add_argument("--desk", default="", help="comma-separated W: the hold desk alone, in process")
    return asyncio.run(main_async(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
