"""DARTS-PT's candidates as one batch (``batch_candidates``): the scores of one by one."""

from __future__ import annotations

import pytest
import torch

from nas.plugins import build_plugin
from nas.selection import PerturbationSelection, evaluate_variants
from nas.strategies import SearchContext
from nas.supernet import build_supernet
from search_spaces.ops import Noise
from tests.selection.test_perturbation import FakeContext


@pytest.fixture(autouse=True)
def float64():
    """Both paths at float64: what remains between them is float rounding."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _net(space: str, layers: int, **kwargs):
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=layers, num_classes=10, **kwargs)
    strategy = build_plugin("search", "darts", init_scale=1.0)  # unequal weights
    strategy.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0))
    return net, strategy


def _variants(strategy, cell_type: str, kind: str, edge: int = 3):
    """The selector's variants: op projection (each op of ``edge`` zeroed) or topology
    projection (each input edge of a node with more than two zeroed)."""
    base = {k: v.detach().clone() for k, v in strategy.arch_weights(sample=False).items()}
    variants = []
    if kind == "op":
        mask = strategy.supernet.op_mask(cell_type)[edge]
        for k in range(base[cell_type].shape[1]):
            if bool(mask[k]):
                w = {ct: t.clone() for ct, t in base.items()}
                w[cell_type][edge, k] = 0.0
                variants.append(w)
    else:
        cell = strategy.supernet.space.cells[cell_type]
        node = cell.intermediate_nodes[-1]  # 5 inputs in a DARTS cell
        for e in cell.edges_into(node):
            w = {ct: t.clone() for ct, t in base.items()}
            w[cell_type][e.index] = 0.0
            variants.append(w)
    return variants


def _batches(channels_last: bool, n: int = 2, batch: int = 6, hw: int = 8):
    torch.manual_seed(5)
    out = []
    for _ in range(n):
        x = torch.randn(batch, 3, hw, hw)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        out.append((x, torch.randint(0, 10, (batch,))))
    return out


def _same_scores(net, variants, cell_type, batches, **kwargs):
    """Batched and one-by-one scores, running statistics and the generator left as they were."""
    before = {k: v.clone() for k, v in net.state_dict().items()}
    torch.manual_seed(11)
    one = evaluate_variants(net, variants, cell_type, batches, seed=3, **kwargs)
    rng_one = torch.get_rng_state()
    torch.manual_seed(11)
    batched = evaluate_variants(
        net, variants, cell_type, batches, seed=3, batch_candidates=True, **kwargs
    )
    assert torch.equal(torch.get_rng_state(), rng_one)
    assert len(batched) == len(one) == len(variants)
    for (acc_1, loss_1), (acc_b, loss_b) in zip(one, batched):
        assert acc_b == pytest.approx(acc_1, abs=1e-9)
        assert loss_b == pytest.approx(loss_1, abs=1e-9)
    # the candidates' scores differ: each chunk must have been weighted by its own variant
    assert len({round(loss, 9) for _, loss in one}) > 1
    after = net.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # incl. num_batches_tracked
    return one


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("kind", ["op", "edge"])
@pytest.mark.parametrize("cell_type", ["normal", "reduce"])
@pytest.mark.parametrize("space", ["s5", "s4"])
def test_darts_space_op_and_topology_variants(space, cell_type, kind, channels_last):
    """S4's noise: a variant that zeroes a noise op skips its draws, and batched chunks follow
    each variant's own draws (the op variants of S4 remove noise on one of them)."""
    net, strategy = _net(space, layers=4)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    variants = _variants(strategy, cell_type, kind)
    _same_scores(net, variants, cell_type, _batches(channels_last))


@pytest.mark.parametrize("kind", ["op", "edge"])
def test_darts_space_with_fused_ops(kind):
    """The DARTS-space cells' fused chains (their batch norms called outside a BN module, the
    grouped convolutions over every op of a state) are per chunk too."""
    net, strategy = _net("s5", layers=4)
    net.fuse = True
    _same_scores(net, _variants(strategy, "normal", kind), "normal", _batches(False))


@pytest.mark.parametrize("space", ["s1", "s2", "s3", "darts"])
def test_other_darts_spaces(space):
    net, strategy = _net(space, layers=3)
    _same_scores(net, _variants(strategy, "normal", "op", edge=9), "normal", _batches(False))


