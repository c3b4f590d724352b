"""DARTS-PT on supernets built so that the right answer is known."""

from __future__ import annotations

import math

import pytest
import torch

from nas.plugins import build_plugin
from nas.selection import PerturbationSelection, evaluate_variants
from nas.strategies import SearchContext
from nas.supernet import build_supernet
from search_spaces.ops import Zero


class FakeContext:
    """The loop's services, without training: fixed batches labelled by the supernet itself."""

    def __init__(self, batches):
        self.batches = batches
        self.search_lr = 0.025
        self.step_in_epoch = 0
        self.requested: list[int] = []
        self.events: list[dict] = []
        self.checkpoints = 0

    def val_batches(self, *, key, limit):
        n = len(self.batches) if limit is None else min(limit, len(self.batches))
        self.requested.append(n)
        yield from self.batches[:n]

    def train_epoch(self, **kwargs):
        raise AssertionError("proj_intv=0: no tuning expected")

    def reset_weight_optimizer(self, lr):
        pass

    def checkpoint(self):
        self.checkpoints += 1

    def stop_point(self):  # no stop is ever requested here
        pass

    def log(self, event, **values):
        self.events.append({"event": event, **values})

    def all_reduce_sum(self, tensor):
        return tensor

    def broadcast(self, obj):
        return obj


def _zero_out(mixed, keep: int | None):
    """Every op of an edge outputs zero except op ``keep`` (None: the whole edge is zero)."""
    for k in range(len(mixed.ops)):
        if k != keep and mixed.op_names[k] != "none":
            mixed.ops[k] = Zero(mixed.C // mixed.k, mixed.stride)


def _teacher_batches(net, strategy, n_batches=2, batch=128, hw=8):
    torch.manual_seed(1)
    batches = []
    with torch.no_grad():
        net.train()
        for _ in range(n_batches):
            x = torch.randn(batch, 3, hw, hw)
            y = net(x, strategy.arch_weights(sample=False)).argmax(1)  # 100% base accuracy
            batches.append((x, y))
    return batches


def _attach(net, strategy_name, key=None):
    """A strategy with uniform weights, or with almost all weight on ``key[ct][edge]`` (so that
    projecting an edge to its key op leaves the supernet's function as it was)."""
    strategy = build_plugin("search", strategy_name, init_scale=0.0)
    strategy.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0))
    with torch.no_grad():
        for ct, edges in (key or {}).items():
            for e, k in edges.items():
                strategy.arch_params[ct][e, k] = 1000.0
    return strategy


@pytest.mark.parametrize("strategy_name", ["darts", "drnas"])
def test_nb201_picks_the_only_op_that_matters_on_every_edge(strategy_name):
    torch.manual_seed(0)
    # 100 classes: small margins, so removing any op that matters flips some predictions
    net = build_supernet("nb201", C=4, layers=1, num_classes=100)
    key = {0: 3, 1: 2, 2: 4, 3: 1, 4: 3, 5: 2}  # edge -> the op that is not zero
    for cell in net.cells:
        for e, mixed in enumerate(getattr(cell, "ops", [])):
            _zero_out(mixed, key[e])
    strategy = _attach(net, strategy_name, {"cell": key})
    ctx = FakeContext(_teacher_batches(net, strategy))
    genotype = PerturbationSelection(proj_intv=0, num_val_batches=2).select(strategy, context=ctx)
    ops = net.space.cells["cell"].edges[0].ops
    assert genotype.ops == tuple(ops[key[e]] for e in range(6))
    decisions = [e for e in ctx.events if e["event"] == "pt_decision"]
    assert len(decisions) == 6 and {d["edge"] for d in decisions} == set(range(6))
    for d in decisions:
        chosen = d["candidates"].index(d["chosen"])
        others = [acc for i, acc in enumerate(d["acc"]) if i != chosen]
        assert d["acc"][chosen] < min(others)
        if strategy_name == "darts":  # removing a zero op leaves the supernet exactly as it was
            assert all(acc == 1.0 for acc in others)


