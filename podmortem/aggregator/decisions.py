"""What the incident book hands to the publishers: one `Decision` per verdict on an incident.

A neutral module: the book (`incidents.py`) makes decisions and the publishers (`publishing.py`,
`metrics.py`, `kube/publish.py`) and the state store read them; none of them imports another for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from podmortem.core.model import Incident, Verdict

ClosedBy = Literal["quorum", "timeout", "revision"]


@dataclass(frozen=True)
class Decision:
    """One verdict on one incident, as published. Revision 1 is the first; a late report may add more."""

    incident: Incident
    verdict: Verdict
    decided_at: float
    revision: int
    closed_by: ClosedBy
    reported: int  # members that had reported a terminal state when deciding

    @property
    def final(self) -> bool:
        """Every expected member had reported: nothing more is expected to change the verdict."""
        return self.reported >= self.incident.world_size

    @property
    def latency(self) -> float | None:
        """Seconds from the first failure observed to the decision (reference clock)."""
        if self.incident.opened_at is None:
            return None
        return max(self.decided_at - self.incident.opened_at, 0.0)

    def to_dict(self) -> dict[str, Any]:
        inc = self.incident
        return {
            "incident": {
                "id": inc.incident_id,
                "job": {"namespace": inc.job.namespace, "name": inc.job.name, "kind": inc.job.kind, "uid": inc.job.uid},
                "attempt": inc.attempt,
                "world_size": inc.world_size,
                "members": [m.pod for m in inc.members],
                "reported": self.reported,
                "opened_at": inc.opened_at,
            },
            "root_cause": self.verdict.root_cause(),
            "verdict": self.verdict.to_dict(),
            "revision": self.revision,
            "final": self.final,
            "closed_by": self.closed_by,
            "decided_at": self.decided_at,
            "latency_seconds": self.latency,
        }
