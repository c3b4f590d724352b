"""Why our fisher ranks NB201 cells better than the published figure: ours against ZC's own code.

fisher (``nas.proxies.fisher``) against SamsungLabs/zero-cost-nas, imported at run time from
your own checkout (``--reference-root zc=PATH``; nothing of it is in this project). For the
first ``--cells`` cells of ``nas-proxy``'s seeded sample, on the same batch:

* ``ours``: our fisher on the benchmark's own network (``TinyNetwork``), as ``nas-proxy``;
* ``zc-net``: our fisher on ZC's NB201 network (``foresight.models.nasbench2``: conv biases
  and affine-free BN without running statistics in the cells), from the same seed;
* ``zc-code``: ZC's own ``compute_fisher_per_weight`` on that network (checks ours against
  theirs: equal to float rounding);
* ``zc-net-nobias``: ZC's network, the same weights, its cell convs' biases set to zero;
* ``ours-batch-per-cell`` / ``zc-code-batch-per-cell``: a new batch for every cell, as ZC's
  ``iter(loader)`` draws one.

Prints Spearman rho / Kendall tau against the NB201 accuracies of ``nas-proxy`` for each.

    git clone https://github.com/SamsungLabs/zero-cost-nas /tmp/refs/zero-cost-nas
    python experiments/benchmarks/fisher_reference.py --reference-root zc=/tmp/refs/zero-cost-nas \
        --cells 300
"""

from __future__ import annotations

import argparse
import os
import sys

VARIANTS = (
    "ours",
    "zc-net",
    "zc-code",
    "zc-net-nobias",
    "ours-batch-per-cell",
    "zc-code-batch-per-cell",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-root", required=True, metavar="zc=PATH")
    parser.add_argument("--cells", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    name, _, root = args.reference_root.partition("=")
    marker = os.path.join(root, "foresight", "models", "nasbench2.py")
    if name != "zc" or not os.path.isfile(marker):
        raise SystemExit(
            f"--reference-root {args.reference_root}: expected zc=PATH, a checkout of "
            "SamsungLabs/zero-cost-nas (with foresight/models/nasbench2.py)"
        )
    if not 1 <= args.cells <= 1000:
        raise SystemExit(f"--cells {args.cells}: expected 1..1000 (a prefix of the sample)")
    sys.path.insert(0, os.path.abspath(root))

    import numpy as np
    import torch
    from foresight.models import nasbench2
    from foresight.pruners import measures
    from torch.nn import functional as F

    from nas.proxies import get_proxy
    from nas.proxies.base import as_scorable
    from nas.proxies.correlation import ground_truth, kendall, sample_cells, spearman
    from nas.proxies.harness import proxy_inputs, training_images
    from search_spaces.nb201 import TinyNetwork, index_to_arch

    torch.set_num_threads(args.threads)
    fisher = get_proxy("fisher")
    x, y = proxy_inputs(["fisher"], seed=0)["fisher"]
    cpu = torch.device("cpu")

    def ours(net: torch.nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> float:
        torch.manual_seed(0)
        return fisher.score(as_scorable(net), xb, yb)

    def theirs(net: torch.nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> float:
        torch.manual_seed(0)
        per_weight = measures.calc_measure(
            "fisher", net, cpu, xb, yb, loss_fn=F.cross_entropy, split_data=1
        )
        return float(sum(t.sum() for t in per_weight))

    indices = sample_cells(1000, 0)[: args.cells]
    scores: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for k, index in enumerate(indices):
        arch = index_to_arch(index)
        torch.manual_seed(index)  # nas-proxy's initialisation of the cell (seed 0)
        net = TinyNetwork(16, 5, index, 10)
        torch.manual_seed(index)
        zc = nasbench2.get_model_from_arch_str(arch, 10)
        zc_nobias = nasbench2.get_model_from_arch_str(arch, 10)
        zc_nobias.load_state_dict(zc.state_dict())
        with torch.no_grad():
            for m in zc_nobias.modules():
                if isinstance(m, torch.nn.Conv2d) and m.bias is not None:
                    m.bias.zero_()
        xi, yi = training_images(64, augment=True, seed=1000 + index)
        row = {
            "ours": ours(net, x, y),
            "zc-net": ours(zc, x, y),
            "zc-code": theirs(zc, x, y),
            "zc-net-nobias": ours(zc_nobias, x, y),
            "ours-batch-per-cell": ours(net, xi, yi),
            "zc-code-batch-per-cell": theirs(zc, xi, yi),
        }
        for v in VARIANTS:
            scores[v].append(row[v])
        print(
            f"[{k + 1}/{len(indices)}] cell {index}: "
            + " ".join(f"{v} {row[v]:.4g}" for v in VARIANTS),
            flush=True,
        )
    truth = ground_truth(indices)
    a, b = np.array(scores["zc-net"]), np.array(scores["zc-code"])
    print(
        f"\nn = {len(indices)}; ours on ZC's network vs ZC's code: max relative difference "
        f"{float(np.max(np.abs(a - b) / np.abs(b))):.1e}"
    )
    print("| fisher | " + " | ".join(f"{label} rho / tau" for label in truth) + " |")
    print("| --- |" + " --- |" * len(truth))
    for v in VARIANTS:
        s = np.array(scores[v])
        cells = " | ".join(
            f"{spearman(s, acc):+.3f} / {kendall(s, acc):+.3f}" for acc in truth.values()
        )
        print(f"| {v} | {cells} |")


if __name__ == "__main__":
    main()
