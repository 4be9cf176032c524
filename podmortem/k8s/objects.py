"""API paths and small readers of Kubernetes objects (plain dicts), shared by both transports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote


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
