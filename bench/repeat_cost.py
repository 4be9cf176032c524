"""What stopping a repeated failure costs: the state kept per job, and the API requests per escalation.

State per job (in process, no API): a job's attempt history at its bound (MAX_ATTEMPTS entries), for
`--jobs` jobs at once: the bytes the aggregator holds for it (tracemalloc over `AttemptHistory`), the
bytes the state file grows by (`StateStore`, table `attempts`, after a checkpoint), and the bytes the
history adds to the job's verdict annotation (`attemptHistory`).

API requests per escalation (`--api`): a JobSet of `--pods` pods on the Kubernetes emulator, failing in
the kubelet's order with real sidecar processes and the real aggregator (tests/support/repeated.py): attempt
0 and attempt 1 with the same NCCL error (attempt 1's root is escalated to RepeatedFailure), and for
contrast another JobSet whose attempt 1 fails differently (not escalated). Printed: the requests the
emulator saw during each attempt 1, by verb and resource, and their difference.

    python -m bench.repeat_cost [--jobs 10000] [--api] [--pods 3] [--json]

Uses the test emulator (kmock, the dev extra). Run it alone and report the load (`uptime`) with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench.hold_cost import request_kind
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.history import AttemptHistory
from podmortem.aggregator.kube.publish import encode
from podmortem.aggregator.state import StateStore
from podmortem.core.model import Incident, JobRef, Verdict
from podmortem.core.repeats import MAX_ATTEMPTS, Attempt


def entry(job: int, attempt: int, now: float) -> Attempt:
    return Attempt(str(attempt), "network", f"network:{job:08x}{attempt:08x}", now - 3600 + attempt, 0.93, True, "")


def memory_per_job(jobs: int) -> float:
    now = time.time()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    history = AttemptHistory(max_jobs=jobs)
    for j in range(jobs):
        uid = f"{j:08x}-1111-2222-3333-444455556666"  # a uid's length
        for a in range(MAX_ATTEMPTS):
            history.record(uid, entry(j, a, now))
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return used / jobs


async def file_per_job(jobs: int, directory: Path) -> float:
    store = StateStore(directory)
    empty = store.path.stat().st_size
    now = time.time()
    for j in range(jobs):
        job = JobRef("team-a", f"llm-{j}", "JobSet", f"{j:08x}-1111-2222-3333-444455556666")
        for a in range(MAX_ATTEMPTS):
            e = entry(j, a, now)
            incident = Incident(job, 8, (), attempt=e.attempt, incident_id=f"team-a:llm-{j}:{a}")
            verdict = Verdict(pod="p", category="network", retryable=True, summary="", confidence=0.93)
            await store.publish(Decision(incident, verdict, e.decided_at, 1, "quorum", 0, attempt=e, own_attempt=True))
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = store.path.stat().st_size - empty
    store.close()
    return size / jobs


async def api_requests(pods: int, tmp: Path) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry
    from support.common import eventually
    from support.kube_emulator import running_emulator
    from support.kube_objects import NS, seed_jobset
    from support.repeated import NCCL_IB, NCCL_SOCKET, fail_attempt, restart_jobset

    from podmortem.aggregator.config import AggregatorConfig
    from podmortem.aggregator.kube.client import KubeSettings
    from podmortem.aggregator.running import Aggregator

    out: dict[str, Any] = {}
    with running_emulator() as api:
        settings = KubeSettings(enabled=True, kubeconfig=str(api.kubeconfig(tmp / "kubeconfig", NS)), namespaces=(NS,))
        verdicts = tmp / "verdicts"
        agg = Aggregator(
            AggregatorConfig(listen="127.0.0.1:0", metrics_listen="", verdict_dir=str(verdicts), quorum_timeout=600),
            registry=CollectorRegistry(),
            kube_settings=settings,
        )
        await agg.start()
        try:
            for name, second in (("same", NCCL_IB.format(peer=13)), ("other", NCCL_SOCKET)):
                jobset, members = seed_jobset(api, name, [("workers", 1, pods)])
                await fail_attempt(api, agg, tmp, members, 1, NCCL_IB.format(peer=12))
                await eventually(partial(Path.exists, verdicts / f"{NS}_{name}_0.json"), "attempt 0", within=60)
                await asyncio.sleep(1.0)  # its publishers' requests done
                members = restart_jobset(api, jobset, members, 1)
                seen = len(api.requests())
                await fail_attempt(api, agg, tmp, members, 2, second)
                await eventually(partial(Path.exists, verdicts / f"{NS}_{name}_1.json"), "attempt 1", within=60)
                await asyncio.sleep(1.0)
                kinds = Counter(request_kind(m, p) for m, p in api.requests()[seen:] if "watch=true" not in p)
                out[name] = dict(sorted(kinds.items()))
        finally:
            await agg.stop(grace=2)
        out["repeated_failures"] = agg.metrics.repeated_failures.labels(category="network")._value.get()
    same, other = Counter(out["same"]), Counter(out["other"])
    out["difference"] = {k: same[k] - other[k] for k in sorted(same | other) if same[k] != other[k]}
    out["job_history_reads"] = agg.job_history.reads
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--api", action="store_true", help="count the API requests of an escalation")
    parser.add_argument("--pods", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args(argv)
    sample = [entry(0, a, time.time()).to_dict() for a in range(MAX_ATTEMPTS)]
    figures: dict[str, Any] = {
        "jobs": ns.jobs,
        "attempts_per_job": MAX_ATTEMPTS,
        "memory_bytes_per_job": round(memory_per_job(ns.jobs)),
        "annotation_bytes_per_job": len(encode({"attemptHistory": sample})) - len(encode({"attemptHistory": []})),
    }
    with tempfile.TemporaryDirectory(prefix="podmortem-repeats-") as tmp:
        figures["state_file_bytes_per_job"] = round(asyncio.run(file_per_job(ns.jobs, Path(tmp))))
    if ns.api:
        with tempfile.TemporaryDirectory(prefix="podmortem-repeats-api-") as tmp:
            figures["api"] = asyncio.run(api_requests(ns.pods, Path(tmp)))
    if ns.json:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    ok = not ns.api or (figures["api"]["repeated_failures"] == 1)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
