"""Captures as JSON: the form a bundle's `pods/<pod>/captures.json` holds (`offline.bundle` reads it back) and
the verdict file's `captures` list carries, so that a bundle made beside a verdict has the evidence the
live verdict had.

The verdict file is rewritten at each revision and its directory is bounded (the chart's is a 256 MiB
emptyDir), so its captures are bounded too (MAX_VERDICT_CAPTURE_CHARS of stacks and Flight Recorder
summaries): the root's and the stuck ranks' pods first, then the others in member order; past the bound
a capture keeps its place (path, ranks, trigger, time) without its stack or summary, and its note says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from podmortem.core.model import Member, WorkerCapture

# Characters of stacks and Flight Recorder summaries one verdict file carries (a stack is at most 32 KiB,
# a summary at most 256 KiB: a few dozen workers' whole evidence).
MAX_VERDICT_CAPTURE_CHARS = 2 << 20
LEFT_OUT = "its stack and Flight Recorder summary were left out of the verdict file (over its bound for captures)"


def capture_dict(capture: WorkerCapture) -> dict[str, Any]:
    """One capture as captures.json holds it."""
    fr = capture.flight_recorder
    return {
        "path": capture.path,
        "global_rank": capture.global_rank,
        "local_rank": capture.local_rank,
        "stack": capture.stack,
        "flight_recorder": fr.to_dict() if fr is not None else None,
        "note": capture.note,
        "trigger": capture.trigger,
        "captured_at": capture.captured_at,
    }


def verdict_captures(
    members: Sequence[Member], first: Sequence[str] = (), limit: int = MAX_VERDICT_CAPTURE_CHARS
) -> list[dict[str, Any]]:
    """Every member's captures, each with its `pod`: the pods named in `first` before the others, stacks and
    summaries within `limit` characters (beyond it, left out and said so in the capture's note)."""
    order: dict[str, int] = {}
    for pod in first:  # a pod named twice (the root, and a stuck pod) keeps its first place
        order.setdefault(pod, len(order))
    held = sorted((m for m in members if m.captures), key=lambda m: order.get(m.pod, len(order)))
    out: list[dict[str, Any]] = []
    left = limit
    for member in held:
        for capture in member.captures:
            doc = capture_dict(capture)
            size = len(capture.stack) + (len(json.dumps(doc["flight_recorder"])) if doc["flight_recorder"] else 0)
            if size > left:
                doc.update(stack="", flight_recorder=None, note="; ".join(n for n in (capture.note, LEFT_OUT) if n))
            else:
                left -= size
            out.append({"pod": member.pod, **doc})
    return out


def captures_by_pod(entries: Any) -> dict[str, list[dict[str, Any]]]:
    """A verdict file's `captures` (untrusted JSON) grouped by pod, each entry without its `pod`, as each
    pod's captures.json holds them; entries that do not name a pod are skipped (the bundle's reader
    validates the rest)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("pod"), str):
            grouped.setdefault(entry["pod"], []).append({k: v for k, v in entry.items() if k != "pod"})
    return grouped
