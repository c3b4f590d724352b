"""The DARTS-space supernet's fused ops (``nas.supernet.fused``): the ``sep_conv`` and
``dil_conv`` ops of every kind that run on the edges reading one state, as one chain of grouped
convolutions and batch norms, against every op run on its own, on the same weights at float64:
logits, gradients of the weights, of the mixing weights and of the input, running statistics and
``num_batches_tracked``, eval mode; normal and reduction cells (stride-2 edges from the inputs),
NCHW and NHWC, the spaces darts and s1..s5; only the ops that run are computed (masks, a one-hot
edge, projections), and partial channels, proxies' hooks and single ops fall back."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nas.proxies.base import module_calls
from nas.selection.projection import EdgeProjection
from nas.strategies.drnas import dirichlet_rsample
from nas.supernet import build_supernet
from nas.supernet.darts import DartsSupernet

# DARTS_OPS
NONE, MAX, AVG, SKIP, SEP3, SEP5, DIL3, DIL5 = range(8)
# edges: 2<-0, 2<-1, 3<-0, 3<-1, 3<-2, 4<-0, 4<-1, 4<-2, 4<-3, 5<-0, 5<-1, 5<-2, 5<-3, 5<-4
SRC = [0, 1, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4]
CONVS = {SEP3: 4, SEP5: 4, DIL3: 2, DIL5: 2}  # convolutions per op
F64 = torch.float64
LAYERS = 3  # a normal cell, then two reduction cells


class _Convs(TorchDispatchMode):
    """The convolutions a forward runs: their count and their work (weight elements)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.work = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.convolution.default:
            self.calls += 1
            self.work += args[1].numel()
        return func(*args, **(kwargs or {}))


def _pair(
    space: str = "darts", k: int = 1, channels_last: bool = False
) -> tuple[DartsSupernet, DartsSupernet]:
    torch.manual_seed(0)
    unfused = build_supernet(space, C=4, layers=LAYERS, num_classes=10, partial_channels=k)
    assert isinstance(unfused, DartsSupernet)
    unfused = unfused.double()
    if channels_last:
        unfused = unfused.to(memory_format=torch.channels_last)
    fused = copy.deepcopy(unfused)
    unfused.fuse, fused.fuse = False, True
    return fused, unfused


def _alpha(net: DartsSupernet, seed: int = 1) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        ct: torch.randn(*shape, dtype=F64, generator=gen) for ct, shape in net.arch_shapes().items()
    }


Weights = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]


