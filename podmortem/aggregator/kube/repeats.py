"""The Kubernetes side of a failure that repeats: the job's own record of its attempts, and its Event.

`JobHistoryReader.read(job)` reads the job object once (one GET) when a root's `RetryableFailure` may be
a repeat (`aggregator.holding`): the attempts its verdict annotation carries (`attemptHistory`, written by
`kube.publish.AnnotationPublisher`), which is how an aggregator that restarted without `--state-dir` still
knows them, and the job's own limit, `podmortem.io/repeat-limit` (an integer 0-8; anything else is
ignored with a warning, and the aggregator's `--repeat-limit` applies). An object whose uid is not the
job's (deleted and created again under the same name) gives neither.

`RepeatEventWriter.post` creates one `Warning` Event on the job, reason `PodmortemRepeatedFailure`, once
the root's `PermanentFailure`/`RepeatedFailure` is written; its name is derived from the incident, so a
second post is a 409 (nothing new). Costs per escalation: that GET, the pod condition's patch, this POST
(`bench/hold_cost.py --repeats` counts them).
"""

from __future__ import annotations

import hashlib
import logging

from podmortem.aggregator.config import MAX_REPEAT_LIMIT
from podmortem.aggregator.kube.client import Kube
from podmortem.aggregator.kube.publish import COMPONENT, earlier_attempts
from podmortem.core.conditions import PodCondition
from podmortem.core.model import Incident, JobRef
from podmortem.core.repeats import Attempt
from podmortem.k8s.errors import AlreadyExistsError, NotFoundError
from podmortem.k8s.objects import core_event, resource_path
from podmortem.k8s.workloads import WORKLOADS

log = logging.getLogger(__name__)

REPEAT_LIMIT_ANNOTATION = "podmortem.io/repeat-limit"
EVENT_REASON = "PodmortemRepeatedFailure"


def _job_path(job: JobRef) -> str | None:
    workload = WORKLOADS.get(job.kind)
    if workload is None or not job.name:
        return None
    return resource_path(workload.api_version, workload.plural, job.namespace, job.name)


def repeat_limit(annotations: dict[str, str], job: str) -> int | None:
    """The job's `podmortem.io/repeat-limit`, or None (absent, or not an integer 0-8: said in the log)."""
    raw = annotations.get(REPEAT_LIMIT_ANNOTATION)
    if raw is None:
        return None
    text = str(raw).strip()
    if text.isdigit() and int(text) <= MAX_REPEAT_LIMIT:
        return int(text)
    log.warning(
        "job %s: %s=%r is not an integer 0-%d; --repeat-limit applies", job, REPEAT_LIMIT_ANNOTATION, raw,
        MAX_REPEAT_LIMIT,
    )  # fmt: skip
    return None


class JobHistoryReader:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.reads = 0

    async def read(self, job: JobRef) -> tuple[tuple[Attempt, ...], int | None]:
        path = _job_path(job)
        if path is None:
            return (), None
        self.reads += 1
        try:
            obj = await self.kube.get(path)
        except NotFoundError:
            return (), None
        meta = obj.get("metadata") or {}
        if meta.get("uid") != job.uid:
            return (), None
        annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        return earlier_attempts(obj, job.uid), repeat_limit(annotations, job.key)


class RepeatEventWriter:
    def __init__(self, kube: Kube, instance: str = "") -> None:
        self.kube = kube
        self.instance = instance
        self.created = 0

    async def post(self, incident: Incident, condition: PodCondition, entry: Attempt) -> None:
        job = incident.job
        workload = WORKLOADS.get(job.kind)
        if workload is None:
            return
        involved = {"apiVersion": workload.api_version, "kind": job.kind, "name": job.name, "namespace": job.namespace}
        if job.uid:
            involved["uid"] = job.uid
        digest = hashlib.sha256(f"{incident.incident_id}\0repeat".encode()).hexdigest()[:16]
        body = core_event(
            name=f"{job.name[:200]}.podmortem-repeat.{digest}",
            namespace=job.namespace,
            involved=involved,
            type_="Warning",
            reason=EVENT_REASON,
            message=f"pod {condition.pod}: {condition.message}"[:1024],
            action="StoppedRetries",
            component=COMPONENT,
            instance=self.instance,
            now=entry.decided_at,
        )
        try:
            await self.kube.request("POST", resource_path("v1", "events", job.namespace), body=body)
            self.created += 1
        except AlreadyExistsError:
            pass
