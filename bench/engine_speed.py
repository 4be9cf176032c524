"""How long the engine takes to decide a large incident (it must stay linear in the members).

    python -m bench.engine_speed [--members 10000] [--repeat 3] [--unknown-words]

Builds one synthetic incident: one root (a Python exception) and N-1 victims with realistic variety —
gloo "Connection closed by peer" naming distinct addresses and ports, collective timeouts, SIGTERM
teardowns with distinct pids, each with a short log tail in torch's format — and prints the best of
`--repeat` wall-clock times of `engine.decide`. With `--unknown-words`, the victims' messages are in words no rule
knows (a made-up stack's exception naming the lost worker): each reads as a failure of its own until the word model
takes it for an echo, and the engine decides twice (podmortem.core.engine, "words no rule knows") — its worst case.
"""

from __future__ import annotations

import argparse
import sys
import time

from podmortem.core.engine import decide
from podmortem.core.errorfile import exception_type_of
from podmortem.core.model import ErrorRecord, Incident, JobRef, Member, Termination

T0 = 1_800_000_000


def _log(rank: int, message: str) -> str:
    return "\n".join(
        [f"[rank{rank}] step {s} loss 1.{s:03d} acc 0.5 (0.21 s/step)" for s in range(0, 40, 10)]
        + [
            f"[rank{rank}]: Traceback (most recent call last):",
            f'[rank{rank}]:   File "/opt/app/train.py", line 310',
            f"[rank{rank}]: {message}",
            f"E1121 14:58:15.{rank % 1000:03d}000 {20000 + rank} site-packages/torch/distributed/elastic/"
            f"multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: {30000 + rank}) of binary: python",
        ]
    )


UNKNOWN_WORDS = (
    "meshrt.errors.MeshError: waiting for worker 0 failed: it is unavailable, the session was terminated remotely"
)


def build(n: int, unknown_words: bool = False) -> Incident:
    members: list[Member] = []
    for i in range(n):
        ip = f"10.{i // 62500}.{(i // 250) % 250}.{i % 250 + 1}"
        if i == 0:
            msg, ts, code = "KeyError: 'cosine_restarts'", T0 + 2, 1
        elif i % 3 == 1:
            msg = (
                f"RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
                f"peer [10.0.0.1]:{20000 + i % 40000}. This is typically caused by a remote worker crashing."
            )
            ts, code = T0 + i % 2, 143
        elif i % 3 == 2:
            msg = (
                f"RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
                f"waiting {10000 + i % 7 * 1000}ms for recv operation to complete"
            )
            ts, code = T0 + 1, 1
        else:
            msg, ts, code = f"SignalException: Process {40000 + i} got signal: 15", T0 + 3, 1
        if unknown_words and i:
            msg = UNKNOWN_WORDS
        members.append(
            Member(
                pod=f"job-worker-{i}",
                rank=i,
                pod_ip=ip,
                node=f"node-{i}",
                error=ErrorRecord(message=msg, exception_type=exception_type_of(msg), timestamp=ts),
                termination=Termination(exit_code=code, reason="Error", finished_at=float(ts + 1)),
                log_tail=f"[rank{i}]: {msg}" if unknown_words and i else _log(i, msg),
            )
        )
    return Incident(job=JobRef("ns", "job", "PyTorchJob"), world_size=n, members=tuple(members))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--unknown-words", action="store_true", help="victims in words no rule knows")
    ns = ap.parse_args(argv)
    incident = build(ns.members, ns.unknown_words)
    best = float("inf")
    verdict = None
    for _ in range(ns.repeat):
        start = time.perf_counter()
        verdict = decide(incident)
        best = min(best, time.perf_counter() - start)
    assert verdict is not None and verdict.pod == "job-worker-0", verdict
    print(
        f"engine.decide: {ns.members} members in {best * 1000:.0f} ms "
        f"({best / ns.members * 1e6:.1f} us/member, best of {ns.repeat}); root {verdict.pod} ({verdict.category})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
