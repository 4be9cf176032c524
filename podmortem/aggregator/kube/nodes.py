"""Bad nodes: each `hardware` root cause is recorded on its node, and a node that keeps failing is marked.

Meta's report on its research clusters (Kokolis et al., 2024) found that detecting "lemon nodes" from
repeated failures measurably raised job success. podmortem knows, per incident, the root pod, its node
and whether the cause was the hardware; this publisher keeps that knowledge where the cluster's owner
and scheduler look:

- the node annotation `podmortem.io/hardware-faults`: JSON, the last `MAX_FAULTS` hardware root causes
  on that node (`time`, `incident`, `job`, `job_uid`, `pod`, `evidence`), oldest first. It lives on the
  node, so the record survives aggregator restarts and needs no database.
- when `threshold` faults (default 2) from at least `min_jobs` different jobs (default 2) and
  `min_namespaces` namespaces (default 1) fall within `window` (default 7 days), and after the last time
  a person cleared the mark: the node condition `podmortem.io/SuspectHardware=True` (reason
  `RepeatedHardwareFaults`, the message naming the faults), a `Warning` Event on the node, and, only
  with `taint` (off by default: taking nodes out of service is the cluster owner's decision), the taint
  `podmortem.io/suspect-hardware:NoSchedule`.

A hardware verdict comes from text the tenant's pod wrote, so the trust in it is bounded
(docs/reliability.md, "What a tenant can do to nodes"):

- a fault counts once per job on a node: the job is the top-level workload, named by its uid as the
  API states it (`--auth tokenreview` resolves it from the pod's owners), else by namespace, kind and
  name. Another incident of the same job (another attempt, another pod, an attempt the pod invented)
  while its fault counts (within the window, after the last clearing) adds nothing; it is counted in
  `refused` as `job_counted`;
- a namespace records at most `per_namespace_per_hour` new faults an hour, over all nodes (a token
  bucket of that size, refilled evenly; in memory, so it starts full after a restart). Beyond it the fault
  is not recorded and is counted as `namespace_rate`.

It never removes a taint or a condition: it adds its own taint when absent and writes only its own
condition type. A person clears the mark by setting the condition to False (podmortem then counts only
faults after that time) and removing the taint; docs/kubernetes.md has the command. Writes are
read-modify-write with the node's resourceVersion as precondition (a 409 re-reads), and only under a
confirmed term: the publish queue fences each publisher's turn (the leader holding its Lease).

The builders (annotation, condition, taint, Event) are pure functions over plain data; the class reads,
decides with them and writes through `kube.Kube`.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from podmortem.aggregator.config import NodeActions
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.kube.client import Kube
from podmortem.core.names import (
    COMPONENT,
    HARDWARE_FAULTS_ANNOTATION,
    SUSPECT_HARDWARE_CONDITION,
    SUSPECT_HARDWARE_EVENT,
    SUSPECT_HARDWARE_REASON,
    SUSPECT_HARDWARE_TAINT,
)
from podmortem.k8s.errors import AlreadyExistsError, ConflictError, NotFoundError
from podmortem.k8s.objects import (
    JSON,
    annotations_of,
    core_event,
    cut,
    metadata_of,
    resource_path,
    rfc3339,
    spec_of,
    status_of,
)

log = logging.getLogger(__name__)


TAINT_EFFECT = "NoSchedule"
EVENT_NAMESPACE = "default"  # Events about cluster-scoped objects live here (as kubectl describe node reads them)
MAX_FAULTS = 10
MAX_EVIDENCE = 3
MAX_EVIDENCE_ITEM = 200
MAX_MESSAGE = 1024
ATTEMPTS = 5
HOUR = 3600.0

# Why a hardware root cause was not recorded on its node, as counted in
# `podmortem_node_faults_refused_total{reason}`: a fixed set.
JOB_COUNTED = "job_counted"
NAMESPACE_RATE = "namespace_rate"
REFUSALS = (JOB_COUNTED, NAMESPACE_RATE)


# -- pure builders -------------------------------------------------------------------------------


def parse_time(text: Any) -> float | None:
    try:
        stamp = datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None
    return stamp.timestamp()


def fault_of(decision: Decision) -> JSON:
    """The record of one hardware root cause."""
    v, job = decision.verdict, decision.incident.job
    out = {
        "time": rfc3339(v.failed_at if v.failed_at is not None else decision.decided_at),
        "incident": decision.incident.incident_id,
        "job": f"{job.namespace}/{job.kind}/{job.name}",
        "pod": v.pod,
        "evidence": [cut(e, MAX_EVIDENCE_ITEM) for e in v.evidence[:MAX_EVIDENCE]],
    }
    if job.uid:
        out["job_uid"] = job.uid
    return out


def job_key(fault: JSON) -> str:
    """Which job a fault is from: its uid when recorded, else namespace/kind/name."""
    return str(fault.get("job_uid") or fault.get("job") or "")


def namespace_of(fault: JSON) -> str:
    return str(fault.get("job") or "").split("/", 1)[0]


REPLAY, NEW = "replay", "new"


def standing(node: JSON, fault: JSON, now: float, window: float) -> str:
    """REPLAY: this incident is in the node's record already; JOB_COUNTED: another incident of the same job
    is, and counts (within the window, after the last clearing); NEW: neither."""
    faults = read_faults(node)
    if any(f.get("incident") == fault["incident"] for f in faults):
        return REPLAY
    key = job_key(fault)
    if key and any(job_key(f) == key for f in recent(faults, now, window, cleared_at(node))):
        return JOB_COUNTED
    return NEW


def suspect(faults: list[JSON], actions: NodeActions) -> bool:
    """Do these (recent) faults mark the node: enough of them, from enough jobs and namespaces?"""
    return (
        len(faults) >= actions.threshold
        and len({job_key(f) for f in faults}) >= actions.min_jobs
        and len({namespace_of(f) for f in faults}) >= actions.min_namespaces
    )


class NamespaceBudget:
    """At most `per_hour` new faults per namespace an hour: a token bucket per namespace, full at start.
    Buckets that have filled up again are forgotten once more than `TRACKED` namespaces have one."""

    TRACKED = 4096

    def __init__(self, per_hour: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_hour = per_hour
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # namespace -> (tokens, when counted)

    def _tokens(self, namespace: str, now: float) -> float:
        tokens, then = self._buckets.get(namespace, (float(self.per_hour), now))
        return min(float(self.per_hour), tokens + (now - then) * self.per_hour / HOUR)

    def take(self, namespace: str) -> bool:
        now = self.clock()
        tokens = self._tokens(namespace, now)
        taken = tokens >= 1.0
        self._buckets[namespace] = (tokens - 1.0 if taken else tokens, now)
        if len(self._buckets) > self.TRACKED:
            for full in [ns for ns in self._buckets if self._tokens(ns, now) >= self.per_hour]:
                del self._buckets[full]
        return taken


def read_faults(node: JSON) -> list[JSON]:
    """The node's fault record; an annotation someone edited into something else reads as empty (logged)."""
    raw = annotations_of(node).get(HARDWARE_FAULTS_ANNOTATION)
    if raw is None:
        return []
    try:
        loaded = json.loads(raw)
    except (ValueError, RecursionError):
        loaded = None
    if not isinstance(loaded, list):
        log.warning("node %s: annotation %s is not a JSON list; starting a new record",
                    metadata_of(node).get("name"), HARDWARE_FAULTS_ANNOTATION)  # fmt: skip
        return []
    return [f for f in loaded if isinstance(f, dict)]