@pytest.mark.slow
def test_darts_space_picks_ops_and_topology():
    torch.manual_seed(0)
    net = build_supernet("darts", C=4, layers=3, num_classes=100)
    # node -> its two edges that matter, with the op of each (index in DARTS_OPS)
    keep = {2: {0: 4, 1: 6}, 3: {0: 5, 2: 7}, 4: {1: 4, 3: 2}, 5: {2: 6, 4: 3}}
    cell_space = net.space.cells["normal"]
    expected = []
    for edges in keep.values():
        for src in sorted(edges):
            expected.append((cell_space.edges[0].ops[edges[src]], src))
    key = {"normal": {}, "reduce": {}}
    for cell in net.cells:
        for e, mixed in enumerate(cell.ops):
            edge = cell_space.edges[e]
            k = keep[edge.dst].get(edge.src) if not cell.reduction else 1 + e % 7
            _zero_out(mixed, k)
            if k is not None:
                key["reduce" if cell.reduction else "normal"][e] = k
    strategy = _attach(net, "darts", key)
    ctx = FakeContext(_teacher_batches(net, strategy, n_batches=2, batch=64))
    genotype = PerturbationSelection(proj_intv=0, num_val_batches=1).select(strategy, context=ctx)
    assert sorted(genotype.normal, key=lambda p: (genotype.normal.index(p) // 2, p[1])) == expected
    kinds = [e["kind"] for e in ctx.events if e["event"] == "pt_decision"]
    assert kinds == ["op"] * 28 + ["edge"] * 6  # 14 op + 3 topology projections per cell type
    assert ctx.requested and all(n == 1 for n in ctx.requested)  # num_val_batches bounds the cost


def test_prefix_reuse_gives_the_same_scores():
    torch.manual_seed(0)
    net = build_supernet("s4", C=4, layers=4, num_classes=10)  # S4: noise ops draw random numbers
    strategy = _attach(net, "darts")
    base = strategy.arch_weights(sample=False)
    variants = []
    for k in range(2):
        w = {ct: t.clone() for ct, t in base.items()}
        w["reduce"][3, k] = 0.0
        variants.append(w)
    batches = [(torch.randn(16, 3, 16, 16), torch.randint(0, 10, (16,))) for _ in range(2)]
    with_reuse = evaluate_variants(net, variants, "reduce", batches, reuse_prefix=True, seed=3)
    without = evaluate_variants(net, variants, "reduce", batches, reuse_prefix=False, seed=3)
    assert with_reuse == without
    assert net.first_cell_of("reduce") == 1


def test_evaluation_leaves_bn_statistics_untouched():
    torch.manual_seed(0)
    net = build_supernet("darts", C=4, layers=3, num_classes=10)
    strategy = _attach(net, "darts")
    before = {k: v.clone() for k, v in net.state_dict().items()}
    batches = [(torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,)))]
    evaluate_variants(net, [strategy.arch_weights(sample=False)], "normal", batches)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_plan_and_tuning_epochs():
    net = build_supernet("darts", C=4, layers=3, num_classes=10)
    s = _attach(net, "darts")
    pt = PerturbationSelection(proj_intv=5)
    assert pt.projection_plan(s) == ["op"] * 14 + ["edge"] * 3
    assert pt.tune_epochs(s) == 16 * 5 + 1
    nb = _attach(build_supernet("nb201", C=4, layers=1, num_classes=10), "darts")
    # nasbench201/projection.py: tune_epochs = proj_intv * (num_edges - 1), no extra epoch
    assert pt.projection_plan(nb) == ["op"] * 6 and pt.tune_epochs(nb) == 25


class TuningContext(FakeContext):
    """Records the learning rate of every tuning epoch and when each decision was taken."""

    def __init__(self, batches):
        super().__init__(batches)
        self.lrs: list[float] = []
        self.decided_at: list[int] = []
        self.resets: list[float] = []

    def train_epoch(self, *, key, lr, update_arch, desc):
        self.lrs.append(lr)
        return {}

    def reset_weight_optimizer(self, lr):
        self.resets.append(lr)

    def log(self, event, **values):
        super().log(event, **values)
        if event == "pt_decision":
            self.decided_at.append(len(self.lrs))  # tuning epochs finished before it


def _tiny_batches(num_classes=10, hw=8):
    torch.manual_seed(2)
    return [(torch.randn(4, 3, hw, hw), torch.randint(0, num_classes, (4,)))]