@pytest.mark.parametrize("reuse_prefix", [True, False])
def test_with_and_without_prefix_reuse(reuse_prefix):
    net, strategy = _net("s4", layers=4)
    variants = _variants(strategy, "reduce", "op")
    _same_scores(net, variants, "reduce", _batches(False), reuse_prefix=reuse_prefix)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("fuse", [False, True], ids=["unfused", "fused"])
def test_nb201(fuse, channels_last):
    """The fused convolutions' batch norm (called outside a BN module) is per chunk too."""
    net, strategy = _net("nb201", layers=1)
    net.fuse = fuse
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    _same_scores(net, _variants(strategy, "cell", "op", edge=2), "cell", _batches(channels_last))


@pytest.mark.parametrize("space", ["proxyless_cifar", "fbnet_cifar"])
def test_chain_spaces(space):
    net, strategy = _net(space, layers=1)
    (cell_type,) = net.space.cell_types
    edge = int(net.op_mask(cell_type).sum(1).argmax())  # a block with every candidate
    variants = _variants(strategy, cell_type, "op", edge=edge)
    _same_scores(net, variants, cell_type, _batches(False, batch=4, hw=16))


def test_partial_channels():
    net, strategy = _net("s5", layers=3, partial_channels=2)
    _same_scores(net, _variants(strategy, "reduce", "op", edge=0), "reduce", _batches(True))


def test_zero_weight_ops_run():
    """Ops of weight 0 run (and S4's noise draws) in every variant: chunk weights 0."""
    net, strategy = _net("s4", layers=4)
    net.zero_weight_ops_run = True
    _same_scores(net, _variants(strategy, "normal", "op"), "normal", _batches(False))


def test_a_random_module_that_does_not_declare_itself_is_caught(monkeypatch):
    net, strategy = _net("s4", layers=3)
    monkeypatch.setattr(Noise, "draws_random_numbers", False)
    variants = _variants(strategy, "normal", "op")
    with pytest.raises(RuntimeError, match="drew random numbers outside a module"):
        evaluate_variants(net, variants, "normal", _batches(False), batch_candidates=True)


def test_hooks_are_refused_before_the_selection_runs():
    net, strategy = _net("s5", layers=3)
    handle = net.cells[0].ops[0].register_forward_hook(lambda *args: None)
    ctx = FakeContext(_batches(False))
    with pytest.raises(ValueError, match="has a forward hook"):
        PerturbationSelection(proj_intv=0, batch_candidates=True).select(strategy, context=ctx)
    assert ctx.requested == []  # nothing evaluated
    handle.remove()
    with pytest.raises(ValueError, match="selection.batch_candidates must be true or false"):
        PerturbationSelection(batch_candidates="yes")  # type: ignore[arg-type]


def test_variants_may_differ_only_in_the_cell_type():
    net, strategy = _net("s5", layers=3)
    variants = _variants(strategy, "normal", "op")
    variants[1]["reduce"][0, 0] = 0.0
    with pytest.raises(ValueError, match="differ in 'reduce'"):
        evaluate_variants(net, variants, "normal", _batches(False), batch_candidates=True)


@pytest.mark.parametrize(("space", "layers"), [("s4", 3), ("nb201", 1)])
def test_a_full_selection_gives_the_same_genotype(space, layers):
    runs = []
    for batched in (False, True):
        net, strategy = _net(space, layers=layers)
        ctx = FakeContext(_batches(False, n=1))
        pt = PerturbationSelection(proj_intv=0, num_val_batches=1, batch_candidates=batched)
        genotype = pt.select(strategy, context=ctx)
        runs.append((genotype, [e for e in ctx.events if e["event"] == "pt_decision"]))
    (g_one, d_one), (g_batched, d_batched) = runs
    assert g_batched == g_one
    assert len(d_one) == len(d_batched) > 0
    for a, b in zip(d_one, d_batched):
        if a["kind"] == "op":
            assert (a["edge"], a["chosen"]) == (b["edge"], b["chosen"])
            assert b["loss"] == pytest.approx(a["loss"], abs=1e-9)
        else:
            assert (a["node"], a["kept"]) == (b["node"], b["kept"])