def _softmax(alpha: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {ct: torch.softmax(a, -1) for ct, a in alpha.items()}


def _input(channels_last: bool = False) -> torch.Tensor:
    x = torch.randn(4, 3, 8, 8, dtype=F64, generator=torch.Generator().manual_seed(2)) * 2 + 0.5
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def _run(net: DartsSupernet, weights_of: Weights, x: torch.Tensor) -> dict:
    alpha = {ct: a.requires_grad_() for ct, a in _alpha(net).items()}
    xin = x.clone().requires_grad_()
    net.zero_grad(set_to_none=True)
    torch.manual_seed(7)  # s4's noise ops draw the same in both networks
    with _Convs() as convs:
        out = net(xin, weights_of(alpha))
    (out * torch.linspace(-1, 1, out.numel(), dtype=F64).view_as(out)).sum().backward()
    return {
        "out": out.detach(),
        "x": xin.grad,
        "alpha": {ct: a.grad for ct, a in alpha.items()},
        "params": {n: p.grad for n, p in net.named_parameters()},
        "buffers": {n: b.clone() for n, b in net.named_buffers()},
        "calls": convs.calls,
        "work": convs.work,
    }


def _close(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def _assert_same(
    weights_of: Weights = _softmax,
    *,
    space: str = "darts",
    k: int = 1,
    channels_last: bool = False,
    setup: Callable[[DartsSupernet], None] = lambda net: None,
    fewer_convs: bool = True,
) -> tuple[dict, dict]:
    fused, unfused = _pair(space, k, channels_last)
    for net in (fused, unfused):
        setup(net)
    x = _input(channels_last)
    f, u = _run(fused, weights_of, x), _run(unfused, weights_of, x)
    assert _close(f["out"], u["out"])
    assert _close(f["x"], u["x"])
    for ct in f["alpha"]:
        assert _close(f["alpha"][ct], u["alpha"][ct]), ct
    assert f["params"].keys() == u["params"].keys()
    for name in f["params"]:
        assert _close(f["params"][name], u["params"][name]), name
    # running statistics and num_batches_tracked of every op's own BNs
    assert f["buffers"].keys() == u["buffers"].keys()
    for name in f["buffers"]:
        a, b = f["buffers"][name], u["buffers"][name]
        assert _close(a, b) if a.is_floating_point() else torch.equal(a, b), name
    # only the ops that run are computed, each once: the same convolution work
    assert f["work"] == u["work"]
    assert (f["calls"] < u["calls"]) == fewer_convs
    # eval mode reads the running statistics the fused BNs wrote back
    for net in (fused, unfused):
        net.eval()
    with torch.no_grad():
        w = weights_of(_alpha(fused))
        torch.manual_seed(7)
        out_f = fused(x, w)
        torch.manual_seed(7)
        assert _close(out_f, unfused(x, w))
    return f, u


def _saved(active: list[list[int]]) -> int:
    """Convolution calls fusion saves in one cell whose edge ``e`` runs the ops ``active[e]``:
    per state, each kind run by n > 1 of its edges runs its convolutions once, not n times."""
    saved = 0
    for src in range(5):
        for op, convs in CONVS.items():
            n = sum(op in active[e] for e in range(14) if SRC[e] == src)
            saved += (n - 1) * convs if n > 1 else 0
    return saved


ALL = [list(range(8))] * 14


@pytest.mark.parametrize("channels_last", [False, True])
def test_darts_softmax_weights(channels_last):
    f, u = _assert_same(channels_last=channels_last)
    # per cell 14 edges x 12 convolutions alone; fused, 12 per state read by 2-4 edges (states
    # 0..3) and 12 alone (state 4): 108 fewer in the normal and in each reduction cell
    assert _saved(ALL) == 108
    assert u["calls"] - f["calls"] == LAYERS * 108


@pytest.mark.parametrize("space", ["s1", "s2", "s3", "s4", "s5"])
def test_the_robust_darts_spaces(space):
    _assert_same(space=space)


def test_drnas_dirichlet_weights_s5():
    gen = torch.Generator()

    def weights_of(alpha: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        gen.manual_seed(3)  # the same draw for both networks
        return {
            ct: dirichlet_rsample(torch.nn.functional.elu(a) + 1, gen)
            for ct, a in sorted(alpha.items())
        }

    _assert_same(weights_of, space="s5", channels_last=True)


def _one_hot_st(index: list[int]) -> Weights:
    """GDAS-style hard weights, the same edge choices in both cell types: one-hot values with
    the softmax's gradient."""

    def weights_of(alpha: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = {}
        for ct, a in alpha.items():
            soft = torch.softmax(a, -1)
            hard = torch.nn.functional.one_hot(torch.tensor(index), 8).to(F64)
            out[ct] = hard - soft.detach() + soft
        return out

    return weights_of


def test_one_hot_edges_fuse_only_the_sampled_ops():
    # state 0 (edges 0, 2, 5, 9): sep3, sep3, sep3, dil5 -> one sep3 group of 3
    # state 1 (edges 1, 3, 6, 10): dil3, dil3, sep5, skip -> one dil3 pair
    # state 2 (edges 4, 7, 11): sep5, dil5, none -> nothing fused
    # state 3 (edges 8, 12): sep3, sep3 -> one pair; state 4 (edge 13): max pool
    index = [SEP3, DIL3, SEP3, DIL3, SEP5, SEP3, SEP5, DIL5, SEP3, DIL5, SKIP, NONE, SEP3, MAX]
    f, u = _assert_same(_one_hot_st(index))
    saved = _saved([[i] for i in index])
    assert saved == 2 * 4 + 2 + 4
    assert u["calls"] - f["calls"] == LAYERS * saved
    # no fusion where no two edges of a state sample the same kind
    index = [SEP3, SEP3, SEP5, SEP5, SEP3, DIL3, DIL3, DIL3, SEP3, DIL5, DIL5, DIL5, DIL5, MAX]
    _assert_same(_one_hot_st(index), fewer_convs=False)


def test_masked_ops_leave_the_fused_kernel():
    mask = torch.ones(14, 8, dtype=torch.bool)
    mask[0, SEP3] = False  # 2<-0: its sep3 pruned; 3<-0, 4<-0, 5<-0 still fuse theirs
    mask[9, :] = False  # 5<-0 pruned to skip
    mask[9, SKIP] = True
    mask[[3, 6, 10], DIL5] = False  # 3 of state 1's 4 dil5 pruned: the fourth runs alone
    mask[[4, 7], :] = False  # 2 of state 2's 3 edges pruned to a max pool: 5<-2 runs alone
    mask[[4, 7], MAX] = True

    def setup(net: DartsSupernet) -> None:
        net.set_op_mask("normal", mask)
        net.set_op_mask("reduce", mask)

    f, u = _assert_same(setup=setup)
    active = [[k for k in range(8) if mask[e, k]] for e in range(14)]
    saved = _saved(active)
    # state 0: sep3 of 2 edges, the other kinds of 3 (4 + 8 + 4 + 4); state 1: dil5 alone
    # (12 + 12 + 6); state 2: nothing; state 3: every kind of its 2 edges (12)
    assert saved == 20 + 30 + 0 + 12
    assert u["calls"] - f["calls"] == LAYERS * saved


def test_after_a_darts_pt_projection():
    proj = EdgeProjection({"normal": (14, 8), "reduce": (14, 8)}, torch.device("cpu"))
    proj.project_op("normal", 2, SEP3)  # 3<-0 fixed to sep3: state 0's other kinds shrink
    proj.project_op("reduce", 0, DIL5)  # a stride-2 edge of a reduction cell
    proj.remove_edge("normal", 8)  # 4<-3 removed: state 3's groups vanish (one edge left)
    proj.remove_edge("reduce", 12)

    removed = torch.ones(14, 8, dtype=F64)
    removed[5, SEP5] = 0.0  # a candidate of the next projection: 4<-0 without its sep5

    def weights_of(alpha: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {ct: w * removed for ct, w in proj(_softmax(alpha)).items()}

    _assert_same(weights_of)


def test_partial_channels_fall_back():
    _assert_same(k=2, fewer_convs=False)
    _assert_same(k=2, channels_last=True, fewer_convs=False)


def test_progressive_widening_then_fused():
    """DrNAS: K=2 widened to K=1 (the same channel maps on both), then fused."""

    def setup(net: DartsSupernet) -> None:
        net.set_partial_channels(1, torch.Generator().manual_seed(5))

    _assert_same(space="s5", k=2, setup=setup)


def test_proxies_and_hooks_fall_back():
    fused, unfused = _pair()
    x = _input()
    w = _softmax(_alpha(fused))
    with torch.no_grad(), module_calls(fused), _Convs() as proxied:  # each op its own ReLU
        out = fused(x, w)
    with torch.no_grad(), _Convs() as alone:
        unfused(x, w)
    assert proxied.calls == alone.calls  # nothing fused
    seen = []
    pointwise = fused.cells[0].ops[0].ops[SEP3][2]  # 2<-0's sep3, its first 1x1
    pointwise.register_forward_hook(lambda *_: seen.append(1))
    with torch.no_grad(), _Convs() as hooked:
        out_hooked = fused(x, w)
    with torch.no_grad():
        assert _close(out_hooked, unfused(x, w)) and _close(out, unfused(x, w))
    assert seen == [1]  # its op ran alone, so the hook saw it
    # the other three sep3 of state 0 in that cell still fuse: 8 calls saved there, not 12
    assert alone.calls - hooked.calls == LAYERS * 108 - 4


def test_compiling_falls_back(monkeypatch):
    fused, unfused = _pair()
    x, w = _input(), _softmax(_alpha(fused))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    with torch.no_grad(), _Convs() as compiling:
        out = fused(x, w)
    with torch.no_grad(), _Convs() as alone:
        assert _close(out, unfused(x, w))
    assert compiling.calls == alone.calls


def test_the_switch_and_the_state_dict():
    fused, unfused = _pair()
    assert fused.fuse and not unfused.fuse
    assert not DartsSupernet(C=4, layers=3).fuse and DartsSupernet(C=4, layers=3, fuse=True).fuse
    sd_f, sd_u = fused.state_dict(), unfused.state_dict()
    assert [(k, v.shape) for k, v in sd_f.items()] == [(k, v.shape) for k, v in sd_u.items()]
    fused.load_state_dict(sd_u)
    with pytest.raises(ValueError, match="fuse must be true or false, got 1"):
        fused.fuse = 1  # type: ignore[assignment]
    fused.fuse = False
    assert not fused.fuse and not any(c.fuse for c in fused.cells)
    # a supernet without cells that fuse: off, and refuses to be switched on
    chain = build_supernet("proxyless_cifar", C=8, layers=21, num_classes=10)
    assert not chain.fuse
    chain.fuse = False
    with pytest.raises(ValueError, match="has no cells that fuse"):
        chain.fuse = True
