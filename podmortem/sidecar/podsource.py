"""Where the sidecar learns how its own pod ended: a source of Pod objects, and the events they add.

The container-termination side of a failure (exit code, signal, OOMKilled, DisruptionTarget,
deletion) is in the Pod object, not in the error file. In Kubernetes the sidecar reads its own pod
from the API (`podmortem.sidecar.apiserver`, raw HTTP, no client library); in local runs and the demo
the torchrun harness writes the pod, as `kubectl get pod -o json` would show it, to a file when the
"pod's" process exits (`LocalFilePodSource`). Both implement `PodSource`, so `PodReporter` turns
either into the same events the aggregator's own pod watch produces (`wire.events_from_snapshot`:
deterministic ids, so a fact seen by both is one event).

`PodSource` protocol (implement it with an async generator method)::

    class MySource:
        async def pods(self) -> AsyncIterator[dict[str, Any]]:
            ...  # yield every new version of the pod until cancelled; swallow and log temporary errors
            yield pod
        async def read(self) -> dict[str, Any] | None:
            ...  # the pod as it is now, once (the last look on SIGTERM); None when unknown

When a new termination arrives, the reporter attaches a bounded tail of the training container's log
as a `LogTail` event: from the log file when one is configured (`PODMORTEM_LOG_FILE`, local runs),
else from the source when it can fetch logs (an optional
`async def log_tail(self, container: str, limit_bytes: int, previous: bool) -> str`, as `OwnPod` has).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from podmortem.core import podstatus
from podmortem.core.finite import finite_or_none
from podmortem.core.podstatus import PodSnapshot
from podmortem.protocol import wire
from podmortem.protocol.v1 import collector_pb2 as pb
from podmortem.sidecar.config import Settings
from podmortem.sidecar.outbox import describe
from podmortem.sidecar.watcher import watch_path

logger = logging.getLogger(__name__)

MAX_POD_BYTES = 1 << 20  # a Pod object is a few KiB; anything over this is not one


@runtime_checkable
class PodSource(Protocol):
    """A stream of this pod's versions (dicts shaped like `kubectl get pod -o json`)."""

    def pods(self) -> AsyncIterator[dict[str, Any]]:
        """Every new version of the pod, until cancelled (an `async def` generator in implementations)."""
        ...

    async def read(self) -> dict[str, Any] | None:
        """The pod as it is now, read once; None when it cannot be known."""
        ...