def with_fault(faults: list[JSON], fault: JSON) -> list[JSON] | None:
    """The record with `fault` added (the last MAX_FAULTS kept), or None when its incident is already in it."""
    if any(f.get("incident") == fault["incident"] for f in faults):
        return None
    return [*faults, fault][-MAX_FAULTS:]


def cleared_at(node: JSON) -> float | None:
    """When a person last set our condition to False (podmortem counts only the faults after it)."""
    for c in status_of(node).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == SUSPECT_HARDWARE_CONDITION and c.get("status") == "False":
            return parse_time(c.get("lastTransitionTime"))
    return None


def recent(faults: list[JSON], now: float, window: float, since: float | None = None) -> list[JSON]:
    """The faults within `window` seconds of `now`, and after `since` when given."""
    start = now - window if since is None else max(now - window, since)
    out = []
    for f in faults:
        t = parse_time(f.get("time"))
        if t is not None and t > start:
            out.append(f)
    return out


def _days(seconds: float) -> str:
    return f"{seconds / 86400:g}d" if seconds % 3600 == 0 else f"{seconds:g}s"


def condition_message(faults: list[JSON], window: float) -> str:
    named = "; ".join(f"{f.get('time')} {f.get('job')} pod {f.get('pod')}" for f in faults)
    return cut(f"{len(faults)} hardware root causes within {_days(window)}: {named}", MAX_MESSAGE)


