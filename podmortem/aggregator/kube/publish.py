"""Verdicts written back into Kubernetes, where the job's owner already looks.

Three publishers, each a `Publisher` for the publish queue, each independent of the others (one
failing — say, RBAC forbids Events — does not stop the rest):

* `AnnotationPublisher` — on the job object and on the root-cause pod: `podmortem.io/summary` (one
  line for people), `podmortem.io/verdict` (a JSON document for tools and `kubectl podmortem`; under
  leader election it names the term that published it, `leaseHolder` and `leaseTransitions`) and
  `podmortem.io/published` (`<incident id>#<revision>`, the idempotency key). The verdict document
  carries the job's attempt history (`attemptHistory`: this attempt and the ones before it, each with
  its category, signature and time, at most `core.repeats.MAX_ATTEMPTS`): merged with the history the
  job's object already carries, so that an aggregator that lost its memory (a restart without
  `--state-dir`) keeps counting (`aggregator.history`). A merge patch of
  `metadata.annotations` touches no other key.
* `ConditionPublisher` — a `PodmortemRootCause` condition in the job's `status.conditions`, written
  through the status subresource by read-modify-write of the whole list with the object's
  resourceVersion as precondition (a 409 means someone else wrote in between: re-read, re-apply).
  Only our entry changes; the conditions the job's controller owns are carried over as read.
  (A controller that rewrites its status from its own cache may drop our entry later; the
  annotations stay the durable record.)
* `EventPublisher` — a `Warning` core/v1 Event on the job and on the root-cause pod. Its name is
  derived from the incident and revision, so publishing twice is a 409 AlreadyExists: nothing new.

A provisional verdict (`Decision.provisional`: a stalled job whose pods still run, `aggregator.stalls`)
gets the annotations (`final: false`, `provisional: true`) and an Event (reason `PodmortemStall`), never
the condition: nothing has failed. Its withdrawal (the job moved again) updates the annotations and
posts a `Normal` Event on the job (reason `PodmortemStallCleared`).

Each decision is published once per incident revision: a publisher first reads the object and skips
it when it already shows this incident at this revision or a later one (an aggregator restart, or the
queue replaying). The builders — decision -> annotations, condition list, Event body — are pure
functions; the classes only read, decide with them, and write through `kube.Kube`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable

from podmortem.aggregator.config import KubeSettings
from podmortem.aggregator.decisions import Decision
from podmortem.aggregator.kube.client import Kube
from podmortem.aggregator.kube.nodes import NodeFaultPublisher
from podmortem.aggregator.publishing import Publisher
from podmortem.core.categories import condition_reason
from podmortem.core.names import (
    COMPONENT,
    PUBLISHED_ANNOTATION,
    ROOT_CAUSE_CONDITION,
    ROOT_CAUSE_EVENT,
    STALL_CLEARED_EVENT,
    STALL_EVENT,
    SUMMARY_ANNOTATION,
    VERDICT_ANNOTATION,
)
from podmortem.core.repeats import MAX_ATTEMPTS, Attempt, recorded
from podmortem.k8s.errors import AlreadyExistsError, ConflictError, NotFoundError
from podmortem.k8s.objects import JSON, annotations_of, core_event, cut, metadata_of, resource_path, rfc3339, status_of
from podmortem.k8s.workloads import WORKLOADS

log = logging.getLogger(__name__)


MAX_SUMMARY = 512
MAX_MESSAGE = 1024  # the root failure's message excerpt in the verdict document
MAX_EVIDENCE = 20
MAX_EVIDENCE_ITEM = 300
MAX_SECONDARY = 32
MAX_VERDICT_BYTES = 32 << 10  # far under the 256 KiB all annotations of an object may take
MAX_NOTE = 1024  # an Event's message


# -- pure builders -----------------------------------------------------------------------------


def publication_key(decision: Decision) -> str:
    return f"{decision.incident.incident_id}#{decision.revision}"


def _parse_key(value: str) -> tuple[str, int] | None:
    incident, sep, revision = value.rpartition("#")
    if not sep or not revision.isdigit():
        return None
    return incident, int(revision)


def is_published(published: str | None, decision: Decision) -> bool:
    """Does an object's key show this incident at this revision or a later one?"""
    parsed = _parse_key(published or "")
    return parsed is not None and parsed[0] == decision.incident.incident_id and parsed[1] >= decision.revision


