"""CPU-scale study: DARTS vs DrNAS, each with argmax and with perturbation selection (DARTS-PT),
on the NAS-Bench-201 space, a few seeds, on the embedded CIFAR-10 subset.

A sanity study that runs on 2 shared CPU cores in about 15 minutes, not a reproduction: the
supernet is reduced (C=8, N=1 cell per stage instead of C=16, N=5), it trains for 3 epochs on
the first 1,600 images of ``cifar10-mini`` (800 for the weights, 800 for the architecture)
instead of 50-100 epochs on 50,000, and PT fine-tunes for one epoch between projections (5
tuning epochs, ``proj_intv * (6 - 1)`` as the reference) and scores each candidate on 4
batches. What it does give is each found cell's *real* NAS-Bench-201 accuracy (the
benchmark's 200-epoch training of that cell), so the methods' choices can be compared honestly
at this scale. (C=8, N=2 on all 4,000 images takes about 80 s an epoch here: 12 runs would
need well over an hour.)

    python experiments/cpu_study/run_study.py                 # every run, then the table
    python experiments/cpu_study/run_study.py --table-only    # the table from existing runs
    python experiments/cpu_study/run_study.py --dry-run       # print the nas-search commands
    python experiments/cpu_study/run_study.py --methods zc-naswot zc-synflow --seeds 0 1 2 3

``zc-naswot`` / ``zc-synflow`` are zero-cost operation scoring (``selection=zc``) on the same
supernet, never trained (``epochs=0``).

Runs go to ``outputs/cpu_study/<method>/seed<seed>/`` (a run with a genotype.json is not run
again); the table is printed and written to ``experiments/cpu_study/results.md``. The runs are
ordinary run folders: ``nas-plot`` and the notebooks read them (NAS_RUNS=outputs/cpu_study).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

COMMON = [
    "space=nb201",
    "space.C=8",
    "space.layers=1",
    "data=cifar10-mini",
    "data.max_items=1600",
    "batch_size=64",
    "eval=false",
    "log_every=5",
]
PT = ["selection=pt", "selection.proj_intv=1", "selection.num_val_batches=4"]
# Zero-cost operation scoring (Xiang et al., AAAI 2023) on the untrained supernet (epochs=0):
# pool of 10 runs, batches of 64 (the paper: 256 on NB201), 3 post-validation batches (paper 100)
ZC = ["selection=zc", "selection.batch_size=64", "selection.validate_rounds=3"]
METHODS: dict[str, list[str]] = {
    "darts": ["search=darts", "selection=argmax"],
    "darts+pt": ["search=darts", *PT],
    "drnas": ["search=drnas", "selection=argmax"],
    "drnas+pt": ["search=drnas", *PT],
    # the sampling strategies; RS-WS selects with its own selector at this scale:
    # 100 random architectures on one batch each, the top 5 on the whole architecture split
    "gdas": ["search=gdas", "selection=argmax"],
    "gdas+pt": ["search=gdas", *PT],
    "snas": ["search=snas", "selection=argmax"],
    "snas+pt": ["search=snas", *PT],
    "reinmax": ["search=reinmax", "selection=argmax"],
    "reinmax+pt": ["search=reinmax", *PT],
    "rsws": [
        "search=rsws",
        "selection=rsws",
        "selection.rounds=1",
        "selection.archs=100",
        "selection.batches_per_arch=1",
        "selection.top_k=5",
    ],
    "rsws+pt": ["search=rsws", *PT],
    "zc-naswot": ["search=darts", *ZC, "selection.proxy=naswot"],
    "zc-synflow": ["search=darts", *ZC, "selection.proxy=synflow"],
}
# The robustness components (nas.strategies.components) on DARTS, argmax and PT. Their schedules
# are scaled to the study's 3 epochs: beta-DARTS ramps lambda over the search (not over 100
# epochs, which would keep it below 1), PC-DARTS warms up for 1 epoch (not 15) at K=4.
COMPONENTS: dict[str, list[str]] = {
    "sdarts_rs": [],
    "sdarts_adv": [],
    "beta_darts": ["components.beta_darts.ramp_epochs=null"],
    "darts_minus": [],
    "pc_darts": ["components.pc_darts.warmup_epochs=1"],
    "fair_darts": [],
}
for _name, _extra in COMPONENTS.items():
    METHODS[f"darts+{_name}"] = [
        "search=darts",
        "selection=argmax",
        f"components=[{_name}]",
        *_extra,
    ]
    METHODS[f"darts+{_name}+pt"] = ["search=darts", f"components=[{_name}]", *_extra, *PT]
UNTRAINED = {"zc-naswot", "zc-synflow"}  # selection without any supernet training
# the sampling strategies' runs (--methods gdas gdas+pt ...), kept out of the default set so
# that the default study stays the 12 runs its table was written from
SAMPLING = {"gdas", "gdas+pt", "snas", "snas+pt", "reinmax", "reinmax+pt", "rsws", "rsws+pt"}
DATASETS = (
    ("cifar10", "CIFAR-10"),
    ("cifar100", "CIFAR-100"),
    ("ImageNet16-120", "ImageNet16-120"),
)


def run_dir(out: Path, method: str, seed: int) -> Path:
    return out / method.replace("+", "_") / f"seed{seed}"


def command(method: str, seed: int, epochs: int, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nas.cli.search",
        *COMMON,
        *METHODS[method],
        f"epochs={0 if method in UNTRAINED else epochs}",
        f"seed={seed}",
        f"hydra.run.dir={run_dir(out, method, seed)}",
    ]


def _run_one(method: str, seed: int, epochs: int, out: Path, env: dict[str, str]) -> str:
    """One nas-search run of the study; its wall time goes to ``study_seconds.txt``."""
    folder = run_dir(out, method, seed)
    if (folder / "genotype.json").is_file():
        return f"[{method} seed {seed}] done already: {folder}"
    cmd = command(method, seed, epochs, out)
    print(f"[{method} seed {seed}] {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{method} seed {seed} failed:\n{proc.stderr[-3000:]}")
    (folder / "study_seconds.txt").write_text(f"{seconds:.1f}\n")
    return f"[{method} seed {seed}] {seconds:.0f} s: {proc.stdout.splitlines()[-1]}"


def run_all(
    methods: list[str], seeds: list[int], epochs: int, out: Path, threads: int, jobs: int = 1
) -> None:
    """Every (method, seed) run, ``jobs`` at a time (each its own process of ``threads``)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    runs = [(method, seed) for method in methods for seed in seeds]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_run_one, m, s, epochs, out, env) for m, s in runs]
        for future in as_completed(futures):
            try:
                print(future.result(), flush=True)
            except RuntimeError as error:
                for other in futures:
                    other.cancel()
                raise SystemExit(str(error)) from None


