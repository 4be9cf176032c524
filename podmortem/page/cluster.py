"""The incident as `kubectl podmortem explain --html` reads it from a live cluster.

The aggregator publishes its verdict on the job (`podmortem.io/verdict`, a JSON document with camelCase
keys: `aggregator/kube/publish.py`), a `PodmortemRootCause` condition on the job, one `podmortem.io/*`
condition on each failed pod, and a hardware record on the root's node. The plugin reads the job, its
pods (their terminations, conditions, deletion) and, where it can, log tails; this module turns what it
read into the incident and verdict the page renders, through the same fold `podmortem analyze` uses.
Error files stay inside the pods: their facts reach the page through the verdict's evidence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from podmortem.core import podstatus
from podmortem.core.model import Condition, Incident, JobRef, Member, evolve
from podmortem.core.names import CONDITION_TYPES
from podmortem.k8s.objects import metadata_of, status_of
from podmortem.page.render import PageContext
from podmortem.protocol import wire

_CAMEL = re.compile(r"(?<!^)([A-Z])")


def verdict_from_annotation(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict dictionary (`Verdict.to_dict()`'s snake_case keys) from the annotation's document; keys
    the page does not know (a later `hang`, `attemptHistory`) are kept under their snake_case names."""
    return {_CAMEL.sub(r"_\1", str(k)).lower(): v for k, v in doc.items()}


def context_from_annotation(doc: Mapping[str, Any], written: Sequence[tuple[str, str]]) -> PageContext:
    revision = doc.get("revision")
    return PageContext(
        source="the cluster (kubectl podmortem explain)",
        decided_at=podstatus.parse_time(doc.get("decidedAt")),
        revision=revision if isinstance(revision, int) else None,
        final=doc.get("final") if isinstance(doc.get("final"), bool) else None,
        written=tuple(written),
        live=True,
    )


def incident_from_cluster(
    job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], logs: Mapping[str, str], doc: Mapping[str, Any]
) -> Incident:
    """The incident of `job` from its pods as the API returned them and the log tails read (by pod name)."""
    meta = metadata_of(job)
    ref = JobRef(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(job.get("kind") or ""))
    members = []
    for pod in pods:
        snap = podstatus.snapshot(dict(pod))
        log = logs.get(snap.name)
        member = wire.member_from_copies(snap, None, (log.encode(), False) if log else None)
        members.append(evolve(member, conditions=member.conditions + written_conditions(pod)))
    world = doc.get("worldSize")
    return Incident(
        job=ref,
        world_size=world if isinstance(world, int) and world > 0 else len(members),
        members=tuple(sorted(podstatus.assign_ranks(members), key=_rank_order)),
        attempt=str(doc.get("attempt") or ""),
        incident_id=str(doc.get("incidentId") or ""),
        stalled_at=podstatus.parse_time(doc.get("stalledAt")),
    )


def written_conditions(pod: Mapping[str, Any]) -> tuple[Condition, ...]:
    """The podmortem.io/* conditions the aggregator wrote on a pod (the fold keeps only the conditions the
    engine reads; the page shows these too)."""
    return tuple(
        Condition(
            str(c.get("type")),
            "True",
            str(c.get("reason") or ""),
            str(c.get("message") or ""),
            podstatus.parse_time(c.get("lastTransitionTime")),
        )
        for c in status_of(pod).get("conditions") or []
        if isinstance(c, dict) and c.get("type") in CONDITION_TYPES and c.get("status") == "True"
    )


def _rank_order(m: Member) -> tuple[int, int, str]:
    return (0 if m.rank is not None else 1, m.rank or 0, m.pod)
