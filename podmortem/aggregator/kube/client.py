"""The aggregator's only door to the Kubernetes API, and the only module that imports `kubernetes`.

Everything else in the aggregator (the pod watch, the job resolver, the publishers) speaks plain dicts
and API paths through `Kube`, and sees only our own small error hierarchy (`podmortem.k8s.errors`):
library exceptions are translated here, at the boundary.

Why the official client but no typed models: the generated models of `kubernetes` (pydantic, one class
per kind) cost time and memory and would have to be turned back into dicts for our pure functions
(podstatus, jobs, kubepublish). We use the client for what it is good at — kubeconfig and in-cluster
configuration, auth plugins and token refresh, TLS, connection pooling — through its generic
`ApiClient.call_api`, which works the same for Pods, Jobs and any custom resource.

The client is synchronous: every call runs in `asyncio.to_thread`, and a watch reads its stream in a
thread of its own. `request` applies a client-side rate limit (token bucket; `qps`, `burst`) before
every call and retries temporary errors (429 — honouring Retry-After —, 5xx, 409 Conflict when asked,
connection errors) with exponential backoff; permanent errors are raised at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import threading
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from podmortem.k8s.backoff import Backoff
from podmortem.k8s.errors import (
    ConflictError,
    GoneError,
    KubeError,
    PermanentError,
    TemporaryError,
    from_response,
    from_watch_event,
)

log = logging.getLogger(__name__)

JSON = dict[str, Any]


def _from_api_exception(exc: ApiException) -> KubeError:
    headers = exc.headers if isinstance(exc.headers, Mapping) else None
    error = from_response(int(exc.status or 0), exc.body, headers)
    if not error.message or error.message == f"HTTP {error.status}":
        error.message = str(exc.reason or error.message)
    return error


# -- settings ----------------------------------------------------------------------------------

# Training pods are found by label; a selector cannot say "this label OR that one", so one watch each.
DEFAULT_POD_SELECTORS: tuple[str, ...] = (
    "training.kubeflow.org/job-name",  # Kubeflow PyTorchJob (training-operator v1)
    "batch.kubernetes.io/job-completion-index",  # indexed batch Jobs, and so JobSet and TrainJob v2
)
PUBLISH_TARGETS = frozenset({"annotations", "condition", "events"})


@dataclass(frozen=True)
class KubeSettings:
    """How the aggregator talks to Kubernetes (flags and environment in `add_kube_arguments`)."""

    enabled: bool = False
    kubeconfig: str | None = None  # None: in-cluster when KUBERNETES_SERVICE_HOST is set, else ~/.kube/config
    context: str | None = None
    namespaces: tuple[str, ...] = ()  # () = every namespace (needs a ClusterRole)
    pod_selectors: tuple[str, ...] = DEFAULT_POD_SELECTORS
    publish: frozenset[str] = PUBLISH_TARGETS
    qps: float = 20.0
    burst: int = 40
    retries: int = 6
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    request_timeout: float = 30.0
    watch_timeout: int = 300  # server-side timeoutSeconds of one watch request
    # The pod watch reads a failed container's log tail (this many bytes; 0: never) for members whose
    # sidecar sent none and whose termination carries no message.
    pod_log_bytes: int = 64 << 10
    # Two or more replicas: only the holder of this Lease serves (podmortem.aggregator.kube.leader).
    leader_elect: bool = False
    lease_name: str = "podmortem-aggregator"
    lease_namespace: str = field(default_factory=lambda: os.environ.get("POD_NAMESPACE") or "default")
    reporting_instance: str = field(default_factory=lambda: os.environ.get("POD_NAME") or os.uname().nodename)


_TRUE = {"1", "true", "yes", "on"}


def add_kube_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("Kubernetes (each flag overrides its environment variable)")
    g.add_argument(
        "--kube", action="store_true", default=None, help="watch pods and publish verdicts [PODMORTEM_KUBE=1]"
    )
    g.add_argument("--kubeconfig", help="kubeconfig file; default in-cluster, else ~/.kube/config [KUBECONFIG]")
    g.add_argument("--kube-context", help="kubeconfig context [PODMORTEM_KUBE_CONTEXT]")
    g.add_argument("--namespaces", help="comma-separated namespaces to watch; default all [PODMORTEM_NAMESPACES]")
    g.add_argument(
        "--pod-selector",
        action="append",
        help="label selector of training pods, repeatable [PODMORTEM_POD_SELECTORS, ';'-separated]",
    )
    g.add_argument(
        "--kube-publish",
        help="what to write: annotations,condition,events or none [PODMORTEM_KUBE_PUBLISH]",
    )
    g.add_argument("--kube-qps", type=float, help="client-side rate limit, requests/s [PODMORTEM_KUBE_QPS]")
    g.add_argument("--kube-burst", type=int, help="client-side burst [PODMORTEM_KUBE_BURST]")
    g.add_argument(
        "--leader-elect",
        action="store_true",
        default=None,
        help="serve only while holding a Lease (two replicas; identity POD_NAME) [PODMORTEM_LEADER_ELECT=1]",
    )
    g.add_argument("--lease-name", help="the Lease's name [PODMORTEM_LEASE_NAME, podmortem-aggregator]")
    g.add_argument("--lease-namespace", help="the Lease's namespace [POD_NAMESPACE, else default]")
    g.add_argument(
        "--pod-log-bytes",
        type=int,
        help="log tail read of a failed pod without a sidecar; 0 never reads logs [PODMORTEM_POD_LOG_BYTES, 65536]",
    )


def load_kube_settings(ns: argparse.Namespace, env: Mapping[str, str] | None = None) -> KubeSettings:
    """Flags > environment > defaults. Raises ValueError naming the bad setting."""
    env = os.environ if env is None else env

    def pick(attr: str, var: str) -> Any:
        value = getattr(ns, attr, None)
        return value if value is not None else env.get(var) or None

    enabled = pick("kube", "PODMORTEM_KUBE")
    namespaces = pick("namespaces", "PODMORTEM_NAMESPACES")
    selectors = getattr(ns, "pod_selector", None) or [
        s for s in (env.get("PODMORTEM_POD_SELECTORS") or "").split(";") if s.strip()
    ]
    publish = pick("kube_publish", "PODMORTEM_KUBE_PUBLISH")
    targets = PUBLISH_TARGETS
    if publish is not None:
        targets = frozenset(t.strip() for t in str(publish).split(",") if t.strip() and t.strip() != "none")
        if unknown := targets - PUBLISH_TARGETS:
            raise ValueError(f"--kube-publish: unknown target(s) {sorted(unknown)}; use {sorted(PUBLISH_TARGETS)}")
    qps = float(pick("kube_qps", "PODMORTEM_KUBE_QPS") or KubeSettings.qps)
    burst = int(pick("kube_burst", "PODMORTEM_KUBE_BURST") or KubeSettings.burst)
    if qps <= 0 or burst < 1:
        raise ValueError("--kube-qps must be > 0 and --kube-burst >= 1")
    log_bytes = pick("pod_log_bytes", "PODMORTEM_POD_LOG_BYTES")
    pod_log_bytes = KubeSettings.pod_log_bytes if log_bytes is None else int(log_bytes)
    if not 0 <= pod_log_bytes <= 1 << 20:
        raise ValueError("--pod-log-bytes must be between 0 and 1048576")
    return KubeSettings(
        enabled=enabled is True or str(enabled).lower() in _TRUE,
        kubeconfig=pick("kubeconfig", "KUBECONFIG"),
        context=pick("kube_context", "PODMORTEM_KUBE_CONTEXT"),
        namespaces=tuple(n.strip() for n in str(namespaces or "").split(",") if n.strip()),
        pod_selectors=tuple(s.strip() for s in selectors) or DEFAULT_POD_SELECTORS,
        publish=targets,
        qps=qps,
        burst=burst,
        pod_log_bytes=pod_log_bytes,
        leader_elect=(elect := pick("leader_elect", "PODMORTEM_LEADER_ELECT")) is True or str(elect).lower() in _TRUE,
        lease_name=pick("lease_name", "PODMORTEM_LEASE_NAME") or KubeSettings.lease_name,
        lease_namespace=pick("lease_namespace", "POD_NAMESPACE") or "default",
    )


# -- paths -------------------------------------------------------------------------------------


# -- pacing ------------------------------------------------------------------------------------


class RateLimiter:
    """A token bucket on the event loop's clock: `burst` calls at once, then `qps` per second."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(burst, 1)
        self._tokens = float(self.burst)
        self._stamp: float | None = None
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            loop = asyncio.get_running_loop()
            now = loop.time()
            if self._stamp is not None:
                self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
            self._stamp = now
            if self._tokens < 1:
                wait = (1 - self._tokens) / self.qps
                await asyncio.sleep(wait)
                self._stamp = loop.time()
                self._tokens = 1.0
            self._tokens -= 1


