"""Imports run one way through the pipeline's stages (docs/ARCHITECTURE.md, issue 16 point 2):
search_spaces -> nas.data -> nas.supernet -> nas.search -> nas.selection -> nas.pipeline; no
module imports a later stage, and the run skeleton (nas.run) imports none. Read from the source
(every import, at the top or inside a function), so a new strategy, selector or component that
reaches upwards fails here before it makes an import cycle."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = (
    "search_spaces",
    "nas.data",
    "nas.supernet",
    "nas.search",
    "nas.selection",
    "nas.pipeline",
)


def _stage(module: str) -> int | None:
    for k, stage in enumerate(STAGES):
        if module == stage or module.startswith(stage + "."):
            return k
    return None


def _imports(path: Path) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno))
    return out


def _modules() -> list[tuple[str, Path]]:
    found = []
    for root in ("nas", "search_spaces"):
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found.append((".".join(parts).removesuffix(".__init__"), path))
    return found


def test_no_stage_imports_a_later_one_and_the_run_skeleton_none():
    modules = _modules()
    assert any(m == "nas.pipeline.search" for m, _ in modules)  # the walk sees the tree
    wrong = []
    for module, path in modules:
        own = _stage(module)
        skeleton = module == "nas.run" or module.startswith("nas.run.")
        if own is None and not skeleton:
            continue
        for imported, line in _imports(path):
            other = _stage(imported)
            if other is not None and (skeleton or (own is not None and other > own)):
                wrong.append(f"{path.relative_to(REPO)}:{line} imports {imported}")
    assert not wrong, "imports against the stage order: " + "; ".join(wrong)
