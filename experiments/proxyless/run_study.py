"""CPU-scale study of the ProxylessNAS block chain: DARTS, ProxylessNAS, FBNet and ProxylessNAS
under two latency budgets, on the 32x32 chain (``proxyless_cifar``) and the embedded CIFAR-10
subset, 3 seeds each.

A sanity study that runs on 2 shared CPU cores in about an hour, not a reproduction (the paper
searches 200 epochs on ImageNet at full width). What it shows, per method and seed: the found
network, its latency *measured here* (the whole network, batch 1, one thread, the table's
protocol) beside the table's prediction and the budget, its parameters, its test accuracy after
a short retraining, and each strategy's search step time and peak memory (the search process's
maximum resident set).

Steps (each skipped where its output exists, so an interrupted study continues):

1. ``nas-profile --space proxyless_cifar`` at the study's size (C=8, all 21 blocks, 32x32,
   batch 1, one thread), calibrated on 20 whole networks: ``outputs/proxyless_study/table.json``.
2. The two budgets, from the table: a quarter and half of the way from the cheapest network of
   the chain to the dearest (calibrated table latency), rounded to 0.01 ms. (Random networks
   are no guide: their latencies, sums of 21 independent choices, crowd around the middle.)
3. 15 ``nas-search`` runs (5 methods x seeds 0, 1, 2), ``--jobs`` at a time, one thread each,
   under ``/usr/bin/time`` for the peak memory. The budgeted runs add the latency cost
   (``cost=latency``, NNI's hinge form with the budget as target) and ``selection=budget``,
   which times the chosen network and replaces it until its measured latency meets the budget.
4. ``nas-train`` of each found network at the search's width (5 epochs on all 4,000 training
   images, test on the 1,000 test images).
5. Each found network timed again here, after all runs (warm-up 20, median of 100 calls).

    python experiments/proxyless/run_study.py              # everything, then the table
    python experiments/proxyless/run_study.py --table-only # the table from existing outputs
    python experiments/proxyless/run_study.py --dry-run    # the commands
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
from statistics import mean, pstdev

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SPACE = "proxyless_cifar"
C, BLOCKS = 8, 21
SEARCH = [
    f"space={SPACE}",
    f"space.C={C}",
    f"space.layers={BLOCKS}",
    "data=cifar10-mini",  # all 4,000 images: 2,000 train the weights, 2,000 the architecture
    "batch_size=64",
    "eval=false",
    "log_every=10",
]
METHODS = ("darts", "proxylessnas", "fbnet", "proxylessnas+tight", "proxylessnas+loose")
# each budget at this fraction of the way from the cheapest network of the table to the dearest
BUDGET_FRACTIONS = {"tight": 0.25, "loose": 0.5}
TRAIN_EPOCHS = 5


def out_dir(args: argparse.Namespace) -> Path:
    return Path(args.out).resolve()


def run_dir(out: Path, method: str, seed: int) -> Path:
    return out / method.replace("+", "_") / f"seed{seed}"


# ------------------------------------------------------------------------ table, budgets


def profile_table(out: Path, env: dict[str, str], dry: bool) -> Path:
    path = out / "table.json"
    cmd = [
        sys.executable, "-m", "nas.cli.profile", "--space", SPACE, "--C", str(C),
        "--layers", str(BLOCKS), "--image-size", "32", "--batch", "1", "--threads", "1",
        "--warmup", "20", "--repeats", "50", "--calibrate", "20", "-q", "-o", str(path),
    ]  # fmt: skip
    if dry:
        print(" ".join(cmd[2:]))
    elif not path.is_file():
        print("[table] " + " ".join(cmd[2:]), flush=True)
        subprocess.run(cmd, cwd=REPO, env=env, check=True)
    return path


def budgets(table_path: Path) -> dict[str, float]:
    """Budgets at ``BUDGET_FRACTIONS`` of the way from the cheapest network to the dearest."""
    from nas.hardware.cost import CostModel, allowed_ops, cheapest_cost
    from nas.hardware.table import load_table

    model = CostModel.from_table(load_table(table_path), "latency")
    floor = cheapest_cost(model, allowed_ops(SPACE))
    assert floor is not None
    top = model.fixed + float(model.per_op["blocks"].max(-1).values.sum())
    return {k: round(floor + f * (top - floor), 2) for k, f in BUDGET_FRACTIONS.items()}


# ------------------------------------------------------------------------------- runs


def search_command(method: str, seed: int, epochs: int, out: Path, table: Path,
                   budget: dict[str, float]) -> list[str]:  # fmt: skip
    strategy, _, bound = method.partition("+")
    cmd = [sys.executable, "-m", "nas.cli.search", *SEARCH, f"search={strategy}"]
    if bound:
        b = budget[bound]
        cmd += [
            "cost=latency", f"cost.table={table}", f"cost.target={b}",
            "selection=budget", f"selection.table={table}", f"selection.budget={b}",
        ]  # fmt: skip
    else:
        cmd += ["selection=argmax"]
    return cmd + [f"epochs={epochs}", f"seed={seed}", f"hydra.run.dir={run_dir(out, method, seed)}"]


def train_command(method: str, seed: int, out: Path) -> list[str]:
    folder = run_dir(out, method, seed)
    return [
        sys.executable, "-m", "nas.cli.train", f"genotype={folder / 'genotype.json'}",
        f"model.proxyless.C={C}", f"model.proxyless.blocks={BLOCKS}", "data=cifar10-mini",
        f"epochs={TRAIN_EPOCHS}", "batch_size=64", "optimizer.lr=0.05", "log_every=20",
        f"seed={seed}", f"hydra.run.dir={folder / 'retrain'}",
    ]  # fmt: skip


def _run_one(method: str, seed: int, args: argparse.Namespace, table: Path,
             budget: dict[str, float], env: dict[str, str]) -> str:  # fmt: skip
    out = out_dir(args)
    folder = run_dir(out, method, seed)
    lines = []
    if not (folder / "genotype.json").is_file():
        cmd = search_command(method, seed, args.epochs, out, table, budget)
        folder.mkdir(parents=True, exist_ok=True)
        timed = ["/usr/bin/time", "-f", "%M", "-o", str(folder / "peak_rss_kb.txt"), *cmd]
        t0 = time.perf_counter()
        proc = subprocess.run(timed, cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{method} seed {seed} search failed:\n{proc.stderr[-3000:]}")
        (folder / "study_seconds.txt").write_text(f"{time.perf_counter() - t0:.1f}\n")
        lines.append(proc.stdout.strip().splitlines()[-1])
    if not (folder / "retrain" / "results.json").is_file():
        cmd = train_command(method, seed, out)
        if (folder / "retrain" / "checkpoints" / "last.pt").is_file():
            cmd.append("resume=true")  # an interrupted retraining continues
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{method} seed {seed} retraining failed:\n{proc.stderr[-3000:]}")
        lines.append(proc.stdout.strip().splitlines()[-1])
    return f"[{method} seed {seed}] " + (" | ".join(lines) or "done already")


def run_all(args: argparse.Namespace, table: Path, budget: dict[str, float]) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    runs = [(m, s) for s in args.seeds for m in args.methods]
    if args.dry_run:
        for m, s in runs:
            print(" ".join(search_command(m, s, args.epochs, out_dir(args), table, budget)[2:]))
            print(" ".join(train_command(m, s, out_dir(args))[2:]))
        return
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(_run_one, m, s, args, table, budget, env) for m, s in runs]
        for future in as_completed(futures):
            try:
                print(future.result(), flush=True)
            except RuntimeError as error:
                for other in futures:
                    other.cancel()
                raise SystemExit(str(error)) from None


# ---------------------------------------------------------------------- measure, table


def measure_all(args: argparse.Namespace, table_path: Path) -> None:
    """Each found network timed here, one after the other, after the runs."""
    import torch

    from nas.hardware.table import load_table
    from nas.hardware.validate import measure_network
    from search_spaces.genotype import genotype_from_json

    torch.set_num_threads(1)
    table = load_table(table_path)
    for method in args.methods:
        for seed in args.seeds:
            folder = run_dir(out_dir(args), method, seed)
            target = folder / "latency_here.json"
            if target.is_file() or not (folder / "genotype.json").is_file():
                continue
            record = json.loads((folder / "genotype.json").read_text())
            genotype = genotype_from_json(record["genotype"])
            timing = measure_network(table, genotype, warmup=20, repeats=100)
            target.write_text(json.dumps({"median_ms": timing.median_ms}) + "\n")


def _row(out: Path, method: str, seed: int, table_path: Path) -> dict | None:
    import torch

    from nas.hardware.cost import CostModel
    from nas.hardware.table import load_table
    from search_spaces.families import family_of
    from search_spaces.genotype import genotype_from_json

    folder = run_dir(out, method, seed)
    if not (folder / "genotype.json").is_file():
        return None
    genotype = genotype_from_json(json.loads((folder / "genotype.json").read_text())["genotype"])
    model = CostModel.from_table(load_table(table_path), "latency")
    net, _ = family_of(genotype).network(genotype, C=C, layers=BLOCKS, num_classes=10)
    events = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    epochs = [e for e in events if e.get("event") == "epoch"]
    timed = [e for e in events if e.get("event") == "budget_measured"]
    retrain = folder / "retrain" / "results.json"
    results = json.loads(retrain.read_text()) if retrain.is_file() else {}
    here = folder / "latency_here.json"
    ips = mean(e["images_per_s"] for e in epochs[1:] or epochs)
    return {
        "genotype": str(genotype),
        "predicted_ms": model.of_genotype(genotype),
        "selection_ms": timed[-1]["measured_ms"] if timed else None,
        "tries": len(timed),
        "measured_ms": json.loads(here.read_text())["median_ms"] if here.is_file() else None,
        "params_m": sum(p.numel() for p in net.parameters()) / 1e6,
        "skipped": genotype.ops.count("none"),  # type: ignore[union-attr]
        "top1": results.get("final", {}).get("test_top1"),  # percent
        "s_per_step": 64 / ips,
        "peak_mb": int((folder / "peak_rss_kb.txt").read_text().split()[-1]) / 1024,
        "search_s": float((folder / "study_seconds.txt").read_text()),
        "torch_threads": torch.get_num_threads(),
    }


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(args: argparse.Namespace, table_path: Path, budget: dict[str, float]) -> str:
    out = out_dir(args)
    lines = [
        f"Budgets: tight {budget['tight']} ms, loose {budget['loose']} ms (a quarter and half of "
        "the way from the cheapest network of the table to the dearest).",
        "",
        "| method | seed | budget (ms) | table (ms) | measured (ms) | params (M) | skipped "
        "blocks | top-1 after retraining (%) | s / step | peak RSS (MB) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary = [
        "",
        "| method | budget (ms) | measured (ms) | params (M) | top-1 (%) | s / step | peak RSS "
        "(MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in args.methods:
        bound = method.partition("+")[2]
        b = budget.get(bound) if bound else None
        rows = []
        for seed in args.seeds:
            row = _row(out, method, seed, table_path)
            if row is None:
                continue
            rows.append(row)
            top1 = row["top1"]
            lines.append(
                f"| {method} | {seed} | {_fmt(b, '.2f')} | {row['predicted_ms']:.2f} | "
                f"{_fmt(row['measured_ms'], '.2f')} | {row['params_m']:.3f} | {row['skipped']} "
                f"| {_fmt(top1, '.1f')} | "
                f"{row['s_per_step']:.2f} | {row['peak_mb']:.0f} |"
            )
        if rows:

            def ms(key: str, scale: float = 1.0, spec: str = ".2f", rs: list = rows) -> str:
                xs = [scale * r[key] for r in rs if r[key] is not None]
                return f"{mean(xs):{spec}} ± {pstdev(xs):{spec}}" if xs else "-"

            summary.append(
                f"| {method} | {_fmt(b, '.2f')} | {ms('measured_ms')} | {ms('params_m', 1, '.3f')}"
                f" | {ms('top1', 1, '.1f')} | {ms('s_per_step')} | {ms('peak_mb', 1, '.0f')} |"
            )
    text = "\n".join(lines + summary) + "\n"
    print(text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--jobs", type=int, default=2, help="runs at a time, one thread each")
    p.add_argument("--out", default=str(REPO / "outputs" / "proxyless_study"))
    p.add_argument("--results", default=str(HERE / "results.md"))
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--table-only", action="store_true")
    args = p.parse_args(argv)
    out = out_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    table_path = profile_table(out, env, args.dry_run or args.table_only)
    if args.dry_run and not table_path.is_file():
        print("(budgets: from the table once profiled)")
        run_all(args, table_path, {"tight": 0.0, "loose": 0.0})
        return 0
    budget = budgets(table_path)
    if not args.table_only:
        run_all(args, table_path, budget)
        if args.dry_run:
            return 0
        measure_all(args, table_path)
    Path(args.results).write_text(table(args, table_path, budget))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
