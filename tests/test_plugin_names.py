"""Outside a plug-in's own files nothing names it (read from the source).

A plug-in is a strategy, selector or component of the config groups (``configs/search``,
``configs/selection``, ``configs/components``); its own files are the module of its YAML's
``_target_`` and those of the plug-ins of the same method (the RS-WS strategy and the RS-WS
selector share their sampler). Everywhere else in ``nas/`` and ``search_spaces/`` the run and
the other plug-ins ask what a plug-in declares (capabilities, ``decision_event``,
``selects_from_weights``, ``concentrations_of``, ...), so this test refuses, with file and
line:

* a reference to the plug-in's class or an import of its module (a subclass may import the
  class it extends: DrNAS is DARTS with Dirichlet weights; a package's ``__init__`` may
  re-export it, deciding nothing);
* a string that is its name (``== "pt"``), or names it as a word in a message (``fair_darts``),
  docstrings aside, which explain, and config keys read (``cfg.get("budget")``), which are
  settings. Names that are also names of a space or space family
  (``darts``) are checked as class references only, and names that are ordinary words
  (an argmax cell, a budget, a threshold) are checked as whole strings only.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from nas.plugins import available, plugin_config
from search_spaces.space import SPACE_NAMES

REPO = Path(__file__).resolve().parents[1]
GROUPS = ("search", "selection", "components")


@dataclass(frozen=True)
class Plugin:
    group: str
    name: str
    module: str
    cls: type

    @property
    def file(self) -> Path:
        return REPO / Path(*self.module.split(".")).with_suffix(".py")


def _plugins() -> list[Plugin]:
    out = []
    for group in GROUPS:
        for name in available(group):
            target = str(plugin_config(group, name)._target_)
            module, cls_name = target.rsplit(".", 1)
            out.append(
                Plugin(group, name, module, getattr(importlib.import_module(module), cls_name))
            )
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _config_keys(tree: ast.AST) -> set[int]:
    """The string constants that read a config key (``cfg.get("budget")``, ``cfg["budget"]``):
    a plug-in's setting may share a word with another plug-in's name."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant):
                ids.add(id(node.args[0]))
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            ids.add(id(node.slice))
    return ids


def _classes_defined(tree: ast.AST, module: str) -> list[type]:
    mod = importlib.import_module(module)
    return [
        getattr(mod, n.name)
        for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef) and isinstance(getattr(mod, n.name, None), type)
    ]


def _source_files() -> list[tuple[str, Path]]:
    found = []
    for root in ("nas", "search_spaces"):
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            found.append((".".join(parts).removesuffix(".__init__"), path))
    return found


def test_no_module_names_a_plugin_outside_its_own_files():
    plugins = _plugins()
    assert {p.name for p in plugins} >= {"darts", "pt", "sdarts_rs"}  # the walk sees them
    spaces = set(SPACE_NAMES) | {"darts", "nb201"}
    words = {"argmax", "budget", "threshold"}
    wrong = []
    for module, path in _source_files():
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstrings(tree) | _config_keys(tree)
        defined = _classes_defined(tree, module)
        where = path.relative_to(REPO)
        for p in plugins:
            own = {q.file for q in plugins if q.name == p.name}
            if path in own or (path.name == "__init__.py" and p.module.startswith(module + ".")):
                continue
            extends = any(issubclass(c, p.cls) and c is not p.cls for c in defined)
            word = re.compile(rf"(?<![\w.]){re.escape(p.name)}(?!\w)")
            for node in ast.walk(tree):
                line = getattr(node, "lineno", 0)
                if (
                    isinstance(node, ast.Name)
                    and node.id == p.cls.__name__
                    and not extends
                    or isinstance(node, ast.Attribute)
                    and node.attr == p.cls.__name__
                ):
                    wrong.append(f"{where}:{line} names {p.cls.__name__}")
                elif (
                    isinstance(node, ast.ImportFrom)
                    and node.module == p.module
                    and not extends
                    or isinstance(node, ast.Import)
                    and any(a.name == p.module for a in node.names)
                ):
                    wrong.append(f"{where}:{line} imports {p.module}")
                elif (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docs
                    and p.name not in spaces
                    and (node.value == p.name or p.name not in words and word.search(node.value))
                ):
                    wrong.append(f"{where}:{line} names {p.group}={p.name} in {node.value!r}")
    assert not wrong, "plug-ins named outside their own files: " + "; ".join(sorted(set(wrong)))
