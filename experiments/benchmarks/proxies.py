"""Time the zero-cost proxies on NAS-Bench-201 cells: each proxy alone, and the batched harness.

Benchmark of ``nas.proxies`` (``nas-proxy``). For ``--cells`` cells of the seeded sample (the
benchmark's C=16, N=5 networks, 10 classes) it measures, per cell:

* each proxy on its own (``Proxy.score``: its own forward / backward, as the ZC harness runs
  every measure on a fresh copy);
* the harness, ``score_many`` with every proxy: one shared forward and backward for grad_norm,
  snip, fisher and jacob_cov, the inputs built once for all cells;
* naswot the way its reference runs it (a forward and backward that arm the hooks, then a
  second forward) against our single forward without autograd;
* building the network (``TinyNetwork`` + its initialisation).

and prints the median seconds per cell and what the whole sample would take. Timings depend
on the machine and its load: run it on an idle one to quote figures.

    python experiments/benchmarks/proxies.py --cells 5
    python experiments/benchmarks/proxies.py --cells 20 --threads 1 --sample 1000
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from nas.proxies import PROXIES, Scorable, get_proxy, proxy_inputs, score_many
from nas.proxies.correlation import sample_cells
from nas.proxies.naswot import logdet, naswot_kernel
from search_spaces.nb201 import TinyNetwork


def _naswot_reference_protocol(net: TinyNetwork, x: torch.Tensor) -> float:
    """NW's score_networks.py: forward + backward of the batch (hooks armed), then a second
    forward whose ReLU codes make K."""
    xg = x.clone().requires_grad_(True)
    net.zero_grad()
    y = net(xg)[1]
    y.backward(torch.ones_like(y))
    with torch.no_grad():
        return logdet(naswot_kernel(Scorable(net), x))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", type=int, default=5, help="cells to time (from the sample)")
    p.add_argument("--sample", type=int, default=1000, help="sample size to extrapolate to")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = PROXIES.names()
    inputs = proxy_inputs(names, seed=args.seed)
    per: dict[str, list[float]] = {n: [] for n in [*names, "harness", "build", "naswot_nw"]}
    for index in sample_cells(args.sample, args.seed)[: args.cells]:
        t0 = time.perf_counter()
        torch.manual_seed(args.seed * 100_003 + index)
        net = TinyNetwork(16, 5, index, 10)
        per["build"].append(time.perf_counter() - t0)
        for n in names:
            proxy = get_proxy(n)
            torch.manual_seed(args.seed)
            t0 = time.perf_counter()
            proxy.score(Scorable(net), *inputs[n])
            per[n].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        score_many(net, names, inputs, seed=args.seed)
        per["harness"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        _naswot_reference_protocol(net, inputs["naswot"][0])
        per["naswot_nw"].append(time.perf_counter() - t0)
        print(f"cell {index}: harness {per['harness'][-1]:.2f} s", flush=True)
    med = {k: statistics.median(v) for k, v in per.items()}
    alone = sum(med[n] for n in names)
    threads = torch.get_num_threads()
    print(f"\nmedian seconds per NB201 cell over {args.cells} cells ({threads} threads)")
    for n in sorted(names, key=lambda n: -med[n]):
        print(f"  {n:<10} {med[n]:8.3f}  ({100 * med[n] / alone:4.1f} % of all proxies alone)")
    print(f"  {'all alone':<10} {alone:8.3f}")
    print(f"  {'harness':<10} {med['harness']:8.3f}  (shared gradient pass, inputs built once)")
    print(f"  {'build net':<10} {med['build']:8.3f}")
    print(
        f"  naswot: reference protocol (fwd + bwd + fwd) {med['naswot_nw']:.3f} s, "
        f"ours (one forward, no autograd) {med['naswot']:.3f} s"
    )
    total = (med["harness"] + med["build"]) * args.sample
    print(f"whole sample of {args.sample} cells with every proxy: ~{total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
