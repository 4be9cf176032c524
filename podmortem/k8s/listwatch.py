"""The list -> watch -> (410 Gone) -> re-list loop, written once for both transports.

A watch is resumed from the last resourceVersion seen when the server ends it (normal, after
timeoutSeconds) or the connection drops; 410 Gone (the version expired) means list again; any other
error is retried after a backoff, and a permanent one also forgets the version (list again). The
caller supplies the transport (`list_`, `watch`) and receives a `Listed` batch after every list — so it
can notice objects deleted while nobody watched — and each watch event. It runs until cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass

from podmortem.k8s.backoff import Backoff
from podmortem.k8s.errors import GoneError, KubeError, PermanentError, from_watch_event
from podmortem.k8s.objects import JSON, resource_version

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listed:
    """Every object of a fresh list (the state now)."""

    items: list[JSON]


@dataclass(frozen=True)
class Watched:
    """One watch event: ADDED, MODIFIED or DELETED (bookmarks only move the version)."""

    type: str
    object: JSON


ListFn = Callable[[], Awaitable[JSON]]
WatchFn = Callable[[str], AsyncGenerator[JSON, None]]  # resourceVersion -> raw watch events


async def list_watch(
    list_: ListFn,
    watch: WatchFn,
    *,
    backoff: Backoff,
    what: str,
    retry: tuple[type[BaseException], ...] = (),
) -> AsyncGenerator[Listed | Watched, None]:
    """Lists and watch events of one scope, resumed and re-listed as needed, until cancelled.

    `retry` names transport exceptions (besides KubeError) to treat as temporary.
    """
    version = ""
    failures = 0
    while True:
        try:
            if not version:
                listing = await list_()
                version = resource_version(listing)
                yield Listed([item for item in listing.get("items") or [] if isinstance(item, dict)])
            # aclosing: a consumer that stops (or is cancelled) closes the watch's connection now, not at
            # garbage collection — an open watch keeps the API server's handler waiting.
            async with contextlib.aclosing(watch(version)) as events:
                async for event in events:
                    failures = 0
                    kind, obj = event.get("type"), event.get("object")
                    if not isinstance(obj, dict):
                        continue
                    if kind == "ERROR":
                        raise from_watch_event(obj)
                    version = resource_version(obj) or version
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        yield Watched(str(kind), obj)
        except GoneError:
            log.info("%s: resourceVersion %s expired; re-listing", what, version)
            version = ""
        except Exception as exc:
            if not isinstance(exc, (KubeError, *retry)):
                raise
            delay = backoff.delay(failures)
            failures += 1
            if isinstance(exc, PermanentError):
                version = ""
            log.warning("%s: %s; again in %.1fs", what, exc or type(exc).__name__, delay)
            await asyncio.sleep(delay)
