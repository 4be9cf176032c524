"""`podmortem demo`: watch podmortem find the first failing pod of a real local torchrun job.

A person evaluating podmortem should see it work in one command, on their laptop, without a cluster:
this runs `podmortem.local.harness.LocalJob` — real torchrun agents as "pods", one real sidecar per pod, one
real aggregator — injects the chosen fault into one pod, and prints the published verdict with its
explanation (summary, evidence, victims) next to the ground truth and the measured time from the fault
to the verdict. Returns 0 when a verdict was printed.

For the faults that hang a worker (`hang`, `dataloader`, `desync`) the demo turns stall detection on, well below the
job's collective timeout, with a workload that cooperates (torch's worker control plane, faulthandler on
SIGTERM): the sidecars report their pods quiet, the aggregator asks them for their workers' stacks and
publishes a provisional verdict while the pods still run, and the final verdict names the worker, its
pod and the line it waits on. The demo prints the hung worker's global rank and pod beforehand, so that
the verdict can be checked, and says which capture path named it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from podmortem.core.capturefile import captures_by_pod
from podmortem.local.faults import EXPECTED_CATEGORY, FAULTS
from podmortem.local.harness import JobResult, JobSpec, LocalJob

# The faults that hang a worker get stall detection (seconds of silence) well below their collective
# timeout (seconds): a sidecar reports quiet after STALL_AFTER (1.5 x with the control plane's progress
# sample), the captures take about 2 s, and the provisional verdict is out long before the timeout.
HANG_FAULTS = ("hang", "dataloader", "desync")
STALL_AFTER = 4.0
HANG_PG_TIMEOUT = 20.0


def _say(out: TextIO, text: str = "") -> None:
    print(text, file=out, flush=True)


def _indent(text: str, prefix: str = "    ") -> str:
    return textwrap.indent(text.rstrip(), prefix)


def render(result: JobResult, out: TextIO) -> bool:
    """Print the verdict and its explanation; False when there was none."""
    doc = result.verdict_doc
    verdict: dict[str, Any] = result.verdict or {}
    if doc is None or not verdict:
        _say(out, f"no verdict was published{': ' + result.error if result.error else ''}")
        _say(out, f"(pods, logs and aggregator log: {result.workdir})" if result.spec.keep_workdir else "")
        return False
    _say(out)
    _say(out, "=" * 78)
    _say(out, f"VERDICT (revision {doc.get('revision')}, {'final' if result.final else 'not final'})")
    _say(out, "=" * 78)
    for line in str(verdict.get("summary", "")).splitlines():
        _say(out, textwrap.fill(line, 100, initial_indent="  ", subsequent_indent="  "))
    _say(out)
    rank = verdict.get("rank")
    _say(
        out,
        f"  root pod    : {verdict.get('pod')}"
        + (f"  (rank {rank}, node {verdict.get('node')})" if rank is not None else ""),
    )
    _say(out, f"  category    : {verdict.get('category')}   retryable: {verdict.get('retryable')}")
    if verdict.get("message"):
        _say(out, f"  error       : {str(verdict['message'])[:300]}")
    if verdict.get("confidence") is not None:
        _say(out, f"  confidence  : {verdict.get('confidence')}")
    evidence = verdict.get("evidence") or []
    if evidence:
        _say(out, "  evidence    :")
        for line in evidence:
            _say(
                out,
                _indent(textwrap.fill(str(line), 100, subsequent_indent="    "), "    - ").replace(
                    "    -     ", "      "
                ),
            )
    secondary = verdict.get("secondary") or []
    if secondary:
        _say(out, "  victims     :")
        for s in secondary:
            _say(out, f"    - {s.get('pod')}: {s.get('reason')}")
    _say(out)
    expected_cat, expected_retry = EXPECTED_CATEGORY.get(result.spec.fault, ("?", None))
    named = verdict.get("pod")
    ok = named == result.root_pod and verdict.get("category") == expected_cat
    _say(
        out,
        f"  ground truth: {result.root_pod} was made to fail ({result.spec.fault} -> {expected_cat}, "
        f"retryable={expected_retry}) — {'podmortem got it right' if ok else 'podmortem named ' + str(named)}",
    )
    _say_hang(result, verdict, out)
    f2v = result.fault_to_verdict
    if f2v is not None:
        first = result.fault_to_first_verdict
        extra = f" (first revision after {first:.1f} s)" if first is not None and abs(first - f2v) > 0.05 else ""
        _say(out, f"  fault -> verdict: {f2v:.1f} s{extra}")
    return True


def _say_hang(result: JobResult, verdict: dict[str, Any], out: TextIO) -> None:
    """For a hang: the provisional verdict, what the captured evidence says, and which path said it."""
    if result.spec.fault not in HANG_FAULTS:
        return
    provisional = result.provisional_doc
    if provisional is not None and result.fault_to_provisional is not None:
        p = provisional.get("verdict") or {}
        state = "while every pod still ran" if result.running_at_provisional else "as the pods were ending"
        _say(
            out,
            f"  provisional : {result.fault_to_provisional:.1f} s after the fault, {state}: "
            f"{p.get('pod')} ({p.get('category')}, rank {p.get('global_rank')})",
        )
    elif result.spec.stall_after > 0:
        _say(out, "  provisional : none (the job was not seen stalled before it failed)")
    hang = verdict.get("hang") or {}
    if not hang:
        _say(out, "  hang        : no captured evidence named a rank (today's behaviour: pod and category only)")
        return
    frame = hang.get("frame") or {}
    where = f"{frame.get('file')}:{frame.get('line')} in {frame.get('function')}" if frame else "no frame"
    _say(
        out,
        f"  hang        : {hang.get('finding')}: rank(s) {hang.get('stuck_ranks')} {hang.get('stuck_pods')}, {where}",
    )
    _say(out, f"  named by    : the {hang.get('path')} capture path")
    named_rank = verdict.get("global_rank")
    ok = named_rank == result.fail_rank and verdict.get("pod") == result.root_pod
    _say(
        out,
        f"  hung worker : global rank {result.fail_rank} on {result.root_pod} — "
        + ("the verdict names both" if ok else f"the verdict names rank {named_rank} on {verdict.get('pod')}"),
    )


PageWriter = Callable[[Path, Mapping[str, Any]], Path]


def main(
    fault: str = "exception",
    pods: int = 3,
    fail_rank: int | None = None,
    nproc: int = 1,
    keep: str | None = None,
    page: PageWriter | None = None,
) -> int:
    """Run the demo job; `fail_rank` is the node rank (pod) made to fail, the last one by default. With
    `keep`, the job runs in that new (or empty) directory, which is left behind as an incident bundle;
    `page` then writes the incident page beside it from the bundle and the published verdict file."""
    out = sys.stdout
    if fault not in FAULTS:
        _say(out, f"unknown fault {fault!r}; choose one of {', '.join(FAULTS)}")
        return 2
    if pods < 2 or (fail_rank is not None and not 0 <= fail_rank < pods) or nproc < 1:
        _say(out, "need at least 2 pods, 1 worker per pod and a fail rank between 0 and pods-1")
        return 2
    if keep is not None:
        where = Path(keep)
        if where.exists() and (not where.is_dir() or any(where.iterdir())):
            _say(out, f"--keep {keep}: not an empty directory; name a new one (nothing was written)")
            return 2
        where.mkdir(parents=True, exist_ok=True)
    spec = JobSpec(fault=fault, pods=pods, nproc=nproc, fail_pod=fail_rank, workdir=keep or "")
    if fault in HANG_FAULTS:
        spec = dataclasses.replace(
            spec, stall_after=STALL_AFTER, pg_timeout=HANG_PG_TIMEOUT, capture="cooperative", deadline=240.0
        )
    job = LocalJob(spec, progress=lambda text: _say(out, f"  {text}"))
    target = spec.failing_pod()
    _say(
        out,
        f"podmortem demo: job {job.job_name}, {pods} pods x {job.nproc} worker(s)"
        + ("" if job.torch else " — without torch: plain worker processes stand in for torchrun"),
    )
    _say(
        out,
        f"  fault: pod {job.pod_name(target)} (node rank {target}, global rank {job.fail_rank()}) {FAULTS[fault].text}",
    )
    if fault in HANG_FAULTS:
        _say(
            out,
            f"  stall detection: a pod is quiet after {spec.stall_after:g} s of silence (collective timeout "
            f"{spec.pg_timeout:g} s); the workload serves torch's worker control plane",
        )
    result = job.run()
    shown = render(result, out)
    if keep is not None:
        write_bundle_header(result, Path(keep))
        _say(out, f"  kept: {keep} (an incident bundle: 'podmortem analyze {keep}')")
        if page is not None and result.verdict_doc:
            try:
                _say(out, f"  page: {page(Path(keep), result.verdict_doc)} (open it in a browser)")
            except (OSError, ValueError) as exc:  # the run's verdict stands without its page
                _say(out, f"  page: not written ({exc})")
    return 0 if shown else 1


def write_bundle_header(result: JobResult, directory: Path) -> None:
    """`incident.json` beside the run's `pods/<pod>/{pod.json,error.json,log.txt}`, and each pod's
    `captures.json` (what its sidecar captured, as the aggregator's last verdict file carries it): the
    directory is then a bundle `podmortem analyze` reads (podmortem/offline/bundle.py), with the evidence
    the live verdict had."""
    spec = result.spec
    verdict_doc = result.verdict_doc or {}
    incident = verdict_doc.get("incident") or {}
    job = incident.get("job") or {"namespace": spec.namespace, "name": result.job_name, "kind": "PyTorchJob"}
    doc = {"job": job, "world_size": spec.pods}
    (directory / "incident.json").write_text(json.dumps(doc, indent=2) + "\n")
    pods = {p.name for p in result.pods}
    for pod, captures in captures_by_pod(verdict_doc.get("captures")).items():
        if pod in pods:  # a name from a file: only this run's pods' directories are written
            (directory / "pods" / pod).mkdir(parents=True, exist_ok=True)
            (directory / "pods" / pod / "captures.json").write_text(json.dumps(captures, indent=2) + "\n")
