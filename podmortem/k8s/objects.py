"""API paths, small readers of Kubernetes objects (plain dicts) and the API's time formats, shared by both
transports and every room that reads or writes objects."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from podmortem.core.names import REPORTING_COMPONENT

JSON = dict[str, Any]  # a Kubernetes object, or a part of one, as the API's JSON decodes


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


def _part(obj: Mapping[str, Any], key: str) -> JSON:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def metadata_of(obj: Mapping[str, Any]) -> JSON:
    """The object's metadata ({} when absent)."""
    return _part(obj, "metadata")


def spec_of(obj: Mapping[str, Any]) -> JSON:
    """The object's spec ({} when absent)."""
    return _part(obj, "spec")


def status_of(obj: Mapping[str, Any]) -> JSON:
    """The object's status ({} when absent)."""
    return _part(obj, "status")


def labels_of(obj: Mapping[str, Any]) -> JSON:
    """metadata.labels ({} when absent)."""
    return _part(metadata_of(obj), "labels")


def annotations_of(obj: Mapping[str, Any]) -> JSON:
    """metadata.annotations ({} when absent)."""
    return _part(metadata_of(obj), "annotations")


def rfc3339(seconds: float) -> str:
    """A Unix time as the API's `Time` (RFC 3339, UTC, whole seconds)."""
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(seconds: float) -> str:
    """A Unix time as the API's `MicroTime` (RFC 3339 with microseconds, UTC): a Lease's times."""
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
) -> JSON:
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
