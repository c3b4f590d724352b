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
import datetime
import importlib.util
import json
import math
import os
import subprocess
import sys
import types
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
    """The rows of one script (or of the whole suite).

    A reference row's ``ref`` may be given as a function of no arguments (``lambda:
    model(x)``): it is called when the row's reference runs here (its label is one of
    ``Refs.live_labels``), and its value is written to ``recording`` when one is kept; otherwise
    the value recorded for that quantity (``recorded``, from ``tests/fidelity/golden/``) is
    used. A quantity with no recorded value fails its row, naming it."""

    rows: list[Row] = field(default_factory=list)
    refs: Refs | None = None

    def _reference_value(
        self, quantity: str, ref: Any, reference: str, exact: bool = False
    ) -> tuple[Any, str]:
        if not callable(ref) or reference == KNOWN:
            return ref, reference
        refs = self.refs
        if refs is not None and reference not in refs.live_labels and refs.recorded is not None:
            entry = refs.recorded.rows.get(quantity)
            refs.replayed.add(quantity)
            if entry is None:
                print(f"  {quantity}: no recorded reference value ({refs.recorded.path})",
                      file=sys.stderr)  # fmt: skip
                return _MISSING, reference
            if entry.get("sketch"):
                return _Sketched(entry["value"]), reference
            return entry["value"], reference
        value = ref()
        if refs is not None and refs.recording is not None:
            refs.recording.put(quantity, value, reference, exact=exact)
        return value, reference

    def add(
        self,
        method: str,
        quantity: str,
        ours: Any,
        ref: Any,
        reference: str = KNOWN,
        tolerance: float = TOLERANCE,
    ) -> float:
        """Compare ``ours`` with ``ref`` (tensors, or lists / dicts of them, or numbers; or a
        function returning them) and add the row; returns the difference."""
        ref, reference = self._reference_value(quantity, ref, reference)
        if ref is _MISSING:
            diff = math.inf
        elif isinstance(ref, _Sketched):  # a long row, recorded as its sketch
            mine = sketch(ours)
            same = mine["shapes"] == ref.value["shapes"]
            diff = max_rel_diff(mine["values"], ref.value["values"]) if same else math.inf
        else:
            diff = max_rel_diff(ours, ref)
        self.rows.append(Row(method, quantity, diff, reference, tolerance))
        return diff

    def add_equal(self, method: str, quantity: str, ours: Any, ref: Any, reference: str = KNOWN):
        """An exact comparison (genotypes, op lists, counts): 0 when equal, inf otherwise."""
        ref, reference = self._reference_value(quantity, ref, reference, exact=True)
        diff = 0.0 if ref is not _MISSING and _plain(ours) == _plain(ref) else math.inf
        self.rows.append(Row(method, quantity, diff, reference, 0.0))
        if diff and ref is not _MISSING:
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


_MISSING = object()

SKETCH_ABOVE = 4096  # a compared row with more values than this is recorded as its sketch
SKETCH_SIZE = 2048


@dataclass
class _Sketched:
    value: dict[str, Any]


def sketch(x: Any, size: int = SKETCH_SIZE) -> dict[str, Any]:
    """A long row (a network's weights after some steps) in ``2 * size`` float64 numbers: the
    values at ``size`` evenly spaced positions of the flattened row, and the sums of ``size``
    consecutive blocks, so every value lies in exactly one compared sum; plus the shapes. Both
    sides are sketched alike and compared with ``max_rel_diff`` at the row's tolerance."""
    flat = _flat(x)
    v = torch.cat(flat) if flat else torch.zeros(0, dtype=torch.float64)
    n = v.numel()
    k = min(size, n)
    idx = torch.linspace(0, max(n - 1, 0), k).round().long()
    sums = torch.stack([b.sum() for b in torch.tensor_split(v, k)]) if k else v
    return {"values": torch.cat([v[idx], sums]), "shapes": [list(t.shape) for t in flat]}


def _numel(x: Any) -> int:
    return sum(t.numel() for t in _flat(x))


def _plain(x: Any) -> Any:
    """Tuples as lists (a recording keeps them, but a reference may build either)."""
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


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


