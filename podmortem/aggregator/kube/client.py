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

import asyncio
import functools
import json
import logging
import threading
from collections.abc import AsyncGenerator, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Literal

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from podmortem.aggregator.config import KubeSettings, in_cluster
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
from podmortem.k8s.objects import JSON

log = logging.getLogger(__name__)


def _from_api_exception(exc: ApiException) -> KubeError:
    headers = exc.headers if isinstance(exc.headers, Mapping) else None
    error = from_response(int(exc.status or 0), exc.body, headers)
    if not error.message or error.message == f"HTTP {error.status}":
        error.message = str(exc.reason or error.message)
    return error


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
    if settings.kubeconfig is None and in_cluster():
        k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        k8s_config.load_kube_config(
            config_file=settings.kubeconfig, context=settings.context, client_configuration=cfg, persist_config=False
        )  # type: ignore[no-untyped-call]
    cfg.retries = 0  # retries are ours (below), with backoff and the rate limit
    return cfg


# Which of the aggregator's API clients: each has a rate limit of its own (and so a budget no other
# caller can spend), built by `client_for`.
Role = Literal["api", "lease", "conditions", "reviews"]


def client_for(settings: KubeSettings, role: Role, threads: int = 0) -> Kube:
    """The one factory of the aggregator's API clients, one configuration, a budget per role:

    - "api": the pod watch and the verdict's publishers (`--kube-qps`, `--kube-burst`), the loop's threads;
    - "lease": the leader elector's, the same budget on a limiter of its own (renewals never wait behind
      a burst of publishes);
    - "conditions": pod condition writes (`--condition-qps`, `--condition-burst`), `threads` threads and
      as many connections;
    - "reviews": TokenReviews and the pod reads that verify membership (`--kube-qps`, `--kube-burst`), one
      retry, `threads` threads (a flood of reviews never holds the threads the publishers' calls need).
    """
    configuration = load_configuration(settings)
    budget = settings.client
    qps, burst, retries, executor = budget.qps, budget.burst, budget.retries, None
    if role == "conditions":
        configuration.connection_pool_maxsize = threads
        qps, burst = settings.conditions.qps, settings.conditions.burst
        executor = ThreadPoolExecutor(threads, thread_name_prefix="podmortem-conditions")
    elif role == "reviews":
        retries = 1
        executor = ThreadPoolExecutor(threads, thread_name_prefix="podmortem-review")
    return Kube(
        configuration,
        qps=qps,
        burst=burst,
        retries=retries,
        backoff=Backoff(budget.backoff_initial, budget.backoff_max),
        request_timeout=budget.request_timeout,
        watch_timeout=budget.watch_timeout,
        executor=executor,
    )


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
        executor: Executor | None = None,
    ) -> None:
        self._api = k8s_client.ApiClient(configuration)
        # The threads its calls run in: the loop's default pool, or a pool of its own (the token
        # reviewers': a flood of reviews then never holds the threads the publishers' calls need).
        self._executor = executor
        self._api.user_agent = "podmortem-aggregator"
        self.limiter = RateLimiter(qps, burst)
        self.retries = retries
        self.backoff = backoff or Backoff()
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.calls = 0  # requests sent (retries included)

    @classmethod
    def from_settings(cls, settings: KubeSettings) -> Kube:
        """The pod watch's and the verdict's publishers' client (`client_for(settings, "api")`)."""
        return client_for(settings, "api")

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
        paced: bool = False,
    ) -> JSON:
        """One API call with rate limit and retries; the decoded JSON answer ({} when empty). `paced`: the
        caller took the first attempt's token from `limiter` already (to choose what to send with it)."""
        data, status = await self._retrying(method, path, query, body, content_type, retry_conflict, paced=paced)
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
        paced: bool = False,
    ) -> tuple[bytes, int]:
        attempt = 0
        while True:
            if attempt or not paced:
                await self.limiter.acquire()
            try:
                call = functools.partial(self._call, method, path, query, body, content_type, accept)
                return await asyncio.get_running_loop().run_in_executor(self._executor, call)
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