def summary(decision: Decision) -> str:
    """One line a person can act on.

    e.g. 'rank 3 (pod j-worker-2 on node-7) failed first: user_code, not retryable — ValueError: bad label'
    """
    v = decision.verdict
    if v.pod is None:
        return cut(v.summary or "no failed pod", MAX_SUMMARY)
    if decision.closed_by == "stall":  # the engine's own words: nothing failed yet, pods still run
        return cut(f"provisional (the pods still run): {v.summary}", MAX_SUMMARY)
    where = f" on {v.node}" if v.node else ""
    who = f"rank {v.rank} (pod {v.pod}{where})" if v.rank is not None else f"pod {v.pod}{where}"
    retry = "retryable" if v.retryable else "not retryable" if v.retryable is not None else "retryability unknown"
    detail = v.message or v.summary
    head = f"{who} failed first: {v.category}, {retry}"
    if v.uncertain:  # say so in words: a confident wrong verdict is worse than none
        runner = (
            f"; runner-up pod {v.runner_up_pod} ({v.runner_up_category or 'cause unknown'})" if v.runner_up_pod else ""
        )
        head = f"likely {head} (confidence {v.confidence:.2f}{runner})"
    return cut(head + (f" — {detail}" if detail else ""), MAX_SUMMARY)


def attempt_history(decision: Decision, earlier: tuple[Attempt, ...] = ()) -> tuple[Attempt, ...]:
    """The job's attempts to write (newest first): `earlier` (read from the job's object) and the
    decision's own history, with this attempt when it is the job's own (`Decision.own_attempt`)."""
    kept: tuple[Attempt, ...] = ()
    for entry in sorted((*earlier, *decision.history), key=lambda a: a.decided_at):
        kept = recorded(kept, entry)
    if decision.own_attempt and decision.attempt is not None:
        kept = recorded(kept, decision.attempt)
    return kept[:MAX_ATTEMPTS]


def earlier_attempts(obj: JSON, uid: str) -> tuple[Attempt, ...]:
    """The attempts an object's verdict annotation carries, when the object is the job of `uid` (a job
    created again under the same name is another job). Malformed entries are skipped."""
    meta = metadata_of(obj)
    if not uid or meta.get("uid") != uid:
        return ()
    try:
        doc = json.loads(((meta.get("annotations") or {}).get(VERDICT_ANNOTATION)) or "{}")
    except (ValueError, RecursionError):
        return ()
    entries = doc.get("attemptHistory") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        return ()
    found = (Attempt.from_dict(e) for e in entries[: 4 * MAX_ATTEMPTS])
    return tuple(a for a in found if a is not None)


