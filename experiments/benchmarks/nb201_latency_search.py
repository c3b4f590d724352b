"""Latency-aware NB201 search on this machine: targets x seeds, ranks, and the Pareto plot.

For each latency target T (ms, from a ``nas-profile`` table of NB201's TinyNetwork, C=16, N=5)
and seed, runs ``nas-search`` at the quickstart's scale (C=8, one cell per stage, 1,600
images, 3 epochs) with the cost term (``cost=latency cost.target=T``, ProxylessNAS's
``mul_log`` unless ``--form``) and the budget selector (``selection=budget
selection.budget=T``: the found cell's table latency is <= T by construction), plus the
unconstrained search (plain argmax) per seed, and the budget selector alone on the
unconstrained search's final weights ("budget only"). For every found cell it reports the
benchmark's CIFAR-10 test accuracy, the table latency, the measured latency of the whole
network (same protocol as the table), its rank among all cells within T by the table, and the
best such cell.

Then draws the exact front (all 15,625 cells: CIFAR-10 test accuracy over table latency) with
the found cells and the targets, and writes ``<out>/results.json``, ``<out>/results.md`` and
``<out>/pareto.png``. ``--plot-only`` draws the front alone.

    nas-profile --space nb201 --threads 1 -o tables/nb201-cpu.json
    python experiments/benchmarks/nb201_latency_search.py --table tables/nb201-cpu.json \
        --targets 4 6 --seeds 0 1 2 --out outputs/latency_search

Timings depend on the machine's other work: run it on a quiet machine for figures to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from nas.bench.nb201 import NB201
from nas.hardware.cost import CostModel, budget_argmax_genotype
from nas.hardware.export import Logits
from nas.hardware.pareto import (
    FoundCell,
    best_within,
    hypervolume,
    nb201_costs,
    pareto_front,
    plot_nb201_front,
    rank_within,
)
from nas.hardware.profiler import time_module
from nas.hardware.table import load_table
from search_spaces.nb201 import NUM_ARCHS, TinyNetwork, arch_to_index

THREADS_PER_SEARCH = 1
COST_EXTRA: list[str] = []  # more cost.* overrides of the constrained searches (--cost)
SCALE = ["space=nb201", "space.C=8", "space.layers=1", "eval=false", "figures=false"]


def search(
    out: Path, seed: int, table: str, target: float | None, form: str | None, scale: list[str]
) -> dict:
    run = out / ("free" if target is None else f"T{target:g}") / f"seed{seed}"
    if not (run / "genotype.json").is_file():
        extra = (
            []
            if target is None
            else [
                "cost=latency",
                f"cost.table={table}",
                f"cost.target={target}",
                *([f"cost.form={form}"] if form else []),
                *COST_EXTRA,
                "selection=budget",
                f"selection.table={table}",
                f"selection.budget={target}",
            ]
        )
        cmd = [
            sys.executable,
            "-m",
            "nas.cli.search",
            *SCALE,
            *scale,
            f"seed={seed}",
            *extra,
            f"hydra.run.dir={run}",
        ]
        env = dict(os.environ, OMP_NUM_THREADS=str(THREADS_PER_SEARCH))
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"nas-search failed ({run}): {proc.stderr.strip()[-500:]}")
    record = json.loads((run / "genotype.json").read_text())
    return {
        "run": str(run),
        "arch": record["genotype"]["arch"] if "arch" in record["genotype"] else record.get("arch"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--table", required=True)
    p.add_argument("--targets", type=float, nargs="*", default=[])
    p.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--form", help="cost.form (default: the cost config's, nni_add + positive)")
    p.add_argument("--cost", nargs="*", default=[], help="more overrides, e.g. cost.scale=0.1")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-items", type=int, default=800, help="training images of the search")
    p.add_argument("--jobs", type=int, default=2, help="searches run at once (2)")
    p.add_argument("--figure", help="also save the plot here (e.g. docs/img/nb201_pareto.png)")
    p.add_argument("--out", default="outputs/latency_search")
    p.add_argument("--repeats", type=int, default=50, help="timed calls per found network")
    p.add_argument("--plot-only", action="store_true")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = load_table(args.table)
    torch.set_num_threads(int(table.environment["threads"] or torch.get_num_threads()))
    model = CostModel.from_table(table, "latency")
    cost = nb201_costs(model)
    bench = NB201()
    acc = np.array([bench.query(i, dataset="cifar10", split="test") for i in range(NUM_ARCHS)])
    front = pareto_front(cost, acc)
    results: dict = {
        "table": args.table,
        "environment": table.environment,
        "front_size": len(front),
        "hypervolume": hypervolume(cost, acc, front),
        "load_average": os.getloadavg()[0],
        "runs": [],
    }
    net = table.network

    def measure(arch: str) -> float:
        m = Logits(TinyNetwork(net["C"], net["layers"], arch, net["num_classes"]), "TinyNetwork")
        size = net["image_size"]
        return time_module(
            m,
            (table.protocol["batch"], 3, size, size),
            device=torch.device("cpu"),
            warmup=10,
            repeats=args.repeats,
        ).median_ms

    scale = [f"epochs={args.epochs}", f"data.max_items={args.max_items}"]
    global THREADS_PER_SEARCH
    COST_EXTRA[:] = args.cost
    THREADS_PER_SEARCH = max(1, (os.cpu_count() or 1) // max(1, args.jobs))
    if not args.plot_only:
        from concurrent.futures import ThreadPoolExecutor

        plan = [(t, s) for t in [None, *args.targets] for s in args.seeds]
        # the searches first, --jobs at a time (each on one thread); then every found network
        # is measured alone, so that no search disturbs a measurement
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            done = list(
                pool.map(lambda ts: search(out, ts[1], args.table, ts[0], args.form, scale), plan)
            )
        for (target, seed), found in zip(plan, done):
            i = arch_to_index(found["arch"])
            row = {
                "target_ms": target,
                "seed": seed,
                "index": i,
                "arch": found["arch"],
                "cifar10_test": float(acc[i]),
                "table_ms": float(cost[i]),
                "measured_ms": measure(found["arch"]),
            }
            if target is not None:
                best, _ = best_within(cost, acc, target)
                row.update(
                    rank_within_target=rank_within(i, cost, acc, target),
                    feasible=best.feasible,
                    best_index=best.index,
                    best_cifar10_test=best.accuracy,
                    meets_table=bool(cost[i] <= target + 1e-9),
                    meets_measured=bool(row["measured_ms"] <= target),
                )
            results["runs"].append(row)
            print(json.dumps(row), flush=True)
        # budget only: the budget selector on the unconstrained search's final weights (the
        # same search, no cost term), read from its last logged architecture weights
        for target in args.targets:
            for seed in args.seeds:
                log = out / "free" / f"seed{seed}" / "metrics.jsonl"
                events = [json.loads(line) for line in log.read_text().splitlines()]
                w = [e for e in events if e.get("event") == "arch_weights"][-1]["cell"]
                g = budget_argmax_genotype(model, {"cell": torch.tensor(w)}, None, target)
                i = arch_to_index(g)
                best, _ = best_within(cost, acc, target)
                row = {"target_ms": target, "seed": seed, "index": i, "arch": str(g),
                       "budget_only": True, "cifar10_test": float(acc[i]),
                       "table_ms": float(cost[i]), "measured_ms": measure(str(g)),
                       "rank_within_target": rank_within(i, cost, acc, target),
                       "feasible": best.feasible, "best_index": best.index,
                       "best_cifar10_test": best.accuracy}  # fmt: skip
                results["runs"].append(row)
                print(json.dumps(row), flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = [
        "| target (ms) | how | seed | cell | CIFAR-10 test | table ms | measured ms "
        "| rank within T (of feasible) | best within T |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results["runs"]:
        t = "none" if r["target_ms"] is None else f"{r['target_ms']:g}"
        how = (
            "argmax"
            if r["target_ms"] is None
            else "budget only"
            if r.get("budget_only")
            else "cost + budget"
        )
        rank = f"{r['rank_within_target']} ({r['feasible']})" if "feasible" in r else "-"
        best = f"{r['best_cifar10_test']:.2f} ({r['best_index']})" if "feasible" in r else "-"
        lines.append(
            f"| {t} | {how} | {r['seed']} | {r['index']} | {r['cifar10_test']:.2f} "
            f"| {r['table_ms']:.3f} | {r['measured_ms']:.3f} | {rank} | {best} |"
        )
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))

    env = table.environment
    xlabel = (
        f"{'calibrated ' if table.calibration else ''}latency (ms), batch "
        f"{table.protocol['batch']}, {env['device_name']}, {env['threads']} thread(s); "
        "o predicted, x measured"
    )
    found = [
        FoundCell(r["index"], r["target_ms"], r["table_ms"], r["cifar10_test"], r["measured_ms"])
        for r in results["runs"]
        if not r.get("budget_only")  # the plot shows the searches with the cost term
    ]
    plot_nb201_front(cost, acc, found, xlabel=xlabel, path=out / "pareto.png")
    if args.figure:
        plot_nb201_front(cost, acc, found, xlabel=xlabel, path=args.figure)
    print(f"wrote {out / 'pareto.png'}, {out / 'results.json'}, {out / 'results.md'}")


if __name__ == "__main__":
    main()
