"""Official NAS-Bench-201 files (``NAS-Bench-201-v1_0-e61699.pth``, ``-v1_1-096897.pth``).

Last stage of the pipeline (``nas.bench``). Dong & Yang, NAS-Bench-201 (ICLR 2020). The official
file is a pickled dict ``{"meta_archs", "arch2infos": {index: {"less": ..., "full": ...}},
"evaluated_indexes"}``; ``full`` holds the 200-epoch runs (``hp="200"``) and ``less`` the
12-epoch ones (``hp="12"``, the official API's default, which this module never falls back to).
Each cell's state is read by the ``nas-bench-201`` package's own ``ArchResults`` /
``ResultsCount`` classes, and the seed means are the package's ``get_metrics(...,
is_random=False)``, asked per schedule explicitly.

Two traps handled here: ``torch.load`` in torch >= 2.6 defaults to ``weights_only=True``, which
refuses pickles holding more than tensors and plain containers (numpy scalars, for one), and the
package's loader does not set it. Such a pickle can run code, so the file is read with the full
unpickler only when the user says they trust it (``nas-bench convert --trust-pickle``,
``trust_pickle=True``); otherwise it is refused in one line naming that switch, before anything
in it runs. Convert it once and use the ``.nbt``, which holds arrays only. And the official file
takes ~28 GB of RAM through the official API, so ``convert_official`` turns it once into a
compact ``.nbt`` (``nb201-curves`` format, see ``container.py``) that keeps every per-epoch curve::

    acc/{hp}/{dataset}/{split}          [cells]               seed mean after the last epoch
    seed_acc/{hp}/{dataset}/{split}     [cells, seeds]        each run after its last epoch
    seed/{hp}/{dataset}                 [cells, seeds]        the seeds (-1: no such run)
    curve_acc|curve_loss/{hp}/{dataset}/{split}  [cells, seeds, epochs]  float32, NaN-padded
    params/{dataset}, flops/{dataset}, latency/{dataset}   exact count, MFLOPs, seconds
    runtime/{hp}/{dataset}              mean total training time of a run (s)
    arch (all 15,625 arch strings), index (the cells present)

``split`` is ``train`` plus the file's evaluation sets (``x-valid``, ``x-test``, ``ori-test``).
``NB201(path=...)`` reads both the converted file and the official ``.pth``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nas.bench.container import encode_container, write_container
from nas.bench.layout import DATASETS, NUM_CELLS, embedded_archs

HP_KEYS = {"200": "full", "12": "less"}  # our hp -> the official file's key
# (schedule, dataset) -> (seeds, epochs, splits): the shape of the arrays
Layout = dict[tuple[str, str], tuple[int, int, list[str]]]
_OFFICIAL_KEYS = ("meta_archs", "arch2infos", "evaluated_indexes")


def load_official(path: str | Path, *, trust_pickle: bool = False) -> dict[str, Any]:
    """The raw dict of an official NAS-Bench-201 ``.pth``: it needs Python's full unpickler, so
    it is read only with ``trust_pickle`` (see the module doc), else refused in one line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"official NAS-Bench-201 file {path} not found")
    from nas.run.checkpoint import UnsafeFileError, safe_load

    try:
        data = safe_load(
            path,
            trust_pickle=trust_pickle,
            switch="--trust-pickle (nas-bench convert FILE OUT.nbt --trust-pickle, once; then "
            "use the .nbt)",
        )
    except UnsafeFileError:
        raise
    except Exception as e:  # any unpickling failure means: not a file we can read
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise ValueError(
            f"{path} cannot be read as an official NAS-Bench-201 .pth file "
            f"({type(e).__name__}: {first})"
        ) from None
    if not isinstance(data, dict) or any(k not in data for k in _OFFICIAL_KEYS):
        raise ValueError(
            f"{path} is not an official NAS-Bench-201 file; expected a dict with keys "
            f"{', '.join(_OFFICIAL_KEYS)}"
        )
    return data


