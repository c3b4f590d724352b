"""Run the 2019-2021 reference NAS code (DARTS, DrNAS, DARTS-PT) unchanged on modern PyTorch.

Used by the side-by-side benchmarks (``search_step.py`` and ``pt_selection.py`` with
``--reference-root``): the reference is imported from the user's own checkout at run time and
nothing of it is copied into this project. The few things modern PyTorch refuses or that assume
a GPU are rewritten in the module's source text, in memory, before it is compiled:

- ``x.cuda(...)`` -> ``x`` and ``torch.cuda.FloatTensor`` (etc.) -> ``torch.FloatTensor``: the
  benchmarks run on the CPU;
- the ``async=`` keyword (a syntax error since Python 3.7) -> ``non_blocking=``;
- ``v.data[0]`` (a Python number in PyTorch 0.3, an index error on a 0-dim tensor now) ->
  ``v.item()``;
- ``Variable(x, volatile=True)`` -> ``Variable(x)`` (``volatile`` has had no effect since 0.4);
- the deprecated positional-scalar overloads ``t.add_(alpha, other)``, ``t.sub_(alpha, other)``
  (and ``add``, ``sub``) -> ``t.add_(other, alpha=alpha)``; ``t.addcmul_(value, a, b)`` /
  ``addcdiv_`` -> ``t.addcmul_(a, b, value=value)``. PyTorch still accepts these with a
  warning; the rewrite is the same computation and keeps working when they go;
- ``x.view(-1)`` -> ``x.reshape(-1)``: the references' ``accuracy()`` flattens a slice of a
  transposed ``eq`` result, which PyTorch >= 1.x no longer makes contiguous (an error now), and
  their ``_concat`` flattens parameters, which fails on ``channels_last`` ones. ``reshape`` is
  the same view wherever ``view`` works and a copy only where ``view`` would raise (both places
  only read the result).

Why source rewrites and not monkeypatches: a patched ``Tensor.add_`` or ``Tensor.cuda`` would put
a Python wrapper on every call in the timed step of the reference (and change torch for the
whole process), and ``async=`` cannot be patched at all because the module does not parse. The
rewritten module runs the reference's own statements, on the native path, at no cost per call.
The rewrite uses :mod:`ast` (only calls of these exact shapes change); compiled code keeps the
reference's file name and line numbers, and no bytecode is written into the user's checkout.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import io
import os
import sys
import tokenize
from collections.abc import Iterable
from types import CodeType
from typing import Any

# methods whose old overload put the scalar first: (name, number of tensor operands, keyword)
_SCALAR_FIRST = {
    "add": (1, "alpha"),
    "add_": (1, "alpha"),
    "sub": (1, "alpha"),
    "sub_": (1, "alpha"),
    "addcmul": (2, "value"),
    "addcmul_": (2, "value"),
    "addcdiv": (2, "value"),
    "addcdiv_": (2, "value"),
}


def _fix_async_keyword(source: str) -> str:
    """``async=`` in a call (a keyword since Python 3.7) -> ``non_blocking=``, token-aware."""
    if "async" not in source:
        return source
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    lines = source.splitlines(keepends=True)
    # edit from the end so earlier positions stay valid
    for i in range(len(tokens) - 2, -1, -1):
        tok, nxt = tokens[i], tokens[i + 1]
        if tok.string == "async" and nxt.type == tokenize.OP and nxt.string == "=":
            row, col = tok.start
            line = lines[row - 1]
            lines[row - 1] = line[:col] + "non_blocking" + line[col + len("async") :]
    return "".join(lines)


class _Rewriter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changes: list[str] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute):
            # x.cuda(...) -> x
            if func.attr == "cuda":
                self.changes.append(f"line {node.lineno}: .cuda() dropped")
                return func.value
            # x.view(-1) -> x.reshape(-1)
            if func.attr == "view" and not node.keywords and len(node.args) == 1:
                arg = node.args[0]
                if (
                    isinstance(arg, ast.UnaryOp)
                    and isinstance(arg.op, ast.USub)
                    and isinstance(arg.operand, ast.Constant)
                    and arg.operand.value == 1
                ):
                    self.changes.append(f"line {node.lineno}: .view(-1) -> .reshape(-1)")
                    func.attr = "reshape"
                    return node
            # scalar-first overloads: a method call with exactly 1 + operands positionals and
            # no keyword is the old form (today the scalar is keyword-only, so no current call
            # has that shape); ``torch.add(a, b)`` is the function, not the method: left alone
            spec = _SCALAR_FIRST.get(func.attr)
            is_torch_function = isinstance(func.value, ast.Name) and func.value.id == "torch"
            if spec and not is_torch_function and not node.keywords:
                operands, keyword = spec
                if len(node.args) == operands + 1:
                    self.changes.append(f"line {node.lineno}: .{func.attr}(scalar, ...) reordered")
                    scalar, node.args = node.args[0], node.args[1:]
                    node.keywords = [ast.keyword(arg=keyword, value=scalar)]
        # Variable(x, volatile=...) -> Variable(x)
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name == "Variable" and any(k.arg == "volatile" for k in node.keywords):
            self.changes.append(f"line {node.lineno}: volatile= dropped")
            node.keywords = [k for k in node.keywords if k.arg != "volatile"]
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        # v.data[0] -> v.item()
        value, index = node.value, node.slice
        if (
            isinstance(value, ast.Attribute)
            and value.attr == "data"
            and isinstance(index, ast.Constant)
            and index.value == 0
            and isinstance(node.ctx, ast.Load)
        ):
            self.changes.append(f"line {node.lineno}: .data[0] -> .item()")
            item = ast.Attribute(value=value.value, attr="item", ctx=ast.Load())
            return ast.Call(func=item, args=[], keywords=[])
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        # torch.cuda.FloatTensor -> torch.FloatTensor (the tensor-type constructors only)
        inner = node.value
        if (
            isinstance(inner, ast.Attribute)
            and inner.attr == "cuda"
            and isinstance(inner.value, ast.Name)
            and inner.value.id == "torch"
            and node.attr.endswith("Tensor")
        ):
            self.changes.append(f"line {node.lineno}: torch.cuda.{node.attr} -> torch.{node.attr}")
            return ast.Attribute(value=inner.value, attr=node.attr, ctx=node.ctx)
        return node


def shim_tree(source: str, filename: str = "<reference>") -> tuple[ast.Module, list[str]]:
    """The shimmed syntax tree of a reference module and the list of what changed."""
    tree = ast.parse(_fix_async_keyword(source), filename=filename)
    rewriter = _Rewriter()
    tree = ast.fix_missing_locations(rewriter.visit(tree))
    return tree, rewriter.changes


def shim_source(source: str) -> str:
    """The shimmed source text (for reading and testing; the importer compiles the tree)."""
    return ast.unparse(shim_tree(source)[0])


def compile_shimmed(source: str, filename: str) -> CodeType:
    return compile(shim_tree(source, filename)[0], filename, "exec", dont_inherit=True)


class _ShimLoader(importlib.machinery.SourceFileLoader):
    """Compiles a reference module from its shimmed tree; reads and writes no bytecode cache
    (a cached shimmed module would otherwise be picked up by the user's own runs)."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        with open(path, encoding="utf-8") as f:
            return compile_shimmed(f.read(), path)


class ReferenceFinder(importlib.abc.MetaPathFinder):
    """Finds modules on ``sys.path`` as usual; those whose file lies under one of ``roots`` are
    loaded through the shims."""

    def __init__(self, roots: Iterable[str]) -> None:
        self.roots = [os.path.realpath(r) + os.sep for r in roots]

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None
        origin = os.path.realpath(spec.origin)
        if not any(origin.startswith(root) for root in self.roots):
            return None
        loader = _ShimLoader(fullname, spec.origin)
        return importlib.util.spec_from_file_location(
            fullname,
            spec.origin,
            loader=loader,
            submodule_search_locations=spec.submodule_search_locations,
        )


def install(root: str, source_dirs: Iterable[str]) -> ReferenceFinder:
    """Make the reference checkout at ``root`` importable with the shims.

    ``source_dirs`` (relative to ``root``) go first on ``sys.path`` in the given order, as the
    reference's own scripts put them (each is run from its folder, and some add ``../``). The
    process's working directory should be the first of them, for the references' own
    ``sys.path.insert(0, '../')``.
    """
    root = os.path.realpath(root)
    for d in reversed(list(source_dirs)):
        sys.path.insert(0, os.path.join(root, d))
    finder = ReferenceFinder([root])
    sys.meta_path.insert(0, finder)
    return finder


def load_function(path: str, name: str, namespace: dict[str, Any]) -> Any:
    """One top-level function of a reference script that cannot be imported (it parses the
    command line and creates folders at import), compiled with the shims; its globals are
    ``namespace`` (the names the function uses, e.g. ``args``, ``torch``)."""
    with open(path, encoding="utf-8") as f:
        tree, _ = shim_tree(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            module = ast.Module(body=[node], type_ignores=[])
            exec(compile(module, path, "exec", dont_inherit=True), namespace)
            return namespace[name]
    raise SystemExit(f"reference: no function {name}() in {path}; expected the reference's script")
