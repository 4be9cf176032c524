"""API paths and small readers of Kubernetes objects (plain dicts), shared by both transports."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from podmortem.core.names import REPORTING_COMPONENT


def resource_path(
    api_version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """'/api/v1/namespaces/ns/pods/p/status' and the like."""
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [root]
    if namespace:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(plural)
    if name:
        parts.append(quote(name, safe=""))
        if subresource:
            parts.append(subresource)
    return "/".join(parts)


def resource_version(obj: Mapping[str, Any]) -> str:
    """metadata.resourceVersion of an object or a list ("" when absent)."""
    meta = obj.get("metadata")
    return str((meta.get("resourceVersion") if isinstance(meta, Mapping) else None) or "")


def rfc3339(seconds: float) -> str:
    """A Unix time as the API's `Time` (RFC 3339, UTC, whole seconds)."""
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def core_event(
    *,
    name: str,
    namespace: str,
    involved: Mapping[str, Any],
    type_: str,
    reason: str,
    message: str,
    action: str,
    component: str,
    instance: str,
    now: float,
) -> dict[str, Any]:
    """A core/v1 Event body, first seen `now`, counted once; `name` is deterministic so a replay is a 409."""
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": dict(involved),
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": REPORTING_COMPONENT,
        "reportingInstance": instance[:128],
        "action": action,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
