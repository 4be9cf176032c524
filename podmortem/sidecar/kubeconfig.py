"""Where the sidecar's API pod source finds the API server: in the pod, or from a kubeconfig.

The same precedence as the aggregator (`podmortem.aggregator.kube.client`): `--kubeconfig` (or
`KUBECONFIG`, a list of files joined by ':' that is merged as kubectl merges it: the first file to
name a cluster, user or context wins, and the first `current-context` set), else in-cluster when
`KUBERNETES_SERVICE_HOST` is set, else `~/.kube/config`. `--kube-context` picks a context other than
the current one.

Without the `kubernetes` package (it costs the sidecar ~25 MiB): a kubeconfig is YAML read with PyYAML
(imported only here, only when a kubeconfig is used) and turned into an `ApiEndpoint`. What the sidecar
can use: `server`, `certificate-authority(-data)`, `insecure-skip-tls-verify`, a user's `token` or
`tokenFile`, `client-certificate(-data)` with `client-key(-data)`. A user that needs an `exec` plugin
or an `auth-provider` is refused with a clear error (run the sidecar in the pod, or `kubectl proxy`).
Relative file paths are relative to the kubeconfig file, as kubectl has them.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from podmortem import settings
from podmortem.sidecar.apiserver import ApiEndpoint

DEFAULT_KUBECONFIG = Path("~/.kube/config")
MAX_KUBECONFIG_BYTES = 4 << 20


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used; the message says which file or entry and why."""


def resolve_endpoint(
    kubeconfig: str | None, context: str | None, environ: Mapping[str, str] | None = None
) -> ApiEndpoint:
    """The API server to talk to, by the aggregator's precedence (see the module docstring)."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig, context)
    in_pod = settings.platform("KUBERNETES_SERVICE_HOST") if environ is None else environ.get("KUBERNETES_SERVICE_HOST")
    if in_pod:
        return ApiEndpoint.in_cluster(environ)
    default = DEFAULT_KUBECONFIG.expanduser()
    if default.is_file():
        return from_kubeconfig(str(default), context)
    raise KubeconfigError(
        f"no API server: not in a pod (KUBERNETES_SERVICE_HOST unset), no --kubeconfig/KUBECONFIG, and no {default}"
    )


def from_kubeconfig(paths: str, context: str | None = None) -> ApiEndpoint:
    """An endpoint from a kubeconfig (one path, or several joined by os.pathsep, merged)."""
    files = [Path(p).expanduser() for p in paths.split(os.pathsep) if p]
    merged: dict[str, dict[str, Any]] = {"clusters": {}, "users": {}, "contexts": {}}
    bases: dict[tuple[str, str], Path] = {}  # (section, name) -> the directory its file lives in
    current = ""
    for path in files:
        doc = _load(path, required=len(files) == 1)
        if doc is None:
            continue
        for section in merged:
            for entry in _list(doc, section, path):
                name = entry.get("name")
                if isinstance(name, str) and name not in merged[section]:
                    merged[section][name] = entry
                    bases[(section, name)] = path.parent
        if not current and isinstance(doc.get("current-context"), str):
            current = doc["current-context"]
    where = paths
    name = context or current
    if not name:
        raise KubeconfigError(f"{where}: no current-context and no --kube-context")
    ctx = _body(merged["contexts"], name, "context", "context", where)
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if not isinstance(cluster_name, str):
        raise KubeconfigError(f"{where}: context {name!r} names no cluster")
    cluster = _body(merged["clusters"], cluster_name, "cluster", "cluster", where)
    user = _body(merged["users"], user_name, "user", "user", where) if isinstance(user_name, str) else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise KubeconfigError(f"{where}: cluster {cluster_name!r} has no http(s) server address")
    for unsupported in ("exec", "auth-provider"):
        if unsupported in user:
            raise KubeconfigError(
                f"{where}: user {user_name!r} needs an {unsupported} plugin, which the sidecar does not run; "
                "use a token or client certificate, `kubectl proxy`, or run it in the pod"
            )
    cbase = bases[("clusters", cluster_name)]
    ubase = bases.get(("users", user_name)) if isinstance(user_name, str) else None
    ca_data = _data(cluster, "certificate-authority-data", where)
    cert_data = _data(user, "client-certificate-data", where)
    key_data = _data(user, "client-key-data", where)
    cert_file = _file(user, "client-certificate", ubase)
    key_file = _file(user, "client-key", ubase)
    if (cert_data or cert_file) and not (key_data or key_file):
        raise KubeconfigError(f"{where}: user {user_name!r} has a client certificate but no client key")
    token = user.get("token")
    return ApiEndpoint(
        base_url=server.rstrip("/"),
        token=token if isinstance(token, str) and token else None,
        token_file=_file(user, "tokenFile", ubase),
        ca_file=_file(cluster, "certificate-authority", cbase),
        ca_data=ca_data.decode("ascii", errors="replace") if ca_data else None,
        client_cert=cert_file,
        client_key=key_file,
        client_pem=(cert_data + b"\n" + key_data) if cert_data and key_data else None,
        insecure=cluster.get("insecure-skip-tls-verify") is True,
    )


def _load(path: Path, required: bool) -> dict[str, Any] | None:
    import yaml  # only here: a sidecar in a pod never reads a kubeconfig

    try:
        with path.open("rb") as f:
            data = f.read(MAX_KUBECONFIG_BYTES + 1)
    except FileNotFoundError:
        if required:
            raise KubeconfigError(f"{path}: no such kubeconfig file") from None
        return None
    except OSError as exc:
        raise KubeconfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > MAX_KUBECONFIG_BYTES:
        raise KubeconfigError(f"{path}: over {MAX_KUBECONFIG_BYTES} bytes; not a kubeconfig")
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"{path}: not valid YAML: {exc}") from None
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{path}: not a kubeconfig (a YAML mapping is expected)")
    return doc


def _list(doc: dict[str, Any], section: str, path: Path) -> list[dict[str, Any]]:
    entries = doc.get(section) or []
    if not isinstance(entries, list):
        raise KubeconfigError(f"{path}: {section} must be a list")
    return [e for e in entries if isinstance(e, dict)]


def _body(entries: dict[str, dict[str, Any]], name: object, section: str, key: str, where: str) -> dict[str, Any]:
    entry = entries.get(name) if isinstance(name, str) else None
    if entry is None:
        raise KubeconfigError(f"{where}: no {section} named {name!r}")
    body = entry.get(key) or {}
    if not isinstance(body, dict):
        raise KubeconfigError(f"{where}: {section} {name!r} is not a mapping")
    return body


def _data(body: dict[str, Any], key: str, where: str) -> bytes | None:
    value = body.get(key)
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"{where}: {key} is not base64") from None


def _file(body: dict[str, Any], key: str, base: Path | None) -> Path | None:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() or base is None else base / path
