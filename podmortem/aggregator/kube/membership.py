"""Which job a pod belongs to, and where in it, as the API says: never as a stream claims it.

A projected token proves which pod is speaking; it says nothing about the job the pod belongs to,
and any pod may project a token for the audience `podmortem`. So a stream's job identity, attempt,
rank, replica index, node and the job's size come from the pod object the token is bound to: its
labels and controller ownerReferences, walked up to the outermost workload we know (`JobResolver`,
the resolution the pod watch does for every training pod). The pod watch feeds what it resolved into
a `MembershipIndex`, so a registration costs no API call when the watch already knows the pod; else
the pod is read once (through the token reviewers' own API budget, never the publishers').

`MembershipVerifier.verify(identity, register)` returns the registration as the API states it, or
raises `AuthRefused` (PERMISSION_DENIED): `not_member` for a pod that belongs to no job we know or to
another job than it claims, `pod_uid` for a token of an earlier pod of the same name, and
`claim_mismatch` for a rank, replica type or replica index the pod object contradicts. Where the pod
object states a fact, it replaces the claim: the job's kind and uid, the node and pod IP, and the
world size (the job's own size replaces the sidecar's hint). Where it states nothing (a rank the spec
cannot give), the claim stays as the sidecar sent it. The attempt is the sidecar's only where the pod
object accounts for it: its JobSet restart attempt, and the training container's restarts at most one
ahead of those the object shows (the sidecar sees a restart as it happens, the watch a moment later).
Any other attempt (an invented `n7`, a restart the container never had) is replaced by the one the
object states, so a pod cannot open incident after incident by naming new attempts.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from podmortem.aggregator.kube.client import Kube
from podmortem.aggregator.kube.jobs import node_rank, world_size
from podmortem.aggregator.refusals import AuthRefused
from podmortem.core import podstatus
from podmortem.core.model import JobRef
from podmortem.k8s.errors import KubeError, NotFoundError, PermanentError
from podmortem.k8s.objects import resource_path
from podmortem.k8s.workloads import (
    JOBSET_RESTART_ATTEMPT,
    WORKLOADS,
    OwnerRef,
    attempt_from,
    attempt_of,
    controller_of,
    workload_from_labels,
)
from podmortem.protocol.v1 import collector_pb2 as pb

log = logging.getLogger(__name__)

JSON = dict[str, Any]
MAX_INDEXED_PODS = 200_000


@dataclass(frozen=True)
class ResolvedJob:
    job: JobRef
    world_size: int | None
    spec_object: JSON | None  # the object whose spec gives ranks (PyTorchJob or JobSet), if read


class JobResolver:
    """Pod -> its outermost workload, walking controller ownerReferences; objects cached for `ttl`."""

    def __init__(
        self, kube: Kube, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic, max_entries: int = 4096
    ) -> None:
        self.kube = kube
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._cache: dict[tuple[str, str, str], tuple[float, JSON | None]] = {}

    async def fetch(self, namespace: str, ref: OwnerRef) -> JSON | None:
        workload = ref.workload
        if workload is None:
            return None
        key = (namespace, ref.kind, ref.name)
        hit = self._cache.get(key)
        if hit is not None and self._clock() - hit[0] < self.ttl:
            return hit[1]
        try:
            path = resource_path(workload.api_version, workload.plural, namespace, ref.name)
            obj: JSON | None = await self.kube.get(path)
        except (NotFoundError, PermanentError) as exc:
            log.info("cannot read %s %s/%s: %s", ref.kind, namespace, ref.name, exc)
            obj = None
        now = self._clock()
        if len(self._cache) >= self.max_entries:  # forget expired jobs (finished long ago) now and then
            self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self.ttl}
        self._cache[key] = (now, obj)
        return obj

    async def resolve(self, pod: JSON) -> ResolvedJob | None:
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        owner = controller_of(pod)
        if owner is None:
            # No ownerReference we know (e.g. a pod created by hand with the labels): labels only.
            ref = workload_from_labels(pod)
            if ref is None:
                return None
            w = WORKLOADS.get(ref.kind)
            owner = OwnerRef(ref.kind, w.api_version, ref.name) if w else None
            if owner is None:
                return ResolvedJob(ref, None, None)
        chain: list[JSON] = []
        seen: set[tuple[str, str]] = set()
        last = owner
        while owner is not None and len(chain) < 4 and (owner.kind, owner.name) not in seen:
            seen.add((owner.kind, owner.name))
            last = owner
            obj = await self.fetch(namespace, owner)
            if obj is None:
                break
            chain.append(obj)
            owner = controller_of(obj)
        if not chain:
            return ResolvedJob(JobRef(namespace, last.name, last.kind, last.uid), None, None)
        top = chain[-1]
        meta = top.get("metadata") or {}
        kind = str(top.get("kind") or last.kind)
        job = JobRef(namespace, str(meta.get("name", last.name)), kind, str(meta.get("uid", "")))
        size = next((s for s in (world_size(o) for o in reversed(chain)) if s), None)
        spec_object = next((o for o in chain if o.get("kind") in ("PyTorchJob", "JobSet")), None)
        return ResolvedJob(job, size, spec_object)


@dataclass(frozen=True)
class PodFacts:
    """A training pod's place in its job, as its object and its job's spec state it."""

    namespace: str
    pod: str
    uid: str
    job: JobRef
    attempt: str  # as its sidecar derives it: JobSet's restart attempt and the container's restarts
    rank: int | None
    replica_type: str
    replica_index: int | None
    node: str
    pod_ip: str
    world_size: int | None
    jobset_attempt: str = ""  # the pod's JobSet restart attempt label ("" for none)
    restarts: int = 0  # the training container's restarts, as the object shows them


def pod_facts(pod: JSON, resolved: ResolvedJob, snap: podstatus.PodSnapshot | None = None) -> PodFacts:
    snap = snap if snap is not None else podstatus.snapshot(pod)
    rank = node_rank(resolved.spec_object, pod)
    return PodFacts(
        namespace=snap.namespace,
        pod=snap.name,
        uid=snap.uid,
        job=resolved.job,
        attempt=attempt_of(pod, snap.restart_count),
        jobset_attempt=str(((pod.get("metadata") or {}).get("labels") or {}).get(JOBSET_RESTART_ATTEMPT, "")),
        restarts=snap.restart_count,
        rank=rank if rank is not None else snap.rank,
        replica_type=snap.replica_type,
        replica_index=snap.replica_index,
        node=snap.node,
        pod_ip=snap.pod_ip,
        world_size=resolved.world_size,
    )


class MembershipIndex:
    """What the pod watch resolved, by (namespace, pod): newest first out when over `max_pods`.

    Entries stay after a pod is deleted: a terminating pod's sidecar may still reconnect to deliver
    its last events, and the facts of a pod's job do not change while it exists."""

    def __init__(self, max_pods: int = MAX_INDEXED_PODS) -> None:
        self.max_pods = max_pods
        self._pods: OrderedDict[tuple[str, str], PodFacts] = OrderedDict()

    def saw(self, facts: PodFacts) -> None:
        key = (facts.namespace, facts.pod)
        self._pods[key] = facts
        self._pods.move_to_end(key)
        while len(self._pods) > self.max_pods:
            self._pods.popitem(last=False)

    def get(self, namespace: str, pod: str) -> PodFacts | None:
        return self._pods.get((namespace, pod))

    def knows(self, namespace: str, pod: str, uid: str) -> bool:
        facts = self._pods.get((namespace, pod))
        return facts is not None and facts.uid == uid