def release_of(root: str) -> str | None:
    """``pypi:NAME==VERSION`` for an unpacked release (a wheel's ``*.dist-info/METADATA`` or an
    sdist's ``PKG-INFO``), else None: how a reference published only as a package is named."""
    found = sorted(Path(root).glob("*.dist-info/METADATA")) + sorted(Path(root).glob("PKG-INFO"))
    for meta in found:
        fields = dict(
            line.split(": ", 1)
            for line in meta.read_text(encoding="utf-8").splitlines()
            if line.startswith(("Name: ", "Version: "))
        )
        if "Name" in fields and "Version" in fields:
            return f"pypi:{fields['Name']}=={fields['Version']}"
    return None


def commit_of(root: str, short: bool = True) -> str:
    """The checkout's commit (12 hex digits, or all 40 with ``short=False``); an unpacked
    release's ``pypi:NAME==VERSION``; ``unknown`` otherwise."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "rev-parse", *(["--short=12"] if short else []), "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return release_of(root) or "unknown"


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


@contextlib.contextmanager
def files_alone(
    root: str, files: Sequence[tuple[str, str]], stubs: dict[str, types.ModuleType]
) -> Iterator[dict[str, types.ModuleType]]:
    """Inside: the reference's ``files`` ((module name, path under ``root``), in order) loaded
    alone, without their packages' ``__init__`` (which may import what the method does not
    need), with ``stubs`` standing in for the packages and modules they import; returns the
    loaded modules by name. On exit ``sys.modules`` is as before."""
    names = [*stubs, *(name for name, _ in files)]
    saved = {k: sys.modules.get(k) for k in names}
    try:
        sys.modules.update(stubs)
        loaded = {}
        for name, rel in files:
            spec = importlib.util.spec_from_file_location(name, os.path.join(root, rel))
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = loaded[name] = module
            spec.loader.exec_module(module)
        yield loaded
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


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
    theirs: dict[str, Any] | Callable[[], dict[str, Any]],
    reference: str,
) -> None:
    """One exact row per setting: ``ours`` and ``theirs`` map a name shown in the table
    (``"weight lr (learning_rate)"``) to the value on each side. ``theirs`` may be a function
    (called once, only when the reference runs here; else each value comes from the
    recording)."""
    cache: list[dict[str, Any]] = []

    def value(name: str) -> Any:
        if not cache:
            cache.append(theirs() if callable(theirs) else theirs)
        return cache[0][name]

    for name in ours:
        table.add_equal(
            method, f"setting: {name}", ours[name], lambda name=name: value(name), reference
        )


# ------------------------------------------------------------------ recorded reference outputs

GOLDEN = ROOT / "tests" / "fidelity" / "golden"


def golden_path(script: str) -> Path:
    """Where a script's recorded reference outputs live: ``tests/fidelity/golden/<script>.pt``."""
    return GOLDEN / f"{script}.pt"


def _frozen(value: Any, quantity: str) -> Any:
    """``value`` as a recording holds it: tensors detached and copied (their own storage, so a
    view does not save its base), containers as plain lists / tuples / dicts, numbers and
    strings as they are. Anything else is refused: a recording must load with
    ``torch.load(weights_only=True)``."""
    if isinstance(value, Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, dict):
        return {str(k): _frozen(v, quantity) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_frozen(v, quantity) for v in value)
    if isinstance(value, list):
        return [_frozen(v, quantity) for v in value]
    if value is None:
        return value
    for kind in (bool, int, float, str):  # NumPy's float64 is a float: made a plain one
        if isinstance(value, kind):
            return kind(value)
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item) and getattr(value, "shape", None) == ():
        return item()
    if hasattr(value, "__array__"):
        return torch.from_numpy(__import__("numpy").asarray(value).copy())
    raise SystemExit(
        f"record: {quantity!r} holds a {type(value).__name__}; expected tensors, numbers, "
        "strings and lists / tuples / dicts of them"
    )


@dataclass
class Recorded:
    """A script's recorded reference outputs: ``rows`` maps each quantity to ``{"value",
    "reference"}``; ``meta`` names the script, each reference's repository and commit, the
    command that recorded them, the date and the PyTorch version."""

    path: Path
    meta: dict[str, Any]
    rows: dict[str, dict[str, Any]]

    @staticmethod
    def load(path: str | os.PathLike[str]) -> Recorded:
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - one line, whatever the loader says
            raise SystemExit(
                f"{path}: not a readable recording ({type(e).__name__}: {e})"
            ) from None
        if not isinstance(data, dict) or set(data) != {"meta", "rows"}:
            raise SystemExit(f"{path}: expected a dict with 'meta' and 'rows'")
        return Recorded(Path(path), data["meta"], data["rows"])

    def label(self, name: str) -> str:
        ref = self.meta["references"][name]
        commit = ref["commit"]
        return f"{ref['repo']}@{commit if commit.startswith('pypi:') else commit[:12]}, recorded"