class LocalFilePodSource:
    """The pod as written to a local file by the torchrun harness or the demo."""

    def __init__(self, path: Path, *, tick_ms: int = 500, force_polling: bool | None = None) -> None:
        self.path = Path(path)
        self._tick_ms = tick_ms
        self._force_polling = force_polling
        self._last_digest: bytes | None = None
        self._last_problem = ""

    async def pods(self) -> AsyncIterator[dict[str, Any]]:
        logger.info("watching pod status file %s", self.path)
        async for _ in watch_path(self.path, tick_ms=self._tick_ms, force_polling=self._force_polling):
            pod = self._load(only_new=True)
            if pod is not None:
                yield pod

    async def read(self) -> dict[str, Any] | None:
        # A look aside (identity at start-up, the last look at shutdown) must not hide this version from
        # `pods()`: only what `pods()` yields is remembered as seen.
        return self._load(only_new=False, remember=False)

    def _load(self, only_new: bool, remember: bool = True) -> dict[str, Any] | None:
        try:
            with self.path.open("rb") as f:
                data = f.read(MAX_POD_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return self._problem(f"cannot read {self.path}: {exc.strerror or exc}")
        if len(data) > MAX_POD_BYTES:
            return self._problem(f"{self.path} is over {MAX_POD_BYTES} bytes; not a Pod object")
        digest = wire.sha256(data).digest()
        if only_new and digest == self._last_digest:
            return None
        try:
            pod = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            # Probably half written: the next change completes it. Said once per distinct problem.
            return self._problem(f"{self.path} is not valid JSON (yet): {exc}", level=logging.DEBUG)
        except RecursionError:  # json recurses once per level of nesting
            return self._problem(f"{self.path} is JSON nested too deeply to be a Pod object")
        if not isinstance(pod, dict):
            return self._problem(f"{self.path} does not hold a JSON object")
        if remember:
            self._last_digest = digest
        self._last_problem = ""
        return pod

    def _problem(self, text: str, level: int = logging.WARNING) -> dict[str, Any] | None:
        """Log a problem with the file once (until it changes); there is no pod to report."""
        if text != self._last_problem:
            logger.log(level, "%s", text)
            self._last_problem = text
        return None


def read_log_tail(path: Path, max_bytes: int) -> pb.LogTail | None:
    """The last `max_bytes` of a log file, cut at a line start when cut; None when there is no log."""
    if max_bytes <= 0:
        return None
    try:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            start = max(0, size - max_bytes)
            f.seek(start)
            data = f.read(max_bytes)
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("cannot read log file %s: %s", path, exc.strerror or exc)
        return None
    truncated = start > 0
    if truncated and b"\n" in data[:-1]:
        data = data[data.index(b"\n") + 1 :]  # drop the partial first line
    return pb.LogTail(text=wire.utf8(data), truncated=truncated)


class PodReporter:
    """Turns each observed version of the pod into the failure events it adds."""

    def __init__(
        self,
        source: PodSource,
        emit: Callable[[pb.Event], object],
        *,
        pod_name: str = "",
        container: str | None = None,
        log_file: Path | None = None,
        log_tail_bytes: int = 64 << 10,
    ) -> None:
        self.source = source
        self._emit = emit
        self.pod_name = pod_name
        self.container = container
        self.log_file = log_file
        self.log_tail_bytes = log_tail_bytes
        self.previous: PodSnapshot | None = None
        self.grace_seconds: float | None = None  # the pod's terminationGracePeriodSeconds, once seen
        self._warned_name = False
        # Runs of the container before this one belong to earlier job attempts, registered as such by
        # earlier sidecars (or the aggregator's pod watch): their ends are not reported again (`serve`).
        self.min_run = 0
        self.on_snapshot: Callable[[PodSnapshot], Awaitable[None]] | None = None

    async def run(self) -> None:
        """Report every version of the pod the source yields, until cancelled."""
        async for pod in self.source.pods():
            await self.observe(pod)

    async def refresh(self) -> list[pb.Event]:
        """One more look at the pod (at shutdown)."""
        pod = await self.source.read()
        return await self.observe(pod) if pod is not None else []

    async def observe(self, pod: dict[str, Any]) -> list[pb.Event]:
        snap = podstatus.snapshot(pod, self.container)
        grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        if (seconds := finite_or_none(grace)) is not None and seconds >= 0:
            self.grace_seconds = seconds
        if self.pod_name and snap.name and snap.name != self.pod_name and not self._warned_name:
            self._warned_name = True
            logger.warning("pod status names pod %r, but this sidecar is for %r", snap.name, self.pod_name)
        events = [e for e in wire.events_from_snapshot(snap, self.previous) if wire.run_of(e) >= self.min_run]
        self.previous = snap
        if any(e.WhichOneof("payload") == "termination" for e in events):
            # The log tail goes out before the termination: once every member reported its end the
            # aggregator decides, and a crash may be visible only in the log ("exitcode: -11").
            tail = await self._log_tail(snap)
            if tail is not None:
                key = snap.uid or f"{snap.namespace}/{snap.name}"
                events.insert(0, wire.make_event(tail, f"{key}/log_tail/{snap.restart_count}"))
        for event in events:
            logger.info("observed %s", describe(event))
            self._emit(event)
        if self.on_snapshot is not None:
            await self.on_snapshot(snap)
        return events

    async def _log_tail(self, snap: PodSnapshot) -> pb.LogTail | None:
        """The training container's log tail: from the local log file, or from a source that can fetch it."""
        if self.log_file is not None:
            return read_log_tail(self.log_file, self.log_tail_bytes)
        fetch = getattr(self.source, "log_tail", None)  # optional capability (apiserver.OwnPod has it)
        if fetch is None or not snap.container or self.log_tail_bytes <= 0:
            return None
        # The failed run's log: after a restart the container runs again and its current log is the new
        # run's, so the earlier run's end (lastState) is read with previous=true.
        previous = snap.termination is None and snap.last_termination is not None
        text = await fetch(snap.container, self.log_tail_bytes, previous=previous)
        if not isinstance(text, str) or not text:
            return None
        # The source keeps whole lines within the limit: a tail that nearly fills it was probably cut.
        data = text.encode("utf-8", "replace")
        return pb.LogTail(text=data, truncated=len(data) >= self.log_tail_bytes * 9 // 10)


def make_pod_source(settings: Settings) -> PodSource | None:
    """The pod source the settings ask for; None when there is none (the error file is then all we watch)."""
    if settings.pod_source == "file" and settings.pod_status_file is not None:
        return LocalFilePodSource(settings.pod_status_file, force_polling=settings.force_polling or None)
    if settings.pod_source == "api":
        # Imported only for this source: raw HTTP, no client library (and PyYAML only for a kubeconfig).
        from podmortem.sidecar.apiserver import OwnPod
        from podmortem.sidecar.kubeconfig import resolve_endpoint

        endpoint = resolve_endpoint(settings.kubeconfig or None, settings.kube_context or None)
        return OwnPod(endpoint, settings.namespace, settings.pod_name)
    return None
