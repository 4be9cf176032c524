"""What the benchmarks share: where the corpora are, real log lines to send, and a server process to measure.

Benchmarks run from the repository's root as modules (`python -m bench.burst ...`), so that they import
this module, and each other's pieces, the ordinary way.

* The development corpus is `tests/corpus-torchrun/` (labelled torchrun incidents, see its README);
  `$PODMORTEM_CORPUS` points every benchmark and the accuracy test at another one.
* `log_tail` builds tails from the corpus' real torchrun logs, so that ingesting them costs what a real
  job's tails cost.
* `aggregator_command` / `start` run a real `podmortem aggregator` process on a free loopback port;
  `cpu_seconds`, `status_kib` and `peak_rss_mib` read its figures from /proc.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEV_CORPUS = REPO / "tests" / "corpus-torchrun"
REALWORLD_CORPUS = REPO / "tests" / "corpus-realworld" / "excerpts.jsonl"
GLOO = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.1]:4242"
T0 = 1_800_000_000


def corpus_dir() -> Path:
    """The labelled development corpus: `$PODMORTEM_CORPUS` when set, else the repository's own."""
    return Path(os.environ.get("PODMORTEM_CORPUS") or DEV_CORPUS)


def bundles(corpus: Path) -> list[Path]:
    """Every incident of a corpus (a directory with incident.json), in name order."""
    return sorted(p for p in corpus.iterdir() if (p / "incident.json").is_file())


def _corpus_logs() -> list[Path]:
    return sorted(corpus_dir().glob("*/pods/*/log.txt"))[:20]


def corpus_note() -> str:
    """Where the tails' lines come from, for a benchmark's header. Without a corpus they are one plain
    ASCII line, far cheaper to ingest, and figures are not comparable with runs that had it."""
    logs = len(_corpus_logs())
    return f"lines from {logs} corpus logs" if logs else f"NO CORPUS at {corpus_dir()}: one plain line repeated"


def log_tail(kib: int) -> str:
    """Real torchrun log lines of healthy training (the corpus logs minus their failure lines: a burst
    measures the load, and every pod's tail quoting some other incident's failure would blur the
    verdict check), repeated up to `kib` KiB; the gloo 'GLHF' line keeps its 4-byte emoji."""
    from podmortem.core.rules import DEFAULT_RULES

    lines = []
    for path in _corpus_logs():
        for line in path.read_text(errors="replace").splitlines():
            failing = DEFAULT_RULES.classify_log_line(line) or DEFAULT_RULES.classify_message(line, "") is not None
            if not failing or "GLHF" in line:
                lines.append(line)
    base = "\n".join(lines) or "I1121 14:00:00.000000 1 torch/distributed/run.py:1] starting"
    out = base
    while len(out.encode()) < kib * 1024:
        out += base
    return out.encode()[: kib * 1024].decode(errors="ignore")


# -- a server process and its figures ----------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid: int, key: str) -> int:
    """A kB figure of /proc/PID/status (VmRSS, VmHWM, ...); 0 when absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    return 0


def peak_rss_mib(pid: int) -> float:
    return status_kib(pid, "VmHWM") / 1024


def aggregator_command(ready: Path, verdicts: Path) -> list[str]:
    """A real `podmortem aggregator` process on a free loopback port, as the benchmarks run it: no metrics
    port, verdict files in `verdicts`, a quorum timeout long enough that only quorum decides."""
    return [
        sys.executable, "-m", "podmortem.cli", "aggregator", "--listen", "127.0.0.1:0", "--metrics-listen", "",
        "--ready-file", str(ready), "--verdict-dir", str(verdicts), "--quorum-timeout", "600",
        "--log-level", "WARNING",
    ]  # fmt: skip


def start(cmd: list[str], ready: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start a server that writes its address to `ready` (run from the repository's root, so that
    `-m bench.*` resolves); returns the process and that address."""
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not ready.exists() or not ready.read_text().strip():
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit(f"server did not start: {cmd}")
        time.sleep(0.05)
    return proc, ready.read_text().strip()