class Recording:
    """The reference values of a live run, by quantity, written by ``--record``."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def put(self, quantity: str, value: Any, reference: str, exact: bool = False) -> None:
        """Keep ``value`` for ``quantity``; a compared (not exact) row with more than
        ``SKETCH_ABOVE`` values is kept as its ``sketch``."""
        if quantity in self.rows:
            raise SystemExit(
                f"record: the quantity {quantity!r} is compared twice; expected one row per "
                "quantity (name the second one differently)"
            )
        if not exact and _numel(value) > SKETCH_ABOVE:
            self.rows[quantity] = {
                "value": _frozen(sketch(value), quantity),
                "reference": reference,
                "sketch": True,
            }
            return
        self.rows[quantity] = {"value": _frozen(value, quantity), "reference": reference}

    def save(self, path: str | os.PathLike[str], meta: dict[str, Any]) -> None:
        """Atomically: a temporary file beside ``path``, then a rename."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".pt.tmp")
        torch.save({"meta": meta, "rows": self.rows}, tmp)
        Recorded.load(tmp)  # what CI will load: refused here, not there
        os.replace(tmp, path)


class Refs:
    """What ``compare`` sees of its references: each one either runs here (a checkout given
    with ``--reference-root``: ``live(name)``) or is replayed from the script's recording.
    Reference statements run under ``if refs.live(name):``; rows name ``refs.label(name)``
    and pass the reference's value as a function, which the table calls only when live."""

    def __init__(
        self,
        references: dict[str, Reference],
        roots: dict[str, str],
        recorded: Recorded | None = None,
        recording: Recording | None = None,
    ) -> None:
        self.references = references
        self.roots = dict(roots)
        self.recorded = recorded
        self.recording = recording
        self.replayed: set[str] = set()
        self.live_labels = {label(references[n], r) for n, r in self.roots.items()}

    def live(self, name: str) -> bool:
        return name in self.roots

    def root(self, name: str) -> str:
        return self.roots[name]

    def label(self, name: str) -> str:
        if self.live(name):
            return label(self.references[name], self.roots[name])
        if self.recorded is None:
            raise SystemExit(f"{name}: neither a checkout nor a recording")
        return self.recorded.label(name)

    def imports(
        self, name: str, script_dir: str, source_dirs: Sequence[str]
    ) -> contextlib.AbstractContextManager[None]:
        """``reference_imports`` of the checkout when ``name`` is live, else nothing."""
        if not self.live(name):
            return contextlib.nullcontext()
        return reference_imports(self.roots[name], script_dir, source_dirs)


def full_commit(root: str) -> str:
    return commit_of(root, short=False)


def replay(module: Any) -> Table:
    """A script's ``compare`` against its recording alone (no checkout), at float64: what CI
    runs, and what the planted-bug tests run under their patch. Rows recorded but not produced
    fail too."""
    script = Path(module.__file__).stem
    recorded = Recorded.load(golden_path(script))
    refs = Refs(module.REFERENCES, {}, recorded)
    table = Table(refs=refs)
    with float64():
        module.compare(table, refs)
    _check_all_produced(table, module.METHOD, recorded)
    return table


def _check_all_produced(table: Table, method: str, recorded: Recorded) -> None:
    produced = {r.quantity for r in table.rows}
    first = recorded.label(next(iter(recorded.meta["references"])))
    for quantity in recorded.rows:
        if quantity not in produced:
            row = Row(method, f"recorded, not produced: {quantity}", math.inf, first)
            table.rows.append(row)


# ---------------------------------------------------------------------------- same weights

COPIED = (nn.Conv2d, nn.BatchNorm2d, nn.Linear)


def modules_in_order(module: nn.Module, kinds: tuple[type, ...] = COPIED) -> list[nn.Module]:
    return [m for m in module.modules() if isinstance(m, kinds)]


