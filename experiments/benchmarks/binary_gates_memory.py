"""Memory of a search step: ProxylessNAS's binary gates beside DARTS's all-path softmax.

ProxylessNAS (Cai et al., ICLR 2019) runs one sampled path per edge in its weight step and, in
its architecture step, keeps the activations of the sampled path only (``mode=full_v2``: the
other paths' outputs are recomputed in the backward; ``two``: one more path's output is kept;
``full``: every path's output is kept); DARTS (first order) runs and keeps every op of every
edge in both steps. For each space, strategy and step (architecture, weight) this measures, in a
fresh process with the same supernet, batch and seed:

* ``saved MB``: the bytes autograd holds for the backward during the step's forward (every
  tensor packed by ``torch.autograd.graph.saved_tensors_hooks``, each storage counted once):
  the activation memory the step needs, exact and independent of the allocator;
* ``peak RSS MB``: the growth of the process's peak resident set over the step
  (``resource.getrusage(...).ru_maxrss`` after the step minus before it; the supernet, the
  optimisers and the batch exist before): what the step costs the machine, allocator included.

    python experiments/benchmarks/binary_gates_memory.py              # NB201 and DARTS spaces
    python experiments/benchmarks/binary_gates_memory.py --batch 32 --spaces nb201
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STRATEGIES: list[tuple[str, dict[str, Any]]] = [
    ("darts", {}),
    ("proxylessnas", {"mode": "full_v2"}),
    ("proxylessnas", {"mode": "two"}),
    ("proxylessnas", {"mode": "full"}),
]
# the supernets: NB201 at the benchmark's size (C=16, N=5), the DARTS search network (C=16,
# 8 cells), on CIFAR-sized images
SIZES = {"nb201": (16, 5), "darts": (16, 8)}


def _label(name: str, kwargs: dict[str, Any]) -> str:
    return name + "".join(f" {k}={v}" for k, v in kwargs.items())


def child(
    space: str, name: str, kwargs: dict[str, Any], phase: str, batch: int
) -> dict[str, float]:
    """One step of ``phase`` in this (fresh) process: saved bytes and peak-RSS growth."""
    import torch

    from nas.plugins import build_plugin
    from nas.strategies import SearchContext
    from nas.supernet import build_supernet

    torch.manual_seed(0)
    C, layers = SIZES[space]
    net = build_supernet(space, C=C, layers=layers, num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    strategy = build_plugin("search", name, **kwargs)
    strategy.prepare_supernet(net)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=10),
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
    strategy.begin_step(0)
    seen: set[int] = set()
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in seen:
            seen.add(key)
            saved[0] += storage.nbytes()
        return t

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if phase == "arch":
            strategy.arch_step((x, y), (x, y))
        else:
            strategy.weight_step((x, y))
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return {"saved_mb": saved[0] / 2**20, "rss_mb": (after - before) * scale / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="+", default=["nb201", "darts"], choices=list(SIZES))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(child(spec["space"], spec["name"], spec["kwargs"], spec["phase"],
                               spec["batch"])))  # fmt: skip
        return
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    print(f"batch {args.batch}, 32x32 images, {args.threads} threads, one fresh process per row")
    print("| space | strategy | step | saved MB | peak RSS MB |")
    print("| --- | --- | --- | ---: | ---: |")
    for space in args.spaces:
        for name, kwargs in STRATEGIES:
            for phase in ("arch", "weight"):
                if phase == "weight" and name == "proxylessnas" and kwargs["mode"] != "full_v2":
                    continue  # the weight step does not depend on the mode
                spec = {"space": space, "name": name, "kwargs": kwargs, "phase": phase,
                        "batch": args.batch}  # fmt: skip
                cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
                done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
                row = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"| {space} | {_label(name, kwargs)} | {phase} | {row['saved_mb']:.1f} | "
                      f"{row['rss_mb']:.1f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
