"""Pareto front and budget ranks against brute force."""

import numpy as np

from nas.hardware.cost import CostModel
from nas.hardware.pareto import best_within, hypervolume, nb201_costs, pareto_front, rank_within
from search_spaces.nb201 import arch_to_index
from search_spaces.op_names import NB201_OPS


def test_front_is_exactly_the_non_dominated_points():
    rng = np.random.default_rng(0)
    cost = rng.integers(0, 30, 300).astype(float)
    acc = rng.integers(0, 40, 300).astype(float)
    front = pareto_front(cost, acc)
    for i in range(300):
        # i is on the front iff nothing at most as costly is strictly more accurate and
        # nothing cheaper is as accurate (ties at one cost: only the first best is kept)
        dominated = any(
            (cost[j] <= cost[i] and acc[j] > acc[i]) or (cost[j] < cost[i] and acc[j] >= acc[i])
            for j in range(300)
        )
        if dominated:
            assert i not in front
    assert all(acc[a] < acc[b] and cost[a] <= cost[b] for a, b in zip(front, front[1:]))
    assert hypervolume(cost, acc, front) > 0


def test_nb201_costs_and_ranks():
    per_op = torch_rand = np.random.default_rng(1).uniform(0.1, 2, (6, 5))
    import torch

    model = CostModel("latency", "nb201", 1.0, {"cell": torch.tensor(torch_rand)})
    cost = nb201_costs(model)
    arch = "|nor_conv_3x3~0|+|skip_connect~0|avg_pool_3x3~1|+|none~0|nor_conv_1x1~1|skip_connect~2|"
    ops = ["nor_conv_3x3", "skip_connect", "avg_pool_3x3", "none", "nor_conv_1x1", "skip_connect"]
    want = 1.0 + sum(per_op[e, NB201_OPS.index(op)] for e, op in enumerate(ops))
    assert np.isclose(cost[arch_to_index(arch)], want)
    acc = np.random.default_rng(2).uniform(0, 100, cost.size)
    budget = float(np.median(cost))
    best, mask = best_within(cost, acc, budget)
    assert cost[best.index] <= budget and acc[best.index] == acc[cost <= budget].max()
    assert rank_within(best.index, cost, acc, budget) == 1
    assert best.feasible == int((cost <= budget).sum())


def test_nas_plot_draws_a_sweep_over_the_front(tmp_path):
    """``nas-plot SWEEP --pareto TABLE``: every NB201 run under the folder, placed by its
    target (the budget of its config) over the exact front."""
    import json

    from nas.cli.plot import main as nas_plot
    from nas.hardware.parts import network_layout
    from nas.hardware.profiler import profile

    table = profile(
        network_layout("nb201", C=4, layers=1, image_size=16, num_classes=10), timed=False
    )
    for entry in table.entries.values():  # latency-like values, deterministic
        entry["latency_ms"] = entry["flops"] / 1e5 + 0.05
    table.protocol["timed"] = True
    path = table.save(tmp_path / "table.json")
    sweep = tmp_path / "sweep"
    arch = "|nor_conv_3x3~0|+|skip_connect~0|avg_pool_3x3~1|+|none~0|nor_conv_1x1~1|skip_connect~2|"
    for k, budget in enumerate((None, 2.0)):
        run = sweep / str(k)
        run.mkdir(parents=True)
        (run / "genotype.json").write_text(json.dumps({"space": "nb201", "arch": arch}))
        selection = "selection: {}\n" if budget is None else f"selection:\n  budget: {budget}\n"
        (run / "config.yaml").write_text(selection)
    out = tmp_path / "front.png"
    assert nas_plot([str(sweep), "--pareto", str(path), "-o", str(out)]) == 0
    assert out.is_file() and out.stat().st_size > 10_000
    assert nas_plot([str(tmp_path / "nope"), "--pareto", str(path)]) == 2
