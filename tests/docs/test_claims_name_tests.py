"""Every test a promise names exists: the README, ``docs/reliability.md``,
``docs/ARCHITECTURE.md``, ``docs/contributing.md``, ``docs/fidelity.md`` and
``docs/performance.md`` back their claims by naming the test that proves each (a file
``tests/...py``, optionally ``::test_name``, or a ``test_name`` in backticks); a renamed or
deleted test fails here, naming the page and the name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [
    "README.md",
    "docs/reliability.md",
    "docs/ARCHITECTURE.md",
    "docs/contributing.md",
    "docs/fidelity.md",
    "docs/performance.md",
]
PATH = re.compile(r"tests/[\w/*<>.-]+\.py(?:::(\w+))?")
NAME = re.compile(r"`(test_\w+)`|::(test_\w+)|\b(test_\w+)\b(?=[`\s,;)(])")


def _defined() -> set[str]:
    names: set[str] = set()
    for f in (REPO / "tests").rglob("*.py"):
        names |= set(re.findall(r"^\s*def (test_\w+)", f.read_text(encoding="utf-8"), re.M))
    return names


DEFINED = _defined()


@pytest.mark.parametrize("page", PAGES)
def test_named_tests_exist(page):
    text = (REPO / page).read_text(encoding="utf-8")
    missing = []
    for m in PATH.finditer(text):
        path = m.group(0).split("::")[0]
        pattern = re.sub(r"<[^>]+>", "*", path)
        if not list(REPO.glob(pattern)):
            missing.append(path)
    for m in NAME.finditer(text):
        name = next(g for g in m.groups() if g)
        if name.startswith("test_planted_") or name in DEFINED:
            continue
        if any((REPO / "tests").rglob(f"{name}.py")):
            continue  # a test file named without its folder
        missing.append(name)
    assert not missing, f"{page} names tests that do not exist: {sorted(set(missing))}"


def test_every_page_names_some_test():
    for page in PAGES:
        text = (REPO / page).read_text(encoding="utf-8")
        assert PATH.search(text) or NAME.search(text), page
