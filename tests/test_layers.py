"""Imports run one way through the toolkit's layers, and no modules import each other in a circle.

Every module of ``search_spaces/`` and ``nas/`` belongs to one layer of ``LAYERS``, lowest first;
a module may import its own layer and the layers before it, never a later one:

 1. ``search_spaces``: what is searched (spaces, ops, genotypes, their families and discrete
    networks); imports nothing of ``nas``, so a genotype needs no search code.
 2. the shared tools, no stage: ``nas`` itself (the version), the registries, ``torch.distributed``
    helpers, progress bars, experiment trackers and the metrics log, Hydra's choices, a network's
    parameter and multiply-add count (``nas.summary``).
 3. ``nas.run``: the run skeleton both loops subclass (checkpoints, resume, schedules, seeds);
    it knows no stage.
 4. ``nas.data``, ``nas.bench``: the inputs, data sets and the NB201 benchmark's table.
 5. ``nas.training``: retraining needs a genotype only, so it sits below every search stage.
 6. ``nas.supernet``: the searchable network of a space.
 7. ``nas.proxies``: zero-cost scores of a network or a supernet (numbers; their figures are
    drawn in ``nas.analysis``).
 8. ``nas.hardware``: the cost model the search and selection use, the profiler, and the export
    of a trained network (it reads what ``nas.training`` writes, hence after it).
 9. ``nas.strategies``: strategies, components, the search data.
10. ``nas.selection``: the selectors that turn a trained supernet into a genotype.
11. ``nas.plugins``: builds strategies, selectors and components from their configs.
12. ``nas.analysis``: reads run folders and draws their figures (the search run lends its figure
    writer, so it sits below the pipeline).
13. ``nas.pipeline``: the search run, driving a strategy and then a selector.
14. ``nas.cli``: the command lines.
15. ``nas.api``: the Python API, which composes and runs jobs as the command lines do.

Imports are read from the source: every ``import``, at the top or inside a function, and
``from x import y`` counts as importing ``x.y`` where that is a module. The import graph of the
modules has no cycle (imports under ``if TYPE_CHECKING:`` never run and are left out of that
check only), and neither has the graph of the layers' packages among themselves. A new module
that reaches upwards or closes a circle fails here, with file:line, before it becomes an import
error at run time. docs/ARCHITECTURE.md ("The pipeline's stages and who imports whom") gives
the same order.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("search_spaces", "nas")

LAYERS: tuple[tuple[str, ...], ...] = (
    ("search_spaces",),
    (
        "nas",
        "nas.registry",
        "nas.distributed",
        "nas.progress",
        "nas.trackers",
        "nas.metrics",
        "nas.choices",
        "nas.summary",
    ),
    ("nas.run",),
    ("nas.data", "nas.bench"),
    ("nas.training",),
    ("nas.supernet",),
    ("nas.proxies",),
    ("nas.hardware",),
    ("nas.strategies",),
    ("nas.selection",),
    ("nas.plugins",),
    ("nas.analysis",),
    ("nas.pipeline",),
    ("nas.cli",),
    ("nas.api",),
)
UNITS = [unit for layer in LAYERS for unit in layer]

# The one import that runs upwards on purpose: ``nas.search`` / ``nas.train`` / ``nas.load_run``
# are the Python API's functions (the top layer), which the package ``nas`` names for type
# checkers and imports when first used. Nothing else may reach upwards, and this one is left out
# of the cycle checks too (it never runs at import time).
ENTRY_POINTS = {("nas", "nas.api")}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module
    path: Path
    line: int
    type_checking: bool  # under ``if TYPE_CHECKING:`` (annotations only; never runs)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def _modules() -> dict[str, Path]:
    found = {}
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts).removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _known(name: str) -> str | None:
    """The module of ours that ``name`` is, or is inside of (a class, a function); None for
    other packages."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, type_checking: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node below ``node``, and whether it sits under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield stmt, True
                yield from _walk(stmt, True)
            for stmt in child.orelse:
                yield stmt, type_checking
                yield from _walk(stmt, type_checking)
            continue
        yield child, type_checking
        yield from _walk(child, type_checking)


def _imports(module: str, path: Path) -> list[Import]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node, type_checking in _walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package of this module, up level - 1
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([base] if base else [])])
            # from x import y: the module x.y where y is one, else x
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names
            ]
        for name in names:
            target = _known(name)
            if target is not None and target != module:
                out.append(Import(module, target, path, node.lineno, type_checking))
    return out


IMPORTS = [
    imp
    for module, path in MODULES.items()
    for imp in _imports(module, path)
    if (imp.source, imp.target) not in ENTRY_POINTS
]


def _unit(module: str) -> str | None:
    """The entry of ``LAYERS`` that holds ``module``: the longest that names it or a package
    above it; ``nas`` holds its ``__init__`` only, so a new module or package of ``nas/`` is in
    no layer until it is placed."""
    best = None
    for unit in UNITS:
        inside = unit != "nas" and module.startswith(unit + ".")
        if (module == unit or inside) and (best is None or len(unit) > len(best)):
            best = unit
    return best


def _layer(module: str) -> int:
    """The position in ``LAYERS`` of the entry that holds ``module`` (-1: none)."""
    unit = _unit(module)
    return next((k for k, layer in enumerate(LAYERS) if unit in layer), -1)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None (depth-first search, in name order)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def _named(cycle: list[str] | None, witness: dict[tuple[str, str], Import]) -> str:
    """``a -> b -> a (a.py:3, b.py:7)``: the cycle and where each step imports the next."""
    if cycle is None:
        return ""
    steps = ", ".join(witness[a, b].where for a, b in zip(cycle, cycle[1:]))
    return f"{' -> '.join(cycle)} ({steps})"


def test_the_walk_sees_the_tree():
    assert {"nas.pipeline.search", "nas.cli.search", "search_spaces.genotype"} <= set(MODULES)
    assert any(
        i.source == "nas.pipeline.search" and i.target == "nas.strategies.base" for i in IMPORTS
    )


def test_every_module_belongs_to_a_layer():
    missing = [m for m in MODULES if _unit(m) is None]
    assert not missing, f"modules in no layer of LAYERS (add them where they belong): {missing}"
    assert sorted(UNITS) == sorted(set(UNITS)), "a LAYERS entry is listed twice"


def test_no_module_imports_a_later_layer():
    wrong = [
        f"{i.where} imports {i.target} (layer {_layer(i.target) + 1}, {_unit(i.target)}) from "
        f"layer {_layer(i.source) + 1} ({_unit(i.source)})"
        for i in IMPORTS
        if _layer(i.target) > _layer(i.source) >= 0
    ]
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def test_no_import_cycle_between_modules():
    graph: dict[str, set[str]] = {}
    witness: dict[tuple[str, str], Import] = {}
    for i in IMPORTS:
        if not i.type_checking:
            graph.setdefault(i.source, set()).add(i.target)
            witness.setdefault((i.source, i.target), i)
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {_named(cycle, witness)}"


def test_no_import_cycle_between_packages():
    """The entries of one layer (its packages and modules) import each other one way too."""
    graph: dict[str, set[str]] = {}
    witness: dict[tuple[str, str], Import] = {}
    for i in IMPORTS:
        a, b = _unit(i.source), _unit(i.target)
        if a is not None and b is not None and a != b and not i.type_checking:
            graph.setdefault(a, set()).add(b)
            witness.setdefault((a, b), i)
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle between packages: {_named(cycle, witness)}"


def test_the_cycle_finder_names_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}}) is None