def base_kind(module: nn.Module, kinds: tuple[type, ...] = COPIED) -> type:
    """The first of ``kinds`` that ``module`` is an instance of: a subclass of ``nn.BatchNorm2d``
    (our narrow-channel NHWC batch norm, a fused or shared module's parts) counts as a batch norm,
    so the copy follows the structure, not the exact classes."""
    return next(k for k in kinds if isinstance(module, k))


def copy_weights(src: nn.Module, dst: nn.Module, kinds: tuple[type, ...] = COPIED) -> None:
    """``src``'s convolutions, batch norms and linear layers into ``dst``'s, in module order
    (weights, biases, running statistics); layers are matched by base kind (``base_kind``), so
    subclasses on either side copy; refuses in one line when the two lists differ in kind or
    shape."""
    a, b = modules_in_order(src, kinds), modules_in_order(dst, kinds)
    if [base_kind(m, kinds) for m in a] != [base_kind(m, kinds) for m in b]:
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
    compare: Callable[[Table, Refs], None] | None,
    argv: Sequence[str] | None = None,
    doc: str | None = None,
) -> int:
    """The command line every script shares: ``--reference-root NAME=PATH`` (repeatable),
    ``--record`` (write the references' values to the script's recording), ``--json PATH``
    (the rows, one JSON object per line, for ``run_all.py``), ``--known-answers-only``.

    Without a checkout, the reference rows are compared with the script's recording
    (``tests/fidelity/golden/<script>.pt``), what CI does."""
    import inspect

    script = Path(inspect.getfile(known_answers)).stem
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
    parser.add_argument(
        "--record",
        action="store_true",
        help=f"run every reference (all checkouts needed) and write their values to "
        f"{golden_path(script).relative_to(ROOT)}",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the rows here (JSON lines)")
    parser.add_argument(
        "--known-answers-only", action="store_true", help="skip the reference comparisons"
    )
    args = parser.parse_args(argv)
    roots = parse_roots(args.reference_root, references)
    if args.record:
        missing = [n for n in references if n not in roots]
        if compare is None or not references:
            raise SystemExit(f"--record: {script} has no reference to record")
        if missing or args.known_answers_only:
            raise SystemExit(
                f"--record: the recording is made by running the reference code; expected "
                f"--reference-root for {', '.join(missing) or 'each reference'}"
                + (" and no --known-answers-only" if args.known_answers_only else "")
            )
    path = golden_path(script)
    recorded = None
    if compare is not None and not args.record and path.exists() and len(roots) < len(references):
        recorded = Recorded.load(path)
    recording = Recording() if args.record else None
    refs = Refs(references, roots, recorded, recording)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    table = Table(refs=refs)
    with float64():  # every tensor built inside, ours and the reference's, is float64
        known_answers(table)
        if compare is not None and not args.known_answers_only and (roots or recorded):
            compare(table, refs)
    if recorded is not None and not args.known_answers_only:
        _check_all_produced(table, method, recorded)
    if args.known_answers_only:
        print(f"{method}: --known-answers-only: the references are not compared", file=sys.stderr)
    elif references and not roots:
        how = f"their recording, {path.relative_to(ROOT)}" if recorded else "no recording"
        print(f"{method}: no --reference-root given ({names}); compared with {how}",
              file=sys.stderr)  # fmt: skip
    print(table.markdown())
    if args.json:
        table.dump(args.json)
    failed = table.failed
    if failed:
        print(f"{method}: {len(failed)} row(s) above tolerance", file=sys.stderr)
        for r in failed:
            print(f"  failed: {r.quantity} ({_fmt(r.max_rel_diff)} > {r.tolerance:g})",
                  file=sys.stderr)  # fmt: skip
        if recording is not None:
            print(f"{method}: not recorded (rows above tolerance)", file=sys.stderr)
        return 1
    if recording is not None:
        meta = {
            "script": f"experiments/fidelity/{script}.py",
            "method": method,
            "references": {
                n: {"repo": references[n].repo, "commit": full_commit(roots[n])} for n in references
            },
            "command": f"python experiments/fidelity/{script}.py --record "
            + " ".join(f"--reference-root {n}=<checkout>" for n in references),
            "recorded_on": datetime.date.today().isoformat(),
            "torch": str(torch.__version__),
        }
        recording.save(path, meta)
        print(f"{method}: recorded {len(recording.rows)} reference values in "
              f"{path.relative_to(ROOT)} ({path.stat().st_size / 1024:.0f} KiB)")  # fmt: skip
    return 0
