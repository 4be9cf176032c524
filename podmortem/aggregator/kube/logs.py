"""The tail of a failed container's log, read by the aggregator for a pod whose sidecar sent none.

A pod without a working sidecar (none injected, or it died with its node) leaves the aggregator's pod
watch its status only: an exit code and, with `terminationMessagePolicy: FallbackToLogsOnError`, a
short termination message. Where that message is empty, the container's log is the evidence left — a
victim's "Connection closed by peer" and the root's traceback look alike by exit code alone. So when
the pod watch sees such a member end, it reads the log tail of the training container (the one that
failed, `podstatus` picks it) with `previous=true` when the container has restarted since the failed
run (its current log is the new run's), bounded on the wire (`limitBytes`, `tailLines`) and in
concurrency (`MAX_CONCURRENT` reads at once, all behind the client's rate limit). The tail becomes
the same `LogTail` event, with the same id, as the sidecar's, so a tail seen by both is one event.

A read that fails (403 without `pods/log` RBAC, 404 after the pod is gone, a timeout) is logged and
the member decided without it: a missing log never holds a verdict.
"""

from __future__ import annotations

import asyncio
import logging

from podmortem.aggregator.kube.client import Kube
from podmortem.core.podstatus import PodSnapshot
from podmortem.k8s.errors import KubeError
from podmortem.k8s.objects import resource_path
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb

log = logging.getLogger(__name__)

MAX_CONCURRENT = 8
TAIL_LINES = 2000
READ_TIMEOUT = 10.0  # seconds per read, retries included: the verdict waits for it


def needs_log(snap: PodSnapshot) -> bool:
    """Does this observation end a run whose log says nothing else? (a termination without a message)"""
    ended = snap.termination or snap.last_termination
    return ended is not None and not ended.message.strip()


class LogReader:
    def __init__(self, kube: Kube, tail_bytes: int, *, timeout: float = READ_TIMEOUT) -> None:
        self.kube = kube
        self.tail_bytes = tail_bytes
        self.timeout = timeout
        self._slots = asyncio.Semaphore(MAX_CONCURRENT)
        self.reads = 0  # for tests and logs
        self.failures = 0

    async def tail_event(self, snap: PodSnapshot) -> pb.Event | None:
        """The failed run's log tail as the sidecar's `LogTail` event, or None (no log, or unreadable)."""
        if self.tail_bytes <= 0 or not snap.container or not snap.namespace or not snap.name:
            return None
        previous = snap.termination is None and snap.last_termination is not None
        cap = self.tail_bytes * 4  # whole lines, cut to tail_bytes here
        query: dict[str, str | int] = {"container": snap.container, "tailLines": TAIL_LINES, "limitBytes": cap}
        if previous:
            query["previous"] = "true"
        path = resource_path("v1", "pods", snap.namespace, snap.name, "log")
        async with self._slots:
            self.reads += 1
            try:
                async with asyncio.timeout(self.timeout):
                    text = await self.kube.get_text(path, query)
                    # The API keeps the *first* limitBytes of the lines tailLines selects: an answer that
                    # fills the cap may stop short of the log's end. Fewer lines, until it fits.
                    while len(text.encode()) >= cap and int(query["tailLines"]) > 1:
                        query["tailLines"] = max(int(query["tailLines"]) // 4, 1)
                        text = await self.kube.get_text(path, query)
            except (KubeError, TimeoutError) as exc:
                self.failures += 1
                log.warning(
                    "log of %s/%s (%s): %s; deciding without it", snap.namespace, snap.name, snap.container, exc
                )
                return None
        if not text:
            return None
        data = text.encode()
        truncated = len(data) > self.tail_bytes
        if truncated:
            data = data[-self.tail_bytes :]
            if b"\n" in data[:-1]:
                data = data[data.index(b"\n") + 1 :]  # from a line start
        key = snap.uid or f"{snap.namespace}/{snap.name}"
        tail = pb.LogTail(text=wire.utf8(data), truncated=truncated)
        return wire.make_event(tail, f"{key}/log_tail/{snap.restart_count}")
