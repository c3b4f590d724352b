"""Weight entanglement (nas.strategies.components.weight_entangle, nas.supernet.entangle): a
smaller op of a group is the largest with its kernel's centre crop, gradients reach the shared
kernel, the supernet loses exactly the smaller ops' parameters, and the genotype and the
discrete networks are those of the unentangled search."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from nas.strategies.components.weight_entangle import WeightEntangle
from nas.supernet import build_supernet
from nas.supernet.batched import check_batchable
from nas.supernet.entangle import centre_kernel, entangle_mixed_op
from nas.supernet.mixed_op import MixedOp
from search_spaces.families import family_of

SPACES = [("darts", 3), ("nb201", 1), ("proxyless_cifar", 1), ("fbnet_cifar", 1)]


def _supernet(space: str, layers: int, k: int = 1) -> nn.Module:
    torch.manual_seed(0)
    net = build_supernet(space, C=8, layers=layers, num_classes=10, partial_channels=k)
    return net.double()


def _edge(net: nn.Module) -> MixedOp:
    """The first mixed op with an entangled group on a full stride-1 block."""
    family = family_of(net.space)
    for m in net.mixed_ops():
        groups = [g for g in family.entangle_groups(m.op_names) if all(m._runnable[k] for k in g)]
        if groups and m.stride == 1:
            return m
    raise AssertionError("no edge to entangle")


def _as_crop(small: nn.Module, large: nn.Module) -> nn.Module:
    """A copy of ``small`` whose parameters and buffers are ``large``'s (kernels centre-cropped)."""
    out = copy.deepcopy(small)
    big = dict(large.named_parameters()) | dict(large.named_buffers())
    with torch.no_grad():
        for name, t in list(out.named_parameters()) + list(out.named_buffers()):
            src = big[name]
            if src.shape != t.shape:  # a kernel: the centre k x k of the large one
                p = (src.shape[-1] - t.shape[-1]) // 2
                src = src[..., p : p + t.shape[-1], p : p + t.shape[-1]]
            t.copy_(src)
    return out


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize(("space", "layers"), SPACES)
def test_one_hot_small_kernel_is_the_centre_crop(space, layers, k):
    if k == 2 and space in ("proxyless_cifar", "fbnet_cifar"):
        pytest.skip("the chain supernets are full width only")
    net = _supernet(space, layers, k)
    mixed = _edge(net)
    groups = family_of(net.space).entangle_groups(mixed.op_names)
    x = torch.randn(4, mixed.C_in if hasattr(mixed, "C_in") else mixed.C, 8, 8).double()
    # the references: each smaller op alone with the largest's weights cropped
    refs = {
        m: _as_crop(mixed.ops[m], mixed.ops[g[0]]) for g in groups for m in g[1:]
    }  # fmt: skip
    mixed.set_entangled(entangle_mixed_op(mixed, groups))
    n_ops = len(mixed.op_names)
    for g in groups:
        for m in g:
            w = torch.zeros(n_ops, dtype=torch.float64)
            w[m] = 1.0
            active = [bool(v) for v in w]
            got = mixed(x, w, active)
            ref_op = refs.get(m, mixed.ops[g[0]])
            c_op = x.shape[1] // k
            y = ref_op(x[:, :c_op]) if k > 1 else ref_op(x)
            if k > 1:  # partial channels: the mixed slot of every K channels
                got = got.view(4, c_op, k, *got.shape[2:])[:, :, 0]
            torch.testing.assert_close(got, y, rtol=1e-10, atol=1e-10)
            # a gate probe (ProxylessNAS) sees the same output of the member alone
            if k == 1:
                torch.testing.assert_close(mixed.probe_output(x, m), y, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("space", "layers"), SPACES)
def test_mixed_kernel_and_gradients_reach_the_shared_kernel(space, layers):
    net = _supernet(space, layers)
    mixed = _edge(net)
    groups = family_of(net.space).entangle_groups(mixed.op_names)
    mixed.set_entangled(entangle_mixed_op(mixed, groups))
    g = mixed.entangled[0]
    large = mixed.ops[g.members[0]]
    x = torch.randn(4, getattr(mixed, "C_in", mixed.C), 8, 8).double()
    w = torch.zeros(len(mixed.op_names), dtype=torch.float64)
    w[list(g.members)] = torch.rand(len(g.members), dtype=torch.float64) + 0.1
    w.requires_grad_()
    got = mixed(x, w, [bool(v) for v in w.detach()])
    # by hand: the largest op on sum_k w_k pad(crop_k(W)) in each entangled convolution
    by_hand = copy.deepcopy(large)
    with torch.no_grad():
        for j, name in enumerate(g.weights):
            W = large.get_parameter(name)
            mix = sum(centre_kernel(W, g.kernels[m][j]) * w[m] for m in g.members)
            by_hand.get_parameter(name).copy_(mix)
    torch.testing.assert_close(got, by_hand(x), rtol=1e-10, atol=1e-10)
    got.square().sum().backward()
    assert all(w.grad[m] != 0 for m in g.members)
    W = large.get_parameter(g.weights[0])
    assert W.grad is not None and W.grad.abs().sum() > 0
    # one-hot on the smallest: only the centre of the shared kernel gets a gradient
    W.grad = None
    small = g.members[-1]
    w1 = torch.zeros_like(w.detach())
    w1[small] = 1.0
    mixed(x, w1, [bool(v) for v in w1]).square().sum().backward()
    kk = g.kernels[small][0]
    p = (W.shape[-1] - kk) // 2
    centre = torch.zeros_like(W, dtype=torch.bool)
    centre[..., p : p + kk, p : p + kk] = True
    assert W.grad[centre].abs().sum() > 0
    assert torch.all(W.grad[~centre] == 0)


