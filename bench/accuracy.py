"""Score the engine on a labelled corpus, next to two naive baselines computed the same way.

    python -m bench.accuracy [CORPUS_DIR] [--rules FILE] [--json] [--misses] [--no-logs] [--skew S]

CORPUS_DIR defaults to `$PODMORTEM_CORPUS`, else the development corpus tests/corpus-torchrun/. For every
bundle (a directory with incident.json) the engine decides from the bundle alone; the bundle's
truth.json is read only afterwards, to score. A bundle that does not load is an error, listed, and
the run exits 1: a score over fewer bundles than the corpus holds is not that corpus' score. Printed
per scenario and overall: root-pod top-1, category and retryable accuracy for

* engine      — `podmortem.core.engine.decide`
* earliest    — smallest error-file timestamp, else earliest container finishedAt (torch's
                `get_first_failure` applied across pods); category from the rules for that pod's message
* last writer — largest error-file timestamp

Baselines get their category and retryable from the same rules (classification of the chosen pod), so
the comparison isolates *who* is blamed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import bundles, corpus_dir
from podmortem.core.assess import assess
from podmortem.core.engine import decide
from podmortem.core.model import Incident, Member
from podmortem.core.rules import DEFAULT_RULES, RuleSet, load_rules
from podmortem.offline.bundle import BundleError, load_bundle

Answer = tuple[str | None, str | None, bool | None]


def _classify(member: Member | None, rules: RuleSet) -> Answer:
    if member is None:
        return None, None, None
    f = assess(member, rules)
    cat = f.category
    return member.pod, cat, f.rule.is_retryable if f.rule is not None and cat is not None else None


def _failed(incident: Incident) -> list[Member]:
    return [m for m in incident.members if not (m.termination is not None and m.termination.exit_code == 0)]


def earliest(incident: Incident, rules: RuleSet) -> Answer:
    failed = _failed(incident)
    if not failed:
        return None, None, None
    with_ts = [m for m in failed if m.error is not None and m.error.timestamp is not None]
    if with_ts:
        pick = min(with_ts, key=lambda m: (m.error.timestamp if m.error else 0, m.pod))
    else:
        pick = min(
            failed,
            key=lambda m: (
                m.termination.finished_at if m.termination and m.termination.finished_at else math.inf,
                m.pod,
            ),
        )
    return _classify(pick, rules)


def last_writer(incident: Incident, rules: RuleSet) -> Answer:
    failed = _failed(incident)
    if not failed:
        return None, None, None
    with_ts = [m for m in failed if m.error is not None and m.error.timestamp is not None]
    if not with_ts:
        return earliest(incident, rules)
    pick = max(with_ts, key=lambda m: (m.error.timestamp if m.error else 0, m.pod))
    return _classify(pick, rules)


def engine(incident: Incident, rules: RuleSet) -> Answer:
    v = decide(incident, rules)
    return v.pod, v.category, v.retryable


METHODS: dict[str, Callable[[Incident, RuleSet], Answer]] = {
    "engine": engine,
    "earliest": earliest,
    "last writer": last_writer,
}


def perturb(incident: Incident, no_logs: bool = False, skew: float = 0.0, seed: int = 0) -> Incident:
    """Robustness variants: drop every log tail (what an aggregator without log access sees) and/or
    shift each member's error-file timestamp by a random whole-second skew in [-skew, +skew]."""
    rnd = random.Random(f"{seed}/{incident.incident_id}")
    members = []
    for m in incident.members:
        if no_logs:
            m = dataclasses.replace(m, log_tail="")
        if skew and m.error is not None and m.error.timestamp is not None:
            shifted = m.error.timestamp + round(rnd.uniform(-skew, skew))
            m = dataclasses.replace(m, error=dataclasses.replace(m.error, timestamp=shifted))
        members.append(m)
    return dataclasses.replace(incident, members=tuple(members))


