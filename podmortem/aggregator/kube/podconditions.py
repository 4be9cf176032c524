"""A member pod's `podmortem.io/*` condition, written on its `status.conditions`.

The decision is `podmortem.core.conditions`'s and the timing the hold desk's (`aggregator.holding`); this
module only writes it: a strategic merge patch of the `pods/status` subresource that names one condition.
`status.conditions` merges by `type` (the pod's own patch strategy), so the conditions the kubelet and the
scheduler own stay as they are, as readiness gates' conditions do; the kubelet keeps conditions it does
not own. RBAC: `patch` on `pods/status` (docs/kubernetes.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from podmortem.aggregator.kube.client import Kube
from podmortem.core.conditions import PodCondition
from podmortem.k8s.objects import resource_path, rfc3339

JSON = dict[str, Any]
STRATEGIC = "application/strategic-merge-patch+json"


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


class PodConditionWriter:
    """Writes a decided condition on its pod through the shared client (its rate limit and retries)."""

    name = "kube-pod-conditions"

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self._clock = clock
        self.written = 0

    async def write(self, namespace: str, pod: str, condition: PodCondition) -> None:
        path = resource_path("v1", "pods", namespace, pod, "status")
        await self.kube.request("PATCH", path, body=status_patch(condition, self._clock()), content_type=STRATEGIC)
        self.written += 1
