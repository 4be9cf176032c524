"""The incident page as one self-contained HTML file: inline CSS and SVG, no script, no fetch of any kind.

Everything on the page that names a pod, quotes a log line or a message comes from the training pods and
is untrusted: it is rendered only through Jinja2 with autoescaping on (every `{{ }}` is HTML-escaped,
attributes quoted), and the page carries a Content-Security-Policy that allows no script, no network
and only inline styles, so even a mistake in escaping runs nothing and loads nothing
(`tests/e2e/test_page_browser.py` opens a hostile bundle's page in Chromium).

The geometry of the timeline (x for a time, y for a row) is computed here, the template only draws it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import jinja2

from podmortem.core.model import Incident, Verdict
from podmortem.core.names import (
    HARDWARE_FAULTS_ANNOTATION,
    PREFIX,
    ROOT_CAUSE_CONDITION,
    SUMMARY_ANNOTATION,
    VERDICT_ANNOTATION,
)
from podmortem.page import timeline
from podmortem.page.timeline import Band, Mark, Row, Timeline

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
LATER_KEYS = ("hang", "attempt_history")  # shown when the verdict (or its file) holds them
RUNNER_UP_BELOW = 0.9  # the runner-up and why it lost are shown below this confidence
WIDTH = 1200
LABEL_W = 420  # the pod-name column of the timeline
PLOT_X0 = LABEL_W + 20
PLOT_X1 = WIDTH - 30
ROW_H = 40
GROUP_H = 24
AXIS_H = 44
SHAPE_GAP = 13  # px between the centres of two marks of one row
LABEL_GAP = 96  # marks closer than this (px) put their labels on the next line
TITLE_CHARS = 56  # a row's first line (pod, rank, node) within the label column
MAX_EXCERPTS = 24  # log excerpts shown: the root's, the runner-up's, odd ones out, one per band


@dataclass(frozen=True)
class PageContext:
    """What is known besides the incident and the verdict: when and how it was decided, what was written.

    `written`: (where, what) pairs podmortem wrote to the cluster beyond each pod's condition (the job's
    annotations and condition, a node's hardware record); empty offline. `extra`: verdict keys of later
    revisions of the verdict shape, shown when present (`hang`, `attempt_history`). `offsets`: the source
    carries the clock offsets the sidecars measured (a verdict file does; a bundle and the cluster's
    annotations do not, and the page then says so rather than count every pod as unmeasured)."""

    source: str = "podmortem analyze"
    decided_at: float | None = None
    closed_by: str = ""
    revision: int | None = None
    final: bool | None = None
    written: tuple[tuple[str, str], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    live: bool = False  # read from a cluster: pod conditions are what the pods carry, none is inferred
    offsets: bool = False


def context_of_verdict_file(doc: Mapping[str, Any], source: str) -> PageContext:
    """The context a verdict file holds (`Decision.to_dict()`: revision, final, closed_by, decided_at)."""
    decided = doc.get("decided_at")
    revision = doc.get("revision")
    return PageContext(
        source=source,
        decided_at=float(decided) if isinstance(decided, (int, float)) else None,
        closed_by=str(doc.get("closed_by") or ""),
        revision=revision if isinstance(revision, int) else None,
        final=doc.get("final") if isinstance(doc.get("final"), bool) else None,
        extra={k: doc[k] for k in LATER_KEYS if k in doc},
        offsets=isinstance(clock_offsets(doc), dict),
    )


def clock_offsets(doc: Mapping[str, Any]) -> dict[str, float] | None:
    """The measured clock offsets a verdict file carries (`incident.clock_offsets`: pod -> seconds, finite
    numbers only); None when it carries none (an older file)."""
    meta = doc.get("incident")
    raw = meta.get("clock_offsets") if isinstance(meta, Mapping) else None
    if not isinstance(raw, Mapping):
        return None
    return {
        str(pod): float(v)
        for pod, v in raw.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    }


def _fmt_time(t: float | None) -> str:
    if t is None:
        return "—"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def _nice_step(span: float) -> float:
    raw = span / 8
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 5, 10):
        if raw <= m * power:
            return m * power
    return 10 * power


class _Scale:
    def __init__(self, start: float | None, end: float | None) -> None:
        self.start = start if start is not None else 0.0
        span = (end - start) if start is not None and end is not None else 0.0
        self.span = span if span > 0 else 1.0
        self.pad = self.span * 0.04
        self.start -= self.pad
        self.span += 2 * self.pad

    def x(self, t: float) -> float:
        return round(PLOT_X0 + (t - self.start) / self.span * (PLOT_X1 - PLOT_X0), 1)

    def ticks(self, origin: float) -> list[dict[str, Any]]:
        step = _nice_step(self.span)
        first = math.ceil((self.start - origin) / step) * step
        out = []
        rel = first
        while origin + rel <= self.start + self.span:
            out.append({"x": self.x(origin + rel), "label": f"{rel:+g} s" if rel else "0 s"})
            rel += step
        return out


def _mark_shapes(marks: Sequence[Mark], scale: _Scale, y: float) -> list[dict[str, Any]]:
    out = []
    last_x: list[float] = []  # per label line, the x where its last label ends
    drawn = -1e9
    for mark in marks:
        # Marks at (nearly) one instant sit side by side, so that no shape hides another; the tooltip keeps
        # the exact time.
        x = max(scale.x(mark.at), drawn + SHAPE_GAP)
        drawn = x
        line = next((i for i, end in enumerate(last_x) if x >= end), len(last_x))
        if line == len(last_x):
            last_x.append(0.0)
        last_x[line] = x + max(LABEL_GAP, 7 * len(mark.label) + 16)
        width = 6 * len(mark.label)
        left = x + 9 + width > PLOT_X1 + 25  # no room on the right: the label goes left of its mark
        out.append(
            {
                "kind": mark.kind, "x": x, "y": y, "label": mark.label, "detail": mark.detail,
                "ly": y - 8 + 11 * line, "lx": x - 9 if left else x + 9, "anchor": "end" if left else "start",
            }
        )  # fmt: skip
    return out


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _offset_words(offset: float | None) -> str:
    if offset is None:
        return "clock offset not measured (none applied)"
    return f"clock offset {offset:+.3f} s applied"


def _layout(tl: Timeline, origin: float, scale: _Scale) -> tuple[list[dict[str, Any]], float]:
    items: list[dict[str, Any]] = []
    y = float(AXIS_H)
    for group in tl.groups:
        items.append({"type": "group", "y": y, "name": group.name, "size": group.size})
        y += GROUP_H
        for row in group.rows:
            marks = _mark_shapes(row.marks, scale, y + ROW_H / 2)
            title = ("ROOT ▶ " if row.role == "root" else "") + row.pod
            title += f" · rank {row.rank}" if row.rank is not None else ""
            if row.node and not group.name.startswith("node ") and len(title) + len(row.node) + 3 <= TITLE_CHARS:
                title += f" · {row.node}"  # else in its tooltip and the victims' table
            items.append({"type": "row", "y": y, "row": row, "marks": marks, "title": _clip(title, TITLE_CHARS)})
            y += ROW_H
        for band in group.bands:
            x0 = scale.x(band.start) if band.start is not None else PLOT_X0
            x1 = scale.x(band.end) if band.end is not None else x0
            items.append({"type": "band", "y": y, "band": band, "x0": x0, "w": max(x1 - x0, 4.0)})
            y += ROW_H
    return items, y + 10


def _sentence(verdict: Verdict, incident: Incident) -> str:
    if verdict.pod is None:
        return verdict.summary.splitlines()[0] if verdict.summary else "No member failed."
    retry = {True: "retryable", False: "not retryable", None: "retryability unknown"}[verdict.retryable]
    hedge = "likely " if verdict.uncertain else ""
    cause = verdict.category or "cause not recorded"
    return f"{verdict.pod} {hedge}failed first: {cause}, {retry}, confidence {verdict.confidence:.2f}."


def _written(tl: Timeline, ctx: PageContext, incident: Incident, verdict: Verdict) -> list[dict[str, str]]:
    counts: dict[str, list[str]] = {}
    for g in tl.groups:
        for r in g.rows:
            if r.condition:
                counts.setdefault(r.condition, []).append(r.pod)
        for b in g.bands:
            for cond, pods in b.conditions:
                counts.setdefault(cond, []).extend(pods)
    out = [{"where": where, "what": what} for where, what in ctx.written]
    if not ctx.live and verdict.pod is not None:  # offline: what the aggregator writes besides
        job = f"{incident.job.kind.lower() or 'job'}/{incident.job.name}"
        out.append({"where": job, "what": f"annotations {SUMMARY_ANNOTATION}, {VERDICT_ANNOTATION}; condition "
                    f"{ROOT_CAUSE_CONDITION}"})  # fmt: skip
        if verdict.category == "hardware" and verdict.node:
            out.append({"where": f"node/{verdict.node}", "what": f"{HARDWARE_FAULTS_ANNOTATION} (this incident)"})
    for cond, carriers in sorted(counts.items()):
        names = ", ".join(carriers[:6]) + (f" and {len(carriers) - 6:,} more" if len(carriers) > 6 else "")
        out.append({"where": f"{len(carriers):,} pod(s): {names}", "what": f"{PREFIX}{cond}"})
    return out


def _runner_up(verdict: Verdict, tl: Timeline) -> dict[str, str] | None:
    if verdict.pod is None or verdict.confidence >= RUNNER_UP_BELOW or not verdict.runner_up_pod:
        return None
    rows = {r.pod: r for g in tl.groups for r in g.rows}
    root, other = rows.get(verdict.pod), rows.get(verdict.runner_up_pod)

    def first(r: Row | None) -> float | None:
        own = [k.at for k in r.marks if k.kind in ("error", "log", "end")] if r else []
        return min(own) if own else None

    t_root, t_other = first(root), first(other)
    if t_root is not None and t_other is not None:
        why = f"its own failure shows {t_other - t_root:+.1f} s from the root's"
    else:
        why = "its failure's time could not be placed before the root's"
    why += f"; the verdict was decided by: {verdict.decided_by or 'the engine'}"
    return {
        "pod": verdict.runner_up_pod,
        "category": verdict.runner_up_category or "cause unknown",
        "why": why,
        "line": other.line if other else "",
    }


def _excerpts(tl: Timeline) -> list[dict[str, Any]]:
    shown: list[dict[str, Any]] = []
    for g in tl.groups:
        for r in g.rows:
            if r.log:
                shown.append({"pod": r.pod, "role": r.role, "note": "", "log": r.log})
        for b in g.bands:
            if b.example.log:
                note = f"one of {len(b.pods):,} that say: {b.why}"
                shown.append({"pod": b.example.pod, "role": b.role, "note": note, "log": b.example.log})
    shown.sort(key=lambda e: timeline._ORDER[e["role"]])
    return shown[:MAX_EXCERPTS]


def _victim_table(tl: Timeline) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for g in tl.groups:
        for r in g.rows:
            if r.role == "victim":
                where = f"node {r.node}" if r.node else g.name
                out.append({"pods": (r.pod,), "group": where, "why": r.why, "condition": r.condition})
        for b in g.bands:
            if b.role == "victim":
                out.append({"pods": b.pods, "group": g.name, "why": b.why, "condition": band_conditions(b)})
    return out


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and {"file", "line", "function"} <= value.keys():  # a stack frame
        return f"{value['file']}:{value['line']} in {value['function']}"
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return ", ".join(str(v) for v in value)
    return json.dumps(value, sort_keys=True, default=str)


def _table(value: Any) -> dict[str, Any] | None:
    """A later verdict key as a table: a mapping is key/value rows, a list of mappings a row each."""
    if not value:
        return None
    if isinstance(value, Mapping):
        return {"head": ("", ""), "rows": [(str(k), _plain(v)) for k, v in value.items()]}
    if isinstance(value, Sequence) and not isinstance(value, str):
        dicts = [v for v in value if isinstance(v, Mapping)]
        head = list(dict.fromkeys(k for d in dicts for k in d))
        if dicts:
            return {"head": tuple(head), "rows": [tuple(_plain(d.get(k, "")) for k in head) for d in dicts]}
        return {"head": ("",), "rows": [(_plain(v),) for v in value]}
    return {"head": ("",), "rows": [(_plain(value),)]}


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("podmortem.page", "templates"),
    autoescape=True,  # every value on the page is text from the pods: escape all of it
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["when"] = _fmt_time
_ENV.globals.update(width=WIDTH, plot_x1=PLOT_X1, row_h=ROW_H, group_h=GROUP_H)


def render(incident: Incident, verdict: Verdict | Mapping[str, Any], ctx: PageContext | None = None) -> str:
    """The page for one incident and its verdict (a Verdict, or its dictionary with any later keys)."""
    ctx = ctx or PageContext()
    doc = dict(verdict.to_dict() if isinstance(verdict, Verdict) else verdict)
    v = verdict if isinstance(verdict, Verdict) else timeline.verdict_of(doc)
    tl = timeline.build(incident, v, decided_at=ctx.decided_at, closed_by=ctx.closed_by, would_write=not ctx.live)
    origin = tl.start if tl.start is not None else 0.0
    root_row = next((r for g in tl.groups for r in g.rows if r.role == "root"), None)
    first_root = min((k.at for k in root_row.marks if k.kind != "capture"), default=None) if root_row else None
    if first_root is not None:
        origin = first_root  # 0 s is the root's first event: everything else reads as before or after it
    scale = _Scale(tl.start, tl.end)
    items, height = _layout(tl, origin, scale)
    job = incident.job
    extras = {**doc, **ctx.extra}
    return _ENV.get_template("incident.html.j2").render(
        csp=CSP,
        job=job,
        incident=incident,
        v=v,
        sentence=_sentence(v, incident),
        summary=v.summary,
        ctx=ctx,
        tl=tl,
        by_node=any(g.name.startswith("node ") for g in tl.groups),
        origin=origin,
        items=items,
        ticks=scale.ticks(origin),
        moments=[
            {"x": scale.x(m.at), "label": m.label, "at": m.at, "end": scale.x(m.at) > PLOT_X1 - 120} for m in tl.moments
        ],
        height=height,
        written=_written(tl, ctx, incident, v),
        runner_up=_runner_up(v, tl),
        victims=_victim_table(tl),
        excerpts=_excerpts(tl),
        hang=_table(extras.get(LATER_KEYS[0])),
        attempts=_table(extras.get(LATER_KEYS[1])),
        role_words=timeline.ROLE_WORDS,
        offset_words=_offset_words,
        offsets_known=ctx.offsets or tl.offsets_measured > 0,
        root_row=root_row,
    )


def band_words(band: Band) -> str:
    return f"{len(band.pods):,} {band.role}s"


def band_conditions(band: Band) -> str:
    return ", ".join(f"{cond} on {len(pods):,}" for cond, pods in band.conditions)


_ENV.globals["band_words"] = band_words
_ENV.globals["band_conditions"] = band_conditions
