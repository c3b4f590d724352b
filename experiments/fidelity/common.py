"""The fidelity suite's harness: ours beside a method's reference code, at float64.

Each script of ``experiments/fidelity/`` (one per method) has two parts:

- ``known_answers(table)``: checks that need no reference checkout. Ours is compared with the
  method's equations written out in the script (a closed form, or the reference algorithm
  restated in a few lines on a copy of the network). CI runs these through
  ``tests/fidelity/``.
- ``compare(table, roots)``: with ``--reference-root NAME=PATH`` (the user's checkout of the
  reference repository), the reference's own modules are imported (``reference_shims``: the few
  statements modern PyTorch refuses are rewritten in memory; nothing in the checkout is
  edited), both networks are built at float64 with the same weights (copied in module order)
  and fed the same batches and the same random draws, and forward, architecture gradient, whole
  steps, schedules and derivation are compared.

Every comparison is one row of a ``Table``: method, quantity, the largest relative difference
``max|ours - ref| / max|ref|`` and the reference it was taken against (``owner/repo@commit``, or
``known answer``). A row above its tolerance (1e-10 by default: float64 rounding through a
network is about 1e-15) fails the script (exit 1). ``run_all.py`` runs every script in a fresh
process (the references' module names clash: ``model_search``, ``architect``, ``operations``)
and writes the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: ``python experiments/fidelity/darts.py``
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import Tensor, nn  # noqa: E402

from experiments.benchmarks import reference_shims  # noqa: E402

TOLERANCE = 1e-10
KNOWN = "known answer"


@dataclass(frozen=True)
class Reference:
    """A reference repository: ``repo`` on GitHub, and a file any checkout of it has."""

    repo: str
    marker: str


@dataclass
class Row:
    method: str
    quantity: str
    max_rel_diff: float
    reference: str
    tolerance: float = TOLERANCE

    @property
    def ok(self) -> bool:
        return math.isfinite(self.max_rel_diff) and self.max_rel_diff <= self.tolerance


@dataclass
class Table:
    """The rows of one script (or of the whole suite)."""

    rows: list[Row] = field(default_factory=list)

    def add(
        self,
        method: str,
        quantity: str,
        ours: Any,
        ref: Any,
        reference: str = KNOWN,
        tolerance: float = TOLERANCE,
    ) -> float:
        """Compare ``ours`` with ``ref`` (tensors, or lists / dicts of them, or numbers) and add
        the row; returns the difference."""
        diff = max_rel_diff(ours, ref)
        self.rows.append(Row(method, quantity, diff, reference, tolerance))
        return diff

    def add_equal(self, method: str, quantity: str, ours: Any, ref: Any, reference: str = KNOWN):
        """An exact comparison (genotypes, op lists, counts): 0 when equal, inf otherwise."""
        diff = 0.0 if ours == ref else math.inf
        self.rows.append(Row(method, quantity, diff, reference, 0.0))
        if diff:
            print(f"  {method} / {quantity}: ours {ours!r} != reference {ref!r}", file=sys.stderr)
        return diff

    @property
    def failed(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]

    def markdown(self) -> str:
        lines = [
            "| method | quantity | max rel. difference | reference |",
            "|---|---|---|---|",
        ]
        for r in self.rows:
            mark = "" if r.ok else f" **above {r.tolerance:g}**"
            lines.append(
                f"| {r.method} | {r.quantity} | {_fmt(r.max_rel_diff)}{mark} | {r.reference} |"
            )
        return "\n".join(lines)

    def dump(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for r in self.rows:
                f.write(json.dumps(asdict(r)) + "\n")

    @staticmethod
    def load(path: str | os.PathLike[str]) -> Table:
        with open(path, encoding="utf-8") as f:
            return Table([Row(**json.loads(line)) for line in f if line.strip()])


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return "differs"
    return f"{x:.1e}"


def _flat(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x.detach().double().reshape(-1)]
    if isinstance(x, dict):
        return [t for k in sorted(x) for t in _flat(x[k])]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat(v)]
    return [torch.tensor([float(x)], dtype=torch.float64)]


def max_rel_diff(ours: Any, ref: Any) -> float:
    """``max|ours - ref| / max|ref|`` over all entries (0 when both are exactly 0); ``inf`` when
    the shapes differ."""
    a, b = _flat(ours), _flat(ref)
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return math.inf
    if not a:
        return 0.0
    x, y = torch.cat(a), torch.cat(b)
    diff = (x - y).abs().max().item()
    scale = y.abs().max().item()
    if diff == 0:
        return 0.0
    return diff / scale if scale > 0 else math.inf


# ------------------------------------------------------------------------- reference checkouts


def parse_roots(items: Sequence[str] | None, references: dict[str, Reference]) -> dict[str, str]:
    """``NAME=PATH`` items of ``--reference-root`` -> {name: absolute path}; one-line errors."""
    roots: dict[str, str] = {}
    for item in items or []:
        name, sep, path = item.partition("=")
        if not sep or name not in references:
            raise SystemExit(
                f"--reference-root: got {item!r}, expected NAME=PATH with NAME one of "
                f"{', '.join(references) or '(none: this script needs no reference)'}"
            )
        ref = references[name]
        path = os.path.abspath(os.path.expanduser(path))
        if not os.path.isfile(os.path.join(path, ref.marker)):
            raise SystemExit(
                f"--reference-root {name}={path}: no {ref.marker} there; expected a checkout "
                f"of github.com/{ref.repo}"
            )
        roots[name] = path
    return roots


def commit_of(root: str) -> str:
    """The checkout's commit (12 hex digits), or ``unknown`` outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def label(ref: Reference, root: str) -> str:
    """``owner/repo@commit``: the reference column of a row."""
    return f"{ref.repo}@{commit_of(root)}"


