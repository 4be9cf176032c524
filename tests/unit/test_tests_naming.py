"""The test tree's names, as tests/README.md states them: a test file is named for the module it tests
(`test_<module>[_<aspect>].py`), so that `ls tests/*/test_<module>*` lists a module's tests in every tier,
or for a cross-cutting name the README lists; and the README's tables list exactly the files there are.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import pytest

TESTS = Path(__file__).parents[1]
PACKAGE = TESTS.parent / "podmortem"
README = TESTS / "README.md"
TIERS = ("unit", "integration", "e2e")


def module_names() -> tuple[dict[str, set[str]], set[str]]:
    """Each module's file name → the packages that hold a module of that name; and the packages' names."""
    leaves: dict[str, set[str]] = defaultdict(set)
    packages: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py":
            if path.parent != PACKAGE:
                packages.add(path.parent.name)
        elif not path.stem.startswith("__") and "_pb2" not in path.stem:  # __main__; generated code
            leaves[path.stem].add(path.parent.name)
    return leaves, packages


def readme_rows(heading: str) -> list[list[str]]:
    """The cells of the table under `## <heading>` in tests/README.md (header and rule left out)."""
    section = README.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows[2:]]


def cross_cutting_names() -> set[str]:
    return {re.fullmatch(r"`(\w+)`", row[0]).group(1) for row in readme_rows("Cross-cutting names")}  # type: ignore[union-attr]


def naming_problems(stems: Iterable[str]) -> list[str]:
    """What is wrong with test files named `test_<stem>.py`, one line each (none: all well named)."""
    leaves, packages = module_names()
    allowed = set(leaves) | packages | cross_cutting_names()
    # Where two packages hold a module of one name, the package comes first (`sidecar_config`).
    allowed |= {f"{package}_{leaf}" for leaf, holders in leaves.items() for package in holders}
    problems = []
    for stem in stems:
        if not any(stem == name or stem.startswith(name + "_") for name in allowed):
            problems.append(f"test_{stem}.py: named for no module under podmortem/ and no name in tests/README.md")
        for leaf, holders in leaves.items():
            (package,) = holders if len(holders) == 1 else (None,)
            qualified = f"{package}_{leaf}"
            if package is not None and (stem == qualified or stem.startswith(qualified + "_")):
                problems.append(
                    f"test_{stem}.py: {leaf} is {package}'s alone; name it test_{stem[len(package) + 1 :]}.py"
                )
    return problems


def files_of(tier: str) -> list[Path]:
    return sorted((TESTS / tier).glob("test_*.py"))


def test_every_test_file_is_named_for_a_module_or_a_listed_name() -> None:
    stems = [path.stem.removeprefix("test_") for tier in TIERS for path in files_of(tier)]
    assert len(stems) > 80
    assert naming_problems(stems) == []


@pytest.mark.parametrize("tier", TIERS)
def test_a_tier_holds_test_files_only(tier: str) -> None:
    others = [p.name for p in (TESTS / tier).iterdir() if p.suffix == ".py" and not p.name.startswith("test_")]
    assert others == []


def test_the_rules_refuse_a_misnamed_file_and_a_needless_package_prefix() -> None:
    assert naming_problems(["outbox", "outbox_bounds", "sidecar_config", "aggregator_running_ports", "page"]) == []
    assert naming_problems(["docs_reliability", "kube_emulator", "sidecar_imports"]) == []
    assert naming_problems(["misnamed"]) == [
        "test_misnamed.py: named for no module under podmortem/ and no name in tests/README.md"
    ]
    assert naming_problems(["outboxes"]) != []  # a module's name, then a word: `outbox_...`
    assert naming_problems(["sidecar_outbox"]) == [
        "test_sidecar_outbox.py: outbox is sidecar's alone; name it test_outbox.py"
    ]
    assert naming_problems(["kube_podwatch_restarts"]) == [
        "test_kube_podwatch_restarts.py: podwatch is kube's alone; name it test_podwatch_restarts.py"
    ]


def test_the_readme_lists_every_test_file_in_its_tier() -> None:
    listed: dict[str, set[str]] = {tier: set() for tier in TIERS}
    for heading in ("Concerns", "Cross-cutting names"):
        for row in readme_rows(heading):
            for tier, cell in zip(TIERS, row[-3:], strict=True):
                listed[tier] |= set(re.findall(r"`(test_\w+\.py)`", cell))
    for tier in TIERS:
        assert listed[tier] == {p.name for p in files_of(tier)}, tier


def test_the_readme_names_code_that_exists() -> None:
    paths = {p for row in readme_rows("Concerns") for p in re.findall(r"`([\w/]+(?:\.py|\.yaml|/))`", row[1])}
    assert len(paths) > 60
    assert sorted(p for p in paths if not (PACKAGE / p).exists()) == []
