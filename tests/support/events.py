"""Sidecar events for outbox and stream tests: error-file versions (one source, superseding each other)
and container-run ends (one fact per run)."""

from __future__ import annotations

from podmortem.core.model import ErrorRecord, Termination
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb


def error_event(n: int, pod_key: str = "pod") -> pb.Event:
    rec = ErrorRecord(message=f"ValueError: {n}", exception_type="ValueError", timestamp=n)
    return wire.make_event(wire.error_to_pb(rec), wire.error_event_id(pod_key, rec))


def run_ended(n: int, pod_key: str = "pod") -> pb.Event:
    """The end of container run n: one fact per run, none superseding another (unlike error-file versions)."""
    term = Termination(exit_code=1, reason="Error", restart_count=n, finished_at=1_800_000_000.0 + n)
    return wire.make_event(wire.termination_to_pb(term), f"{pod_key}/termination/{n}")