def test_nb201_tunes_25_epochs_with_projections_at_the_reference_epochs():
    """nasbench201/projection.py: 25 epochs, projections at 0, 5, 10, 15, 20 and 24."""
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    strategy = _attach(net, "darts")
    ctx = TuningContext(_tiny_batches())
    PerturbationSelection(proj_intv=5).select(strategy, context=ctx)
    assert len(ctx.lrs) == 25
    assert ctx.decided_at == [0, 5, 10, 15, 20, 24]


@pytest.mark.slow
@pytest.mark.parametrize("space", ["s5", "nb201"])
def test_tuning_lr_is_constant_by_default_on_every_space(space):
    """The reference holds search lr / 10 (sota/cnn/projection.py never steps its cosine)."""
    net = build_supernet(space, C=4, layers=3 if space == "s5" else 1, num_classes=10)
    strategy = _attach(net, "darts")
    ctx = TuningContext(_tiny_batches())
    PerturbationSelection(proj_intv=1, num_val_batches=1).select(strategy, context=ctx)
    assert ctx.resets == [pytest.approx(0.025 / 10, rel=1e-15)]
    assert len(ctx.lrs) == (17 if space == "s5" else 5)
    assert ctx.lrs == [ctx.resets[0]] * len(ctx.lrs)
    if space == "s5":  # the last of 17 projections at epoch 16, then one more epoch
        assert ctx.decided_at == sorted([*range(17), *range(17)])


@pytest.mark.slow
def test_tuning_lr_cosine_option():
    net = build_supernet("s5", C=4, layers=3, num_classes=10)
    strategy = _attach(net, "darts")
    ctx = TuningContext(_tiny_batches())
    pt = PerturbationSelection(proj_intv=1, num_val_batches=1, tune_lr_schedule="cosine")
    pt.select(strategy, context=ctx)
    total = 17
    expected = [
        0.001 + (0.0025 - 0.001) * (1 + math.cos(math.pi * e / total)) / 2 for e in range(total)
    ]
    assert ctx.lrs == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="selection.tune_lr_schedule must be 'constant'"):
        PerturbationSelection(tune_lr_schedule="step")


def test_candidates_include_none_and_none_can_win():
    """S3 (none, skip, sep): the reference measures `none` too. On the edge below, removing
    skip_connect restores the labels' network and removing the (zeroed) sep_conv changes
    nothing, so no removal lowers the accuracy below that of removing `none`: `none` wins."""
    torch.manual_seed(0)
    net = build_supernet("s3", C=4, layers=3, num_classes=100)
    strategy = _attach(net, "darts")
    ops = net.space.cells["normal"].edges[0].ops
    assert ops == ("none", "skip_connect", "sep_conv_3x3")
    target = 9  # an edge between two intermediate nodes (stride 1 in every cell)
    for cell in net.cells:
        if not cell.reduction:
            _zero_out(cell.ops[target], ops.index("skip_connect"))
    pt = PerturbationSelection(proj_intv=0)
    projection = pt.attach(strategy)
    for e in range(14):  # every other normal edge decided: only `target` is left to project
        if e != target:
            projection.project_op("normal", e, ops.index("sep_conv_3x3"))
    teacher = strategy.arch_weights(sample=False)
    teacher["normal"][target] = 0.0  # the labels come from the network without that edge
    torch.manual_seed(1)
    batches = []
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(64, 3, 8, 8)
            batches.append((x, net(x, teacher).argmax(1)))
    ctx = FakeContext(batches)
    decision = pt.project_op(ctx, strategy, "normal")
    assert decision["edge"] == target
    assert decision["candidates"] == list(ops)
    acc = dict(zip(decision["candidates"], decision["acc"]))
    assert acc["skip_connect"] == 1.0 and acc["none"] == acc["sep_conv_3x3"] < 1.0
    assert decision["chosen"] == "none"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"criterion": "f1"}, "selection.criterion must be 'acc' or 'loss'"),
        ({"proj_intv": -1}, "selection.proj_intv must be an int >= 0"),
        ({"num_val_batches": 0}, "selection.num_val_batches must be a positive int or null"),
    ],
)
def test_bad_pt_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PerturbationSelection(**kwargs)
