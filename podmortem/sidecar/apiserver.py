"""The sidecar's view of its own Pod, read from the Kubernetes API with no client library.

The training container's end — exit code, signal, OOMKilled, a restart (lastState), a
DisruptionTarget condition, the pod's deletion — is only in the Pod object. The sidecar watches its
own pod for it, one pod per sidecar on every training pod of the cluster, so it must be cheap: the
official `kubernetes` package costs ~28 MiB of RSS per process, and this module needs four API calls.
It speaks HTTP/1.1 over asyncio streams itself (stdlib only: no threads, cancellable at any await):

* `GET /api/v1/namespaces/<ns>/pods?fieldSelector=metadata.name=<pod>` — list, for the state now and
  the resourceVersion to watch from;
* the same with `watch=true&resourceVersion=<rv>` — a stream of JSON lines, resumed from the last
  version seen after a dropped connection, re-listed after 410 Gone (an expired version), and
  retried with exponential backoff after errors (the API server restarting must not kill us);
* `GET .../pods/<pod>` — one read (the last look at shutdown);
* `GET .../pods/<pod>/log?container=&tailLines=&limitBytes=` — the tail of the training container's
  log, bounded in bytes (`log_tail`).

Credentials come from the projected service-account volume (token re-read on every request: the
kubelet rotates it; CA bundle; namespace), and the address from KUBERNETES_SERVICE_HOST/PORT — or,
outside a pod, a kubeconfig (`podmortem.sidecar.kubeconfig`), or for tests an explicit base URL and
token (`ApiEndpoint`). The RBAC this needs is
`get`, `list`, `watch` on `pods` and `get` on `pods/log` in the pod's namespace (docs/kubernetes.md).

`OwnPod` implements the sidecar's `PodSource` protocol (`pods()`, `read()`); turning pods into
events is the sidecar core's job (`podsource.PodReporter`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from podmortem import settings
from podmortem.k8s.backoff import Backoff
from podmortem.k8s.errors import KubeError, NotFoundError, TemporaryError, from_response
from podmortem.k8s.listwatch import Listed, list_watch
from podmortem.k8s.objects import resource_version
from podmortem.sidecar import http1

log = logging.getLogger(__name__)


def _bad_response(message: str) -> TemporaryError:
    """An answer that is not HTTP, or too large, or cut short: temporary (retried like a dropped connection)."""
    return TemporaryError(0, "BadResponse", message)


SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_LINE = 4 << 20  # one watch event (a Pod object) — far above any real pod
MAX_BODY = 8 << 20
# What a raw HTTP exchange can raise besides our KubeError: retried like a temporary error.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (OSError, TimeoutError, ValueError, ssl.SSLError)


@dataclass(frozen=True)
class ApiEndpoint:
    """Where the API server is and how to authenticate to it."""

    base_url: str  # "https://10.96.0.1:443", or "http://127.0.0.1:8001" (kubectl proxy, tests)
    token: str | None = None
    token_file: Path | None = None
    ca_file: Path | None = None
    ca_data: str | None = None  # PEM, as a kubeconfig's certificate-authority-data holds it
    client_cert: Path | None = None  # PEM files: TLS client authentication (a kubeconfig user's cert)
    client_key: Path | None = None
    client_pem: bytes | None = field(default=None, repr=False)  # certificate and key inline (kubeconfig *-data)
    insecure: bool = False  # a kubeconfig's insecure-skip-tls-verify: no check of the server's certificate

    @classmethod
    def in_cluster(cls, environ: Mapping[str, str] | None = None, directory: Path = SERVICE_ACCOUNT) -> ApiEndpoint:
        if environ is None:
            host, port = settings.platform("KUBERNETES_SERVICE_HOST"), settings.platform("KUBERNETES_SERVICE_PORT")
        else:
            host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
        port = port or "443"
        if not host:
            raise ValueError("KUBERNETES_SERVICE_HOST is not set: not in a pod, give the API address explicitly")
        if ":" in host:  # IPv6
            host = f"[{host}]"
        ca = directory / "ca.crt"
        return cls(f"https://{host}:{port}", token_file=directory / "token", ca_file=ca if ca.exists() else None)

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(
            cafile=str(self.ca_file) if self.ca_file else None, cadata=self.ca_data or None
        )
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.client_cert is not None:
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key) if self.client_key else None)
        elif self.client_pem is not None:
            # The ssl module loads a key only from a file: one private to this process, gone at once.
            # tempfile (with shutil, bz2, lzma, random) only here: an in-cluster sidecar never needs it.
            import tempfile

            with tempfile.TemporaryDirectory(prefix="podmortem-") as tmp:
                pem = Path(tmp) / "client.pem"
                pem.touch(mode=0o600)
                pem.write_bytes(self.client_pem)
                ctx.load_cert_chain(str(pem))
        return ctx

    def bearer(self) -> str | None:
        if self.token is not None:
            return self.token
        if self.token_file is not None:
            try:
                return self.token_file.read_text().strip()
            except OSError as exc:
                log.warning("cannot read the service-account token %s: %s", self.token_file, exc)
        return None


class OwnPod:
    """This pod, as the API server sees it: `pods()` (every new version), `read()`, `log_tail()`."""

    def __init__(
        self,
        endpoint: ApiEndpoint,
        namespace: str,
        name: str,
        *,
        watch_timeout: int = 300,
        request_timeout: float = 30.0,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
    ) -> None:
        self.endpoint = endpoint
        self.namespace = namespace
        self.name = name
        self.watch_timeout = watch_timeout
        self.request_timeout = request_timeout
        self.backoff = Backoff(backoff_initial, backoff_max)
        self.lists = 0  # for tests and logs
        self.watches = 0
        url = urlsplit(endpoint.base_url)
        self._tls = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if self._tls else 80)
        self._ssl: ssl.SSLContext | None = None
        if self._tls:
            self._ssl = endpoint.ssl_context()

    @property
    def _pods_path(self) -> str:
        return f"/api/v1/namespaces/{quote(self.namespace, safe='')}/pods"

    # -- PodSource --

    async def pods(self) -> AsyncIterator[dict[str, Any]]:
        """Every new version of this pod (its deletion included) until cancelled; errors are retried."""
        selector = {"fieldSelector": f"metadata.name={self.name}"}

        async def list_() -> dict[str, Any]:
            self.lists += 1
            return await self._get_json(f"{self._pods_path}?{urlencode(selector)}")

        def watch(version: str) -> AsyncGenerator[dict[str, Any], None]:
            query = dict(selector, watch="true", allowWatchBookmarks="true", resourceVersion=version)
            query["timeoutSeconds"] = str(self.watch_timeout)
            self.watches += 1
            return self._stream(f"{self._pods_path}?{urlencode(query)}")

        last_yielded = ""
        changes = list_watch(list_, watch, backoff=self.backoff, what="pod watch", retry=TRANSPORT_ERRORS)
        async with contextlib.aclosing(changes):
            async for change in changes:
                for pod in change.items if isinstance(change, Listed) else [change.object]:
                    if resource_version(pod) != last_yielded:
                        last_yielded = resource_version(pod)
                        yield pod

    async def read(self) -> dict[str, Any] | None:
        """The pod now; None when it is gone or the API cannot be reached (logged)."""
        try:
            return await self._get_json(f"{self._pods_path}/{quote(self.name, safe='')}")
        except KubeError as exc:
            if not isinstance(exc, NotFoundError):
                log.warning("cannot read pod %s/%s: %s", self.namespace, self.name, exc)
        except (OSError, TimeoutError, ValueError, ssl.SSLError) as exc:
            log.warning("cannot read pod %s/%s: %s", self.namespace, self.name, exc or type(exc).__name__)
        return None

    # -- the log --

    async def log_tail(self, container: str, limit_bytes: int, tail_lines: int = 2000, previous: bool = False) -> str:
        """The last lines of a container's log, at most `limit_bytes` of UTF-8; "" when unavailable.

        The API's `limitBytes` keeps the *first* bytes of what `tailLines` selects, so asking for
        the tail of a log with long lines can cut off exactly the end we want. We ask for at most
        4 * limit_bytes and, when that fills up, ask again for fewer lines; then keep the last
        `limit_bytes`, starting at a line.
        """
        if limit_bytes <= 0:
            return ""
        cap = 4 * limit_bytes
        lines = max(tail_lines, 1)
        data = b""
        while True:
            query = {"container": container, "tailLines": str(lines), "limitBytes": str(cap)}
            if previous:
                query["previous"] = "true"
            try:
                data = await self._get_bytes(
                    f"{self._pods_path}/{quote(self.name, safe='')}/log?{urlencode(query)}", cap
                )
            except (KubeError, OSError, TimeoutError, ValueError, ssl.SSLError) as exc:
                log.warning("cannot read the log of %s/%s[%s]: %s", self.namespace, self.name, container, exc)
                return ""
            if len(data) < cap or lines <= 1:
                break
            lines = max(lines // 4, 1)
        if len(data) > limit_bytes:
            data = data[-limit_bytes:]
            cut = data.find(b"\n")
            if 0 <= cut < len(data) - 1:
                data = data[cut + 1 :]  # start at a whole line
        return data.decode("utf-8", errors="replace")

    async def last_output(self, container: str) -> float | None:
        """When the container's log was last written (the timestamp of its last line, as the kubelet
        recorded it: the node's clock); None when it has no output or the API cannot be read (logged).

        One `tailLines=1&timestamps=true` read: the kubelet seeks back from the end of the log file for it
        (pkg/kubelet/kuberuntime/logs/logs.go), so it costs the same however long the log is."""
        query = {"container": container, "tailLines": "1", "timestamps": "true", "limitBytes": "512"}
        try:
            data = await self._get_bytes(f"{self._pods_path}/{quote(self.name, safe='')}/log?{urlencode(query)}", 512)
        except (KubeError, OSError, TimeoutError, ValueError, ssl.SSLError) as exc:
            log.warning("cannot read the log of %s/%s[%s]: %s", self.namespace, self.name, container, exc)
            return None
        return rfc3339(data.split(b" ", 1)[0].decode("ascii", "replace")) if data.strip() else None

    # -- HTTP --

    async def _open(self, path: str) -> http1.Response:
        reader, writer = await http1.within(
            asyncio.open_connection(
                self._host, self._port, ssl=self._ssl, server_hostname=self._host if self._ssl else None, limit=MAX_LINE
            ),
            self.request_timeout,
        )
        headers = [
            f"GET {path} HTTP/1.1",
            f"Host: {self._host}:{self._port}",
            "Accept: application/json",
            "User-Agent: podmortem-sidecar",
            "Connection: close",
        ]
        token = self.endpoint.bearer()
        if token:
            headers.append(f"Authorization: Bearer {token}")
        return await http1.send(reader, writer, headers, self.request_timeout, _bad_response)

    async def _body(self, response: http1.Response, limit: int) -> bytes:
        return await http1.body(response, self.request_timeout, limit, _bad_response)

    async def _get_bytes(self, path: str, limit: int = MAX_BODY) -> bytes:
        response = await self._open(path)
        try:
            body = await self._body(response, max(limit, 64 << 10))
        finally:
            response.close()
        if not 200 <= response.status <= 299:
            raise from_response(response.status, body)
        return body[:limit]

    async def _get_json(self, path: str) -> dict[str, Any]:
        data = json.loads(await self._get_bytes(path))
        if not isinstance(data, dict):
            raise ValueError("the answer is not a JSON object")
        return data

    async def _stream(self, path: str) -> AsyncGenerator[dict[str, Any], None]:
        """The JSON lines of a watch until the server ends it (normal: after timeoutSeconds)."""
        response = await self._open(path)
        try:
            if not 200 <= response.status <= 299:
                raise from_response(response.status, await self._body(response, 64 << 10))
            pending = b""
            wait = self.watch_timeout + self.request_timeout
            async for chunk in http1.chunks(response, wait, 1 << 62, _bad_response):
                pending += chunk
                if len(pending) > MAX_LINE:
                    raise TemporaryError(0, "BadResponse", f"a watch event over {MAX_LINE} bytes")
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        event = json.loads(line)
                        if isinstance(event, dict):
                            yield event
        finally:
            response.close()


def rfc3339(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as the kubelet writes it ("2026-11-27T06:00:01.123456789Z":
    Python reads the nanoseconds to the microsecond); None when it is not one, or has no zone."""
    from datetime import datetime  # only with stall detection on: not in every sidecar's memory

    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return None
    return stamp.timestamp() if stamp.tzinfo is not None else None
