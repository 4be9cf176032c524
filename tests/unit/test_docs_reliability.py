"""docs/reliability.md's table of what podmortem does to the cluster, against the names the code writes: every
annotation, condition type, Event reason, taint and webhook mark podmortem can put on an object has its row."""

from __future__ import annotations

import re
from pathlib import Path

from podmortem.aggregator.config import KubeSettings
from podmortem.aggregator.kube import nodes
from podmortem.core import names
from podmortem.core.names import CONDITION_TYPES
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
        names.SUMMARY_ANNOTATION,
        names.VERDICT_ANNOTATION,
        names.PUBLISHED_ANNOTATION,
        names.ROOT_CAUSE_CONDITION,
        names.ROOT_CAUSE_EVENT,
        names.HARDWARE_FAULTS_ANNOTATION,
        names.SUSPECT_HARDWARE_CONDITION,
        names.SUSPECT_HARDWARE_EVENT,
        f"{names.SUSPECT_HARDWARE_TAINT}:{nodes.TAINT_EFFECT}",
        mutation.SIDECAR_NAME,
        mutation.ERRORS_VOLUME,
        mutation.TOKEN_VOLUME,
        names.INJECTED_ANNOTATION,
        names.RETRY_POLICY_ADDED_ANNOTATION,
        f"podReplacementPolicy: {retrypolicy.REPLACEMENT_POLICY}",
        KubeSettings().leader.lease_name,
    }
    rows = action_column()
    documented = set().union(*(named(cell) for cell in rows))
    assert written <= documented, f"no row for {sorted(written - documented)}"
    # One row per pod condition type: each has its own effect on a Job.
    for condition_type in CONDITION_TYPES:
        assert sum(condition_type in named(cell) for cell in rows) == 1