def verdict_document(decision: Decision, earlier: tuple[Attempt, ...] = ()) -> JSON:
    """The JSON document of `podmortem.io/verdict` (bounded to MAX_VERDICT_BYTES once encoded)."""
    v, inc = decision.verdict, decision.incident
    doc: JSON = {
        "incidentId": inc.incident_id,
        "revision": decision.revision,
        "final": decision.final,
        "provisional": decision.provisional,
        "decidedAt": rfc3339(decision.decided_at),
        # When a provisional verdict on a stall of this attempt was published (null: none): the page draws it.
        "stalledAt": rfc3339(inc.stalled_at) if inc.stalled_at is not None else None,
        "job": {"kind": inc.job.kind, "name": inc.job.name, "namespace": inc.job.namespace},
        "attempt": inc.attempt,
        "worldSize": inc.world_size,
        "reported": decision.reported,
        "pod": v.pod,
        "rank": v.rank,
        "node": v.node or None,
        "category": v.category,
        "retryable": v.retryable,
        "exceptionType": v.exception_type or None,
        "message": cut(v.message, MAX_MESSAGE) if v.message else None,
        "summary": cut(v.summary, MAX_SUMMARY),
        "evidence": [cut(e, MAX_EVIDENCE_ITEM) for e in v.evidence[:MAX_EVIDENCE]],
        "secondary": [{"pod": s.pod, "reason": cut(s.reason, 200)} for s in v.secondary[:MAX_SECONDARY]],
        "confidence": round(v.confidence, 3),
        "rule": v.rule or None,
        "globalRank": v.global_rank,
        # A hang's captured evidence: the stuck ranks, the collective they did not enter, the culprit's frame.
        "hang": v.hang.to_dict() if v.hang is not None else None,
        "signature": decision.attempt.signature if decision.attempt is not None else None,
        "repeats": decision.repeats,
        "attemptHistory": [a.to_dict() for a in attempt_history(decision, earlier)],
    }
    if decision.term is not None:  # under leader election: which term published it
        doc["leaseHolder"] = decision.term.holder
        doc["leaseTransitions"] = decision.term.transitions
    while len(encode(doc)) > MAX_VERDICT_BYTES and (doc["evidence"] or doc["secondary"]):
        (doc["secondary"] if doc["secondary"] else doc["evidence"]).pop()
    return doc


def encode(doc: JSON) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def annotations_patch(decision: Decision, earlier: tuple[Attempt, ...] = ()) -> JSON:
    """A merge patch that sets our three annotations and nothing else."""
    return {
        "metadata": {
            "annotations": {
                SUMMARY_ANNOTATION: summary(decision),
                VERDICT_ANNOTATION: encode(verdict_document(decision, earlier)),
                PUBLISHED_ANNOTATION: publication_key(decision),
            }
        }
    }


def condition(decision: Decision, now: float) -> JSON:
    v = decision.verdict
    tag = f"(incident {decision.incident.incident_id}, revision {decision.revision})"
    text = summary(decision)
    out: JSON = {
        "type": ROOT_CAUSE_CONDITION,
        "status": "True" if v.pod is not None else "False",
        "reason": condition_reason(v.category),
        "message": cut(text, MAX_NOTE - len(tag) - 1) + " " + tag,
        "lastTransitionTime": rfc3339(now),
    }
    if decision.incident.job.kind == "PyTorchJob":
        out["lastUpdateTime"] = out["lastTransitionTime"]  # Kubeflow's JobCondition has it; others do not
    return out


def condition_is_current(conditions: list[JSON], decision: Decision) -> bool:
    """Does the list already hold our condition for this incident at this revision or later?"""
    for c in conditions:
        if isinstance(c, dict) and c.get("type") == ROOT_CAUSE_CONDITION:
            message = str(c.get("message", ""))
            marker = f"(incident {decision.incident.incident_id}, revision "
            if marker in message:
                tail = message.rsplit(marker, 1)[1].rstrip(")")
                return tail.isdigit() and int(tail) >= decision.revision
    return False


def merged_conditions(conditions: list[JSON], ours: JSON) -> list[JSON]:
    """The list with our condition put in (replacing an older one of ours), everything else as it was."""
    out: list[JSON] = []
    replaced = False
    for c in conditions:
        if isinstance(c, dict) and c.get("type") == ROOT_CAUSE_CONDITION:
            if c.get("status") == ours["status"] and c.get("lastTransitionTime"):
                ours = dict(ours, lastTransitionTime=c["lastTransitionTime"])  # no transition happened
            out.append(ours)
            replaced = True
        else:
            out.append(c)
    if not replaced:
        out.append(ours)
    return out


