"""One small error hierarchy for every Kubernetes API call, whichever transport made it.

    KubeError
    ├── PermanentError      retrying the same request cannot help: fix the request or give up
    │   ├── NotFoundError        404
    │   ├── AlreadyExistsError   409 AlreadyExists (a create of something already there)
    │   ├── ForbiddenError       401, 403 (RBAC: see docs/kubernetes.md)
    │   └── InvalidError         400, 405, 406, 413, 415, 422
    └── TemporaryError      the same request may succeed later (status 0 = no HTTP answer at all)
        ├── ConflictError        409 Conflict (stale resourceVersion): re-read, re-apply
        └── GoneError            410 (a watch's resourceVersion expired): re-list

Transports translate at their edge (`translate`, `from_status_body`); nothing above them sees a
client library's exception.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


class KubeError(Exception):
    """A failed API call, translated from whatever the transport raised."""

    def __init__(self, status: int, reason: str = "", message: str = "", retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class PermanentError(KubeError):
    """Retrying the same request cannot help."""


class TemporaryError(KubeError):
    """The same request may succeed later (after a backoff, a re-read or a re-list)."""


class NotFoundError(PermanentError):
    pass


class AlreadyExistsError(PermanentError):
    pass


class ForbiddenError(PermanentError):
    pass


class InvalidError(PermanentError):
    pass


class ConflictError(TemporaryError):
    pass


class GoneError(TemporaryError):
    pass


def translate(status: int, reason: str = "", message: str = "", retry_after: float | None = None) -> KubeError:
    """Our error for an HTTP status and the Status body's reason (also used for watch ERROR events)."""
    cls: type[KubeError]
    if status == 404:
        cls = NotFoundError
    elif status == 409:
        cls = AlreadyExistsError if reason == "AlreadyExists" else ConflictError
    elif status == 410:
        cls = GoneError
    elif status in (401, 403):
        cls = ForbiddenError
    elif status in (400, 405, 406, 413, 415, 422):
        cls = InvalidError
    elif status == 0 or status in (408, 429) or status >= 500:
        cls = TemporaryError
    else:
        cls = PermanentError
    return cls(status, reason, message, retry_after)


def status_body(text: str | bytes | None) -> dict[str, Any]:
    """The `Status` object of an error answer, or {} when the body is not one."""
    try:
        body = json.loads(text or "")
    except (ValueError, TypeError):
        return {}
    return body if isinstance(body, dict) else {}


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from a Retry-After header (429 and some 5xx), None when absent or not a number."""
    value = None
    for key, v in (headers or {}).items():
        if key.lower() == "retry-after":
            value = v
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return max(seconds, 0.0) if seconds is not None and math.isfinite(seconds) else None


def from_response(status: int, body: str | bytes | None, headers: Mapping[str, str] | None = None) -> KubeError:
    """Our error for an HTTP error answer: status, and reason/message from its Status body."""
    parsed = status_body(body)
    message = str(parsed.get("message") or "")
    if not message and body:
        raw = body if isinstance(body, str) else body[:200].decode("utf-8", errors="replace")
        message = raw[:200]
    return translate(status, str(parsed.get("reason") or ""), message or f"HTTP {status}", retry_after(headers))


def from_watch_event(obj: Mapping[str, Any]) -> KubeError:
    """Our error for a watch's `{"type": "ERROR", "object": <Status>}` event."""
    code = int(obj.get("code") or 500)
    return translate(code, str(obj.get("reason") or ""), str(obj.get("message") or "watch error"))