class BoundPod(Protocol):
    """The pod a token is bound to, as the TokenReview says (`auth.Identity`)."""

    @property
    def namespace(self) -> str: ...
    @property
    def pod(self) -> str: ...
    @property
    def pod_uid(self) -> str: ...


def _refuse(reason: str, message: str) -> AuthRefused:
    return AuthRefused(reason, message, code="PERMISSION_DENIED")


class MembershipVerifier:
    """`verify(identity, register)`: the registration as the API states it (see the module's docstring)."""

    def __init__(self, kube: Kube, index: MembershipIndex | None = None, resolver: JobResolver | None = None) -> None:
        self.kube = kube
        self.index = index if index is not None else MembershipIndex()
        self.resolver = resolver or JobResolver(kube)
        self.pod_reads = 0  # pods read from the API (not found in the index), for tests and logs

    async def facts(self, identity: BoundPod) -> PodFacts:
        known = self.index.get(identity.namespace, identity.pod)
        if known is not None and (not identity.pod_uid or known.uid == identity.pod_uid):
            return known
        self.pod_reads += 1
        try:
            pod = await self.kube.get(resource_path("v1", "pods", identity.namespace, identity.pod))
        except NotFoundError:
            raise _refuse("not_member", f"pod {identity.namespace}/{identity.pod} does not exist") from None
        except KubeError as exc:
            raise AuthRefused("review_failed", f"cannot read the pod: {exc}", code="UNAVAILABLE") from None
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if identity.pod_uid and uid and uid != identity.pod_uid:
            raise _refuse("pod_uid", f"the token is bound to an earlier pod {identity.namespace}/{identity.pod}")
        try:
            resolved = await self.resolver.resolve(pod)
        except KubeError as exc:
            raise AuthRefused("review_failed", f"cannot read the pod's job: {exc}", code="UNAVAILABLE") from None
        if resolved is None:
            raise _refuse("not_member", f"pod {identity.namespace}/{identity.pod} belongs to no training job")
        facts = pod_facts(pod, resolved)
        self.index.saw(facts)
        return facts

    async def verify(self, identity: BoundPod, reg: pb.Register) -> pb.Register:
        facts = await self.facts(identity)
        return verified_register(facts, reg)


