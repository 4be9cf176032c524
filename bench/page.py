"""The incident page of a large job: its size, the time to write it, the time a browser takes to show it.

    python -m bench.page [--pods 4096] [--per-node 1] [--repeat 3] [--screenshot PNG]

Writes the synthetic bundle of bench/analyze_speed.py (one root, victims with gloo peer-closed, collective
timeouts and SIGTERM teardowns, each pod with an error file, a pod.json and a log tail; `--per-node` pods
share each node, as GPUs of one machine do), runs the installed
`podmortem analyze DIR --json --html PAGE` as a user does, then opens PAGE `--repeat` times in a fresh
headless Chromium (bench/browser.py, the DevTools protocol) and prints:

* the page's size, against the 2 MB target;
* `analyze --html` end to end, and the page's rendering alone in-process (`podmortem.page.render`);
* the browser's time from navigation to the load event, and the page's own loadEventEnd and first
  contentful paint, against the 2 s target (best of `--repeat`; each in a new browser, cold).

It fails (exit 1) when the page names the wrong root, when the browser logs an error or makes a request.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import browser
from bench.analyze_speed import write
from bench.engine_speed import build

SIZE_TARGET = 2 << 20
LOAD_TARGET_S = 2.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=4096)
    ap.add_argument("--per-node", type=int, default=1, help="pods on each node")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--screenshot", help="also write a full-page PNG of the last load here")
    ns = ap.parse_args(argv)
    incident = build(ns.pods)
    if ns.per_node > 1:
        members = tuple(dataclasses.replace(m, node=f"node-{i // ns.per_node}") for i, m in enumerate(incident.members))
        incident = dataclasses.replace(incident, members=members)
    with tempfile.TemporaryDirectory(prefix="podmortem-page-") as tmp:
        bundle = Path(tmp) / "bundle"
        bundle.mkdir()
        write(incident, bundle)
        page = Path(tmp) / "incident.html"
        cli = Path(sys.executable).parent / "podmortem"
        start = time.perf_counter()
        done = subprocess.run([str(cli), "analyze", str(bundle), "--json", "--html", str(page)], capture_output=True)
        analyze_s = time.perf_counter() - start
        if done.returncode != 0:
            print(done.stderr.decode(), file=sys.stderr)
            return 1
        root = json.loads(done.stdout)["root_cause"]["pod"]

        from podmortem.core.engine import decide
        from podmortem.page.render import render

        verdict = decide(incident)
        start = time.perf_counter()
        render(incident, verdict)
        render_s = time.perf_counter() - start

        size = page.stat().st_size
        loads = []
        probes = {"root": "document.getElementById('root-row')?.dataset.pod ?? null"}
        for i in range(ns.repeat):
            shot = ns.screenshot if ns.screenshot and i == ns.repeat - 1 else None
            loaded = browser.load(page, evaluate=probes, screenshot=shot)
            if loaded.errors or loaded.requests or loaded.values["root"] != root:
                print(f"bad page: {loaded.errors} {loaded.requests} root {loaded.values['root']}", file=sys.stderr)
                return 1
            loads.append(loaded)
        best = min(loads, key=lambda x: x.load_seconds)
        size_ok = "met" if size < SIZE_TARGET else "NOT met"
        load_ok = "met" if best.load_seconds < LOAD_TARGET_S else "NOT met"
        where = f", {ns.per_node} a node" if ns.per_node > 1 else ", one a node"
        print(
            f"incident page, {ns.pods} pods{where}: {size / 1024:.0f} KiB; target < {SIZE_TARGET >> 20} MB: {size_ok}"
        )
        print(f"  podmortem analyze --json --html (process, end to end): {analyze_s:.2f} s")
        print(f"  of which rendering the page (in-process, podmortem.page.render): {render_s * 1000:.0f} ms")
        print(
            f"  chromium, navigation -> load event: best {best.load_seconds * 1000:.0f} ms of {ns.repeat} "
            f"(all: {', '.join(f'{x.load_seconds * 1000:.0f}' for x in loads)} ms); target < {LOAD_TARGET_S:g} s: "
            f"{load_ok}"
        )
        print(
            f"  the page's own timing (best run): domContentLoaded {best.timing['domContentLoaded']:.0f} ms, "
            f"loadEventEnd {best.timing['loadEventEnd']:.0f} ms, first contentful paint "
            f"{best.timing['firstContentfulPaint']:.0f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
