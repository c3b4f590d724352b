"""What running the ops of weight zero costs SDARTS-RS's weight step (``zero_weight_ops_run``).

The NB201 row of ``experiments/benchmarks/search_step.py`` (C=16, N=5, batch 64, random
CIFAR-sized input, SGD 0.025 / momentum 0.9 / wd 3e-4, clip 5, NHWC): DARTS with the
``sdarts_rs`` component, whose weight step is timed with the option on (what the component
sets) and off (the ops of weight zero skipped). The perturbed weights are made with a share of
exact zeros (``--zeros``, 0.29 by default: SDARTS's clip on 8 near-uniform ops at epsilon
0.3), the same weights for both settings, so both time the same arithmetic but the skipped ops.
Each setting runs in its own fresh process, in turn (the order flipped every round); the table
gives the best and the median of the rounds (each round's figure: the median of its timed
steps).

    python experiments/sdarts/zero_weight_cost.py --rounds 3 --steps 5 --warmup 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch


def zero_share_weights(shape: torch.Size, share: float, seed: int) -> torch.Tensor:
    """Positive weights on the simplex with ``round(share * entries)`` exact zeros at random
    places (never a row's largest entry)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(shape, generator=g) + 0.05
    candidates = (w < w.max(-1, keepdim=True).values).flatten().nonzero().flatten()
    count = min(round(share * w.numel()), candidates.numel())
    drop = candidates[torch.randperm(candidates.numel(), generator=g)[:count]]
    w.view(-1)[drop] = 0.0
    return w / w.sum(-1, keepdim=True)


def child(run: bool, share: float, steps: int, warmup: int, threads: int) -> dict[str, float]:
    from nas.plugins import build_plugin
    from nas.strategies import SearchContext
    from nas.supernet import build_supernet

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = build_supernet("nb201", C=16, layers=5, num_classes=10)
    net = net.to(memory_format=torch.channels_last)
    strategy = build_plugin("search", "darts")
    strategy.add_components([build_plugin("components", "sdarts_rs")])
    strategy.prepare_supernet(net)  # sets zero_weight_ops_run
    net.zero_weight_ops_run = run
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4, foreach=True)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=50))
    strategy.begin_epoch(49)
    comp = strategy.component_list()[0]
    step_no = [0]
    shares = []

    def perturb(st: object, weights: dict, shards: object) -> dict:
        out = {ct: zero_share_weights(w.shape, share, step_no[0]) for ct, w in weights.items()}
        shares.append(float((out["cell"] == 0).float().mean()))
        return out

    comp.perturb = perturb  # type: ignore[method-assign]
    times = []
    for i in range(warmup + steps):
        x = torch.randn(64, 3, 32, 32).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (64,))
        strategy.begin_step(i)
        step_no[0] = i
        t0 = time.perf_counter()
        strategy.weight_step((x, y))
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return {"weight_step_s": statistics.median(times), "zero_share": statistics.mean(shares)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--zeros", type=float, default=0.29)
    parser.add_argument("--child", choices=["on", "off"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        r = child(args.child == "on", args.zeros, args.steps, args.warmup, args.threads)
        print(json.dumps(r))
        return
    base = [sys.executable, os.path.abspath(__file__), "--steps", str(args.steps)]
    base += ["--warmup", str(args.warmup), "--threads", str(args.threads)]
    base += ["--zeros", str(args.zeros)]
    results: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    for r in range(args.rounds):
        for setting in ("on", "off")[:: 1 if r % 2 == 0 else -1]:
            out = subprocess.run(
                base + ["--child", setting], capture_output=True, text=True, check=True
            ).stdout
            results[setting].append(json.loads(out.strip().splitlines()[-1]))
    print(f"{args.rounds} rounds, {args.threads} threads, {args.warmup}+{args.steps} steps")
    print("| zero_weight_ops_run | zero share | weight step s best | median |")
    print("| --- | --- | --- | --- |")
    best = {}
    for setting, rs in results.items():
        t = [x["weight_step_s"] for x in rs]
        best[setting] = min(t)
        share = statistics.mean(x["zero_share"] for x in rs)
        print(f"| {setting} | {share:.3f} | {min(t):.3f} | {statistics.median(t):.3f} |")
    print(f"on / off (best): {best['on'] / best['off']:.3f}")


if __name__ == "__main__":
    main()