def accounted_attempts(facts: PodFacts) -> set[str]:
    """The attempts a pod's sidecar may register under: its JobSet restart attempt with each restart count
    from none to one past the object's (`k8s.workloads.attempt_from`)."""
    labels = {JOBSET_RESTART_ATTEMPT: facts.jobset_attempt}
    return {attempt_from(labels, n) for n in range(facts.restarts + 2)}


def verified_register(facts: PodFacts, reg: pb.Register) -> pb.Register:
    """`reg` with what the pod object states put in; AuthRefused when a claim contradicts it."""
    who = f"pod {facts.namespace}/{facts.pod}"
    if reg.job.namespace != facts.namespace or reg.job.name != facts.job.name:
        raise _refuse(
            "not_member",
            f"{who} belongs to {facts.job.kind} {facts.namespace}/{facts.job.name}, not to job "
            f"{reg.job.namespace}/{reg.job.name}",
        )
    wrong = []
    if facts.rank is not None and reg.HasField("rank") and reg.rank != facts.rank:
        wrong.append(f"rank {reg.rank} (the pod is rank {facts.rank})")
    if facts.replica_index is not None and reg.HasField("replica_index") and reg.replica_index != facts.replica_index:
        wrong.append(f"replica index {reg.replica_index} (the pod's is {facts.replica_index})")
    if facts.replica_type and reg.replica_type and reg.replica_type.lower() != facts.replica_type.lower():
        wrong.append(f"replica type {reg.replica_type!r} (the pod's is {facts.replica_type!r})")
    if wrong:
        raise _refuse("claim_mismatch", f"{who} claims " + ", ".join(wrong))
    out = pb.Register()
    out.CopyFrom(reg)
    out.job.kind, out.job.uid = facts.job.kind, facts.job.uid
    if reg.attempt not in accounted_attempts(facts):
        log.warning(
            "%s registers as attempt %r, which its pod object does not account for: filed under %r",
            who,
            reg.attempt,
            facts.attempt,
        )
        out.attempt = facts.attempt
    if facts.rank is not None:
        out.rank = facts.rank
    if facts.replica_index is not None:
        out.replica_index = facts.replica_index
    if facts.replica_type:
        out.replica_type = facts.replica_type
    if facts.node:
        out.node = facts.node
    if facts.pod_ip:
        out.pod_ip = facts.pod_ip
    if facts.world_size:
        out.world_size_hint = facts.world_size
    return out