def _expected_saving(net: nn.Module) -> int:
    """The parameters of the smaller ops of every group, counted on the unentangled supernet."""
    family = family_of(net.space)
    out = 0
    for m in net.mixed_ops():
        for g in family.entangle_groups(m.op_names):
            if all(m._runnable[k] for k in g):
                out += sum(p.numel() for k in g[1:] for p in m.ops[k].parameters())
    return out


@pytest.mark.parametrize(("space", "layers"), SPACES)
def test_parameter_count_drops_by_the_smaller_ops(space, layers):
    net = _supernet(space, layers)
    before = sum(p.numel() for p in net.parameters())
    saving = _expected_saving(net)
    WeightEntangle().prepare_supernet(net)
    assert before - sum(p.numel() for p in net.parameters()) == saving > 0


def test_darts_saving_in_closed_form():
    """DARTS (affine-free BN): per edge of C channels, sep_conv_3x3 2 (9C + C^2) and
    dil_conv_3x3 9C + C^2 parameters go."""
    net = _supernet("darts", 3)
    want = sum(3 * (9 * m.C + m.C * m.C) for m in net.mixed_ops())
    before = sum(p.numel() for p in net.parameters())
    WeightEntangle().prepare_supernet(net)
    assert before - sum(p.numel() for p in net.parameters()) == want


@pytest.mark.parametrize(("space", "layers"), SPACES)
def test_genotype_and_discrete_network_unchanged(space, layers):
    plain, tied = _supernet(space, layers), _supernet(space, layers)
    WeightEntangle().prepare_supernet(tied)
    family = family_of(plain.space)
    gen = torch.Generator().manual_seed(1)
    weights = {ct: torch.rand(e, o, generator=gen) for ct, (e, o) in plain.arch_shapes().items()}
    g_plain = family.derive(plain.space, weights, {ct: plain.op_mask(ct) for ct in weights})
    g_tied = family.derive(tied.space, weights, {ct: tied.op_mask(ct) for ct in weights})
    assert g_plain == g_tied
    ops = {op for ct in g_tied.cell_types for op, *_ in g_tied.edges(ct)}
    assert ops <= {op for c in tied.space.cells.values() for e in c.edges for op in e.ops}
    # the published-network path builds the same discrete network from it
    a, _ = family.network(g_plain, C=8, layers=layers, num_classes=10)
    b, _ = family.network(g_tied, C=8, layers=layers, num_classes=10)
    assert [tuple(p.shape) for p in a.parameters()] == [tuple(p.shape) for p in b.parameters()]


def test_refusals():
    net = build_supernet("s2", C=8, layers=3, num_classes=10)
    with pytest.raises(ValueError, match="weight_entangle needs ops of one kind"):
        WeightEntangle().prepare_supernet(net)
    net = build_supernet("darts", C=8, layers=3, num_classes=10)
    net.fuse = True
    with pytest.raises(ValueError, match="weight_entangle needs the supernet's fuse off"):
        WeightEntangle().prepare_supernet(net)
    net.fuse = False
    comp = WeightEntangle()
    comp.prepare_supernet(net)
    with pytest.raises(ValueError, match="entangled already"):
        comp.prepare_supernet(net)
    with pytest.raises(ValueError, match="weight-entangled"):
        check_batchable(net)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["space=s2", "space.layers=3"], "component weight_entangle needs ops of one kind"),
        (["selection=pt", "selection.batch_candidates=true"], "weight-entangled"),
    ],
)
def test_refused_in_one_line_before_the_search(overrides, says):
    import settings_matrix as M

    out = M.run([*M.TINY, "search=darts", "components=[weight_entangle]", *overrides])
    assert out.refused is not None and says in out.refused and "\n" not in out.refused
    assert out.epochs_logged == 0
