"""Budget-constrained argmax: never over budget on random supernets; the argmax when it does
not bind; one line when no network fits."""

import random

import pytest
import torch

from nas.hardware.cost import CostModel, budget_argmax_genotype
from nas.hardware.parts import network_layout
from nas.hardware.profiler import profile
from nas.selection.argmax import argmax_genotype
from search_spaces.space import get_space


@pytest.fixture(scope="module")
def models():
    out = {}
    for space, layers in (("nb201", 1), ("darts", 3)):
        table = profile(
            network_layout(space, C=4, layers=layers, image_size=16, num_classes=10), timed=False
        )
        out[space] = CostModel.from_table(table, "flops")
    return out


def _random_costs(model, rng):
    # random per-op costs (latency-like: positive, ops differ) on the real layout's shapes
    per_op = {
        ct: torch.tensor([[rng.uniform(0.1, 5.0) for _ in row] for row in t.tolist()]).double()
        for ct, t in model.per_op.items()
    }
    for ct, t in per_op.items():  # `none` costs nothing, as in the table
        for e, edge in enumerate(get_space(model.space).cells[ct].edges):
            for k, op in enumerate(edge.ops):
                if op == "none":
                    t[e, k] = 0.0
    return CostModel(model.metric, model.space, rng.uniform(0.5, 2.0), per_op)


@pytest.mark.parametrize("space", ["nb201", "darts"])
def test_budget_is_never_exceeded_on_random_supernets(models, space):
    rng = random.Random(0)
    sp = get_space(space)
    for trial in range(40):
        model = models[space] if trial % 2 == 0 else _random_costs(models[space], rng)
        g = torch.Generator().manual_seed(trial)
        weights = {
            ct: torch.softmax(torch.randn(*t.shape, generator=g) * 3, -1)
            for ct, t in model.per_op.items()
        }
        masks = {ct: torch.ones_like(w, dtype=torch.bool) for ct, w in weights.items()}
        free = argmax_genotype(sp, weights, masks)
        free_cost = model.of_genotype(free)
        floor = _nb201_floor(model) if space == "nb201" else _darts_floor(model)
        for frac in (0.0, 0.2, 0.5, 0.8, 1.0):
            budget = floor + frac * (free_cost - floor)
            genotype = budget_argmax_genotype(model, weights, masks, budget)
            genotype.validate(sp)
            assert model.of_genotype(genotype) <= budget + 1e-9
        # a budget that does not bind gives the plain argmax
        assert budget_argmax_genotype(model, weights, masks, free_cost) == free
        assert budget_argmax_genotype(model, weights, masks, 1e18) == free


def _nb201_floor(model):
    return model.fixed + float(model.per_op["cell"].min(-1).values.sum())


def _darts_floor(model):
    from itertools import combinations

    sp = get_space(model.space)
    total = model.fixed
    for ct, cell in sp.cells.items():
        t = model.per_op[ct]
        for node in cell.intermediate_nodes:
            mins = [
                min(float(t[e.index, k]) for k, op in enumerate(e.ops) if op != "none")
                for e in cell.edges_into(node)
            ]
            total += min(a + b for a, b in combinations(mins, 2))
    return total


def test_budget_below_the_cheapest_network_is_one_line(models):
    model = models["nb201"]
    w = {"cell": torch.softmax(torch.randn(6, 5), -1)}
    with pytest.raises(ValueError, match="below the cheapest network") as err:
        budget_argmax_genotype(model, w, None, model.fixed * 0.5)
    assert "\n" not in str(err.value)


def test_masked_ops_are_never_chosen(models):
    model = models["nb201"]
    w = {"cell": torch.softmax(torch.randn(6, 5), -1)}
    mask = torch.ones(6, 5, dtype=torch.bool)
    mask[:, 0] = False  # no `none`: the cheapest op is gone
    g = budget_argmax_genotype(model, w, {"cell": mask}, 1e18)
    assert "none" not in g.ops
