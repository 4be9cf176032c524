"""How long from a real fault to podmortem's published verdict, per fault kind.

Runs each fault once as a real local torchrun job (podmortem.local.harness.LocalJob: aggregator, one sidecar
per pod, torchrun agents on loopback) and prints, per case, the seconds from the fault (the marker the
workload writes right before injecting it) to the final verdict file, split into the part torch and the
"cluster" take (fault -> last pod ended) and the part podmortem takes (last pod ended -> verdict), with
whether the verdict named the right pod and category. The split matters: most of the time is torch
noticing the failure and the controller tearing the job down; podmortem's own share is the second one.

    python -m bench.fault_to_verdict [--pods 3] [--nproc 1] [--only exception,hang] [--json]
                                     [--kubelet-order [--status-lag 0.5]]

`--kubelet-order` plays the kubelet with native sidecars: each sidecar is SIGTERMed as its training
container exits and the pod status showing that end reaches it `--status-lag` seconds later.

Without torch the harness falls back to plain worker processes (the numbers then say nothing about
torch). Run it alone: the machine's cores are the bottleneck.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from typing import Any

from podmortem.local.faults import EXPECTED_CATEGORY
from podmortem.local.harness import JobSpec, LocalJob


def run_case(fault: str, pods: int, nproc: int, kubelet_order: bool = False, status_lag: float = 0.5) -> dict[str, Any]:
    spec = JobSpec(
        fault=fault, pods=pods, nproc=nproc, keep_workdir=True, kubelet_order=kubelet_order, status_lag=status_lag
    )
    job = LocalJob(spec)
    started = time.monotonic()
    result = job.run()
    category, retryable = EXPECTED_CATEGORY[fault]
    correct = result.root_cause == {"pod": result.root_pod, "category": category, "retryable": retryable}
    if correct and not result.error:
        shutil.rmtree(result.workdir, ignore_errors=True)  # kept only to look into a wrong or failed run
    ended = result.last_exit_time
    teardown = ended - result.fault_time if ended is not None and result.fault_time is not None else None
    decide = result.last_exit_to_verdict
    return {
        "fault": fault,
        "torch": result.torch,
        "fault_to_verdict_s": result.fault_to_verdict,
        "fault_to_first_verdict_s": result.fault_to_first_verdict,
        "fault_to_last_pod_end_s": teardown,
        "last_pod_end_to_verdict_s": decide,
        "correct": correct,
        "expected_pod": result.root_pod,
        "workdir": "" if correct and not result.error else result.workdir,
        "root_cause": result.root_cause,
        "revisions": result.revisions,
        "closed_by": (result.verdict_doc or {}).get("closed_by"),
        "final": result.final,
        "run_s": time.monotonic() - started,
        "error": result.error,
    }


def _fmt(x: float | None) -> str:
    return "   -  " if x is None else f"{x:6.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pods", type=int, default=3)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated fault kinds, repeats allowed (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object per case instead of the table")
    p.add_argument("--kubelet-order", action="store_true", help="sidecars SIGTERMed at their container's exit")
    p.add_argument("--status-lag", type=float, default=0.5, help="with --kubelet-order: status delay, seconds")
    args = p.parse_args(argv)
    faults = [f for f in args.only.split(",") if f] or list(EXPECTED_CATEGORY)
    if not args.json:
        print(
            f"{'fault':10} {'fault->verdict':>14} {'fault->pods gone':>16} {'pods gone->verdict':>18}  correct  "
            "closed by  run"
        )
    ok = True
    for fault in faults:
        row = run_case(fault, args.pods, args.nproc, args.kubelet_order, args.status_lag)
        ok &= bool(row["correct"])
        if args.json:
            print(json.dumps(row), flush=True)
            continue
        print(
            f"{fault:10} {_fmt(row['fault_to_verdict_s']):>14} {_fmt(row['fault_to_last_pod_end_s']):>16} "
            f"{_fmt(row['last_pod_end_to_verdict_s']):>18}  {'yes' if row['correct'] else 'NO ':7}  "
            f"{row['closed_by'] or '-':9}  "
            f"{row['run_s']:.0f}s{'  ' + row['error'] if row['error'] else ''}"
            f"{'' if row['torch'] else '  (no torch)'}"
            f"{'  kept: ' + row['workdir'] if row['workdir'] else ''}",
            flush=True,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