@contextlib.contextmanager
def reference_imports(root: str, script_dir: str, source_dirs: Sequence[str]) -> Iterator[None]:
    """Inside: the working directory is the reference's script folder, ``source_dirs``
    (relative to ``root``) are first on ``sys.path`` and modules under ``root`` import through
    the shims. On exit the folder, ``sys.path``, the finder and every module imported inside
    are restored, so a script may enter two references in turn."""
    cwd, path, modules = os.getcwd(), list(sys.path), set(sys.modules)
    os.chdir(os.path.join(root, script_dir))
    finder = reference_shims.install(root, source_dirs)
    try:
        yield
    finally:
        os.chdir(cwd)
        sys.path[:] = path
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        for name in set(sys.modules) - modules:
            del sys.modules[name]


def load_function(path: str, name: str, namespace: dict[str, Any]) -> Any:
    """One top-level function of a reference script that cannot be imported (it parses the
    command line at import), compiled with the shims, its globals ``namespace``."""
    return reference_shims.load_function(path, name, namespace)


def script_defaults(path: str) -> dict[str, Any]:
    """The ``default=`` of every ``add_argument('--name', ...)`` of a reference script, read
    from its syntax tree (the script is not run): ``{"learning_rate": 0.025, ...}``. Flags
    (``action='store_true'``) without a default are ``False``; non-literal defaults are left
    out."""
    import ast

    with open(path, encoding="utf-8") as f:
        tree = ast.parse(reference_shims._fix_async_keyword(f.read()), filename=path)
    out: dict[str, Any] = {}
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).startswith("--")
        ):
            continue
        name = str(node.args[0].value)[2:].replace("-", "_")
        kw = {k.arg: k.value for k in node.keywords}
        if "default" in kw:
            try:
                out[name] = ast.literal_eval(kw["default"])
            except ValueError:
                continue
        elif isinstance(kw.get("action"), ast.Constant) and kw["action"].value == "store_true":
            out[name] = False
    return out