def condition_patch(job: JSON, decision: Decision, now: float) -> JSON | None:
    """The status merge patch for `job` as read, or None when it is already current."""
    conditions = [c for c in (status_of(job).get("conditions") or []) if isinstance(c, dict)]
    if condition_is_current(conditions, decision):
        return None
    return {
        "metadata": {"resourceVersion": metadata_of(job).get("resourceVersion")},
        "status": {"conditions": merged_conditions(conditions, condition(decision, now))},
    }


def event_name(target_name: str, decision: Decision) -> str:
    digest = hashlib.sha256(f"{publication_key(decision)}\0{target_name}".encode()).hexdigest()[:16]
    return f"{target_name[:200]}.podmortem.{digest}"


def event_body(target: JSON, decision: Decision, now: float, instance: str = "") -> JSON:
    """A core/v1 Warning Event about `target` (the job or the pod object, as read)."""
    meta = metadata_of(target)
    involved = {
        "apiVersion": target.get("apiVersion", ""),
        "kind": target.get("kind", ""),
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", ""),
    }
    if meta.get("uid"):
        involved["uid"] = meta["uid"]
    return core_event(
        name=event_name(str(meta.get("name", "")), decision),
        namespace=str(meta.get("namespace", "")),
        involved=involved,
        type_="Warning" if decision.verdict.pod is not None else "Normal",
        reason={"stall": STALL_EVENT, "resumed": STALL_CLEARED_EVENT}.get(decision.closed_by, ROOT_CAUSE_EVENT),
        message=cut(f"{summary(decision)} [incident {publication_key(decision)}]", MAX_NOTE),
        action="Diagnosed",
        component=COMPONENT,
        instance=instance,
        now=now,
    )


def job_path(decision: Decision, subresource: str | None = None) -> str | None:
    job = decision.incident.job
    workload = WORKLOADS.get(job.kind)
    if workload is None or not job.name:
        return None
    return resource_path(workload.api_version, workload.plural, job.namespace, job.name, subresource)


def pod_path(decision: Decision) -> str | None:
    v = decision.verdict
    if v.pod is None:
        return None
    namespace = next((m.namespace for m in decision.incident.members if m.pod == v.pod and m.namespace), "")
    return resource_path("v1", "pods", namespace or decision.incident.job.namespace, v.pod)


def _targets(decision: Decision) -> list[str]:
    paths = [job_path(decision), pod_path(decision)]
    if paths[0] is None:
        log.warning(
            "incident %s: job kind %r is not one we know; not writing to the job",
            decision.incident.incident_id,
            decision.incident.job.kind,
        )
    return [p for p in paths if p is not None]


# -- publishers --------------------------------------------------------------------------------


class AnnotationPublisher:
    name = "kube-annotations"

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.written = 0

    async def publish(self, decision: Decision) -> None:
        for path in _targets(decision):
            try:
                obj = await self.kube.get(path)
            except NotFoundError:
                log.info("incident %s: %s is gone; no annotations there", decision.incident.incident_id, path)
                continue
            annotations = annotations_of(obj)
            if is_published(annotations.get(PUBLISHED_ANNOTATION), decision):
                continue
            await self.kube.request(
                "PATCH",
                path,
                body=annotations_patch(decision, earlier_attempts(obj, decision.incident.job.uid)),
                content_type="application/merge-patch+json",
                retry_conflict=True,
            )
            self.written += 1


