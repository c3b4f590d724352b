"""NAS-Bench-201 lookup: the real results of all 15,625 cells, at once, exact about their meaning.

Last stage of the pipeline (``nas.bench``). Dong & Yang, "NAS-Bench-201: Extending the Scope of
Reproducible Neural Architecture Search", ICLR 2020: every cell of the NB201 space (``C=16``,
``N=5`` ``TinyNetwork``) trained on four datasets. ``NB201()`` reads the table embedded in the
package (``embedded/nb201.nbt``, under 2 MB, read on the first query, never at import);
``NB201(path=...)`` reads a file converted by ``nas-bench convert`` (with per-epoch curves) or an
official ``NAS-Bench-201-v1_[01]-*.pth`` directly (through the ``nas-bench-201`` package).

What a number means. A query names a *dataset* (which training run) and a *split* (which images
it was evaluated on); the four datasets are four separate trainings::

    dataset         trained on                     splits
    cifar10-valid   CIFAR-10 train, first 25k      x-valid  = the other 25k training images
                                                   ori-test = the 10k CIFAR-10 test set
    cifar10         CIFAR-10 train, all 50k        ori-test = the 10k CIFAR-10 test set
    cifar100        CIFAR-100 train, 50k           x-valid, x-test = two 5k halves of the test set
                                                   ori-test = the whole 10k test set
    ImageNet16-120  ImageNet16-120 train, 151.7k   x-valid, x-test = two 3k halves of its 6k
                                                   test set; ori-test = all 6k

``split="valid"`` / ``"test"`` are aliases: ``x-valid`` / ``x-test`` for CIFAR-100 and
ImageNet16-120, ``x-valid`` / ``ori-test`` for ``cifar10-valid``, and ``ori-test`` for
``cifar10``. So the papers' "CIFAR-10 valid" is ``cifar10-valid`` / ``x-valid`` and their
"CIFAR-10 test" is ``cifar10`` / ``ori-test``: two different training runs. ``cifar10`` has no
validation split, and asking for one is an error rather than a silent switch of run (which
the official API does). A split that a table lacks is a one-line ``ValueError`` naming those
it has (the embedded table has no ``train`` accuracies; converted official files do).

Values are top-1 accuracies in percent after the last epoch, averaged over the training seeds
(2 or 3 of 777 / 888 / 999). The schedule is the paper's 200 epochs (``hp="200"``) unless
``hp="12"`` is asked for (the official API's default, a different, 12-epoch schedule).
``per_seed`` gives the runs behind a mean. One subtlety of the embedded table (from its sources,
see ``make_embedded.py``): the CIFAR-10 columns are means over the NAS-Bench-201 v1.0 runs,
while the per-seed ``cifar10-valid`` / ``x-valid`` values are the NATS-Bench runs; their mean is
``query(..., seed_set="nats")`` and can differ from the default v1.0 mean by a few points.
``params`` is the exact parameter count of the authors' network for that dataset's classes.
"""

from __future__ import annotations

import math
import numbers
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, Union

from nas.bench.container import MAGIC, Container
from nas.bench.layout import (
    DATASETS,
    EMBEDDED_FILE,
    FORMATS,
    HPS,
    NUM_CELLS,
    SEED_SETS,
    SPLIT_ALIASES,
)
from nas.bench.official import official_table_bytes
from search_spaces.genotype import NB201Genotype, parse_nb201_arch

if TYPE_CHECKING:
    import numpy as np

    Arch = Union[str, int, NB201Genotype]  # noqa: UP007 (read by the type checker only)


def is_benchmark_cell(genotype: object) -> TypeGuard[NB201Genotype]:
    """Whether the benchmark holds ``genotype``: a cell of its space (every ``NB201Genotype``
    is one of its 15,625 cells); a genotype of another space has no entry. What the search
    run, the analysis and ``nas-plot`` ask before a lookup."""
    return isinstance(genotype, NB201Genotype)


