"""DARTS-PT told a budget: every projection keeps room for the cheapest completion of the
rest, so the selected network is never over budget (random supernets, random cost tables)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from nas.hardware.cost import CostModel, cheapest_cost
from nas.hardware.parts import network_layout
from nas.hardware.profiler import profile
from nas.plugins import build_plugin
from nas.selection import PerturbationSelection
from nas.strategies import SearchContext
from nas.supernet import build_supernet


class Ctx:
    search_lr = 0.025

    def __init__(self, batches):
        self.batches = batches

    def val_batches(self, *, key, limit):
        return iter(self.batches if limit is None else self.batches[:limit])

    def train_epoch(self, **kwargs):
        pass

    def reset_weight_optimizer(self, lr):
        pass

    def checkpoint(self):
        pass

    def stop_point(self):  # no stop is ever requested here
        pass

    def log(self, event, **values):
        pass

    def all_reduce_sum(self, tensor):
        return tensor

    def broadcast(self, obj):
        return obj


def _strategy(net):
    strategy = build_plugin("search", "darts", init_scale=0.0)
    strategy.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0))
    return strategy


def _table(tmp_path, space, layers, rng):
    """A table of the tiny network whose per-part latencies are random (seeded)."""
    table = profile(
        network_layout(space, C=4, layers=layers, image_size=16, num_classes=10), timed=False
    )
    for entry in table.entries.values():
        entry["latency_ms"] = rng.uniform(0.1, 3.0)
    table.protocol["timed"] = True
    data = table.to_json()
    path = tmp_path / f"{space}-{rng.random():.6f}.json"
    path.write_text(json.dumps(data))
    return path, CostModel.from_table(table, "latency")


@pytest.mark.parametrize("space,layers", [("nb201", 1), ("s3", 3)])
def test_pt_with_a_budget_is_never_over_it(tmp_path, space, layers):
    rng = random.Random(0)
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g))]
    for trial in range(2 if space == "s3" else 6):
        path, model = _table(tmp_path, space, layers, rng)
        torch.manual_seed(trial)
        net = build_supernet(space, C=4, layers=layers, num_classes=10)
        strategy = _strategy(net)
        with torch.no_grad():
            for p in strategy.arch_parameters():
                p.normal_(0, 2.0)
        allowed = {ct: net.op_mask(ct).clone() for ct in net.arch_shapes()}
        floor = cheapest_cost(model, allowed)
        assert floor is not None
        top = floor + sum(float(t.max(-1).values.sum()) for t in model.per_op.values())
        budget = floor + rng.uniform(0.0, 0.5) * (top - floor)
        pt = PerturbationSelection(proj_intv=0, table=str(path), budget=budget, force=True)
        genotype = pt.select(strategy, context=Ctx(batches))
        assert model.of_genotype(genotype) <= budget + 1e-9
        # every recorded op decision was taken among the ops that fit
        for d in pt.decisions:
            if d["kind"] == "op":
                assert d["chosen"] in d["within_budget"]


def test_pt_budget_below_the_cheapest_network_is_one_line(tmp_path):
    path, model = _table(tmp_path, "nb201", 1, random.Random(1))
    # refused when the selector is built, before any search
    with pytest.raises(ValueError, match="below the cheapest network") as e:
        PerturbationSelection(proj_intv=0, table=str(path), budget=model.fixed / 2, force=True)
    assert "\n" not in str(e.value)
