"""Benchmark: seconds per search step, images/s and peak memory of the supernet search.

The protocol of ``shared/docs/PERFORMANCE.md``: random CIFAR-sized input (3x32x32, 10
classes), ``torch.set_num_threads(2)``, warm-up steps then the median of timed steps, peak RSS
of the whole process; one fresh process per configuration. A "search step" is an
architecture step plus a weight step (forward, backward, optimiser step each), as
``SearchStrategy.step`` takes it in a real search.

    python experiments/benchmarks/search_step.py                 # all settings of the issue
    python experiments/benchmarks/search_step.py --only nb201-darts1 --steps 5 --warmup 2

DrNAS rows: the DARTS space without ``none`` (S5) with partial channels K; the reference's
own figures are in PERFORMANCE.md. The memory format follows ``nas-search channels_last=auto``
(NHWC for K=1, NCHW for K > 1); ``--channels-last true|false`` forces one.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

SETTINGS = {
    # name: (space, C, layers, strategy, order, K, batch, reference images/s, reference peak MiB)
    "darts-darts1": ("darts", 16, 8, "darts", 1, 1, 64, 1.95, 9792),
    "darts-darts2": ("darts", 16, 8, "darts", 2, 1, 64, 0.86, 13003),
    "nb201-darts1": ("nb201", 16, 5, "darts", 1, 1, 64, 10.95, 3165),
    "nb201-drnas-k1": ("nb201", 16, 5, "drnas", 1, 1, 64, 10.36, 3132),
    "s5-drnas-k4-c16": ("s5", 16, 8, "drnas", 1, 4, 64, 4.70, 3339),
    # DrNAS's progressive stage 1: C=36, 20 cells, K=6 (the reference's own row)
    "s5-drnas-k6-c36": ("s5", 36, 20, "drnas", 1, 6, 64, 1.28, 10821),
    # K=1 at C=36 / 20 cells does not fit this machine at batch 64: compare K=6 and K=1 at 16
    "s5-drnas-k6-c36-b16": ("s5", 36, 20, "drnas", 1, 6, 16, None, None),
    "s5-drnas-k1-c36-b16": ("s5", 36, 20, "drnas", 1, 1, 16, None, None),
}


def run_one(name: str, steps: int, warmup: int, memory_format: str) -> dict[str, float | str]:
    import torch

    from nas.search import STRATEGIES, SearchContext
    from nas.supernet import build_supernet

    torch.set_num_threads(2)
    torch.manual_seed(0)
    space, C, layers, strategy_name, order, k, batch, _, _ = SETTINGS[name]
    # nas-search's channels_last=auto: NHWC for full-width ops, NCHW for partial channels
    channels_last = k == 1 if memory_format == "auto" else memory_format == "true"
    net = build_supernet(space, C=C, layers=layers, num_classes=10, partial_channels=k)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4, foreach=True)
    strategy = STRATEGIES.get(strategy_name)(order=order)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0))

    def batch_():
        x = torch.randn(batch, 3, 32, 32)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.randint(0, 10, (batch,))

    arch_times, weight_times = [], []
    for i in range(warmup + steps):
        tb, vb = batch_(), batch_()
        t0 = time.perf_counter()
        strategy.arch_step(tb, vb)
        t1 = time.perf_counter()
        strategy.weight_step(tb)
        t2 = time.perf_counter()
        if i >= warmup:
            arch_times.append(t1 - t0)
            weight_times.append(t2 - t1)
    step = statistics.median(a + w for a, w in zip(arch_times, weight_times))
    return {
        "setting": name,
        "channels_last": str(channels_last),
        "arch_step_s": statistics.median(arch_times),
        "weight_step_s": statistics.median(weight_times),
        "search_step_s": step,
        "images_per_s": batch / step,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SETTINGS), action="append")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--channels-last",
        choices=["auto", "true", "false"],
        default="auto",
        help="memory format; auto (as nas-search): NHWC for K=1, NCHW for partial channels",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.steps, args.warmup, args.channels_last)))
        return
    print(
        "| setting | batch | arch step s | weight step s | search step s | images/s | "
        "reference images/s | speed-up | peak RSS MiB | reference peak MiB | NHWC |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.only or list(SETTINGS):
        cmd = [sys.executable, __file__, "--child", name, "--steps", str(args.steps)]
        cmd += ["--warmup", str(args.warmup), "--channels-last", args.channels_last]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        ref_ips, ref_mem = SETTINGS[name][7], SETTINGS[name][8]
        ratio = f"{r['images_per_s'] / ref_ips:.2f}x" if ref_ips else "-"
        print(
            f"| {name} | {SETTINGS[name][6]} | {r['arch_step_s']:.2f} | {r['weight_step_s']:.2f} | "
            f"{r['search_step_s']:.2f} | {r['images_per_s']:.2f} | {ref_ips or '-'} | "
            f"{ratio} | {r['peak_rss_mib']:.0f} | {ref_mem or '-'} | {r['channels_last']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