def _check_index_map(meta_archs: list[str], path: Path) -> None:
    if len(meta_archs) != NUM_CELLS:
        raise ValueError(f"{path} lists {len(meta_archs)} architectures; expected {NUM_CELLS}")
    reference = embedded_archs()  # the embedded table carries the official index -> arch map
    for i, arch in enumerate(meta_archs):
        if arch != reference[i]:
            raise ValueError(
                f"{path}: architecture {i} is {arch!r}; NAS-Bench-201 index {i} is "
                f"{reference[i]!r} (not a NAS-Bench-201 file?)"
            )


def official_arrays(
    path: str | Path, *, trust_pickle: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(meta, arrays)`` of the ``nb201-curves`` table holding an official file's results."""
    import numpy as np  # on first use: importing nas.bench stays instant (no numpy)

    path = Path(path)
    data = load_official(path, trust_pickle=trust_pickle)
    meta_archs = [str(a) for a in data["meta_archs"]]
    _check_index_map(meta_archs, path)
    infos = data["arch2infos"]
    keys = sorted(infos, key=int)
    n = len(keys)

    # Pass 1, on the raw state dicts: how many seeds, epochs and which splits per schedule.
    layout: Layout = {}
    for key in keys:
        with _reading(path, key):
            _scan_layout(infos[key], layout)

    order = {s: i for i, s in enumerate(("train", "x-valid", "x-test", "ori-test"))}
    layout = {
        (hp, ds): (width, epochs, sorted(splits, key=lambda s: (order.get(s, len(order)), s)))
        for hp in HP_KEYS
        for ds in DATASETS
        if (hp, ds) in layout
        for width, epochs, splits in [layout[(hp, ds)]]
    }
    arrays: dict[str, Any] = {"arch": meta_archs, "index": np.array(keys, dtype="<i4")}
    for (hp, ds), (width, epochs, splits) in layout.items():
        arrays[f"seed/{hp}/{ds}"] = np.full((n, width), -1, dtype="<i4")
        arrays[f"runtime/{hp}/{ds}"] = np.full(n, np.nan)
        for split in splits:
            arrays[f"acc/{hp}/{ds}/{split}"] = np.full(n, np.nan)
            arrays[f"seed_acc/{hp}/{ds}/{split}"] = np.full((n, width), np.nan)
            for kind in ("curve_acc", "curve_loss"):
                arrays[f"{kind}/{hp}/{ds}/{split}"] = np.full(
                    (n, width, epochs), np.nan, dtype="<f4"
                )
    for ds in DATASETS:
        if any(d == ds for _, d in layout):
            for cost in ("params", "flops", "latency"):
                arrays[f"{cost}/{ds}"] = np.full(n, np.nan)

    # Pass 2, through the package's classes. Each cell's raw entry is dropped once read, so
    # memory shrinks as the conversion goes.
    for row, key in enumerate(keys):
        entry = infos.pop(key)
        with _reading(path, key):
            _read_cell(entry, row, layout, arrays)

    meta = {
        "description": "NAS-Bench-201 results with per-epoch curves, converted from an "
        "official file by `nas-bench convert`",
        "source": path.name,
        "schedules": {hp: f"the official file's {part!r} results" for hp, part in HP_KEYS.items()},
        "credits": "NAS-Bench-201 (Dong & Yang, ICLR 2020), official benchmark file",
    }
    return meta, arrays


@contextlib.contextmanager
def _reading(path: Path, key: Any) -> Iterator[None]:
    """A malformed entry of an official file as one line naming the file and the cell."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, AssertionError) as e:
        detail = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(
            f"{path}: the entry of cell {key} cannot be read ({type(e).__name__}"
            f"{': ' + detail[:200] if detail else ''}); expected an official NAS-Bench-201 file"
        ) from None


def _scan_layout(info: dict[str, Any], layout: Layout) -> None:
    """Widen ``layout`` (seeds, epochs, splits per schedule and dataset) to one cell's runs."""
    for hp, part in HP_KEYS.items():
        state = info.get(part)
        if state is None:
            continue
        for ds, seeds in state["dataset_seed"].items():
            if ds not in DATASETS:
                continue
            width, epochs, splits = layout.get((hp, ds), (0, 0, ["train"]))
            for seed in seeds:
                result = state["all_results"][(ds, seed)]
                epochs = max(epochs, int(result["epochs"]))
                splits += [s for s in result["eval_names"] if s not in splits]
            layout[(hp, ds)] = (max(width, len(seeds)), epochs, splits)


def _read_cell(
    entry: dict[str, Any],
    row: int,
    layout: Layout,
    arrays: dict[str, Any],
) -> None:
    """One cell's runs into row ``row`` of the arrays, through the package's classes."""
    from nas_201_api import ArchResults  # optional: only the official file's classes need it

    for hp in ("12", "200"):  # the 200-epoch costs are written last and win
        if HP_KEYS[hp] not in entry:
            continue
        results = ArchResults.create_from_state_dict(entry[HP_KEYS[hp]])
        for ds in results.get_dataset_names():
            if (hp, ds) not in layout:
                continue
            splits = layout[(hp, ds)][2]
            for slot, seed in enumerate(results.get_dataset_seeds(ds)):
                run = results.query(ds, seed)
                arrays[f"seed/{hp}/{ds}"][row, slot] = seed
                for split in splits:
                    if split == "train":
                        # files may hold some epochs only: the others are missing values
                        acc, loss = run.train_acc1es or {}, run.train_losses or {}
                        curve = [
                            (acc.get(e, math.nan), loss.get(e, math.nan)) for e in range(run.epochs)
                        ]
                    elif split in run.eval_names:
                        acc, loss = run.eval_acc1es or {}, run.eval_losses or {}
                        curve = [
                            (
                                acc.get(f"{split}@{e}", math.nan),
                                loss.get(f"{split}@{e}", math.nan),
                            )
                            for e in range(run.epochs)
                        ]
                    else:
                        continue
                    arrays[f"curve_acc/{hp}/{ds}/{split}"][row, slot, : run.epochs] = [
                        c[0] for c in curve
                    ]
                    arrays[f"curve_loss/{hp}/{ds}/{split}"][row, slot, : run.epochs] = [
                        c[1] for c in curve
                    ]
                    arrays[f"seed_acc/{hp}/{ds}/{split}"][row, slot] = float(curve[-1][0])
            for split in splits:
                try:  # the package's seed mean after the last epoch of this schedule
                    metrics = results.get_metrics(ds, split, iepoch=None, is_random=False)
                except (KeyError, ValueError, TypeError, AssertionError):
                    continue
                arrays[f"acc/{hp}/{ds}/{split}"][row] = float(metrics["accuracy"])
            costs = results.get_compute_costs(ds)
            total = costs.get("T-train@total")
            arrays[f"runtime/{hp}/{ds}"][row] = math.nan if total is None else float(total)
            arrays[f"params/{ds}"][row] = round(float(costs["params"]) * 1e6)  # MB -> count
            arrays[f"flops/{ds}"][row] = float(costs["flops"])
            latency = costs.get("latency")
            arrays[f"latency/{ds}"][row] = math.nan if latency is None else float(latency)


def official_table_bytes(
    path: str | Path, *, codec: str = "raw", trust_pickle: bool = False
) -> bytes:
    """An official file's results as ``.nbt`` bytes (uncompressed by default: kept in memory)."""
    meta, arrays = official_arrays(path, trust_pickle=trust_pickle)
    return encode_container(
        format="nb201-curves", version=1, meta=meta, arrays=arrays, codec=codec, level=6
    )


def convert_official(src: str | Path, dst: str | Path, *, trust_pickle: bool = False) -> Path:
    """Convert an official NAS-Bench-201 ``.pth`` into a compressed ``.nbt`` with all curves
    (``trust_pickle``: the official file needs the full unpickler, see the module doc)."""
    dst = Path(dst)
    if Path(src).resolve() == dst.resolve():
        raise ValueError(f"convert: output {dst} would overwrite the official file")
    write_container(dst, official_table_bytes(src, codec="zlib", trust_pickle=trust_pickle))
    return dst


__all__ = [
    "HP_KEYS",
    "convert_official",
    "load_official",
    "official_arrays",
    "official_table_bytes",
]