def table(methods: list[str], seeds: list[int], out: Path) -> str:
    from nas.analysis.stats import mean_std
    from nas.bench import NB201
    from search_spaces.genotype import genotype_from_json

    bench = NB201()
    rows = [
        "| method | seed | NB201 index | cell | CIFAR-10 test | CIFAR-100 test | "
        "ImageNet16-120 test | search time (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    summary = []
    for method in methods:
        accs: dict[str, list[float]] = {d: [] for d, _ in DATASETS}
        times = []
        for seed in seeds:
            folder = run_dir(out, method, seed)
            record_path = folder / "genotype.json"
            if not record_path.is_file():
                rows.append(f"| {method} | {seed} | (not run) | | | | | |")
                continue
            record = json.loads(record_path.read_text())
            genotype = str(record.get("arch") or genotype_from_json(record["genotype"]))
            escaped = genotype.replace("|", "\\|")  # a pipe in a Markdown table cell
            values = {
                d: bench.query(genotype, dataset=d, split="test", hp="200") for d, _ in DATASETS
            }
            for d, _ in DATASETS:
                accs[d].append(values[d])
            seconds_file = folder / "study_seconds.txt"
            seconds = float(seconds_file.read_text()) if seconds_file.is_file() else float("nan")
            times.append(seconds)
            rows.append(
                f"| {method} | {seed} | {bench.index(genotype)} | `{escaped}` | "
                + " | ".join(f"{values[d]:.2f}" for d, _ in DATASETS)
                + f" | {seconds:.0f} |"
            )
        if accs["cifar10"]:
            cells = []
            for d, _ in DATASETS:
                m, s = mean_std(accs[d])
                cells.append(f"**{m:.2f} ± {s:.2f}**")
            mt, _ = mean_std(times)
            summary.append(
                f"| **{method}** | mean ± std ({len(accs['cifar10'])} seeds) | | | "
                + " | ".join(cells)
                + f" | {mt:.0f} |"
            )
    best = bench.best(dataset="cifar10", split="test")
    footer = (
        f"\nFor scale: the best of the 15,625 NB201 cells reaches {best.accuracy:.2f} on "
        "CIFAR-10 test (index "
        f"{best.index}); NB201 accuracies are the benchmark's 200-epoch means (CIFAR-10 = the "
        "`cifar10` / `ori-test` training, CIFAR-100 and ImageNet16-120 `x-test`).\n"
    )
    return "\n".join(rows + summary) + "\n" + footer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--methods",
        nargs="+",
        # the zc methods, the sampling strategies and the components: name them
        # (--methods gdas darts+sdarts_rs ...)
        default=[
            m
            for m in METHODS
            if m not in UNTRAINED | SAMPLING and not any(c in m for c in COMPONENTS)
        ],
        choices=list(METHODS),
    )
    parser.add_argument(
        "--out", type=Path, default=Path("outputs/cpu_study"), help="relative to the repo root"
    )
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each run")
    parser.add_argument(
        "--jobs", type=int, default=1, help="runs at a time (2 on 2 cores with --threads 1)"
    )
    parser.add_argument(
        "--results", type=Path, default=HERE / "results.md", help="where the table is written"
    )
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if not args.out.is_absolute():
        args.out = REPO / args.out
    if args.dry_run:
        for method in args.methods:
            for seed in args.seeds:
                out = args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out
                cmd = command(method, seed, args.epochs, out)
                print("nas-search " + " ".join(cmd[3:]))
        return 0
    if not args.table_only:
        t0 = time.perf_counter()
        run_all(args.methods, args.seeds, args.epochs, args.out, args.threads, args.jobs)
        print(f"all runs: {time.perf_counter() - t0:.0f} s", flush=True)
    text = table(args.methods, args.seeds, args.out)
    print(text)
    args.results.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