def suspect_condition(faults: list[JSON], window: float, now: float) -> JSON:
    stamp = rfc3339(now)
    return {
        "type": SUSPECT_HARDWARE_CONDITION,
        "status": "True",
        "reason": SUSPECT_HARDWARE_REASON,
        "message": condition_message(faults, window),
        "lastTransitionTime": stamp,
        "lastHeartbeatTime": stamp,
    }


def conditions_with(conditions: list[JSON], ours: JSON) -> list[JSON] | None:
    """The node's conditions with ours set True; None when it already says exactly that."""
    out: list[JSON] = []
    found = False
    for c in conditions:
        if isinstance(c, dict) and c.get("type") == SUSPECT_HARDWARE_CONDITION:
            found = True
            if c.get("status") == "True":
                if c.get("message") == ours["message"]:
                    return None
                ours = dict(ours, lastTransitionTime=c.get("lastTransitionTime", ours["lastTransitionTime"]))
            out.append(ours)
        else:
            out.append(c)
    if not found:
        out.append(ours)
    return out


def taints_with(taints: list[JSON]) -> list[JSON] | None:
    """The node's taints with ours added; None when a taint with our key is there already (ours or a person's)."""
    if any(isinstance(t, dict) and t.get("key") == SUSPECT_HARDWARE_TAINT for t in taints):
        return None
    return [*taints, {"key": SUSPECT_HARDWARE_TAINT, "value": "true", "effect": TAINT_EFFECT}]


def event_body(node: JSON, fault: JSON, faults: list[JSON], window: float, now: float, instance: str = "") -> JSON:
    """A core/v1 Warning Event about the node; named after node and incident, so a replay is a 409."""
    meta = metadata_of(node)
    name = str(meta.get("name", ""))
    digest = hashlib.sha256(f"{name}\0{fault['incident']}".encode()).hexdigest()[:16]
    involved = {"apiVersion": "v1", "kind": "Node", "name": name}
    if meta.get("uid"):
        involved["uid"] = meta["uid"]
    return core_event(
        name=f"{name[:200]}.podmortem.{digest}",
        namespace=EVENT_NAMESPACE,
        involved=involved,
        type_="Warning",
        reason=SUSPECT_HARDWARE_EVENT,
        message=cut(f"node {name} is suspect: {condition_message(faults, window)}", MAX_MESSAGE),
        action="MarkedSuspect",
        component=COMPONENT,
        instance=instance,
        now=now,
    )


# -- the publisher -------------------------------------------------------------------------------


