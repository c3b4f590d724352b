"""Outside ``search_spaces`` nothing names a space family (read from the source).

Everything a family knows lives in ``search_spaces`` (``search_spaces.family``: the hooks; one
module per family; the registry ``search_spaces.families``), and the later stages find the
family of a space, a genotype or a network and call its hooks. This test reads every module of
``nas/`` and fails, with file and line, where one names a family instead:

* an import of a family's own modules (where its ``Family`` subclass and its discrete networks
  are defined: ``search_spaces.darts_family``, ``search_spaces.darts``, ...), also as
  ``from search_spaces import darts`` or a module path in a string (``importlib``);
* a reference to a family's classes: its ``Family`` subclass, its genotype class (and every
  alias of it, ``Genotype``), its discrete networks; also their names in a string (``getattr``);
* a string that names a family (``"nb201"``, ``f"model.darts.{key}"``, ``"nb201/"``: the family
  names as words), a search space (``"s3"``) or a cell type (``"reduce"``), whole or summed
  from constants (``"nb" + "201"``); and an attribute named after a family
  (``cfg.model.darts``).

Docstrings explain and are left alone; prose in messages names families with their titles
(``NB201``, ``DARTS``), which are not checked. The names, classes and modules are read from the
registry, so a new family is checked as soon as it is registered. A plug-in declares its own
name (``search: darts`` names the DARTS *strategy*): in the module of its YAML's
``_target_``, the value of a class's ``name = "darts"`` is not a family's name; any other use
of the word there is checked as anywhere else. Everything else that must keep a name is listed
in ``ALLOWED`` / ``ALLOWED_FILES`` with its reason, and an entry that no longer matches
anything fails too.

Not read: ``nas/bench/`` (the NAS-Bench-201 lookup is about that benchmark, whose cells are one
family's).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import search_spaces
import search_spaces.genotype as genotype_module
from nas.plugins import available, plugin_config
from search_spaces.families import FAMILIES
from search_spaces.space import SPACE_NAMES, get_space

REPO = Path(__file__).resolve().parents[2]

NOT_READ = (
    "nas/bench/",  # the NAS-Bench-201 lookup: that benchmark's space is one family's
)

# (file, the exact string constant it may keep) -> why
ALLOWED: dict[tuple[str, str], str] = {
    ("nas/cli/profile.py", "nb201"): (
        "nas-profile's default --space: a user-facing default, as a config's `space:` value"
    ),
}


def _supernet_files() -> dict[str, str]:
    """Each family's own supernet module (where its builder in ``SUPERNETS`` is defined): made
    of ``nas.supernet``'s MixedOp, a later layer than ``search_spaces``, so the family's own
    module of the supernet stage."""
    from nas.supernet.network import SUPERNETS

    out = {}
    for family, build in SUPERNETS.items():
        owner = getattr(build, "__self__", None)  # a classmethod's class: the subclass
        module = owner.__module__ if isinstance(owner, type) else build.__module__
        out[module.replace(".", "/") + ".py"] = f"the {family} family's supernet (SUPERNETS)"
    return out


# files that belong to one family: whole modules of the later stages that are the family's own
ALLOWED_FILES: dict[str, str] = _supernet_files()


def _aliases(classes: set[type]) -> set[str]:
    """The names the family classes go by where ``nas`` imports them from (``Genotype``)."""
    names = {c.__name__ for c in classes}
    for module in (search_spaces, genotype_module):
        names |= {n for n, v in vars(module).items() if isinstance(v, type) and v in classes}
    return names


def _family_knowledge() -> tuple[set[str], set[str], set[str], set[str], set[str]]:
    """Family names, space names, cell types, family class names, family module names."""
    families = set(FAMILIES)
    spaces = set(SPACE_NAMES)
    cell_types = {ct for name in SPACE_NAMES for ct in get_space(name).cell_types}
    classes: set[type] = set()
    modules: set[str] = set()
    for family in FAMILIES.values():
        own = {type(family), family.genotype_type, *family.network_types()}
        classes |= own
        modules |= {type(family).__module__}
        modules |= {c.__module__ for c in family.network_types()}
    return families, spaces, cell_types, _aliases(classes), modules


def _plugin_names_by_file() -> dict[Path, set[str]]:
    """The plug-in names each plug-in module may use (its YAML's ``_target_`` is there)."""
    out: dict[Path, set[str]] = {}
    for group in ("search", "selection", "components"):
        for name in available(group):
            module = str(plugin_config(group, name)._target_).rsplit(".", 1)[0]
            path = REPO / Path(*module.split(".")).with_suffix(".py")
            out.setdefault(path, set()).add(name)
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _plugin_declarations(tree: ast.AST, plugin_names: set[str]) -> set[int]:
    """The string constants that declare a plug-in's name in its class (``name = "darts"``)."""
    ids = set()
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            for stmt in cls.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and [getattr(t, "id", None) for t in stmt.targets] == ["name"]
                    and isinstance(stmt.value, ast.Constant)
                    and stmt.value.value in plugin_names
                ):
                    ids.add(id(stmt.value))
    return ids


