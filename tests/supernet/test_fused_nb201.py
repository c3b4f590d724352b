"""The NB201 supernet's fused convolutions (``nas.supernet.fused``): one convolution and one batch
norm per kind of ReLU-conv-BN op over all the edges that read a state, against every op run on
its own, on the same weights at float64: outputs, gradients of the weights, of the mixing weights
and of the input, running statistics; only the ops that run are computed (masks, projections,
one-hot samples), and partial channels, proxies' hooks and single ops fall back."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nas.proxies.base import module_calls
from nas.selection.projection import EdgeProjection
from nas.strategies.drnas import dirichlet_rsample
from nas.strategies.gdas import gdas_sample
from nas.supernet import build_supernet
from nas.supernet.nb201 import NB201Supernet

NONE, SKIP, CONV1, CONV3, POOL = range(5)  # NB201_OPS; edges: 1<-0, 2<-0, 2<-1, 3<-0, 3<-1, 3<-2
F64 = torch.float64


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


def _pair(k: int = 1, N: int = 1, C: int = 4) -> tuple[NB201Supernet, NB201Supernet]:
    torch.manual_seed(0)
    unfused = build_supernet("nb201", C=C, layers=N, num_classes=10, partial_channels=k)
    assert isinstance(unfused, NB201Supernet)
    unfused = unfused.double()
    fused = copy.deepcopy(unfused)
    unfused.fuse, fused.fuse = False, True
    return fused, unfused


def _alpha(seed: int = 1) -> torch.Tensor:
    return torch.randn(6, 5, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _run(
    net: NB201Supernet, weights_of: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> dict:
    alpha = _alpha().requires_grad_()
    xin = x.clone().requires_grad_()
    net.zero_grad(set_to_none=True)
    with _Convs() as convs:
        out = net(xin, {"cell": weights_of(alpha)})
    (out * torch.linspace(-1, 1, out.numel(), dtype=F64).view_as(out)).sum().backward()
    return {
        "out": out.detach(),
        "x": xin.grad,
        "alpha": alpha.grad,
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
    weights_of: Callable[[torch.Tensor], torch.Tensor],
    k: int = 1,
    setup: Callable[[NB201Supernet], None] = lambda net: None,
    fewer_convs: bool = True,
) -> tuple[dict, dict]:
    fused, unfused = _pair(k)
    for net in (fused, unfused):
        setup(net)
    x = torch.randn(4, 3, 8, 8, dtype=F64, generator=torch.Generator().manual_seed(2)) * 2 + 0.5
    f, u = _run(fused, weights_of, x), _run(unfused, weights_of, x)
    assert _close(f["out"], u["out"])
    assert _close(f["x"], u["x"]) and _close(f["alpha"], u["alpha"])
    assert f["params"].keys() == u["params"].keys()
    for name in f["params"]:
        assert _close(f["params"][name], u["params"][name]), name
    # running statistics (and num_batches_tracked) of every op's own BN
    assert f["buffers"].keys() == u["buffers"].keys()
    for name in f["buffers"]:
        a, b = f["buffers"][name], u["buffers"][name]
        assert _close(a, b) if a.is_floating_point() else torch.equal(a, b), name
    # only the ops that run are computed, each once: the same convolution work
    assert f["work"] == u["work"]
    assert (f["calls"] < u["calls"]) == fewer_convs
    # eval mode reads the running statistics the fused BN wrote back
    for net in (fused, unfused):
        net.eval()
    with torch.no_grad():
        w = {"cell": weights_of(_alpha())}
        assert _close(fused(x, w), unfused(x, w))
    return f, u


def test_darts_softmax_weights():
    f, u = _assert_same(lambda a: torch.softmax(a, -1))
    # per cell 12 ReLU-conv-BN ops alone; fused, 2 per state read by 2 or 3 edges + 2 alone
    assert u["calls"] - f["calls"] == 3 * (12 - 6)


def test_drnas_dirichlet_weights():
    gen = torch.Generator()

    def weights_of(alpha: torch.Tensor) -> torch.Tensor:
        gen.manual_seed(3)  # the same draw for both networks
        return dirichlet_rsample(torch.nn.functional.elu(alpha) + 1, gen)

    _assert_same(weights_of)


def _one_hot_st(index: list[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """GDAS-style hard weights: one-hot values with the softmax's gradient."""

    def weights_of(alpha: torch.Tensor) -> torch.Tensor:
        soft = torch.softmax(alpha, -1)
        hard = torch.nn.functional.one_hot(torch.tensor(index), 5).to(F64)
        return hard - soft.detach() + soft

    return weights_of


