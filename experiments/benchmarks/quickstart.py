"""Wall time and found cells of the quickstart (``nas-search`` alone), over seeds.

Runs ``nas-search seed=<k> hydra.run.dir=<out>/seed<k>`` one after the other with
``OMP_NUM_THREADS`` threads (2 by default: the README's "2 CPU cores"), and prints per seed the
wall time, the load average before and after (the machine's other work), the found cell's
NAS-Bench-201 index and its CIFAR-10 / CIFAR-100 / ImageNet16-120 test accuracies, then the
mean and spread of the accuracies. The README's quickstart table comes from these runs.

    python experiments/benchmarks/quickstart.py --seeds 0 1 2 3 4
    python experiments/benchmarks/quickstart.py --seeds 0 1 2 --out outputs/bench_bf16 amp=bf16

Overrides after the options are passed to every ``nas-search`` (``amp=bf16``: bf16 autocast).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

DATASETS = (
    ("cifar10", "CIFAR-10"),
    ("cifar100", "CIFAR-100"),
    ("ImageNet16-120", "ImageNet16-120"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("outputs/bench_quickstart"))
    parser.add_argument("overrides", nargs="*", help="nas-search overrides for every seed")
    args = parser.parse_args()

    from nas.bench import NB201

    bench = NB201()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    rows = []
    for seed in args.seeds:
        run_dir = args.out / f"seed{seed}"
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "nas.cli.search", f"seed={seed}", f"hydra.run.dir={run_dir}"]
        cmd += args.overrides
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        record = json.loads((run_dir / "genotype.json").read_text())
        accs = [bench.query(record["arch"], dataset=d, split="test") for d, _ in DATASETS]
        rows.append((seed, record["index"], *accs, wall, load_before, os.getloadavg()[0]))
        print(
            f"seed {seed}: cell {record['index']}  "
            + "  ".join(f"{name} {a:.2f}" for (_, name), a in zip(DATASETS, accs))
            + f"  {wall:.0f} s (load average {load_before:.1f} -> {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    for i, (_, name) in enumerate(DATASETS):
        values = [row[2 + i] for row in rows]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        mean = statistics.mean(values)
        print(f"{name} test: {mean:.2f} +- {spread:.2f} over {len(values)} seeds")


if __name__ == "__main__":
    main()
