"""The collapse to parameter-free operations over a longer search: DARTS vs each fix.

A CPU-scale experiment on the embedded data (``cifar10-mini``): the NB201 supernet of the
CPU study (C=8, one cell per stage, the first 1,600 images) searched for ``--epochs`` epochs
(default 30, ten times the study's) with first-order DARTS alone and with each robustness
component (``nas.strategies.components``), argmax selection, one run folder per method and seed
under ``outputs/collapse/``. ``notebooks/collapse.ipynb`` reads them and plots the share of
parameter-free operations (``none``, ``skip_connect``, pooling) in each epoch's argmax cell.

    python experiments/collapse/run_collapse.py                    # every method, seed 0
    python experiments/collapse/run_collapse.py --seeds 0 1 2 --epochs 50
    python experiments/collapse/run_collapse.py --dry-run          # the nas-search commands

Schedules follow the search's length (epsilon, lambda and beta ramps over the run); PC-DARTS
warms up for a third of it, as 15 of its 50 epochs. A run with a genotype.json is not run again.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMON = [
    "space=nb201", "space.C=8", "space.layers=1", "data=cifar10-mini", "data.max_items=1600",
    "batch_size=64", "eval=false", "log_every=5", "figures=false", "search=darts",
    "selection=argmax",
]  # fmt: skip


def methods(epochs: int) -> dict[str, list[str]]:
    return {
        "darts": [],
        "sdarts_rs": ["components=[sdarts_rs]"],
        "sdarts_adv": ["components=[sdarts_adv]"],
        "beta_darts": ["components=[beta_darts]", "components.beta_darts.ramp_epochs=null"],
        "darts_minus": ["components=[darts_minus]"],
        "pc_darts": ["components=[pc_darts]", f"components.pc_darts.warmup_epochs={epochs // 3}"],
        "fair_darts": ["components=[fair_darts]"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--methods", nargs="+", default=None)
    parser.add_argument("--out", type=Path, default=REPO / "outputs" / "collapse")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    table = methods(args.epochs)
    for name in args.methods or list(table):
        if name not in table:
            parser.error(f"unknown method {name!r}; expected one of {', '.join(table)}")
        for seed in args.seeds:
            run_dir = args.out / name / f"seed{seed}"
            cmd = [sys.executable, "-m", "nas.cli.search", *COMMON, *table[name],
                   f"epochs={args.epochs}", f"seed={seed}", f"hydra.run.dir={run_dir}"]  # fmt: skip
            if args.dry_run:
                print(" ".join(["nas-search", *cmd[3:]]))
                continue
            if (run_dir / "genotype.json").is_file():
                continue
            env = dict(os.environ, OMP_NUM_THREADS="1")
            subprocess.run(cmd, check=True, cwd=REPO, env=env)


if __name__ == "__main__":
    main()
