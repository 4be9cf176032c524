"""Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection package does it.

Two aggregator replicas (a Deployment with `--leader-elect`) share one Lease; only its holder serves:
the standby waits in `acquire()` before it opens its gRPC port, so it is not Ready and the Service
sends every sidecar to the leader. The holder renews the Lease every `retry_period` (`hold()`); if it
cannot renew within `renew_deadline` — the API server unreachable, or another replica took the Lease
— `hold()` raises `LeadershipLost`, the aggregator's root task ends and the process goes through its
one stop path and exits, as client-go's callers do (a restarted process competes again). A graceful
stop releases the Lease (`release()`: holder "" with a 1 s duration) so the standby takes over at once
instead of after `lease_duration`. Sidecars reconnect to the new leader and give it everything again
(their outbox keeps acknowledged events for a changed aggregator id), so a failover loses nothing a
live sidecar knows.

Fencing: a process can be paused (SIGSTOP, a frozen VM, a long GC) past its Lease while another
replica takes over, and then wake with decisions in hand. So nothing is published on the strength of
`is_leader` alone: `may_act()` holds only while the last successful renewal, on the local monotonic
clock (which runs on while the process is stopped), is within `renew_deadline`, so at least
`lease_duration - renew_deadline` seconds of the Lease are left; `confirm()` (what the publish queue
and any writer of pod conditions await before each write) renews at once when that no longer holds —
a process waking from a pause re-verifies against the API — and returns the `Term` it acts under
(holder identity and `leaseTransitions`, written into each verdict), or None: then it must not act.

Timings are client-go's defaults: a 15 s lease, a 10 s renew deadline, a 2 s retry period. Expiry is
judged as client-go judges it, on the local monotonic clock: a Lease is free once its record has not
changed for `lease_duration` since this process last saw it change — never by comparing another
node's `renewTime` with our wall clock. Writes use the object's resourceVersion (optimistic
concurrency), so of two candidates that race, one gets 409 Conflict and stays standby.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from podmortem.aggregator.decisions import Term
from podmortem.aggregator.kube.client import Kube
from podmortem.core.finite import finite_or_none
from podmortem.k8s.errors import ConflictError, KubeError, NotFoundError
from podmortem.k8s.objects import resource_path

log = logging.getLogger(__name__)

JSON = dict[str, Any]


class LeadershipLost(RuntimeError):
    """The Lease could not be renewed within the renew deadline (or another replica holds it now)."""


@dataclass(frozen=True)
class LeaseTimings:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("leader election needs 0 < retry period < renew deadline < lease duration")


def micro_time(t: float) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        timings: LeaseTimings | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings or LeaseTimings()
        self._monotonic = monotonic
        self._wall = wall
        self._observed: JSON | None = None  # the Lease spec last seen
        self._observed_at = 0.0  # when it last changed, on our monotonic clock
        self.is_leader = False
        self.transitions = 0  # leaderships won by this process, for tests and logs
        # Once released, `hold` renews no more (it would take the released Lease straight back), and a
        # renewal in flight finishes before the release reads the Lease.
        self._released = False
        self._round = asyncio.Lock()
        self._renewed_at: float | None = None  # the last successful acquire or renewal (monotonic)

    @property
    def path(self) -> str:
        return resource_path("coordination.k8s.io/v1", "leases", self.namespace, self.name)

    async def acquire(self, stop: asyncio.Event | None = None) -> bool:
        """Wait until this process holds the Lease (True), or until `stop` is set (False)."""
        stop = stop or asyncio.Event()
        self._released = False
        logged = False
        while not stop.is_set():
            if await self._try_acquire_or_renew():
                self.is_leader = True
                self._renewed_at = self._monotonic()
                self.transitions += 1
                log.info("leader election: %s holds lease %s/%s", self.identity, self.namespace, self.name)
                return True
            if not logged:
                holder = (self._observed or {}).get("holderIdentity") or "nobody"
                log.info("leader election: lease %s/%s is held by %s; standing by", self.namespace, self.name, holder)
                logged = True
            await _sleep_or_stop(stop, self.timings.retry_period * (1 + 0.2 * random.random()))
        return False

    async def hold(self) -> None:
        """Renew the Lease until cancelled or released; raise `LeadershipLost` when it cannot be renewed in time."""
        last_renewed = self._renewed_at if self._renewed_at is not None else self._monotonic()
        while True:
            await asyncio.sleep(self.timings.retry_period)
            if self._released:
                return
            left = self.timings.renew_deadline - (self._monotonic() - last_renewed)
            try:
                async with asyncio.timeout(max(left, 0.001)):  # a slow API server must not stretch it
                    async with self._round:
                        if self._released:
                            return
                        renewed = await self._try_acquire_or_renew()
            except TimeoutError:
                renewed = False
            if renewed:
                last_renewed = self._renewed_at = self._monotonic()
                continue
            if self._monotonic() - last_renewed >= self.timings.renew_deadline or self._held_by_another():
                self.is_leader = False
                holder = (self._observed or {}).get("holderIdentity") or "nobody"
                raise LeadershipLost(f"lease {self.namespace}/{self.name} not renewed in time (holder now: {holder})")

    # -- fencing ---------------------------------------------------------------------------------

    def may_act(self) -> bool:
        """May this process write now? It leads, has not released the Lease, and renewed it within the
        renew deadline on the local monotonic clock. A synchronous check: see `confirm` to re-verify."""
        return (
            self.is_leader
            and not self._released
            and self._renewed_at is not None
            and self._monotonic() - self._renewed_at < self.timings.renew_deadline
        )

    @property
    def term(self) -> Term:
        spec = self._observed or {}
        return Term(str(spec.get("holderIdentity") or ""), int(spec.get("leaseTransitions") or 0))

    async def confirm(self) -> Term | None:
        """The term to act under, or None: this process must not write. When the last renewal is too old
        (the process was paused, or the API server is slow), one renewal is tried now, bounded by the
        retry period; another replica holding the Lease, or no answer, means None."""
        if self.may_act():
            return self.term
        if not self.is_leader or self._released:
            return None
        try:
            async with asyncio.timeout(self.timings.retry_period):
                async with self._round:
                    if self.may_act():  # the renewal loop renewed meanwhile
                        return self.term
                    if self._released:
                        return None
                    renewed = await self._try_acquire_or_renew()
        except TimeoutError:
            renewed = False
        if not renewed:
            if self._held_by_another():
                self.is_leader = False
            log.warning(
                "leader election: %s cannot confirm it holds lease %s/%s", self.identity, self.namespace, self.name
            )
            return None
        self._renewed_at = self._monotonic()
        return self.term

    async def reacquire(self) -> bool:
        """After `release` with nobody taking over: take the Lease back (one round) to decide what is
        open; True when held again."""
        async with self._round:
            if not await self._try_acquire_or_renew():
                return False
        self._released, self.is_leader, self._renewed_at = False, True, self._monotonic()
        return True

    async def release(self) -> None:
        """Give the Lease up (a graceful stop), so that the standby need not wait for it to expire."""
        if not self.is_leader:
            return
        self.is_leader = False
        self._released = True
        async with self._round:
            await self._release()

    async def _release(self) -> None:
        try:
            lease = await self.kube.get(self.path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            now = micro_time(self._wall())
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now}
            await self.kube.request("PUT", self.path, body=lease)
            log.info("leader election: %s released lease %s/%s", self.identity, self.namespace, self.name)
        except KubeError as exc:
            log.warning("leader election: could not release lease %s/%s: %s", self.namespace, self.name, exc)

    async def taken_over(self, limit: float) -> bool:
        """After `release`: has another replica taken the Lease within `limit` seconds? (A standby tries
        every retry period.) False when nobody did — or the API server could not be asked."""
        loop = asyncio.get_running_loop()
        end = loop.time() + limit
        while True:
            try:
                lease = await self.kube.get(self.path)
            except KubeError as exc:
                log.warning("leader election: cannot read lease %s/%s: %s", self.namespace, self.name, exc)
                return False
            holder = (lease.get("spec") or {}).get("holderIdentity") or ""
            if holder and holder != self.identity:
                log.info("leader election: %s took lease %s/%s over", holder, self.namespace, self.name)
                return True
            if loop.time() >= end:
                return False
            await asyncio.sleep(min(self.timings.retry_period / 4, max(end - loop.time(), 0.0)))

    # -- one round -------------------------------------------------------------------------------

    def _held_by_another(self) -> bool:
        holder = (self._observed or {}).get("holderIdentity")
        return bool(holder) and holder != self.identity

    async def _try_acquire_or_renew(self) -> bool:
        now_wall, now = self._wall(), self._monotonic()
        duration = self.timings.lease_duration
        try:
            lease = await self.kube.get(self.path)
        except NotFoundError:
            spec = self._spec(now_wall, acquire=now_wall, transitions=0)
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec,
            }
            try:
                await self.kube.request(
                    "POST", resource_path("coordination.k8s.io/v1", "leases", self.namespace), body=body
                )
            except KubeError as exc:  # 409: another candidate created it first
                log.debug("leader election: create lost: %s", exc)
                return False
            self._observe(spec, now)
            return True
        except KubeError as exc:
            log.warning("leader election: cannot read lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        spec = lease.get("spec") or {}
        if spec != self._observed:
            self._observe(spec, now)
        holder = spec.get("holderIdentity") or ""
        held_for = finite_or_none(spec.get("leaseDurationSeconds")) or duration
        if holder and holder != self.identity and now < self._observed_at + held_for:
            return False  # held by another, and not expired
        mine = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        acquire = spec.get("acquireTime") if mine and spec.get("acquireTime") else None
        new_spec = self._spec(
            now_wall, acquire=acquire if isinstance(acquire, str) else now_wall, transitions=transitions
        )
        lease["spec"] = new_spec
        try:
            await self.kube.request("PUT", self.path, body=lease)  # carries metadata.resourceVersion
        except ConflictError:
            return False  # another candidate wrote in between
        except KubeError as exc:
            log.warning("leader election: cannot update lease %s/%s: %s", self.namespace, self.name, exc)
            return False
        self._observe(new_spec, now)
        return True

    def _spec(self, now: float, *, acquire: float | str, transitions: int) -> JSON:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(round(self.timings.lease_duration), 1),
            "acquireTime": acquire if isinstance(acquire, str) else micro_time(acquire),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }

    def _observe(self, spec: JSON, now: float) -> None:
        self._observed, self._observed_at = dict(spec), now


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        pass
