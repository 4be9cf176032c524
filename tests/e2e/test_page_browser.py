"""The incident page in a real browser: Debian's headless Chromium over the DevTools protocol (bench/browser.py).

Four pages, each written as a user gets it: a demo bundle's (`podmortem demo --keep`, plain worker
processes standing in for torchrun), a 4,096-pod bundle's (bench's inflater, `podmortem analyze --html`), a
hostile bundle's, and a hang's (real torch captures in the bundle, beside the verdict file the aggregator
publishes, as `podmortem demo --keep` writes it). Each must load with no console error and no request of
any kind, show the root's row and the verdict sentence in the rendered DOM, and run no script
(`window.__pwned`, which the hostile text tries to set, stays undefined). Screenshots go to
`$PODMORTEM_SCREENSHOTS` when set (to look at them), else to the test's tmp_path.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.bundles import HANG_TS, HOSTILE_LINES, HOSTILE_ROOT_MESSAGE, hang_bundle, hostile_bundle

from bench import browser
from bench.analyze_speed import write as write_inflated
from bench.engine_speed import build
from podmortem.core.engine import decide
from podmortem.offline import analyze
from podmortem.offline.bundle import load_bundle

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


def open_page(page: Path, png: Path, **probes: str) -> browser.Loaded:
    loaded = browser.load(page, evaluate={**PROBES, **probes}, screenshot=png)
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
    assert "3 of 3 measured" in loaded.values["text"]  # the sidecars' clock offsets, from the verdict file


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


def test_a_hang_page_draws_the_stall_and_where_the_stuck_rank_was(tmp_path: Path) -> None:
    bundle = hang_bundle(tmp_path / "hang")
    verdict = decide(load_bundle(bundle))
    doc = {
        "incident": {"id": "ns:job", "attempt": "", "opened_at": HANG_TS + 10.2, "stalled_at": HANG_TS + 1.0,
                     "clock_offsets": {"job-worker-0": 0.004, "job-worker-1": -0.012, "job-worker-2": 0.0}},
        "verdict": verdict.to_dict(), "revision": 2, "final": True, "closed_by": "quorum", "decided_at": HANG_TS + 12,
    }  # fmt: skip
    loaded = open_page(analyze.page_beside(bundle, doc), shots(tmp_path) / "page-hang.png")
    assert loaded.values["root"] == "job-worker-1"
    assert loaded.values["sentence"] == "job-worker-1 failed first: hang, retryable, confidence 0.95."
    root = loaded.values["root_text"]
    assert "rank 1 never entered all_reduce #7 that the others wait in" in root
    assert "stuck at workload.py:216 in load_batch" in root
    text = loaded.values["text"]
    assert "stalled: every member quiet" in text and "3 of 3 measured" in text


# Where Chromium drew each incident-wide moment's line (its label, its x on the screen), and the centre of the
# root row's capture mark.
MOMENT_LINES = (
    "[...document.querySelectorAll('g.moment-g')].map(g => [g.querySelector('text').textContent, "
    "g.querySelector('line').getBoundingClientRect().x])"
)
CAPTURE_MARK = (
    "(() => { const r = document.querySelector('#root-row g.mark-capture title').nextElementSibling"
    ".getBoundingClientRect(); return r.x + r.width / 2; })()"
)


def test_a_provisional_verdicts_page_draws_the_stall_when_it_was_first_seen(tmp_path: Path) -> None:
    # The stall's provisional verdict, beside a bundle copied without the sidecars' captures: the stall drawn
    # when the aggregator first saw every member quiet, the verdict 8 s later when it was published, and the
    # capture (its own time not kept) at the stall, not at the publish.
    verdict = decide(load_bundle(hang_bundle(tmp_path / "hang"))).to_dict()
    bare = hang_bundle(tmp_path / "bare", captured=False)
    doc = {
        "incident": {"id": "ns:job", "attempt": "", "opened_at": None, "stalled_at": HANG_TS + 1.0},
        "verdict": verdict, "revision": 1, "final": False, "provisional": True, "closed_by": "stall",
        "decided_at": HANG_TS + 9.0,
    }  # fmt: skip
    loaded = open_page(
        analyze.page_beside(bare, doc),
        shots(tmp_path) / "page-provisional.png",
        moments=MOMENT_LINES,
        capture=CAPTURE_MARK,
    )
    drawn = dict(loaded.values["moments"])
    assert list(drawn) == ["stalled: every member quiet", "provisional verdict"]
    assert drawn["provisional verdict"] - drawn["stalled: every member quiet"] > 100  # 8 s apart on the plot
    assert abs(loaded.values["capture"] - drawn["stalled: every member quiet"]) < 2
    root = loaded.values["root_text"]
    assert "stuck at workload.py:216 in load_batch" in root
    assert "taken after the stall was seen, its own time not kept: drawn at the stall" in root
