"""The aggregator's own view of the training pods, for members whose sidecar never speaks.

A sidecar reports its pod's end — unless the pod vanished first (deleted, evicted with its sidecar)
or its node died (no kubelet, no sidecar, no network). Those are exactly the pods that often failed
first, so the aggregator watches the training pods itself and feeds what it sees into the same
incident book, as the same events a sidecar would send (`wire.events_from_snapshot`: deterministic
ids, so a fact seen by both is one event):

* every training pod becomes a member of its job attempt (`book.observe_member`), so quorum waits
  for it and the engine sees it even if its sidecar never registered;
* a pod that disappears (a DELETED watch event, or missing from a re-list) becomes a
  `Deletion(reason="Deleted")` event — a terminal state for quorum;
* a pod on a lost node (phase Unknown / reason NodeLost) and any termination, restart or
  DisruptionTarget the watch shows become their events;
* the job's size, resolved from its spec (`jobs.world_size`), goes to `book.expect`;
* a member that ends with no sidecar to speak for it and no termination message gets its failed
  run's log tail read (`logs.LogReader`) — ingested before its termination, so quorum does not close
  on a member whose log is still on its way. A pod's events stay in the order the watch saw them;
* each version of a member pod goes to the hold desk (`holding.HoldDesk.pod_seen`), with it the API's
  word that this pod belongs to this job, and a pod that cannot be held gets its condition there;
* each member's end (termination or deletion) goes to the stall desk too (`stalls.StallDesk.ended`): a
  stalled job whose pods all end well is over, and its sidecars may say nothing more.

Pods are found by label selector (one watch per selector and namespace: `KubeSettings.pod_selectors`,
`KubeSettings.namespaces`). A watch resumes from the last resourceVersion it saw after a dropped
connection, re-lists after 410 Gone, and backs off after errors. Job objects are read through a small
cache (`JobResolver`): one GET per job and minute, however many pods it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from podmortem.aggregator.config import KubeSettings
from podmortem.aggregator.holding import HoldDesk
from podmortem.aggregator.incidents import IncidentBook, MemberKey
from podmortem.aggregator.intake import is_end
from podmortem.aggregator.kube.client import Kube
from podmortem.aggregator.kube.logs import LogReader, needs_log
from podmortem.aggregator.kube.membership import JobResolver, MembershipIndex, pod_facts
from podmortem.aggregator.stalls import StallDesk
from podmortem.core import podstatus
from podmortem.core.podstatus import PodSnapshot
from podmortem.k8s.backoff import Backoff
from podmortem.k8s.listwatch import Listed, list_watch
from podmortem.k8s.objects import JSON, metadata_of, resource_path
from podmortem.k8s.workloads import attempt_of
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb

log = logging.getLogger(__name__)


@dataclass
class _Known:
    key: MemberKey
    snapshot: PodSnapshot
    scope: tuple[str | None, str]


class PodWatch:
    """Feeds the incident book from pod watches. `run()` until cancelled."""

    def __init__(
        self,
        kube: Kube,
        book: IncidentBook,
        settings: KubeSettings,
        resolver: JobResolver | None = None,
        backoff: Backoff | None = None,
        index: MembershipIndex | None = None,
        holds: HoldDesk | None = None,
        stalls: StallDesk | None = None,
    ) -> None:
        self.kube = kube
        self.book = book
        self.holds = holds
        self.stalls = stalls
        self.settings = settings
        self.resolver = resolver or JobResolver(kube)
        self.index = index  # where stream registrations are checked against what the watch resolved
        self.backoff = backoff or Backoff(settings.client.backoff_initial, settings.client.backoff_max)
        self._known: dict[str, _Known] = {}  # pod uid (or ns/name) -> last observation
        self._expected: dict[tuple[str, str, str], int] = {}
        self.relists = 0  # lists done (the first one included), for tests and logs
        self.observed = 0
        self.logs = LogReader(kube, settings.pod_log_bytes) if settings.pod_log_bytes > 0 else None
        # Per pod, the events waiting behind a log read, so that the pod's events keep their order.
        self._queued: dict[str, asyncio.Task[None]] = {}

    async def run(self) -> None:
        scopes = [(ns, sel) for ns in (self.settings.namespaces or (None,)) for sel in self.settings.pod_selectors]
        try:
            async with asyncio.TaskGroup() as tg:
                for namespace, selector in scopes:
                    tg.create_task(
                        self.watch_scope(namespace, selector), name=f"podwatch {namespace or '*'} {selector}"
                    )
        finally:
            queued = list(self._queued.values())
            for task in queued:
                task.cancel()
            await asyncio.gather(*queued, return_exceptions=True)

    def _ingest(self, uid: str, key: MemberKey, events: list[pb.Event], snap: PodSnapshot | None = None) -> None:
        """Ingest a pod's events in order; with `snap`, its failed run's log tail first (read meanwhile)."""
        before = self._queued.get(uid)
        if before is None and snap is None:
            for event in events:
                self._take(key, event)
            return

        async def in_turn() -> None:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)
            if snap is not None and self.logs is not None:
                tail = await self.logs.tail_event(snap)
                if tail is not None:
                    self.book.ingest(key, tail)
            for event in events:
                self._take(key, event)

        task = asyncio.create_task(in_turn(), name=f"podwatch ingest {uid}")
        self._queued[uid] = task
        task.add_done_callback(lambda t: self._queued.pop(uid, None) if self._queued.get(uid) is t else None)

    def _take(self, key: MemberKey, event: pb.Event) -> None:
        """One event into the book; a member's end to the stall desk too (taken already or not: the state
        file may have replayed it)."""
        self.book.ingest(key, event)
        if self.stalls is not None and is_end(event):
            self.stalls.ended(key)

    async def watch_scope(self, namespace: str | None, selector: str) -> None:
        path = resource_path("v1", "pods", namespace)
        query = {"labelSelector": selector}
        scope = (namespace, selector)

        async def list_() -> JSON:
            self.relists += 1
            return await self.kube.get(path, query)

        def watch(version: str) -> AsyncGenerator[JSON, None]:
            return self.kube.watch(path, query, version)

        what = f"pod watch {scope}"
        async with contextlib.aclosing(list_watch(list_, watch, backoff=self.backoff, what=what)) as changes:
            async for change in changes:
                if isinstance(change, Listed):
                    await self._relisted(scope, change.items)
                elif change.type == "DELETED":
                    await self.vanished(change.object)
                else:
                    await self.observe(change.object, scope)

    async def _relisted(self, scope: tuple[str | None, str], pods: list[JSON]) -> None:
        present = set()
        for pod in pods:
            known = await self.observe(pod, scope)
            if known is not None:
                present.add(known)
        for uid, was in list(self._known.items()):
            if was.scope == scope and uid not in present:
                await self._vanish(uid, was)  # deleted while we were not watching

    @staticmethod
    def _uid(pod: JSON) -> str:
        meta = metadata_of(pod)
        return str(meta.get("uid") or f"{meta.get('namespace', '')}/{meta.get('name', '')}")

    async def observe(self, pod: JSON, scope: tuple[str | None, str] = (None, "")) -> str | None:
        """One version of a training pod: its membership, the job's size, and the facts it adds."""
        resolved = await self.resolver.resolve(pod)
        if resolved is None:
            return None
        uid = self._uid(pod)
        snap = podstatus.snapshot(pod)
        facts = pod_facts(pod, resolved, snap)
        if self.index is not None:
            self.index.saw(facts)
        attempt = facts.attempt  # as the pod's sidecar registers (k8s.workloads.attempt_of)
        identity = dataclasses.replace(wire.member_from_snapshot(snap), rank=facts.rank)
        key = self.book.observe_member(resolved.job, attempt, identity)
        if resolved.world_size:
            jkey = (resolved.job.namespace, resolved.job.name, attempt)
            if self._expected.get(jkey) != resolved.world_size:
                if len(self._expected) >= 10_000:
                    self._expected.clear()  # a bound; telling the book again is harmless
                self._expected[jkey] = resolved.world_size
                self.book.expect(resolved.job, attempt, resolved.world_size)
        previous = self._known.get(uid)
        events = wire.events_from_snapshot(snap, previous.snapshot if previous else None)
        earlier = [e for e in events if wire.run_of(e) < snap.restart_count]
        if earlier:  # the end of the run before a restart belongs to that run's attempt
            events = [e for e in events if e not in earlier]
            before = self.book.observe_member(resolved.job, attempt_of(pod, snap.restart_count - 1), identity)
            read_before = self.logs is not None and needs_log(snap) and self.book.lacks_log(before)
            self._ingest(uid, before, earlier, snap if read_before else None)
        ended = any(e.WhichOneof("payload") == "termination" for e in events)
        read_log = ended and self.logs is not None and needs_log(snap) and self.book.lacks_log(key)
        self._ingest(uid, key, events, snap if read_log else None)
        if self.holds is not None:
            self.holds.pod_seen(key, snap)
        self._known[uid] = _Known(key, snap, scope)
        self.observed += 1
        return uid

    async def vanished(self, pod: JSON) -> None:
        """A DELETED watch event: the pod is gone, whatever its sidecar said or did not say."""
        uid = self._uid(pod)
        known = self._known.get(uid)
        if known is None:
            await self.observe(pod)  # first sight is its deletion: still a member
            known = self._known.get(uid)
        if known is not None:
            # The DELETED object is the pod's last state: its facts first, then its disappearance.
            snap = podstatus.snapshot(pod)
            self._ingest(uid, known.key, wire.events_from_snapshot(snap, known.snapshot))
            known = dataclasses.replace(known, snapshot=snap)
            await self._vanish(uid, known)

    async def _vanish(self, uid: str, known: _Known) -> None:
        self._known.pop(uid, None)
        snap = known.snapshot
        deletion = pb.Deletion(phase=snap.phase, reason="Deleted")
        ts = wire.to_ts(snap.deleted_at if snap.deleted_at is not None else time.time())
        assert ts is not None
        deletion.deletion_timestamp.CopyFrom(ts)
        self._ingest(uid, known.key, [wire.make_event(deletion, f"{uid}/deletion/vanished")])
        if self.holds is not None:
            self.holds.vanished(known.key)
        log.info("pod %s/%s is gone (phase %s)", snap.namespace, snap.name, snap.phase or "unknown")


async def run_kubernetes(
    book: IncidentBook,
    settings: KubeSettings,
    stop: asyncio.Event,
    kube: Kube | None = None,
    index: MembershipIndex | None = None,
    holds: HoldDesk | None = None,
    stalls: StallDesk | None = None,
) -> None:
    """The aggregator's pod watch task: runs until `stop` is set, then cancels its watches and returns.

    Pass the same `Kube` as to `kube_publishers` to share one rate limit; without one it is built
    from `settings` and closed on return.
    """
    own = kube is None
    client = Kube.from_settings(settings) if kube is None else kube
    watch = PodWatch(client, book, settings, index=index, holds=holds, stalls=stalls)
    task = asyncio.create_task(watch.run(), name="podmortem pod watch")
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        task.cancel()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await task  # re-raises what made the watch fail, if it did
        finally:
            if own:
                client.close()