# -- the client --------------------------------------------------------------------------------


def load_configuration(settings: KubeSettings) -> k8s_client.Configuration:
    """kubeconfig when given, else in-cluster when in a pod, else the default kubeconfig."""
    cfg = k8s_client.Configuration()
    if settings.kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        k8s_config.load_kube_config(
            config_file=settings.kubeconfig, context=settings.context, client_configuration=cfg, persist_config=False
        )  # type: ignore[no-untyped-call]
    cfg.retries = 0  # retries are ours (below), with backoff and the rate limit
    return cfg


class Kube:
    """Plain-dict access to the API: `request` for one call, `watch` for a stream of events."""

    def __init__(
        self,
        configuration: k8s_client.Configuration,
        *,
        qps: float = 20.0,
        burst: int = 40,
        retries: int = 6,
        backoff: Backoff | None = None,
        request_timeout: float = 30.0,
        watch_timeout: int = 300,
    ) -> None:
        self._api = k8s_client.ApiClient(configuration)
        self._api.user_agent = "podmortem-aggregator"
        self.limiter = RateLimiter(qps, burst)
        self.retries = retries
        self.backoff = backoff or Backoff()
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.calls = 0  # requests sent (retries included)

    @classmethod
    def from_settings(cls, settings: KubeSettings) -> Kube:
        return cls(
            load_configuration(settings),
            qps=settings.qps,
            burst=settings.burst,
            retries=settings.retries,
            backoff=Backoff(settings.backoff_initial, settings.backoff_max),
            request_timeout=settings.request_timeout,
            watch_timeout=settings.watch_timeout,
        )

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]

    # -- one call --

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str | None = None,
        retry_conflict: bool = False,
    ) -> JSON:
        """One API call with rate limit and retries; the decoded JSON answer ({} when empty)."""
        data, status = await self._retrying(method, path, query, body, content_type, retry_conflict)
        return _decoded(data, status)

    async def get_text(self, path: str, query: Mapping[str, str | int] | None = None) -> str:
        """A GET whose answer is text, not JSON (a container's log), with the same limit and retries."""
        data, _ = await self._retrying("GET", path, query, None, None, False, accept="text/plain")
        return data.decode("utf-8", errors="replace")

    async def _retrying(
        self,
        method: str,
        path: str,
        query: Mapping[str, str | int] | None,
        body: Any,
        content_type: str | None,
        retry_conflict: bool,
        accept: str = "application/json",
    ) -> tuple[bytes, int]:
        attempt = 0
        while True:
            await self.limiter.acquire()
            try:
                return await asyncio.to_thread(self._call, method, path, query, body, content_type, accept)
            except KubeError as exc:
                error = exc
            retryable = isinstance(error, TemporaryError) and not isinstance(error, GoneError)
            if isinstance(error, ConflictError) and not retry_conflict:
                retryable = False
            if not retryable or attempt >= self.retries:
                raise error
            delay = error.retry_after if error.retry_after is not None else self.backoff.delay(attempt)
            log.info("%s %s: %s; retry %d in %.2fs", method, path, error, attempt + 1, delay)
            attempt += 1
            await asyncio.sleep(delay)

    def _call(
        self,
        method: str,
        path: str,
        query: Mapping[str, str | int] | None,
        body: Any,
        content_type: str | None,
        accept: str = "application/json",
    ) -> tuple[bytes, int]:
        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        self.calls += 1
        try:
            params = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._api.call_api(*params, _request_timeout=self.request_timeout)
            data = response.read()  # type: ignore[no-untyped-call]
            if not 200 <= response.status <= 299:
                text = data.decode("utf-8", errors="replace") if data else ""
                raise from_response(response.status, text, response.headers)  # Retry-After on a 429
        except ApiException as exc:
            raise _from_api_exception(exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TemporaryError(0, type(exc).__name__, str(exc)) from exc
        return data or b"", response.status

    async def get(self, path: str, query: Mapping[str, str | int] | None = None) -> JSON:
        return await self.request("GET", path, query=query)

    # -- a stream --

    async def watch(
        self, path: str, query: Mapping[str, str | int] | None = None, resource_version: str = ""
    ) -> AsyncGenerator[JSON, None]:
        """The events ({"type", "object"}) of one watch request, until the server ends it.

        Raises GoneError when the resourceVersion expired (re-list, then watch again), other
        KubeErrors as `request` would; no retries here — the caller's loop owns resumption.
        """
        await self.limiter.acquire()
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[JSON | BaseException | None] = asyncio.Queue()
        params: dict[str, str | int] = dict(query or {})
        params.update(watch="true", allowWatchBookmarks="true", timeoutSeconds=self.watch_timeout)
        if resource_version:
            params["resourceVersion"] = resource_version
        holder: dict[str, Any] = {}
        stopping = threading.Event()
        guard = threading.Lock()  # orders "the reader has a response" against "the consumer left"

        def put(item: JSON | BaseException | None) -> None:
            if not stopping.is_set():
                loop.call_soon_threadsafe(queue.put_nowait, item)

        def close(raw: Any) -> None:
            try:
                raw.shutdown()  # unblocks a read() in progress in the reader thread
                raw.close()  # and never back to the pool: the server may still be streaming on it
            except Exception:  # pragma: no cover - best effort on a dying connection
                log.debug("closing watch %s", path, exc_info=True)

        def reader() -> None:
            self.calls += 1
            raw: Any = None
            finished = False
            try:
                request = self._api.param_serialize(
                    method="GET",
                    resource_path=path,
                    query_params=list(params.items()),
                    header_params={"Accept": "application/json"},
                    auth_settings=["BearerToken"],
                )
                response = self._api.call_api(
                    *request, _request_timeout=(self.request_timeout, self.watch_timeout + self.request_timeout)
                )
                with guard:
                    raw = holder["raw"] = response.response
                    if stopping.is_set():
                        return  # the consumer left while we connected
                if not 200 <= response.status <= 299:
                    text = response.read().decode("utf-8", errors="replace")  # type: ignore[no-untyped-call]
                    put(from_response(response.status, text))
                    return
                for line in iter_resp_lines(raw):  # type: ignore[no-untyped-call]
                    if stopping.is_set():
                        return
                    if line.strip():
                        put(json.loads(line))
                with guard:
                    finished = holder["finished"] = True  # the server ended the stream: the connection is reusable
                put(None)
            except ApiException as exc:
                put(_from_api_exception(exc))
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                put(None if stopping.is_set() else TemporaryError(0, type(exc).__name__, str(exc)))
            except BaseException as exc:  # pragma: no cover - handed to the awaiting task
                put(exc)
            finally:
                if raw is not None and not finished:
                    close(raw)

        thread = threading.Thread(target=reader, name=f"watch {path}", daemon=True)
        thread.start()
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                if item.get("type") == "ERROR":
                    raise from_watch_event(item.get("object") or {})
                yield item
        finally:
            with guard:
                stopping.set()
                raw = None if holder.get("finished") else holder.get("raw")
            if raw is not None:
                close(raw)


def _decoded(data: bytes, status: int) -> JSON:
    if not data:
        return {}
    try:
        decoded = json.loads(data)
    except ValueError as exc:
        raise PermanentError(status, "BadResponse", "the answer is not JSON") from exc
    return decoded if isinstance(decoded, dict) else {"items": decoded}