_DATASET_BY_LOWER = {d.lower(): d for d in DATASETS}
_ACC_KINDS = ("acc", "seed_acc", "curve_acc", "curve_loss")
_KIND_WORDS = {
    "acc": "accuracies",
    "seed_acc": "per-seed accuracies",
    "curve_acc": "per-epoch accuracy curves",
    "curve_loss": "per-epoch loss curves",
}


def canonical_dataset(dataset: object) -> str:
    """The official spelling of a dataset name (case-insensitive), or a one-line ValueError."""
    found = _DATASET_BY_LOWER.get(dataset.lower()) if isinstance(dataset, str) else None
    if found is None:
        raise ValueError(
            f"unknown NB201 dataset {dataset!r}; expected one of {', '.join(DATASETS)}"
        )
    return found


def canonical_hp(hp: object) -> str:
    """``"200"`` or ``"12"`` from a str or int schedule, or a one-line ValueError."""
    text = str(hp) if isinstance(hp, (str, int)) and not isinstance(hp, bool) else None
    if text is None or text not in HPS:
        raise ValueError(
            f"unknown NB201 schedule hp={hp!r}; expected '200' (200 epochs, the default) "
            "or '12' (the 12-epoch schedule)"
        )
    return text


@dataclass(frozen=True)
class BestCell:
    """The best cell of a dataset / split: ``ties`` lists every index with the same accuracy."""

    index: int
    arch: str
    accuracy: float
    ties: tuple[int, ...]
    dataset: str
    split: str
    hp: str


