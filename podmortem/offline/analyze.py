"""`podmortem analyze DIR`: decide the root cause of an incident bundle copied out of a cluster.

The edge around the pure engine: read the bundle (`podmortem.offline.bundle`) and the optional rules file
(`podmortem.core.rules.load_rules`), decide, and print either the human report (`podmortem.offline.report`) or one
JSON object for scripts and scorers::

    {"root_cause": {"pod", "category", "retryable"}, "verdict": {...}, "explanation": "..."}

With `--html FILE` it also writes the incident page (`podmortem.page`): one self-contained HTML file.
`page_beside` writes the page of a bundle whose verdict the aggregator published (`podmortem demo --keep`).

Exit codes: 0 a verdict was printed (also for a job that did not fail), 2 the input could not be used
(the reason is one line on stderr, never a traceback).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from podmortem.core.engine import decide
from podmortem.core.model import evolve
from podmortem.core.rules import RulesError, load_rules
from podmortem.offline import report
from podmortem.offline.bundle import BundleError, load_bundle
from podmortem.page.render import PageContext, clock_offsets, context_of_verdict_file, render

PAGE_NAME = "incident.html"

EXIT_OK = 0
EXIT_BAD_INPUT = 2


def result_json(verdict_dict: dict[str, Any], explanation: str) -> dict[str, Any]:
    return {
        "root_cause": {k: verdict_dict[k] for k in ("pod", "category", "retryable")},
        "verdict": verdict_dict,
        "explanation": explanation,
    }


def main(
    path: str,
    as_json: bool = False,
    rules_path: str | None = None,
    html_path: str | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Print the verdict for the bundle at `path`; returns the process exit code."""
    stdout = out or sys.stdout
    stderr = err or sys.stderr
    try:
        rules = load_rules(rules_path) if rules_path else None
        incident = load_bundle(path)
    except (BundleError, RulesError) as exc:
        print(f"podmortem analyze: {exc}", file=stderr)
        return EXIT_BAD_INPUT
    verdict = decide(incident, rules)
    if html_path:
        try:
            write_page(html_path, render(incident, verdict, PageContext(source="podmortem analyze (offline)")))
        except OSError as exc:
            print(f"podmortem analyze: cannot write the page {html_path}: {exc.strerror or exc}", file=stderr)
            return EXIT_BAD_INPUT
        print(f"podmortem analyze: incident page written to {html_path}", file=stderr)
    if as_json:
        doc = result_json(verdict.to_dict(), verdict.summary)
        stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    else:
        stdout.write(report.render(incident, verdict))
    return EXIT_OK


def write_page(path: str | os.PathLike[str], html: str) -> None:
    """Write the page whole or not at all (a temporary file renamed over it)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def page_beside(bundle: str | os.PathLike[str], verdict_file: Mapping[str, Any]) -> Path:
    """Write `<bundle>/incident.html` from the bundle and the verdict file the aggregator published for it
    (its verdict, when and how it was decided); returns the page's path. Raises BundleError or OSError."""
    incident = load_bundle(Path(bundle))
    meta = verdict_file.get("incident") or {}
    opened = meta.get("opened_at") if isinstance(meta, Mapping) else None
    attempt = meta.get("attempt") if isinstance(meta, Mapping) else None
    incident = dataclasses.replace(
        incident,
        opened_at=float(opened) if isinstance(opened, (int, float)) else None,
        attempt=str(attempt or ""),
        incident_id=str(meta.get("id") or incident.incident_id) if isinstance(meta, Mapping) else incident.incident_id,
    )
    offsets = clock_offsets(verdict_file) or {}  # measured by the sidecars: the bundle's files carry none
    incident = dataclasses.replace(
        incident, members=tuple(evolve(m, clock_offset=offsets.get(m.pod, m.clock_offset)) for m in incident.members)
    )
    stalled = meta.get("stalled_at") if isinstance(meta, Mapping) else None
    if isinstance(stalled, (int, float)) and not isinstance(stalled, bool) and math.isfinite(stalled):
        incident = dataclasses.replace(incident, stalled_at=float(stalled))
    verdict = verdict_file.get("verdict") or {}
    target = Path(bundle) / PAGE_NAME
    write_page(target, render(incident, verdict, context_of_verdict_file(verdict_file, "podmortem demo (aggregator)")))
    return target