def _folded(node: ast.AST) -> str | None:
    """The string a constant expression makes: a literal, or literals joined by ``+``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _folded(node.left), _folded(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _source_files() -> list[Path]:
    files = []
    for path in sorted((REPO / "nas").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if not any(rel == skip or rel.startswith(skip) for skip in NOT_READ):
            files.append(path)
    return files


def _findings(path: Path, knowledge: tuple, plugin_names: set[str]) -> list[tuple[int, str, str]]:
    """``(line, what, the string constant or "")`` for every name of a family in ``path``."""
    families, spaces, cell_types, classes, modules = knowledge
    word = re.compile(r"(?<!\w)(" + "|".join(map(re.escape, sorted(families))) + r")(?!\w)")
    tree = ast.parse(path.read_text(), str(path))
    # docstrings explain; a plug-in's class declares its own name
    skipped = _docstrings(tree) | _plugin_declarations(tree, plugin_names)
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [(line, f"imports {a.name}", "") for a in node.names if a.name in modules]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            for a in node.names:
                if base in modules or f"{base}.{a.name}" in modules:
                    found.append((line, f"imports {base}.{a.name}", ""))
                elif a.name in classes:
                    found.append((line, f"imports {a.name}", ""))
        elif isinstance(node, ast.Name) and node.id in classes:
            found.append((line, f"names {node.id}", ""))
        elif isinstance(node, ast.Attribute) and (node.attr in classes or node.attr in families):
            found.append((line, f"names .{node.attr}", ""))
        elif isinstance(node, (ast.Constant, ast.BinOp)) and id(node) not in skipped:
            text = _folded(node)
            if text is None:
                continue
            if text in spaces or text in cell_types or text in classes or text in modules:
                found.append((line, f"names {text!r}", text))
            elif word.search(text):
                found.append((line, f"names {word.search(text).group(1)!r} in {text!r}", text))
    return found


def test_the_check_sees_the_families():
    families, spaces, cell_types, classes, modules = _family_knowledge()
    assert {"darts", "nb201"} <= families and {"s1", "s5"} <= spaces
    assert {"normal", "reduce", "cell"} <= cell_types
    assert {"DartsGenotype", "Genotype", "NB201Genotype", "TinyNetwork", "NB201Family"} <= classes
    assert {"search_spaces.darts", "search_spaces.nb201_family"} <= modules


def test_the_check_is_not_fooled(tmp_path):
    """Each way of naming a family is caught; strategy names in their own module are not."""
    source = tmp_path / "sample.py"
    source.write_text(
        '"""A docstring may say nb201 and darts."""\n'
        "import importlib\n"
        "from search_spaces import darts\n"
        "from search_spaces.genotype import Genotype\n"
        "import search_spaces.nb201\n"
        "x = isinstance(g, NB201Genotype)\n"
        'y = cfg.model.darts.C + FAMILIES["nb" + "201"].paper_size[0]\n'
        'z = f"model.darts.{key}", "nb201/cifar10/test", space.cells["reduce"]\n'
        'w = getattr(m, "TinyNetwork"), importlib.import_module("search_spaces.darts")\n'
        'ok = "search=darts_minus", "pc_darts", "DARTS-PT", "NB201 index"\n'
        "class DARTS:\n"
        '    name = "darts"\n'
        '    space = "darts"\n'
    )
    found = _findings(source, _family_knowledge(), plugin_names=set())
    lines = sorted({line for line, _, _ in found})
    assert lines == [3, 4, 5, 6, 7, 8, 9, 12, 13], found
    as_plugin = _findings(source, _family_knowledge(), plugin_names={"darts"})
    assert sorted({line for line, _, _ in as_plugin}) == [3, 4, 5, 6, 7, 8, 9, 13]


def test_no_module_outside_search_spaces_names_a_family():
    knowledge = _family_knowledge()
    plugins = _plugin_names_by_file()
    wrong, used = [], set()
    for path in _source_files():
        rel = path.relative_to(REPO).as_posix()
        for line, what, text in _findings(path, knowledge, plugins.get(path, set())):
            if rel in ALLOWED_FILES:
                used.add(rel)
            elif (rel, text) in ALLOWED:
                used.add((rel, text))
            else:
                wrong.append(f"{rel}:{line} {what}")
    assert not wrong, "a space family named outside search_spaces:\n" + "\n".join(wrong)
    stale = [str(k) for k in [*ALLOWED, *ALLOWED_FILES] if k not in used]
    assert not stale, f"allow-list entries that match nothing any more: {stale}"


def test_every_family_module_is_a_module():
    """The modules the check refuses exist (a renamed module would silently escape it)."""
    for module in _family_knowledge()[4]:
        importlib.import_module(module)