@pytest.mark.parametrize("unselected_scalars", [False, True])
def test_gdas_one_hot_weights_fuse_only_the_sampled_ops(unselected_scalars):
    # 1<-0 and 2<-0 sample conv3x3 (fused), 3<-0 conv1x1 (alone); 2<-1 and 3<-1 conv1x1 (fused)
    index = [CONV3, CONV3, CONV1, CONV1, CONV1, CONV3]

    def setup(net: NB201Supernet) -> None:
        net.set_unselected_scalars(unselected_scalars)

    f, u = _assert_same(_one_hot_st(index), setup=setup)
    assert u["calls"] - f["calls"] == 3 * 2  # two pairs fused per cell; the rest ran alone
    # no fusion where no two edges of a state sample the same kind of conv
    _assert_same(_one_hot_st([CONV3, CONV1, CONV3, SKIP, CONV1, CONV3]), fewer_convs=False)


def test_gdas_sampler_draws():
    gen = torch.Generator()

    def weights_of(alpha: torch.Tensor) -> torch.Tensor:
        gen.manual_seed(0)
        w, _ = gdas_sample(alpha, 1.0, gen)
        return w

    fused, unfused = _pair()
    fused.set_unselected_scalars(True)
    unfused.set_unselected_scalars(True)
    x = torch.randn(4, 3, 8, 8, dtype=F64)
    f, u = _run(fused, weights_of, x), _run(unfused, weights_of, x)
    assert f["work"] == u["work"] and _close(f["out"], u["out"])
    assert _close(f["alpha"], u["alpha"])


def test_masked_ops_leave_the_fused_kernel():
    mask = torch.ones(6, 5, dtype=torch.bool)
    mask[0, CONV3] = False  # 1<-0: its conv3x3 pruned; 2<-0 and 3<-0 still fuse theirs
    mask[2, CONV1] = False  # 2<-1: conv1x1 pruned; 3<-1's runs alone
    mask[3, :] = False  # 3<-0 pruned whole
    mask[3, SKIP] = True

    def setup(net: NB201Supernet) -> None:
        net.set_op_mask("cell", mask)

    f, u = _assert_same(lambda a: torch.softmax(a, -1), setup=setup)
    # per cell: node 0 fuses the conv1x1 of 2 edges (its conv3x3 runs alone), node 1 the
    # conv3x3 of 2 edges (its conv1x1 alone)
    assert u["calls"] - f["calls"] == 3 * 2


def test_after_a_darts_pt_projection():
    proj = EdgeProjection({"cell": (6, 5)}, torch.device("cpu"))
    proj.project_op("cell", 1, CONV3)  # 2<-0 fixed to conv3x3
    proj.remove_edge("cell", 4)  # 3<-1 removed

    removed = torch.ones(6, 5, dtype=F64)
    removed[0, CONV1] = 0.0  # a candidate of the next projection: 1<-0 without its conv1x1

    def weights_of(alpha: torch.Tensor) -> torch.Tensor:
        return proj({"cell": torch.softmax(alpha, -1)})["cell"] * removed

    _assert_same(weights_of)


def test_partial_channels_fall_back():
    _assert_same(lambda a: torch.softmax(a, -1), k=2, fewer_convs=False)


def test_progressive_widening_then_fused():
    """DrNAS: K=2 widened to K=1 (the same channel maps on both), then fused."""

    def setup(net: NB201Supernet) -> None:
        net.set_partial_channels(1, torch.Generator().manual_seed(5))

    _assert_same(lambda a: torch.softmax(a, -1), k=2, setup=setup)


def test_proxies_and_hooks_fall_back():
    fused, unfused = _pair()
    x = torch.randn(2, 3, 8, 8, dtype=F64)
    w = {"cell": torch.softmax(_alpha(), -1)}
    with torch.no_grad(), module_calls(fused), _Convs() as convs:  # each op its own ReLU
        out = fused(x, w)
    assert convs.calls == 3 * 12 + 1 + 2 * 3  # nothing fused; the stem, the residual blocks
    seen = []
    first_conv = fused.cells[0].ops[0].ops[CONV3][1]
    first_conv.register_forward_hook(lambda *_: seen.append(1))
    with torch.no_grad():
        assert _close(fused(x, w), unfused(x, w)) and _close(out, unfused(x, w))
    assert seen == [1]  # its op ran alone, so the hook saw it


def test_the_switch_and_the_state_dict():
    fused, unfused = _pair()
    assert fused.fuse and not unfused.fuse
    assert not NB201Supernet(C=4, N=1).fuse and NB201Supernet(C=4, N=1, fuse=True).fuse
    sd_f, sd_u = fused.state_dict(), unfused.state_dict()
    assert [(k, v.shape) for k, v in sd_f.items()] == [(k, v.shape) for k, v in sd_u.items()]
    fused.load_state_dict(sd_u)
    with pytest.raises(ValueError, match="fuse must be true or false, got 1"):
        fused.fuse = 1  # type: ignore[assignment]