class NB201:
    """NAS-Bench-201 results by arch string, benchmark index (0..15624) or ``NB201Genotype``.

    ``NB201()`` is the embedded table of all 15,625 cells; ``NB201(path=...)`` a table converted
    by ``nas-bench convert`` or an official ``.pth`` (converted in memory on first use). Nothing
    is read until the first query. See the module docstring for what datasets and splits mean.
    """

    def __init__(self, path: str | Path | None = None, *, trust_pickle: bool = False) -> None:
        self.path = None if path is None else Path(path).expanduser()
        # an official .pth needs the full unpickler (nas.bench.official): only when trusted
        self.trust_pickle = trust_pickle
        self._table: Container | None = None
        self._archs: list[str] = []
        self._arch_index: dict[str, int] = {}
        self._indices: list[int] = []
        self._rows: dict[int, int] | None = None  # benchmark index -> row; None: row == index
        self._available: dict[tuple[str, str, str], list[str]] = {}
        self._columns: dict[str, array] = {}
        self._arrays: dict[str, Any] = {}
        self._names: dict[tuple[Any, ...], str] = {}
        self._sorted: dict[str, list[float]] = {}

    # ------------------------------------------------------------------------------ loading

    @property
    def source(self) -> str:
        """Where the results come from, as error messages name it."""
        return "the embedded NB201 table" if self.path is None else str(self.path)

    def _open(self) -> Container:
        if self.path is None:
            return Container(EMBEDDED_FILE, name=self.source)
        if not self.path.is_file():
            raise FileNotFoundError(f"NB201 results file {self.path} not found")
        with open(self.path, "rb") as f:
            magic = f.read(len(MAGIC))
        if magic == MAGIC:
            return Container(self.path)
        data = official_table_bytes(self.path, trust_pickle=self.trust_pickle)
        return Container(data, name=str(self.path))

    def _load(self) -> Container:
        if self._table is not None:
            return self._table
        table = self._open()
        if table.format not in FORMATS or table.version != 1:
            raise ValueError(
                f"{self.source} holds format {table.format!r} v{table.version}; expected one of "
                f"{', '.join(FORMATS)} v1"
            )
        archs = table.texts("arch")
        if len(archs) != NUM_CELLS:
            raise ValueError(f"{self.source} lists {len(archs)} arch strings; expected {NUM_CELLS}")
        indices = [int(i) for i in table.numbers("index")]
        self._archs = archs
        self._arch_index = {a: i for i, a in enumerate(archs)}
        self._indices = indices
        self._rows = (
            None if indices == list(range(NUM_CELLS)) else {i: r for r, i in enumerate(indices)}
        )
        for name in table.arrays:
            parts = name.split("/")
            if parts[0] in _ACC_KINDS:  # kind/hp/dataset/split[/seed_set]
                self._available.setdefault((parts[0], parts[1], parts[2]), []).append(
                    "/".join(parts[3:])
                )
        self._table = table
        return table

    def __len__(self) -> int:
        self._load()
        return len(self._indices)

    def __repr__(self) -> str:
        return f"NB201({'' if self.path is None else repr(str(self.path))})"

    # ----------------------------------------------------------------------- cells by name

    def index(self, arch: Arch) -> int:
        """The official benchmark index of an arch string, index or ``NB201Genotype``."""
        if isinstance(arch, str):
            self._load()
            found = self._arch_index.get(arch)
            return self._parse(arch) if found is None else found
        if type(arch) is int and 0 <= arch < NUM_CELLS:  # the common case, before the ABC check
            return arch
        if isinstance(arch, numbers.Integral) and not isinstance(arch, bool):
            if 0 <= int(arch) < NUM_CELLS:
                return int(arch)
            raise ValueError(
                f"NB201 index {arch!r} out of range; expected an int in 0..{NUM_CELLS - 1}"
            )
        # Only an already-imported genotype module can have made a genotype: no torch import here.
        if isinstance(arch, NB201Genotype):
            return self._parse(str(arch))
        kind = type(arch).__name__
        hint = " (a DARTS-space genotype has no NAS-Bench-201 entry)" if "Darts" in kind else ""
        raise ValueError(f"expected an NB201 arch string, index or NB201Genotype, got {kind}{hint}")

    def _parse(self, text: str) -> int:
        self._load()
        found = self._arch_index.get(text.strip())
        if found is not None:
            return found
        # Malformed text: let the genotype module word the error.
        found = self._arch_index.get(str(parse_nb201_arch(text)))
        if found is None:
            raise ValueError(f"NB201 arch {text!r} is not in {self.source}")
        return found

    def arch(self, arch: Arch) -> str:
        """The official arch string of a cell (given by index, string or genotype)."""
        index = self.index(arch)
        self._load()
        return self._archs[index]

    def _row(self, arch: Arch) -> int:
        index = self.index(arch)
        if self._table is None:
            self._load()
        if self._rows is None:
            return index
        row = self._rows.get(index)
        if row is None:
            raise ValueError(
                f"NB201 cell {index} is not in {self.source}, which holds {len(self._rows)} of "
                f"the {NUM_CELLS} cells"
            )
        return row

    # ------------------------------------------------------------------ names of the arrays

    def _describe(self, kind: str, hp: str) -> str:
        """What a table has of one kind: 'cifar10 ori-test; cifar100 x-valid, x-test, ...'."""
        parts = []
        for dataset in DATASETS:
            splits = self._available.get((kind, hp, dataset))
            if splits:
                shown = [
                    f"{s.split('/')[0]} (seed_set='{s.split('/')[1]}')" if "/" in s else s
                    for s in splits
                ]
                parts.append(f"{dataset} {', '.join(shown)}")
        return "; ".join(parts) if parts else "none"

    def _name(
        self, kind: str, dataset: str, split: str, hp: str | int, seed_set: str | None
    ) -> str:
        key = (kind, dataset, split, hp, seed_set)
        try:
            return self._names[key]
        except KeyError:
            name = self._names[key] = self._resolve(kind, dataset, split, hp, seed_set)
            return name
        except TypeError:  # unhashable user input: let _resolve word the error
            return self._resolve(kind, dataset, split, hp, seed_set)

    def _resolve(self, kind: str, dataset: Any, split: Any, hp: Any, seed_set: Any) -> str:
        table = self._load()
        ds, hp = canonical_dataset(dataset), canonical_hp(hp)
        what = _KIND_WORDS[kind]
        have = self._available.get((kind, hp, ds), [])
        if not have:
            if kind.startswith("curve") and not any(k[0] == kind for k in self._available):
                raise ValueError(
                    f"{self.source} has no per-epoch curves; convert an official NAS-Bench-201 "
                    "file with `nas-bench convert` and open it with NB201(path=...)"
                )
            raise ValueError(
                f"{self.source} has no {hp}-epoch {what} for {ds}; it has: "
                f"{self._describe(kind, hp)}"
            )
        if not isinstance(split, str):
            raise ValueError(f"expected a split name (str), got {type(split).__name__}")
        canonical = SPLIT_ALIASES[ds].get(split.lower(), split.lower())
        if seed_set is not None and seed_set not in SEED_SETS:
            raise ValueError(
                f"unknown seed_set {seed_set!r}; expected None (the table's column) or "
                f"{', '.join(repr(s) for s in SEED_SETS)}"
            )
        name = f"{kind}/{hp}/{ds}/{canonical}" + ("" if seed_set is None else f"/{seed_set}")
        if name in table:
            return name
        plain = [s for s in have if "/" not in s]
        aliases = {v: k for k, v in SPLIT_ALIASES[ds].items()}
        listed = ", ".join(f"{s} ('{aliases[s]}')" if s in aliases else s for s in plain)
        if seed_set is None and f"{canonical}/nats" in have:
            raise ValueError(
                f"{self.source} has {what} for {ds} {canonical} only from the NATS-Bench seed "
                f"set; pass seed_set='nats' (its mean is query(..., seed_set='nats'), not the "
                "default v1.0 mean)"
            )
        if seed_set is not None and canonical in plain:
            raise ValueError(
                f"seed_set={seed_set!r}: {self.source} has no such {hp}-epoch {what} for {ds} "
                f"{canonical}; it has: {self._describe(kind, hp)}"
            )
        hint = ""
        if ds == "cifar10" and canonical in ("valid", "x-valid"):
            hint = (
                "; CIFAR-10 validation accuracy comes from another training run: "
                "dataset='cifar10-valid', split='x-valid'"
            )
        raise ValueError(
            f"{ds} has no split {split!r} in the {hp}-epoch {what} of {self.source}; "
            f"it has: {listed or 'none without a seed_set'}{hint}"
        )

    def _column(self, name: str) -> array:
        col = self._columns.get(name)
        if col is None:
            col = self._columns[name] = self._load().floats(name)
        return col

    def _ndarray(self, name: str) -> np.ndarray:
        arr = self._arrays.get(name)
        if arr is None:
            arr = self._arrays[name] = self._load().ndarray(name)
        return arr

    # ------------------------------------------------------------------------------ queries

    def query(
        self,
        arch: Arch,
        *,
        dataset: str = "cifar10",
        split: str = "test",
        hp: str | int = "200",
        seed_set: str | None = None,
    ) -> float:
        """Top-1 accuracy (%) of ``arch``: mean over seeds after the last epoch of ``hp``.

        ``dataset`` is one of ``cifar10-valid``, ``cifar10``, ``cifar100``, ``ImageNet16-120``;
        ``split`` one of the dataset's ``x-valid``, ``x-test``, ``ori-test`` (``train`` in
        converted files) or the aliases ``valid`` / ``test`` (module docstring). ``hp="12"``
        selects the 12-epoch schedule. ``seed_set="nats"`` selects the NATS-Bench mean where the
        embedded table has one (``cifar10-valid`` / ``x-valid``). NaN where a value is missing.
        """
        return self._column(self._name("acc", dataset, split, hp, seed_set))[self._row(arch)]

    def per_seed(
        self,
        arch: Arch,
        *,
        dataset: str = "cifar100",
        split: str = "test",
        hp: str | int = "200",
        seed_set: str | None = None,
    ) -> tuple[float, ...]:
        """The accuracy of each training run behind a mean, in seed order.

        The embedded table has them for CIFAR-100 and ImageNet16-120 (every split) and for
        ``cifar10-valid`` / ``x-valid`` with ``seed_set="nats"`` only; it does not record which
        two seeds a two-run cell used (``seeds`` does, for converted official files).
        """
        name = self._name("seed_acc", dataset, split, hp, seed_set)
        width = self._load().shape(name)[1]
        row = self._row(arch)
        values = self._column(name)[row * width : (row + 1) * width]
        return tuple(v for v in values if not math.isnan(v))

    def n_seeds(
        self,
        arch: Arch,
        *,
        dataset: str = "cifar100",
        split: str = "test",
        hp: str | int = "200",
        seed_set: str | None = None,
    ) -> int:
        """How many training runs are behind ``per_seed`` (and the mean) of this cell."""
        return len(self.per_seed(arch, dataset=dataset, split=split, hp=hp, seed_set=seed_set))

    def seeds(self, arch: Arch, *, dataset: str, hp: str | int = "200") -> tuple[int, ...]:
        """The seeds of the runs of ``arch`` on ``dataset`` (converted official files only)."""
        name = f"seed/{canonical_hp(hp)}/{canonical_dataset(dataset)}"
        table = self._load()
        if name not in table:
            raise ValueError(
                f"{self.source} does not record seed ids for {canonical_dataset(dataset)} "
                f"({canonical_hp(hp)} epochs); per-seed values are in seed order (777, 888, 999)"
            )
        width = table.shape(name)[1]
        row = self._row(arch)
        ids = self._column(name)[row * width : (row + 1) * width]
        return tuple(int(s) for s in ids if s >= 0)

    def params(self, arch: Arch, *, dataset: str = "cifar10") -> int:
        """Exact parameter count of the cell's network (C=16, N=5) for ``dataset``'s classes."""
        ds = canonical_dataset(dataset)
        name = f"params/{ds}"
        if name not in self._load():
            raise ValueError(f"{self.source} has no parameter counts for {ds}")
        count = self._column(name)[self._row(arch)]
        if math.isnan(count):
            raise ValueError(
                f"{self.source} has no parameter count of cell {self.index(arch)} for {ds}"
            )
        return int(count)

    def runtime(self, arch: Arch, *, dataset: str, hp: str | int = "200") -> float:
        """Total training time of one run in seconds (mean over seeds), as the source has it."""
        ds, hp = canonical_dataset(dataset), canonical_hp(hp)
        name = f"runtime/{hp}/{ds}"
        if name not in self._load():
            have = [
                n.split("/", 2)[2] for n in self._load().arrays if n.startswith(f"runtime/{hp}/")
            ]
            raise ValueError(
                f"{self.source} has no {hp}-epoch training time for {ds}; it has: "
                f"{', '.join(have) or 'none'}"
            )
        return self._column(name)[self._row(arch)]

    def record(self, arch: Arch) -> dict[str, float]:
        """Every per-cell number of ``arch`` keyed by its array name (``acc/200/cifar10/ori-test``,
        ``params/cifar100``, ``runtime/200/cifar100``, ``extra/naswot_score_v1``, ...)."""
        table = self._load()
        row = self._row(arch)
        return {
            name: self._column(name)[row]
            for name, e in table.arrays.items()
            if len(e["shape"]) == 1 and e["dtype"] != "text" and name != "index"
        }

    def curve(
        self,
        arch: Arch,
        *,
        dataset: str,
        split: str,
        hp: str | int = "200",
        seed: int | None = None,
        metric: str = "accuracy",
    ) -> np.ndarray:
        """Per-epoch ``accuracy`` (%) or ``loss`` of ``arch``: seed mean, or run ``seed``.

        Only converted official files have curves; the embedded table has final values only.
        """
        import numpy as np  # on first use: importing nas.bench stays instant (no numpy)

        if metric not in ("accuracy", "loss"):
            raise ValueError(f"unknown curve metric {metric!r}; expected 'accuracy' or 'loss'")
        kind = "curve_acc" if metric == "accuracy" else "curve_loss"
        name = self._name(kind, dataset, split, hp, None)
        data = self._ndarray(name)[self._row(arch)].astype(np.float64)  # [seeds, epochs]
        ids = self.seeds(arch, dataset=dataset, hp=hp)
        if seed is None:
            return data[: len(ids)].mean(axis=0)
        if seed not in ids:
            raise ValueError(
                f"NB201 cell {self.index(arch)} has no {dataset} run with seed {seed!r}; "
                f"its seeds: {', '.join(map(str, ids))}"
            )
        return data[ids.index(seed)]

    # ----------------------------------------------------------------- across the benchmark

    def datasets(self, *, hp: str | int = "200") -> tuple[str, ...]:
        """The datasets with ``hp``-epoch accuracies in this table."""
        hp = canonical_hp(hp)
        self._load()
        return tuple(d for d in DATASETS if self._available.get(("acc", hp, d)))

    def splits(self, dataset: str, *, hp: str | int = "200") -> tuple[str, ...]:
        """The splits of ``dataset`` with ``hp``-epoch mean accuracies (no seed-set variants)."""
        ds, hp = canonical_dataset(dataset), canonical_hp(hp)
        self._load()
        return tuple(s for s in self._available.get(("acc", hp, ds), []) if "/" not in s)

    def best(
        self,
        *,
        dataset: str = "cifar10",
        split: str = "test",
        hp: str | int = "200",
        seed_set: str | None = None,
    ) -> BestCell:
        """The cell with the highest mean accuracy (the lowest index among exact ties)."""
        name = self._name("acc", dataset, split, hp, seed_set)
        col = self._column(name)
        top = max(v for v in col if not math.isnan(v))
        ties = sorted(self._indices[r] for r, v in enumerate(col) if v == top)
        parts = name.split("/")
        return BestCell(
            index=ties[0],
            arch=self._archs[ties[0]],
            accuracy=top,
            ties=tuple(ties),
            dataset=parts[2],
            split="/".join(parts[3:]),
            hp=parts[1],
        )

    def _sorted_values(self, name: str) -> list[float]:
        values = self._sorted.get(name)
        if values is None:
            values = self._sorted[name] = sorted(v for v in self._column(name) if not math.isnan(v))
        return values

    def rank(
        self,
        arch: Arch,
        *,
        dataset: str = "cifar10",
        split: str = "test",
        hp: str | int = "200",
        seed_set: str | None = None,
    ) -> int:
        """1 + the number of cells with a strictly higher mean accuracy (the best cell is 1)."""
        name = self._name("acc", dataset, split, hp, seed_set)
        value = self._value(arch, name)
        values = self._sorted_values(name)
        return len(values) - bisect_right(values, value) + 1

    def percentile(
        self,
        arch: Arch,
        *,
        dataset: str = "cifar10",
        split: str = "test",
        hp: str | int = "200",
        seed_set: str | None = None,
    ) -> float:
        """Percentage of cells whose mean accuracy is at most this cell's (the best is 100)."""
        name = self._name("acc", dataset, split, hp, seed_set)
        value = self._value(arch, name)
        values = self._sorted_values(name)
        return 100.0 * bisect_right(values, value) / len(values)

    def _value(self, arch: Arch, name: str) -> float:
        value = self._column(name)[self._row(arch)]
        if math.isnan(value):
            raise ValueError(f"NB201 cell {self.index(arch)} has no value for {name}")
        return value


__all__ = [
    "DATASETS",
    "EMBEDDED_FILE",
    "HPS",
    "NB201",
    "NUM_CELLS",
    "SPLIT_ALIASES",
    "BestCell",
    "canonical_dataset",
    "canonical_hp",
]
