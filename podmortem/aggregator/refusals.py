"""Why a sidecar stream is refused: one small hierarchy, each refusal a gRPC status and a metric reason.

The server ends a stream by raising (or catching) a `StreamRefused`; it aborts the call with `code`,
counts `reason` in `podmortem_streams_rejected_total{reason}` and logs the message. The kinds say what
a sidecar can do about it:

* `AuthRefused` — who is speaking, and for whom: no or invalid token (UNAUTHENTICATED), a token for
  another pod, a pod outside the watched namespaces or outside the job it claims (PERMISSION_DENIED),
  or the API server could not say (UNAVAILABLE: the sidecar retries). One kind, so a caller can tell
  "not allowed" from "not now" by the class alone.
* `Unavailable` — not now: a standby replica, the state file refused a write, the token reviews are
  saturated. The sidecar keeps what was not acknowledged and retries after its backoff.
* `Exhausted` — a limit (members per job, namespaces, the stream's event rate): RESOURCE_EXHAUSTED.
* `TooSlow` — the stream did not register within the deadline: DEADLINE_EXCEEDED.

The code names are those of `grpc.StatusCode`; this module imports no gRPC.
"""

from __future__ import annotations

from typing import ClassVar


class StreamRefused(Exception):
    """A stream that may not go on: `code` is the gRPC status name, `reason` a short metric label."""

    code: str = "UNAVAILABLE"
    allowed_codes: ClassVar[frozenset[str]] = frozenset({"UNAVAILABLE"})

    def __init__(self, reason: str, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            if code not in self.allowed_codes:
                raise ValueError(f"{type(self).__name__} cannot end a stream with {code}")
            self.code = code
        self.reason = reason


class AuthRefused(StreamRefused):
    """Authentication or authorization said no (or could not say: UNAVAILABLE)."""

    code = "UNAUTHENTICATED"
    allowed_codes = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED", "UNAVAILABLE", "RESOURCE_EXHAUSTED"})


class Unavailable(StreamRefused):
    """Not now: the sidecar retries after its backoff and loses nothing."""

    code = "UNAVAILABLE"


class Exhausted(StreamRefused):
    """A limit against floods: nothing already held is dropped."""

    code = "RESOURCE_EXHAUSTED"
    allowed_codes = frozenset({"RESOURCE_EXHAUSTED"})


class TooSlow(StreamRefused):
    """No `register` within the deadline."""

    code = "DEADLINE_EXCEEDED"
    allowed_codes = frozenset({"DEADLINE_EXCEEDED"})
