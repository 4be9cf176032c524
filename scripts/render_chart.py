"""Render the Helm chart locally, as `helm template` does, with the real Helm engine (helm-python-sdk).

    python scripts/render_chart.py [--values FILE]... [--set KEY=VALUE]... [--name NAME] [--namespace NS]

Prints every rendered manifest (YAML documents, each headed `# Source: <template>`), after a strict
lint; exits 1 with the lint's errors. `make chart` runs `helm template` instead where `helm` is on
PATH. Needs the dev extra (helm-python-sdk: Linux x86_64 wheels).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import helm_python

CHART = Path(__file__).resolve().parent.parent / "charts" / "podmortem"


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--values", "-f", action="append", default=[], help="a values file (repeatable)")
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE (repeatable)")
    parser.add_argument("--name", default="podmortem")
    parser.add_argument("--namespace", "-n", default="podmortem")
    args = parser.parse_args(argv)
    values: dict[str, Any] = {}
    for path in args.values:
        values = merge(values, helm_python.values_from_yaml(Path(path).read_text()))
    for assignment in args.set:
        values = merge(values, helm_python.parse_set_string(assignment))
    report = helm_python.lint(str(CHART), values, strict=True, namespace=args.namespace)
    errors = [m for m in report.get("messages", []) if m.get("severity", 0) >= 3]
    if errors or report.get("errors"):
        for problem in errors or report["errors"]:
            print(f"lint: {problem}", file=sys.stderr)
        return 1
    chart = helm_python.Chart.load(str(CHART))
    rendered = chart.render(values, name=args.name, namespace=args.namespace, is_install=True)
    for template, text in sorted(rendered.items()):
        if text.strip() and not template.endswith("NOTES.txt"):
            print(f"---\n# Source: {template}\n{text.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
