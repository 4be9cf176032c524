"""`podmortem analyze DIR`: decide the root cause of an incident bundle copied out of a cluster.

The edge around the pure engine: read the bundle (`podmortem.offline.bundle`) and the optional rules file
(`podmortem.core.rules.load_rules`), decide, and print either the human report (`podmortem.offline.report`) or one
JSON object for scripts and scorers::

    {"root_cause": {"pod", "category", "retryable"}, "verdict": {...}, "explanation": "..."}

Exit codes: 0 a verdict was printed (also for a job that did not fail), 2 the input could not be used
(the reason is one line on stderr, never a traceback).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from podmortem.core.engine import decide
from podmortem.core.rules import RulesError, load_rules
from podmortem.offline import report
from podmortem.offline.bundle import BundleError, load_bundle

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
    if as_json:
        doc = result_json(verdict.to_dict(), verdict.summary)
        stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    else:
        stdout.write(report.render(incident, verdict))
    return EXIT_OK
