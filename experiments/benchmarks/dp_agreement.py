"""Measurement: how far a 2-process search and a 1-process search with ``micro_batches=2`` agree.

Both runs take the same global batches with the same augmentation and normalise batch norm
over the same groups of B / 2 images, and add the halves' gradients in the same order (the
2-process run in the all-reduce, the single process as it accumulates them; the architecture
gradients per micro-batch, ``ShardSums``), so on one thread per process they should agree bit
for bit but for second-order DARTS's finite differences. This script runs both through the
command line (``torchrun --nproc_per_node=2`` and
``nas-search micro_batches=2``) on one setting and prints how far apart they are: the step
losses, the architecture parameters (and their softmax, the mixing weights) at the end, the
supernet weights, and the genotypes.

    python experiments/benchmarks/dp_agreement.py                      # NB201 C=8, 640 images
    python experiments/benchmarks/dp_agreement.py --C 4 --images 128 --batch 16 --epochs 3

The default setting: NB201 at C=8 with one cell per stage, the first 640 cifar10-mini images
(320 weight images, 5 steps of 64 per epoch), 2 epochs = 10 steps, first-order DARTS
(``--search drnas``, ``--order 2`` for the others). ``--threads 2`` runs the single process on
two intra-op threads (torchrun's workers have one each), which changes the order of the sums
inside the convolutions' backward as well.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch


def _run(cmd: list[str], threads: int = 1) -> None:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr}")


def _steps(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == "step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--C", type=int, default=8)
    parser.add_argument("--images", type=int, default=640)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--order", type=int, default=1)
    parser.add_argument("--search", default="darts", help="darts or drnas")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="intra-op threads of the single process (torchrun gives each worker 1)",
    )
    args = parser.parse_args()
    overrides = [
        "space=nb201", f"space.C={args.C}", "space.layers=1", f"batch_size={args.batch}",
        f"data.max_items={args.images}", f"epochs={args.epochs}", f"search={args.search}",
        f"search.order={args.order}",
        "log_every=1", "figures=false", "eval=false", "device=cpu",
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        one, two = Path(tmp) / "one", Path(tmp) / "two"
        _run([sys.executable, "-m", "nas.cli.search", *overrides, "micro_batches=2",
              f"hydra.run.dir={one}"], threads=args.threads)  # fmt: skip
        _run([sys.executable, "-m", "torch.distributed.run", "--standalone",
              "--nproc_per_node=2", "-m", "nas.cli.search", *overrides,
              f"hydra.run.dir={two}"])  # fmt: skip
        a = torch.load(one / "checkpoints" / "last.pt", weights_only=True)
        b = torch.load(two / "checkpoints" / "last.pt", weights_only=True)
        sa, sb = _steps(one), _steps(two)
        ga = json.loads((one / "genotype.json").read_text())["text"]
        gb = json.loads((two / "genotype.json").read_text())["text"]

    def spread(x: dict, y: dict, keep=lambda k: True) -> float:
        return max(float((x[k].double() - y[k].double()).abs().max()) for k in x if keep(k))

    arch_a = {k: v for k, v in a["strategy"]["module"].items() if k.startswith("arch")}
    arch_b = {k: v for k, v in b["strategy"]["module"].items() if k.startswith("arch")}
    mix_a = {k: v.softmax(-1) for k, v in arch_a.items()}
    mix_b = {k: v.softmax(-1) for k, v in arch_b.items()}
    weights = lambda k: "running" not in k and "num_batches" not in k  # noqa: E731
    print(f"setting: {' '.join(overrides)}; {len(sa)} steps; single process on "
          f"{args.threads} thread(s), each of the 2 processes on 1")  # fmt: skip
    for key in ("train_loss", "val_loss"):
        first = abs(sa[0][key] - sb[0][key])
        worst = max(abs(x[key] - y[key]) for x, y in zip(sa, sb, strict=True))
        print(f"{key}: first step {sa[0][key]:.6f}, differs by {first:.2g}; largest over the "
              f"steps {worst:.2g}")  # fmt: skip
    print(f"architecture parameters: largest difference {spread(arch_a, arch_b):.2g} "
          f"(values up to {max(float(v.abs().max()) for v in arch_a.values()):.2g})")  # fmt: skip
    print(f"mixing weights (softmax): largest difference {spread(mix_a, mix_b):.2g}")
    print(f"supernet weights: largest difference "
          f"{spread(a['supernet'], b['supernet'], weights):.2g}")  # fmt: skip
    print(f"genotypes {'equal' if ga == gb else 'differ'}: {ga} | {gb}")


if __name__ == "__main__":
    main()
