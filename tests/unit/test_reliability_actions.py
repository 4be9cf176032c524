"""docs/reliability.md's table of what podmortem does to the cluster, against the names the code writes: every
annotation, condition type, Event reason, taint and webhook mark podmortem can put on an object has its row."""

from __future__ import annotations

import re
from pathlib import Path

from podmortem.aggregator.config import KubeSettings
from podmortem.aggregator.kube import nodes, publish
from podmortem.core.conditions import CONDITION_TYPES
from podmortem.webhook import mutation, retrypolicy

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
SECTION = "## What podmortem does to the cluster, and who can make it"


def action_column() -> list[str]:
    """The first cell of each row of the section's table."""
    text = DOC.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| action")]
    return [row.split(" | ", 1)[0] for row in rows]


def named(cell: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", cell))


def test_every_name_podmortem_writes_has_a_row() -> None:
    written = {
        *CONDITION_TYPES,
        publish.SUMMARY_ANNOTATION,
        publish.VERDICT_ANNOTATION,
        publish.PUBLISHED_ANNOTATION,
        publish.CONDITION_TYPE,
        publish.EVENT_REASON,
        nodes.FAULTS_ANNOTATION,
        nodes.CONDITION_TYPE,
        nodes.EVENT_REASON,
        f"{nodes.TAINT_KEY}:{nodes.TAINT_EFFECT}",
        mutation.SIDECAR_NAME,
        mutation.ERRORS_VOLUME,
        mutation.TOKEN_VOLUME,
        mutation.INJECTED_ANNOTATION,
        retrypolicy.ADDED_ANNOTATION,
        f"podReplacementPolicy: {retrypolicy.REPLACEMENT_POLICY}",
        KubeSettings().lease_name,
    }
    rows = action_column()
    documented = set().union(*(named(cell) for cell in rows))
    assert written <= documented, f"no row for {sorted(written - documented)}"
    # One row per pod condition type: each has its own effect on a Job.
    for condition_type in CONDITION_TYPES:
        assert sum(condition_type in named(cell) for cell in rows) == 1