def score(corpus: Path, rules: RuleSet, no_logs: bool = False, skew: float = 0.0) -> dict[str, Any]:
    """{"rows": [...per incident...], "table": {scenario: {method: {pod, category, retryable, n}}},
    "errors": [(bundle, why it did not load)...]}"""
    rows: list[dict[str, Any]] = []
    errors: list[tuple[str, str]] = []
    for b in bundles(corpus):
        try:
            incident = load_bundle(b)
        except BundleError as exc:
            errors.append((b.name, str(exc)))
            continue
        if no_logs or skew:
            incident = perturb(incident, no_logs, skew)
        truth = json.loads((b / "truth.json").read_text())  # scoring only, after deciding
        answers = {name: fn(incident, rules) for name, fn in METHODS.items()}
        rows.append({"incident": b.name, "scenario": truth.get("scenario", "?"), "truth": truth, "answers": answers})
    table: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for row in rows:
        t = row["truth"]
        for scen in (row["scenario"], "ALL"):
            for name, (pod, cat, retry) in row["answers"].items():
                cell = table[scen][name]
                cell["n"] += 1
                cell["pod"] += pod == t.get("root_pod")
                cell["category"] += cat == t.get("category")
                cell["retryable"] += retry == t.get("retryable")
    out = {
        scen: {name: {k: (v / cells["n"] if k != "n" else v) for k, v in cells.items()} for name, cells in per.items()}
        for scen, per in table.items()
    }
    return {"rows": rows, "table": out, "errors": errors}


def render(result: dict[str, Any]) -> str:
    table = result["table"]
    names = list(METHODS)
    head = f"{'scenario':<22}{'n':>3}  " + "  ".join(f"{n + ' pod/cat/retry':<26}" for n in names)
    lines = [head, "-" * len(head)]
    scenarios = sorted(s for s in table if s != "ALL") + (["ALL"] if "ALL" in table else [])
    for scen in scenarios:
        n = int(table[scen][names[0]]["n"])
        cells = []
        for name in names:
            c = table[scen][name]
            cells.append(f"{c['pod']:.2f} / {c['category']:.2f} / {c['retryable']:.2f}".ljust(26))
        lines.append(f"{scen:<22}{n:>3}  " + "  ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "corpus", type=Path, nargs="?", default=None, help="default: $PODMORTEM_CORPUS, else tests/corpus-torchrun"
    )
    ap.add_argument("--rules", help="operator rules file to load in front of the built-in rules")
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    ap.add_argument("--misses", action="store_true", help="list the incidents the engine got wrong")
    ap.add_argument("--no-logs", action="store_true", help="robustness: drop every log tail before deciding")
    ap.add_argument(
        "--skew",
        type=float,
        default=0.0,
        metavar="S",
        help="robustness: shift error-file timestamps by a random skew in [-S, +S] seconds",
    )
    ns = ap.parse_args(argv)
    corpus = ns.corpus or corpus_dir()
    if not corpus.is_dir():
        print(f"{corpus}: not a directory", file=sys.stderr)
        return 2
    rules = load_rules(ns.rules) if ns.rules else DEFAULT_RULES
    result = score(corpus, rules, ns.no_logs, ns.skew)
    if ns.json:
        print(json.dumps(result["table"], indent=2, sort_keys=True))
    else:
        print(render(result))
    if ns.misses:
        for row in result["rows"]:
            t = row["truth"]
            pod, cat, retry = row["answers"]["engine"]
            if (pod, cat, retry) != (t.get("root_pod"), t.get("category"), t.get("retryable")):
                print(
                    f"MISS {row['incident']} [{row['scenario']}]: engine {pod} {cat} {retry}; "
                    f"truth {t.get('root_pod')} {t.get('category')} {t.get('retryable')}"
                )
    for name, why in result["errors"]:
        print(f"NOT LOADED {name}: {why}", file=sys.stderr)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
