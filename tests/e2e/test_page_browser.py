"""The incident page in a real browser: Debian's headless Chromium over the DevTools protocol (bench/browser.py).

Three pages, each written by the command a user runs: a demo bundle's (`podmortem demo --keep`, plain
worker processes standing in for torchrun), a 4,096-pod bundle's (bench's inflater, `podmortem analyze
--html`) and a hostile bundle's. Each must load with no console error and no request of any kind, show the
root's row and the verdict sentence in the rendered DOM, and run no script (`window.__pwned`, which the
hostile text tries to set, stays undefined). Screenshots go to `$PODMORTEM_SCREENSHOTS` when set (to look
at them), else to the test's tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.bundles import HOSTILE_LINES, HOSTILE_ROOT_MESSAGE, hostile_bundle

from bench import browser
from bench.analyze_speed import write as write_inflated
from bench.engine_speed import build

PROBES = {
    "pwned": "typeof window.__pwned",
    "sentence": "document.getElementById('verdict-sentence')?.textContent ?? null",
    "root": "document.getElementById('root-row')?.dataset.pod ?? null",
    "root_text": "document.getElementById('root-row')?.textContent ?? ''",
    "text": "document.body.innerText",
    "scripts": "document.scripts.length",
}


@pytest.fixture(scope="module", autouse=True)
def chromium() -> None:
    if browser.executable() is None:
        pytest.fail("no chromium on PATH: `make setup` installs Debian's chromium (or set PODMORTEM_CHROMIUM)")


def shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("PODMORTEM_SCREENSHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def podmortem(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "podmortem.cli", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **env},
        check=False,
    )


def open_page(page: Path, png: Path) -> browser.Loaded:
    loaded = browser.load(page, evaluate=PROBES, screenshot=png)
    assert loaded.errors == [], loaded.errors
    assert loaded.requests == [], loaded.requests
    assert loaded.values["pwned"] == "undefined"
    assert loaded.values["scripts"] == 0
    assert png.stat().st_size > 10_000  # a picture, not an error page
    return loaded


def test_the_demo_page(tmp_path: Path) -> None:
    kept = tmp_path / "demo"
    done = podmortem("demo", "--fault", "segfault", "--pods", "3", "--keep", str(kept), PODMORTEM_HARNESS_TORCH="0")
    assert done.returncode == 0, done.stdout + done.stderr
    target = re.search(r"fault: pod (\S+) \(node rank", done.stdout)
    assert target and f"page: {kept / 'incident.html'}" in done.stdout, done.stdout
    loaded = open_page(kept / "incident.html", shots(tmp_path) / "page-demo.png")
    assert loaded.values["root"] == target.group(1)
    assert loaded.values["sentence"] == f"{target.group(1)} failed first: crash, not retryable, confidence 0.95."
    assert "from podmortem demo (aggregator) · revision" in loaded.values["text"]
    assert "SIGSEGV" in loaded.values["root_text"]  # its end, on its row


def test_the_page_of_4096_pods(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    write_inflated(build(4096), bundle)
    page = tmp_path / "page.html"
    done = podmortem("analyze", str(bundle), "--json", "--html", str(page))
    assert done.returncode == 0, done.stderr
    root = json.loads(done.stdout)["root_cause"]["pod"]
    assert page.stat().st_size < 2 << 20
    loaded = open_page(page, shots(tmp_path) / "page-4096.png")
    assert loaded.values["root"] == root == "job-worker-0"
    assert loaded.values["sentence"] == "job-worker-0 failed first: user_code, not retryable, confidence 0.95."
    assert "1,365 victims" in loaded.values["text"]  # folded: one band per echo


def test_the_hostile_page_runs_nothing_and_shows_the_text(tmp_path: Path) -> None:
    bundle = hostile_bundle(tmp_path / "hostile")
    page = tmp_path / "page.html"
    done = podmortem("analyze", str(bundle), "--html", str(page))
    assert done.returncode == 0, done.stderr
    loaded = open_page(page, shots(tmp_path) / "page-hostile.png")
    assert loaded.values["root"] == "job-worker-1"
    assert loaded.values["sentence"] == "job-worker-1 failed first: user_code, not retryable, confidence 0.95."
    for line in (*HOSTILE_LINES, HOSTILE_ROOT_MESSAGE):
        assert line in loaded.values["text"], line