class ConditionPublisher:
    name = "kube-condition"

    def __init__(self, kube: Kube, clock: Callable[[], float] | None = None, attempts: int = 5) -> None:
        self.kube = kube
        self.attempts = attempts
        self._clock = clock
        self.written = 0

    async def publish(self, decision: Decision) -> None:
        path = job_path(decision)
        if path is None or decision.provisional:
            return  # a provisional verdict: nothing has failed, so no condition says it did
        for attempt in range(self.attempts):
            try:
                job = await self.kube.get(path)
            except NotFoundError:
                log.info("incident %s: job %s is gone; no condition", decision.incident.incident_id, path)
                return
            now = self._clock() if self._clock is not None else decision.decided_at
            patch = condition_patch(job, decision, now)
            if patch is None:
                return
            try:
                await self.kube.request(
                    "PATCH", path + "/status", body=patch, content_type="application/merge-patch+json"
                )
                self.written += 1
                return
            except ConflictError:
                log.info(
                    "incident %s: job changed (attempt %d); re-reading", decision.incident.incident_id, attempt + 1
                )
        raise ConflictError(409, "Conflict", f"{path}: still conflicting after {self.attempts} attempts")


class EventPublisher:
    name = "kube-events"

    def __init__(self, kube: Kube, instance: str = "") -> None:
        self.kube = kube
        self.instance = instance
        self.created = 0

    async def publish(self, decision: Decision) -> None:
        if decision.verdict.pod is None and decision.closed_by != "resumed":
            return  # nothing failed: the annotations and the condition say so; no Warning
        for path in _targets(decision):
            try:
                target = await self.kube.get(path)
            except NotFoundError:
                target = self._placeholder(path, decision)
            body = event_body(target, decision, decision.decided_at, self.instance)
            namespace = body["metadata"]["namespace"]
            try:
                await self.kube.request("POST", resource_path("v1", "events", namespace), body=body)
                self.created += 1
            except AlreadyExistsError:
                pass  # published before (same incident and revision)

    @staticmethod
    def _placeholder(path: str, decision: Decision) -> JSON:
        """The pod is gone: an Event about it is still worth having (kubectl get events shows it)."""
        name = path.rsplit("/", 1)[1]
        kind = "Pod" if "/pods/" in path else decision.incident.job.kind
        api_version = "v1" if kind == "Pod" else WORKLOADS[kind].api_version
        namespace = path.split("/namespaces/")[1].split("/")[0]
        return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace}}


class NamespaceGuard:
    """Publishes only for jobs in the namespaces the aggregator watches (`--namespaces`; all when unset).

    Whatever reached the incident book — a stream with `--auth none`, a forged registration — the
    aggregator never writes to a namespace it was not given: no annotating `kube-system/coredns-0`.
    """

    def __init__(self, inner: Publisher, namespaces: tuple[str, ...]) -> None:
        self.inner, self.namespaces = inner, frozenset(namespaces)
        self.name = inner.name

    async def publish(self, decision: Decision) -> None:
        namespace = decision.incident.job.namespace
        if self.namespaces and namespace not in self.namespaces:
            log.warning(
                "incident %s: namespace %s is not watched; not written", decision.incident.incident_id, namespace
            )
            return
        await self.inner.publish(decision)


def kube_publishers(
    settings: KubeSettings,
    kube: Kube | None = None,
    *,
    on_suspects: Callable[[int], None] = lambda n: None,
    on_node_refused: Callable[[str], None] = lambda reason: None,
) -> list[Publisher]:
    """The publishers `settings.publish` asks for (and the node actions unless off), sharing one client (and so
    one rate limit). `on_suspects`: the suspect-node gauge;
    `on_node_refused`: a hardware fault not recorded on its node, by reason."""
    if not settings.publish and not settings.nodes.enabled:
        return []
    client = kube if kube is not None else Kube.from_settings(settings)
    out: list[Publisher] = []
    if "annotations" in settings.publish:
        out.append(AnnotationPublisher(client))
    if "condition" in settings.publish:
        out.append(ConditionPublisher(client))
    if "events" in settings.publish:
        out.append(EventPublisher(client, settings.reporting_instance))
    if settings.nodes.enabled:
        out.append(
            NodeFaultPublisher(
                client,
                settings.nodes,
                on_suspects=on_suspects,
                on_refused=on_node_refused,
                instance=settings.reporting_instance,
            )
        )
    return [NamespaceGuard(p, settings.namespaces) for p in out] if settings.namespaces else out
