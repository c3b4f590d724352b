"""Loader throughput: CIFAR training images per second with the search augmentation.

Benchmark of the data stage (``nas.data``): is the loader ever the bottleneck of a search? Times
full passes over the training set (RandomCrop 32 pad 4, flip, normalisation, optional Cutout;
batch 64, shuffled) for each worker count, after warm-up passes; workers persist across passes,
so the figures are steady-state throughput, not worker start-up.

    python experiments/benchmarks/bench_loader.py              # the embedded cifar10-mini
    python experiments/benchmarks/bench_loader.py --dataset cifar10 \
        --root ../shared/data/cifar10-subset --cutout 16
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from nas.data import build_dataset, make_loader, train_transform


def time_passes(loader: torch.utils.data.DataLoader, *, warmup: int, passes: int) -> list[float]:
    """Seconds per full pass over ``loader``, after ``warmup`` untimed passes."""
    times = []
    for i in range(warmup + passes):
        start = time.perf_counter()
        for _images, _labels in loader:
            pass
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dataset", default="cifar10-mini", help="cifar10-mini, cifar10, cifar100")
    parser.add_argument("--root", default=None, help="dataset folder (not for cifar10-mini)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cutout", type=int, default=0, help="Cutout side (retraining uses 16)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()

    data = build_dataset(
        args.dataset,
        root=args.root,
        train=True,
        transform=train_transform(args.dataset, cutout=args.cutout),
    )
    print(
        f"{args.dataset}: {len(data)} training images, batch {args.batch_size}, "
        f"cutout {args.cutout}, {args.warmup} warm-up + {args.passes} timed passes; "
        f"{os.cpu_count()} CPUs, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"Python {platform.python_version()}"
    )
    print(f"{'workers':>7} | {'images/s (median)':>17} | {'min .. max':>15} | {'ms / batch':>10}")
    print(f"{'-' * 7}-+-{'-' * 17}-+-{'-' * 15}-+-{'-' * 10}")
    for workers in args.workers:
        loader = make_loader(
            data,
            batch_size=args.batch_size,
            shuffle=True,
            seed=0,
            num_workers=workers,
            persistent_workers=True,
        )
        rates = [len(data) / t for t in time_passes(loader, warmup=args.warmup, passes=args.passes)]
        median = statistics.median(rates)
        print(
            f"{workers:>7} | {median:>17,.0f} | {min(rates):>6,.0f} .. {max(rates):>6,.0f} | "
            f"{1000 * args.batch_size / median:>10.1f}"
        )
        del loader  # shut persistent workers down before the next configuration


if __name__ == "__main__":
    main()
