"""The test suite's two tiers: every test file keeps tests in the fast one.

``python -m pytest`` runs the fast tier (``addopts`` in ``pyproject.toml`` deselects the tests
marked ``slow``); ``python -m pytest -m "slow or not slow"`` runs the full tier, which CI runs.
A slow mark goes on a test or on some of its parameters, so the fast tier still runs something
of every file; a file that is slow as a whole says so once, at its top (``pytestmark``: the
planted-bug files, whose areas the fast tier tests through their methods' own tests). A file
whose every test is marked slow one by one fails here.
Read from the source (the decorators and ``pytestmark``), so it costs no collection.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _is_slow_mark(node: ast.expr) -> bool:
    """``pytest.mark.slow`` (a decorator or a ``pytestmark`` entry)."""
    return isinstance(node, ast.Attribute) and node.attr == "slow"


def _fast_tests(tree: ast.Module) -> list[str]:
    """Test functions of a module that carry no slow mark of their own."""
    fast = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test")
            and not any(_is_slow_mark(d) for d in node.decorator_list)
        ):
            fast.append(node.name)
    return fast


def _file_marked_slow(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            values = (
                node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            )
            if any(_is_slow_mark(v) for v in values):
                return True
    return False


def test_every_test_file_has_fast_tests():
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 100
    all_slow = []
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        if not _file_marked_slow(tree) and not _fast_tests(tree):
            all_slow.append(str(path.relative_to(TESTS.parent)))
    assert not all_slow, (
        "test files with no test in the fast tier (mark single tests or parameters slow, and "
        f"keep a quick one of the file's area fast): {all_slow}"
    )


def test_default_run_is_the_fast_tier():
    """The default deselects the slow tests; the full tier is the README's CI command."""
    addopts = [
        line
        for line in (TESTS.parent / "pyproject.toml").read_text().splitlines()
        if line.startswith("addopts")
    ]
    assert len(addopts) == 1 and "-m 'not slow'" in addopts[0], addopts
    readme = (TESTS.parent / "README.md").read_text()
    ci = (TESTS.parent / ".ci" / "run").read_text()
    full = 'python3 -m pytest -m "slow or not slow"'
    assert full in ci and full in readme