class NodeFaultPublisher:
    """Records hardware root causes on their nodes; marks a node past the threshold (see the module doc)."""

    name = "kube-nodes"

    def __init__(
        self,
        kube: Kube,
        actions: NodeActions,
        *,
        on_suspects: Callable[[int], None] = lambda n: None,
        on_refused: Callable[[str], None] = lambda reason: None,
        clock: Callable[[], float] | None = None,
        instance: str = "",
    ) -> None:
        self.kube = kube
        self.actions = actions
        self.on_suspects = on_suspects  # the number of nodes marked suspect, for the gauge
        self.on_refused = on_refused  # a fault not recorded, by reason (REFUSALS), for the counter
        self._clock = clock
        self.budget = NamespaceBudget(actions.per_namespace_per_hour, clock if clock is not None else time.monotonic)
        self.instance = instance
        self.suspects: set[str] = set()

    async def publish(self, decision: Decision) -> None:
        v = decision.verdict
        if decision.provisional or v.category != "hardware" or not v.pod or not v.node:
            return  # a provisional verdict (pods still running) records nothing on a node
        path = resource_path("v1", "nodes", None, v.node)
        fault = fault_of(decision)
        now = self._clock() if self._clock is not None else decision.decided_at

        try:
            known = standing(await self.kube.get(path), fault, now, self.actions.window)
        except NotFoundError:
            log.info("node %s is gone; nothing recorded", v.node)
            return
        incident = decision.incident.incident_id
        if known == JOB_COUNTED:
            log.info("incident %s: job %s has counted on node %s already", incident, fault["job"], v.node)
            self.on_refused(JOB_COUNTED)
            return
        namespace = decision.incident.job.namespace
        if known == NEW and not self.budget.take(namespace):
            limit = self.actions.per_namespace_per_hour
            log.warning("incident %s: namespace %s recorded %d hardware faults on nodes within the hour; "
                        "node %s not written", incident, namespace, limit, v.node)  # fmt: skip
            self.on_refused(NAMESPACE_RATE)
            return

        def record(node: JSON) -> JSON | None:
            if standing(node, fault, now, self.actions.window) != NEW:
                return None
            faults = with_fault(read_faults(node), fault)
            if faults is None:
                return None
            encoded = json.dumps(faults, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            return {"metadata": {"annotations": {HARDWARE_FAULTS_ANNOTATION: encoded}}}

        node = await self._update(path, "", record)
        if node is None:
            return
        if standing(node, fault, now, self.actions.window) != REPLAY:
            self.on_refused(JOB_COUNTED)  # another incident of this job was recorded meanwhile (a 409 re-read)
            return
        faults = recent(read_faults(node), now, self.actions.window, cleared_at(node))
        if not suspect(faults, self.actions):
            self._count(v.node, False)
            return

        def mark(node: JSON) -> JSON | None:
            conditions = [c for c in (status_of(node).get("conditions") or []) if isinstance(c, dict)]
            merged = conditions_with(conditions, suspect_condition(faults, self.actions.window, now))
            return None if merged is None else {"status": {"conditions": merged}}

        node = await self._update(path, "/status", mark) or node
        self._count(v.node, True)
        try:
            body = event_body(node, fault, faults, self.actions.window, now, self.instance)
            await self.kube.request("POST", resource_path("v1", "events", EVENT_NAMESPACE), body=body)
        except AlreadyExistsError:
            pass  # this incident's Event was written before
        if self.actions.taint:

            def taint(node: JSON) -> JSON | None:
                taints = [t for t in (spec_of(node).get("taints") or []) if isinstance(t, dict)]
                merged = taints_with(taints)
                return None if merged is None else {"spec": {"taints": merged}}

            await self._update(path, "", taint)
        log.warning(
            "node %s marked %s: %s", v.node, SUSPECT_HARDWARE_CONDITION, condition_message(faults, self.actions.window)
        )

    async def _update(self, path: str, sub: str, change: Callable[[JSON], JSON | None]) -> JSON | None:
        """Read the node, merge-patch `change(node)` with its resourceVersion, re-read on 409; the node
        as written (or as read when there was nothing to change); None when it is gone."""
        for attempt in range(ATTEMPTS):
            try:
                node = await self.kube.get(path)
            except NotFoundError:
                log.info("node %s is gone; nothing recorded", path.rsplit("/", 1)[1])
                return None
            patch = change(node)
            if patch is None:
                return node
            patch.setdefault("metadata", {})["resourceVersion"] = metadata_of(node).get("resourceVersion")
            try:
                return await self.kube.request(
                    "PATCH", path + sub, body=patch, content_type="application/merge-patch+json"
                )
            except ConflictError:
                log.info("node %s changed (attempt %d); re-reading", path.rsplit("/", 1)[1], attempt + 1)
        raise ConflictError(409, "Conflict", f"{path}{sub}: still conflicting after {ATTEMPTS} attempts")

    def _count(self, node: str, suspect: bool) -> None:
        (self.suspects.add if suspect else self.suspects.discard)(node)
        self.on_suspects(len(self.suspects))
