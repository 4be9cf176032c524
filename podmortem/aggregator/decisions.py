"""What the incident book hands to the publishers: one `Decision` per verdict on an incident.

A neutral module: the book (`incidents.py`) makes decisions and the publishers (`publishing.py`,
`metrics.py`, `kube/publish.py`) and the state store read them; none of them imports another for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from podmortem.core.capturefile import verdict_captures
from podmortem.core.model import Incident, Verdict
from podmortem.core.repeats import Attempt, run_length

# quorum / timeout: the first verdict on a failure; revision: a later one. stall: a provisional verdict
# on a job whose members all went quiet while the pods still run (`aggregator.stalls`); resumed: the
# provisional verdict is withdrawn (the job made progress again; or, after a restart, nothing of the job
# came back: its summary says which).
ClosedBy = Literal["quorum", "timeout", "revision", "stall", "resumed"]


@dataclass(frozen=True)
class Term:
    """Whose leadership a publication was made under: the Lease's holder and its `leaseTransitions`
    (`aggregator.kube.leader`). A reader of two verdicts tells by it which term published each."""

    holder: str
    transitions: int


@dataclass(frozen=True)
class Decision:
    """One verdict on one incident, as published. Revision 1 is the first; a late report may add more."""

    incident: Incident
    verdict: Verdict
    decided_at: float
    revision: int
    closed_by: ClosedBy
    reported: int  # members that had reported a terminal state when deciding
    term: Term | None = None  # set by the publish queue under leader election, before any publisher
    # Members whose job membership was verified against the API (`IncidentBook.is_verified`): only
    # these may be acted on (a pod condition, a node record); the others are evidence only.
    verified: frozenset[str] = frozenset()
    # This attempt as the job's history keeps it (None: no root cause), and the job's earlier attempts,
    # newest first (`aggregator.history`). `own_attempt`: the pod watch placed the root in this attempt,
    # so the entry is the job's own and is kept (state file, annotation).
    attempt: Attempt | None = None
    history: tuple[Attempt, ...] = ()
    own_attempt: bool = False

    @property
    def repeats(self) -> int:
        """Attempts in a row, ending with this one, with this one's signature (1: not a repeat)."""
        return run_length(self.history, self.attempt) if self.attempt is not None else 1

    @property
    def provisional(self) -> bool:
        """Decided while the pods still run (a stall, or its withdrawal): nothing has failed, so nothing
        may act on it (no job or pod condition, no node record); annotations, Events and metrics say it."""
        return self.closed_by in ("stall", "resumed")

    @property
    def first(self) -> bool:
        """The incident's first verdict on a failure (quorum or timeout), which the metrics count once."""
        return self.closed_by in ("quorum", "timeout")

    @property
    def final(self) -> bool:
        """Every expected member had reported: nothing more is expected to change the verdict."""
        return not self.provisional and self.reported >= self.incident.world_size

    @property
    def latency(self) -> float | None:
        """Seconds from the first failure observed to the decision (reference clock)."""
        if self.incident.opened_at is None:
            return None
        return max(self.decided_at - self.incident.opened_at, 0.0)

    def to_dict(self) -> dict[str, Any]:
        """The verdict file's document; under leader election it also names its term (`lease`)."""
        inc = self.incident
        doc: dict[str, Any] = {
            "incident": {
                "id": inc.incident_id,
                "job": {"namespace": inc.job.namespace, "name": inc.job.name, "kind": inc.job.kind, "uid": inc.job.uid},
                "attempt": inc.attempt,
                "world_size": inc.world_size,
                "members": [m.pod for m in inc.members],
                "reported": self.reported,
                "opened_at": inc.opened_at,
                "stalled_at": inc.stalled_at,
                # Measured by each member's sidecar (reference = pod clock + offset), to place a bundle's pod
                # times on the aggregator's clock (`offline.analyze.page_beside`); unmeasured members left out.
                "clock_offsets": {m.pod: m.clock_offset for m in inc.members if m.clock_offset is not None},
            },
            "root_cause": self.verdict.root_cause(),
            "verdict": self.verdict.to_dict(),
            "revision": self.revision,
            "final": self.final,
            "provisional": self.provisional,
            "closed_by": self.closed_by,
            "decided_at": self.decided_at,
            "latency_seconds": self.latency,
        }
        if self.attempt is not None:
            doc["signature"] = self.attempt.signature
            doc["repeats"] = self.repeats
        doc["attempt_history"] = [a.to_dict() for a in self.history]
        stuck = self.verdict.hang.stuck_pods if self.verdict.hang is not None else ()
        first = tuple(p for p in (self.verdict.pod, *stuck) if p)
        # What the members' sidecars captured (a bundle made beside this file carries it: `podmortem demo --keep`).
        doc["captures"] = verdict_captures(inc.members, first)
        if self.term is not None:
            doc["lease"] = {"holderIdentity": self.term.holder, "leaseTransitions": self.term.transitions}
        return doc
