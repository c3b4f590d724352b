"""Benchmark: the cost of DARTS-PT's evaluations, with and without the prefix reuse.

DARTS space (S5: 7 ops, as darts-pt) at C=16, 8 layers, random CIFAR-sized batches of 64,
``num_val_batches`` fixed; ``torch.set_num_threads(2)``. Reports the wall time of one op
projection (all candidates of one edge) for a normal and a reduce edge, and of one full
selection without fine-tuning (``proj_intv=0``: 14 op + 3 topology projections per cell type),
each with the cells before the perturbed cell type computed once per batch (reuse) or once per
candidate (no reuse). Each configuration runs in a fresh process.

    python experiments/benchmarks/pt_selection.py --num-val-batches 1
    python experiments/benchmarks/pt_selection.py --only op          # the op projections alone
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def run_child(what: str, reuse: bool, num_val_batches: int, cell_type: str) -> dict[str, float]:
    import torch

    from nas.search import SearchContext
    from nas.search.darts import DARTS
    from nas.selection import PerturbationSelection
    from nas.supernet import build_supernet

    torch.set_num_threads(2)
    torch.manual_seed(0)
    net = build_supernet("s5", C=16, layers=8, num_classes=10).to(memory_format=torch.channels_last)
    strategy = DARTS()
    strategy.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0))
    batches = [
        (
            torch.randn(64, 3, 32, 32).contiguous(memory_format=torch.channels_last),
            torch.randint(0, 10, (64,)),
        )
        for _ in range(num_val_batches)
    ]

    class Context:
        search_lr = 0.025
        step_in_epoch = 0

        def val_batches(self, *, key, limit):
            yield from batches[: limit or len(batches)]

        def train_epoch(self, **kwargs):
            raise AssertionError

        def reset_weight_optimizer(self, lr):
            pass

        def checkpoint(self):
            pass

        def log(self, event, **values):
            pass

        def all_reduce_sum(self, tensor):
            return tensor

        def broadcast(self, obj):
            return obj

    pt = PerturbationSelection(proj_intv=0, num_val_batches=num_val_batches, reuse_prefix=reuse)
    t0 = time.perf_counter()
    if what == "op":
        pt.project_op(Context(), strategy, cell_type)
    else:
        pt.select(strategy, context=Context())
    return {"seconds": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-val-batches", type=int, default=1)
    parser.add_argument("--only", choices=["op", "full"])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, reuse, cell_type = args.child
        print(json.dumps(run_child(what, reuse == "1", args.num_val_batches, cell_type)))
        return
    rows = []
    if args.only in (None, "op"):
        rows += [("op", "normal"), ("op", "reduce")]
    if args.only in (None, "full"):
        rows += [("full", "-")]
    print(f"num_val_batches={args.num_val_batches}, batch 64, DARTS space (S5) C=16, 8 layers")
    print("| what | cell type | with reuse s | without reuse s | speed-up |")
    print("| --- | --- | --- | --- | --- |")
    for what, ct in rows:
        times = []
        for reuse in ("1", "0"):
            cmd = [sys.executable, __file__, "--num-val-batches", str(args.num_val_batches)]
            cmd += ["--child", what, reuse, ct if ct != "-" else "normal"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            times.append(json.loads(out.strip().splitlines()[-1])["seconds"])
        label = "one op projection (7 candidates)" if what == "op" else "full selection, no tuning"
        print(
            f"| {label} | {ct} | {times[0]:.1f} | {times[1]:.1f} | {times[1] / times[0]:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
