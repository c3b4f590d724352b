"""Validate a latency table: its sum vs the measured latency of whole discrete networks.

For a seeded sample of NB201 cells (TinyNetwork) or DARTS genotypes (NetworkCIFAR: the
published ones plus random ones), each network is timed with the table's own protocol
(``nas.hardware.profiler``: eval, no_grad, warm-up, median of the timed calls) and compared with
the table's prediction (fixed parts + the chosen ops). Printed and written as JSON: nn-Meter's
RMSE, RMSPE and +-5/10/15 % shares, Spearman and Kendall, for the plain sum and for a linear
correction ``a * sum + b`` fitted on the even-numbered half of the sample and judged on the odd
half (the plain sum judged on the same half next to it).

    python experiments/benchmarks/latency_table.py --space nb201 --n 100 --threads 1
    python experiments/benchmarks/latency_table.py --space darts --n 30 --threads 1 --table t.json

Timings depend on the machine's other work: run it on a quiet machine for figures to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from nas.hardware.cost import CostModel
from nas.hardware.export import Logits
from nas.hardware.parts import network_layout
from nas.hardware.profiler import profile, time_module
from nas.hardware.table import load_table
from search_spaces.darts import NetworkCIFAR
from search_spaces.genotype import DartsGenotype
from search_spaces.nb201 import NUM_ARCHS, TinyNetwork, index_to_arch
from search_spaces.published import published_genotype, published_names
from search_spaces.space import get_space


def random_darts(space: str, rng: random.Random) -> DartsGenotype:
    sp = get_space(space)
    cells = {}
    for ct in ("normal", "reduce"):
        cell = sp.cells[ct]
        pairs = []
        for node in cell.intermediate_nodes:
            for e in rng.sample(list(cell.edges_into(node)), 2):
                pairs.append((rng.choice([o for o in e.ops if o != "none"]), e.src))
        cells[ct] = tuple(pairs)
    concat = tuple(range(2, 2 + len(sp.cells["normal"].intermediate_nodes)))
    return DartsGenotype(cells["normal"], concat, cells["reduce"], concat, concat_as_range=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--space", default="nb201")
    p.add_argument("--n", type=int, default=100, help="networks in the sample")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--repeats", type=int, default=50)
    p.add_argument("--C", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--table", help="an existing table (else profiled now, same protocol)")
    p.add_argument("--out", default="latency_validation.json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    family = get_space(args.space).family
    C = args.C or (16 if family == "nb201" else 36)
    layers = args.layers or (5 if family == "nb201" else 20)
    load0 = os.getloadavg()[0]
    t0 = time.time()
    if args.table:
        table = load_table(args.table)
    else:
        layout = network_layout(args.space, C=C, layers=layers, image_size=32, num_classes=10)
        table = profile(layout, device=device, batch=args.batch, warmup=args.warmup,
                        repeats=args.repeats)  # fmt: skip
    model = CostModel.from_table(table, "latency")
    net_cfg = table.network
    rng = random.Random(args.seed)
    if family == "nb201":
        genotypes = [index_to_arch(i) for i in rng.sample(range(NUM_ARCHS), args.n)]
    else:
        named = [published_genotype(n) for n in published_names()] if args.space == "darts" else []
        genotypes = named + [random_darts(args.space, rng) for _ in range(args.n - len(named))]
    rows = []
    for k, g in enumerate(genotypes):
        if family == "nb201":
            net = TinyNetwork(net_cfg["C"], net_cfg["layers"], g, net_cfg["num_classes"])
            wrapped, genotype = Logits(net, "TinyNetwork"), net.genotype
        else:
            net = NetworkCIFAR(net_cfg["C"], net_cfg["num_classes"], net_cfg["layers"], False, g)
            wrapped, genotype = Logits(net, "NetworkCIFAR"), net.genotype
        size = net_cfg["image_size"]
        timing = time_module(wrapped, (table.protocol["batch"], 3, size, size), device=device,
                             warmup=args.warmup, repeats=args.repeats)  # fmt: skip
        predicted = model.of_genotype(genotype)
        rows.append({"genotype": str(genotype), "measured_ms": timing.median_ms,
                     "p10_ms": timing.p10_ms, "p90_ms": timing.p90_ms,
                     "predicted_ms": predicted})  # fmt: skip
        print(f"[{k + 1}/{len(genotypes)}] measured {timing.median_ms:8.3f} ms  "
              f"table {predicted:8.3f} ms  {genotype}", flush=True)  # fmt: skip
    from nas.hardware.validate import fit_correction, prediction_metrics

    y = np.array([r["measured_ms"] for r in rows])
    yhat = np.array([r["predicted_ms"] for r in rows])
    fit, test = np.arange(len(y)) % 2 == 0, np.arange(len(y)) % 2 == 1
    a, b = fit_correction(y[fit], yhat[fit])
    result = {
        "space": args.space,
        "environment": table.environment,
        "network": net_cfg,
        "protocol": table.protocol,
        "load_average_before_after": [load0, os.getloadavg()[0]],
        "wall_s": time.time() - t0,
        "plain_sum_all": prediction_metrics(y, yhat).row(),
        "plain_sum_heldout": prediction_metrics(y[test], yhat[test]).row(),
        "corrected_heldout": prediction_metrics(y[test], a * yhat[test] + b).row(),
        "correction": {"a": a, "b_ms": b, "fitted_on": int(fit.sum())},
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for name in ("plain_sum_all", "plain_sum_heldout", "corrected_heldout"):
        r = result[name]
        print(f"{name:<18} n={r['n']:<4} RMSPE {r['rmspe_pct']:6.2f} %  within 10 % "
              f"{r['within_10pct']:5.1f} %  Spearman {r['spearman']:.3f}  Kendall "
              f"{r['kendall']:.3f}  pred/measured {r['mean_pred_over_measured']:.3f}")  # fmt: skip
    print(f"correction: measured ~ {a:.4f} * table + {b:.4f} ms; load average "
          f"{load0:.2f} -> {os.getloadavg()[0]:.2f}; wrote {args.out}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
