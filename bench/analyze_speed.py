"""`podmortem analyze` of a large incident bundle, black box: the CLI as a separate process.

    python -m bench.analyze_speed [--pods 10000] [--repeat 3] [--profile]

Writes one bundle of `--pods` pods (the synthetic incident of bench/engine_speed.py: one root with a
Python exception and victims with gloo "Connection closed by peer", collective timeouts and SIGTERM
teardowns, each with a torch-format error file, a pod.json as `kubectl get -o json` prints it and a
short log tail), then times the installed `podmortem analyze DIR --json` end to end (interpreter start,
imports, reading every file, deciding, printing) and checks that it names the root. `--profile` also
splits one in-process run into loading the bundle and deciding. Prints the best of `--repeat` runs
next to the issue's target (1.25 s at 10,000 pods).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.engine_speed import build
from podmortem.core.model import Incident

TARGET_S = 1.25


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write(incident: Incident, directory: Path) -> None:
    job = incident.job
    (directory / "incident.json").write_text(
        json.dumps(
            {"job": {"namespace": job.namespace, "name": job.name, "kind": job.kind}, "world_size": incident.world_size}
        )
    )
    for m in incident.members:
        pod_dir = directory / "pods" / m.pod
        pod_dir.mkdir(parents=True)
        term = m.termination
        assert term is not None and term.finished_at is not None and m.error is not None
        state: dict[str, Any] = {
            "exitCode": term.exit_code,
            "reason": term.reason,
            "startedAt": _rfc3339(term.finished_at - 3600),
            "finishedAt": _rfc3339(term.finished_at),
        }
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": m.pod,
                "namespace": job.namespace,
                "uid": f"00000000-0000-0000-0000-{m.rank:012d}",
                "labels": {
                    "training.kubeflow.org/job-name": job.name,
                    "training.kubeflow.org/replica-type": "worker",
                    "training.kubeflow.org/replica-index": str(m.rank),
                },
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": job.kind, "name": job.name}],
            },
            "spec": {"nodeName": m.node, "containers": [{"name": "pytorch", "image": "trainer:1"}]},
            "status": {
                "phase": "Failed",
                "podIP": m.pod_ip,
                "containerStatuses": [{"name": "pytorch", "restartCount": 0, "state": {"terminated": state}}],
            },
        }
        (pod_dir / "pod.json").write_text(json.dumps(pod))
        error = {
            "message": {
                "message": m.error.message,
                "extraInfo": {
                    "py_callstack": f'Traceback (most recent call last):\n  File "/opt/app/train.py", line 310\n'
                    f"{m.error.message}\n",
                    "timestamp": str(int(m.error.timestamp or 0)),
                },
            }
        }
        (pod_dir / "error.json").write_text(json.dumps(error))
        (pod_dir / "log.txt").write_text(m.log_tail)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="also split one in-process run: load vs decide")
    ns = ap.parse_args(argv)
    incident = build(ns.pods)
    root = incident.members[0].pod
    with tempfile.TemporaryDirectory(prefix="podmortem-analyze-") as tmp:
        bundle = Path(tmp) / "bundle"
        bundle.mkdir()
        start = time.perf_counter()
        write(incident, bundle)
        size = sum(f.stat().st_size for f in bundle.rglob("*") if f.is_file())
        print(f"bundle: {ns.pods} pods, {size / 2**20:.1f} MiB, written in {time.perf_counter() - start:.1f} s")
        cli = Path(sys.executable).parent / "podmortem"  # the installed console script
        cmd = [str(cli), "analyze", str(bundle), "--json"]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        times = []
        for _ in range(ns.repeat):
            start = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            times.append(time.perf_counter() - start)
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return 1
            got = json.loads(done.stdout)["root_cause"]["pod"]
            if got != root:
                print(f"wrong root: {got} (expected {root})", file=sys.stderr)
                return 1
        base = subprocess.run([sys.executable, "-c", "import podmortem.cli"], check=True, env=env)
        start = time.perf_counter()
        for _ in range(3):
            base = subprocess.run([sys.executable, "-c", "import podmortem.cli"], check=True, env=env)
        startup = (time.perf_counter() - start) / 3
        del base
        best = min(times)
        verdict = "met" if best <= TARGET_S else "NOT met"
        print(
            f"podmortem analyze, {ns.pods} pods: best {best:.2f} s of {ns.repeat} "
            f"(all: {', '.join(f'{t:.2f}' for t in times)}); target <= {TARGET_S} s: {verdict}"
        )
        print(f"  of which interpreter start + importing the CLI: {startup:.2f} s")
        if ns.profile:
            from podmortem.core.engine import decide
            from podmortem.offline.bundle import load_bundle

            start = time.perf_counter()
            loaded = load_bundle(bundle)
            loaded_at = time.perf_counter()
            decide(loaded)
            decided_at = time.perf_counter()
            print(f"  in-process: load_bundle {loaded_at - start:.2f} s, decide {decided_at - loaded_at:.2f} s")
            start = time.perf_counter()
            for pod_dir in sorted(p for p in (bundle / "pods").iterdir()):
                for name in ("pod.json", "error.json", "log.txt"):
                    data = (pod_dir / name).read_bytes()
                    if name.endswith(".json"):
                        json.loads(data)
            floor = time.perf_counter() - start
            print(f"  floor: reading every file and parsing its JSON, nothing else: {floor:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
