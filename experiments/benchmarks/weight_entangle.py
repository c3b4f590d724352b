"""Weight entanglement beside weight sharing: step time and memory of the same search step.

Weight entanglement (Sukthanker et al., AutoML-Conf 2024; ``components=[weight_entangle]``,
``nas/supernet/entangle.py``) runs each group of ops of one kind at several kernel sizes as one
op on the alpha-weighted centre crops of the largest kernel, where weight sharing (the plain
supernet) runs every op. For each space, in a fresh process per measurement, the same supernet
(seed 0), batch and DARTS (first-order) weight step, with and without the component:

* ``params``: the supernet's parameters;
* ``saved MB``: the bytes autograd holds for the backward during the step's forward (every
  tensor packed by ``torch.autograd.graph.saved_tensors_hooks``, each storage counted once):
  the activation memory the step needs, exact and independent of the allocator;
* ``peak RSS MB``: the growth of the process's peak resident set over the steps, the untimed
  first included (``resource.getrusage(...).ru_maxrss``; the supernet, optimiser and batch
  exist before);
* ``step s``: the fastest of ``--steps`` timed weight steps (after one untimed).

The processes alternate (plain, entangled, plain, ...) for ``--rounds`` rounds; each figure is
the best (lowest) over the rounds. The load average before and after is printed with the table.

    python experiments/benchmarks/weight_entangle.py
    python experiments/benchmarks/weight_entangle.py --batch 32 --rounds 3 --spaces darts
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# the supernets: the DARTS search network (C=16, 8 cells); ProxylessNAS's on 32x32 images at
# half width (C=16) with two blocks kept per stage
SIZES = {"darts": (16, 8), "proxyless_cifar": (16, 2)}


def child(space: str, entangled: bool, batch: int, steps: int) -> dict[str, float]:
    """``steps`` weight steps in this (fresh) process: params, saved bytes, RSS, best time."""
    import torch

    from nas.plugins import build_plugin
    from nas.strategies import SearchContext
    from nas.strategies.components.weight_entangle import WeightEntangle
    from nas.supernet import build_supernet

    torch.manual_seed(0)
    C, layers = SIZES[space]
    net = build_supernet(space, C=C, layers=layers, num_classes=10)
    strategy = build_plugin("search", "darts")
    if entangled:
        strategy.add_components([WeightEntangle()])
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=10),
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
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
    strategy.begin_step(0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        strategy.weight_step((x, y))  # untimed: allocator and caches warm
    times = []
    for step in range(steps):
        strategy.begin_step(1 + step)
        t0 = time.perf_counter()
        strategy.weight_step((x, y))
        times.append(time.perf_counter() - t0)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return {
        "params": float(sum(p.numel() for p in net.parameters())),
        "saved_mb": saved[0] / 2**20,
        "rss_mb": (after - before) * scale / 2**20,
        "step_s": min(times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spaces", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(child(spec["space"], spec["entangled"], spec["batch"], spec["steps"])))
        return
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    load_before = os.getloadavg()
    best: dict[tuple[str, bool], dict[str, float]] = {}
    for space in args.spaces:
        for _ in range(args.rounds):
            for entangled in (False, True):
                spec: dict[str, Any] = {"space": space, "entangled": entangled,
                                        "batch": args.batch, "steps": args.steps}  # fmt: skip
                cmd = [sys.executable, __file__, "--child", json.dumps(spec)]
                done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
                row = json.loads(done.stdout.strip().splitlines()[-1])
                old = best.get((space, entangled))
                best[(space, entangled)] = (
                    row if old is None else {k: min(v, old[k]) for k, v in row.items()}
                )
    load_after = os.getloadavg()
    print(f"batch {args.batch}, 32x32 images, {args.threads} thread(s), DARTS weight step, "
          f"best of {args.rounds} fresh processes x {args.steps} steps; load average "
          f"(1, 5, 15 min) before {load_before[0]:.2f} {load_before[1]:.2f} "
          f"{load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} "
          f"{load_after[2]:.2f}; {os.cpu_count()} CPUs")  # fmt: skip
    print("| space | supernet | params | saved MB | peak RSS MB | step s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for space in args.spaces:
        for entangled in (False, True):
            r = best[(space, entangled)]
            label = "entangled" if entangled else "weight sharing"
            print(f"| {space} | {label} | {int(r['params']):,} | {r['saved_mb']:.1f} | "
                  f"{r['rss_mb']:.1f} | {r['step_s']:.2f} |")  # fmt: skip
        a, b = best[(space, False)], best[(space, True)]
        print(f"| {space} | entangled / sharing | {b['params'] / a['params']:.3f} | "
              f"{b['saved_mb'] / a['saved_mb']:.3f} | "
              f"{b['rss_mb'] / max(a['rss_mb'], 1e-9):.3f} | "
              f"{b['step_s'] / a['step_s']:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