def compose(overrides: Sequence[str]) -> Any:
    """Our composed ``nas-search`` config for ``overrides`` (what the command would run)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from nas.choices import config_dir

    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        return hydra_compose("nas_search", overrides=list(overrides))


def add_settings(
    table: Table,
    method: str,
    ours: dict[str, Any],
    theirs: dict[str, Any],
    reference: str,
) -> None:
    """One exact row per setting: ``ours`` and ``theirs`` map a name shown in the table
    (``"weight lr (learning_rate)"``) to the value on each side."""
    for name in ours:
        table.add_equal(method, f"setting: {name}", ours[name], theirs[name], reference)


# ---------------------------------------------------------------------------- same weights

COPIED = (nn.Conv2d, nn.BatchNorm2d, nn.Linear)


def modules_in_order(module: nn.Module, kinds: tuple[type, ...] = COPIED) -> list[nn.Module]:
    return [m for m in module.modules() if isinstance(m, kinds)]


def copy_weights(src: nn.Module, dst: nn.Module, kinds: tuple[type, ...] = COPIED) -> None:
    """``src``'s convolutions, batch norms and linear layers into ``dst``'s, in module order
    (weights, biases, running statistics); refuses in one line when the two lists differ in
    kind or shape."""
    a, b = modules_in_order(src, kinds), modules_in_order(dst, kinds)
    if [type(m) for m in a] != [type(m) for m in b]:
        raise SystemExit(
            f"copy_weights: {type(src).__name__} has {len(a)} layers, {type(dst).__name__} "
            f"{len(b)}, or their kinds differ in order; expected the same layout"
        )
    with torch.no_grad():
        for m, r in zip(a, b):
            for name in ("weight", "bias", "running_mean", "running_var"):
                x, y = getattr(m, name, None), getattr(r, name, None)
                if x is None or y is None:
                    continue
                if x.shape != y.shape:
                    raise SystemExit(
                        f"copy_weights: {name} of {type(m).__name__} is {tuple(x.shape)} here, "
                        f"{tuple(y.shape)} there; expected the same layout"
                    )
                y.copy_(x)


def trained(module: nn.Module) -> list[Tensor]:
    """The trained tensors of ``module``, in module order (convolutions, affine batch norms,
    linear layers): what "weights after N steps" rows compare."""
    out = []
    for m in modules_in_order(module):
        for name in ("weight", "bias"):
            t = getattr(m, name, None)
            if isinstance(t, Tensor):
                out.append(t.detach().clone())
    return out


def our_genotype(strategy: Any) -> list[list[tuple[str, int]]]:
    """The (op, input) pairs of both cells of the genotype our run derives, as the DARTS-family
    references' ``genotype()`` lists them."""
    from nas.selection.base import derived_genotype

    g: Any = derived_genotype(strategy)
    return [[(op, src) for op, src in g.normal], [(op, src) for op, src in g.reduce]]


def reference_genotype(model: Any) -> list[list[tuple[str, int]]]:
    """The (op, input) pairs of both cells of a DARTS-family reference's ``genotype()``."""
    g = model.genotype()
    return [list(g.normal), list(g.reduce)]


def randomise_affine(module: nn.Module, seed: int = 0) -> None:
    """Affine batch-norm parameters away from 1 / 0, so that a mix-up of them shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d) and m.affine:
                m.weight.copy_(torch.rand(m.weight.shape, generator=g, dtype=m.weight.dtype) + 0.5)
                m.bias.copy_(torch.rand(m.bias.shape, generator=g, dtype=m.bias.dtype) - 0.5)


def batches(
    n: int, size: int = 8, hw: int = 16, classes: int = 10, seed: int = 0
) -> list[tuple[Tensor, Tensor]]:
    """``n`` float64 batches of random images and labels (a fixed seed)."""
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(size, 3, hw, hw, generator=g, dtype=torch.float64),
            torch.randint(0, classes, (size,), generator=g),
        )
        for _ in range(n)
    ]


@contextlib.contextmanager
def float64() -> Iterator[None]:
    """Default dtype float64 inside (the references build their parameters with the default)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


# ------------------------------------------------------------------------------ entry point


def main(
    method: str,
    references: dict[str, Reference],
    known_answers: Callable[[Table], None],
    compare: Callable[[Table, dict[str, str]], None] | None,
    argv: Sequence[str] | None = None,
    doc: str | None = None,
) -> int:
    """The command line every script shares: ``--reference-root NAME=PATH`` (repeatable),
    ``--json PATH`` (the rows, one JSON object per line, for ``run_all.py``)."""
    parser = argparse.ArgumentParser(
        description=(doc or "").strip().splitlines()[0] if doc else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    names = ", ".join(f"{k} (github.com/{v.repo})" for k, v in references.items())
    parser.add_argument(
        "--reference-root",
        action="append",
        metavar="NAME=PATH",
        help=f"a checkout of the reference code; NAME one of: {names or 'none'}",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the rows here (JSON lines)")
    parser.add_argument(
        "--known-answers-only", action="store_true", help="skip the reference comparisons"
    )
    args = parser.parse_args(argv)
    roots = parse_roots(args.reference_root, references)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    table = Table()
    with float64():  # every tensor built inside, ours and the reference's, is float64
        known_answers(table)
        if roots and compare is not None and not args.known_answers_only:
            compare(table, roots)
    if roots and args.known_answers_only:
        print(f"{method}: --known-answers-only: the reference is not run", file=sys.stderr)
    elif not roots and references:
        print(
            f"{method}: no --reference-root given ({names}); known answers only",
            file=sys.stderr,
        )
    print(table.markdown())
    if args.json:
        table.dump(args.json)
    failed = table.failed
    if failed:
        print(f"{method}: {len(failed)} row(s) above tolerance", file=sys.stderr)
        return 1
    return 0
