"""A member pod's `podmortem.io/*` condition, written on its `status.conditions`.

The decision is `podmortem.core.conditions`'s and the timing the hold desk's (`aggregator.holding`); this
module only writes it: a strategic merge patch of the `pods/status` subresource that names one condition.
`status.conditions` merges by `type` (the pod's own patch strategy), so the conditions the kubelet and the
scheduler own stay as they are, as readiness gates' conditions do; the kubelet keeps conditions it does
not own. RBAC: `patch` on `pods/status` (docs/kubernetes.md).

Order and budget. A large job fails all at once: one write per failed pod, thousands within a few seconds,
each while its pod's sidecar holds it. They go through a client of their own (`client_for(settings, "conditions")`: its
rate limit `--condition-qps`/`--condition-burst`, its threads and connections), so the verdict's
publishers and the pod watch never queue behind them. Waiting writes go out best first, not in arrival
order: a member that failed on its own (PermanentFailure, RetryableFailure — the condition a Job's
`podFailurePolicy` fails or retries the job on) before the echoes (Victim), and in arrival order within
each. A worker takes the rate limit's next token first and then the best write waiting, and at most
`workers` writes are under way at once, one per thread of the client: a write that comes late but ranks
first waits for one of those, never for the queue. A write whose caller stopped
waiting (its sidecar's hold ran out) and that has not started is dropped: the pod turned terminal
without it. `bench/hold_cost.py --api` measures the writes of a 4,096-pod job.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable

from podmortem.aggregator.kube.client import Kube
from podmortem.core.conditions import PodCondition
from podmortem.core.names import VICTIM
from podmortem.k8s.objects import JSON, resource_path, rfc3339

STRATEGIC = "application/strategic-merge-patch+json"
# Writes under way at once: the condition client's threads and pooled connections. At the defaults'
# 400/s it leaves each write 40 ms of API latency before the threads, not the rate limit, are the bound.
WORKERS = 16


def condition_entry(condition: PodCondition, now: float) -> JSON:
    """The PodCondition object: status "True", the decision's reason and message, and the time."""
    return {
        "type": condition.type,
        "status": "True",
        "reason": condition.reason,
        "message": condition.message,
        "lastTransitionTime": rfc3339(now),
    }


def status_patch(condition: PodCondition, now: float) -> JSON:
    """A strategic merge patch of `pods/status` that adds this one condition (merged by type)."""
    return {"status": {"conditions": [condition_entry(condition, now)]}}


def rank(condition: PodCondition) -> int:
    """Which waiting write goes first (lower first): a member's own failure before an echo."""
    return 1 if condition.type == VICTIM else 0


class PodConditionWriter:
    """Writes decided conditions on their pods, best first (`rank`), at most `workers` at once."""

    name = "kube-pod-conditions"

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.time, workers: int = WORKERS) -> None:
        self.kube = kube
        self._clock = clock
        self.workers = max(workers, 1)
        self.written = 0
        self._waiting: list[tuple[int, int, str, str, PodCondition, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._running: set[asyncio.Task[None]] = set()

    async def write(self, namespace: str, pod: str, condition: PodCondition) -> None:
        """Write `condition` on the pod (raises the API's error); cancelled before it started, it never is."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (rank(condition), next(self._order), namespace, pod, condition, done))
        if len(self._running) < self.workers:
            task = asyncio.get_running_loop().create_task(self._work(), name="pod condition writer")
            self._running.add(task)
            task.add_done_callback(self._running.discard)
        await done

    async def _work(self) -> None:
        """Take the rate limit's next token, then write the best condition waiting then; until none waits."""
        while self._waiting:
            await self.kube.limiter.acquire()  # first: a better write may come while this one waits for it
            while self._waiting and self._waiting[0][-1].done():  # its caller stopped waiting: the pod is
                heapq.heappop(self._waiting)  # terminal, or about to be, without it
            if not self._waiting:
                return
            *_, namespace, pod, condition, done = heapq.heappop(self._waiting)
            try:
                await self._patch(namespace, pod, condition)
            except asyncio.CancelledError:
                done.cancel()  # the process is stopping: the caller is not left waiting
                raise
            except Exception as exc:
                if not done.done():
                    done.set_exception(exc)
            else:
                if not done.done():
                    done.set_result(None)

    async def _patch(self, namespace: str, pod: str, condition: PodCondition) -> None:
        path = resource_path("v1", "pods", namespace, pod, "status")
        body = status_patch(condition, self._clock())
        await self.kube.request("PATCH", path, body=body, content_type=STRATEGIC, paced=True)
        self.written += 1
