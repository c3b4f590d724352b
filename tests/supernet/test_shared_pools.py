"""Shared pools: a cell pools each state once per pool setting (``MixedOp``'s ``pooled``,
``SharedPools``) instead of once per edge; the same forward bit for bit, the same gradients and
running statistics to float rounding, and every place that must see each op's own pool does."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nas.supernet import build_supernet
from nas.supernet import mixed_op as mixed_op_module

POOLS = {
    torch.ops.aten.avg_pool2d.default,
    torch.ops.aten.max_pool2d_with_indices.default,
    torch.ops.aten.max_pool2d.default,
}


class _PoolCalls(TorchDispatchMode):
    """Counts the 3x3 pooling kernels dispatched (the ops'; forward and backward separately)."""

    def __init__(self) -> None:
        super().__init__()
        self.forward = 0
        self.backward = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in POOLS and list(args[1]) == [3, 3]:
            self.forward += 1
        elif "pool" in func.name() and "backward" in func.name() and list(args[2]) == [3, 3]:
            self.backward += 1
        return func(*args, **(kwargs or {}))


def _net(space, dtype=torch.float64, **kwargs):
    torch.manual_seed(0)
    layers = 1 if space == "nb201" else 3
    return build_supernet(space, C=4, layers=layers, num_classes=10, **kwargs).to(dtype)


def _weights(net, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return {
        ct: torch.softmax(torch.randn(shape, generator=g, dtype=dtype), -1).requires_grad_()
        for ct, shape in net.arch_shapes().items()
    }


def _run(net, x, weights):
    """Logits, every parameter and architecture gradient, the running statistics, and the
    pool kernels dispatched, of one forward and backward."""
    net.zero_grad()
    for w in weights.values():
        w.grad = None
    with _PoolCalls() as calls:
        out = net(x, weights)
        out.square().sum().backward()
    grads = [p.grad.clone() for p in net.parameters() if p.grad is not None]
    arch = [w.grad.clone() for w in weights.values()]
    stats = [b.clone() for name, b in net.named_buffers() if "running" in name]
    return out.detach(), grads, arch, stats, calls


@pytest.fixture
def unshared(monkeypatch):
    """Every edge runs its own pool (what the reference does)."""

    def off():
        monkeypatch.setattr(mixed_op_module, "shared_head", lambda op: None)

    return off


def _close(a, b):
    return len(a) == len(b) and all(
        torch.allclose(u, v, rtol=1e-10, atol=1e-12) for u, v in zip(a, b)
    )


@pytest.mark.parametrize("space", ["nb201", "darts", "s5"])
def test_shared_pools_equal_a_pool_per_edge(space, unshared):
    """NB201 (bare pools) and the DARTS spaces (pool then batch norm, whose running
    statistics stay per edge): the logits equal bit for bit, gradients and running statistics
    to float64 rounding; fewer pools run, forward and backward."""
    x = torch.randn(3, 3, 16, 16, dtype=torch.float64)
    net = _net(space)
    shared = _run(net, x, _weights(net))
    net = _net(space)
    unshared()
    own = _run(net, x, _weights(net))
    assert torch.equal(shared[0], own[0])
    assert _close(shared[1], own[1]) and _close(shared[2], own[2]) and _close(shared[3], own[3])
    assert 0 < shared[4].forward < own[4].forward
    assert 0 < shared[4].backward < own[4].backward
    if space == "nb201":  # per cell: 3 states read by 3, 2, 1 edges -> 3 pools, not 6
        assert own[4].forward == 2 * shared[4].forward == 6 * 3


def test_the_forward_is_the_same_bits_in_float32(unshared):
    x = torch.randn(4, 3, 16, 16)
    net = _net("darts", torch.float32).to(memory_format=torch.channels_last)
    with torch.no_grad():
        shared = net(x, _weights(net, torch.float32))
    unshared()
    with torch.no_grad():
        own = net(x, _weights(net, torch.float32))
    assert torch.equal(shared, own)


def test_only_the_edges_that_run_a_pool_share_it(unshared):
    """Masks leave some edges without their pools: the running statistics of the pool's batch
    norm move only on the edges that ran it, as each edge's own pool would."""
    x = torch.randn(3, 3, 16, 16, dtype=torch.float64)
    g = torch.Generator().manual_seed(2)
    masks = {
        ct: torch.rand(shape, generator=g) > 0.4
        for ct, shape in _net("darts").arch_shapes().items()
    }
    results = []
    for share in (True, False):
        net = _net("darts")
        for ct, mask in masks.items():
            net.set_op_mask(ct, mask)
        if not share:
            unshared()
        results.append(_run(net, x, _weights(net)))
    shared, own = results
    assert torch.equal(shared[0], own[0])
    assert _close(shared[1], own[1]) and _close(shared[2], own[2]) and _close(shared[3], own[3])
    assert 0 < shared[4].forward < own[4].forward


def test_a_hooked_pool_and_the_proxies_see_every_edges_own_pool():
    """A hook on a pool (or on a pool op), global hooks, and the proxies' ``module_calls``
    turn the sharing off, so each edge's pool module runs as in the reference."""
    from nas.proxies.base import module_calls

    net = _net("nb201", torch.float32)
    x, w = torch.randn(2, 3, 8, 8), _weights(net, torch.float32)
    pools = [
        op for mixed in net.mixed_ops() for op in mixed.ops if isinstance(op, torch.nn.AvgPool2d)
    ]
    assert len(pools) == 3 * 6
    with torch.no_grad(), _PoolCalls() as calls:
        net(x, w)
        assert calls.forward == 3 * 3
        with module_calls(net):
            net(x, w)
        assert calls.forward == 3 * 3 + 3 * 6
        seen = []
        handle = pools[0].register_forward_hook(lambda *_: seen.append(1))
        net(x, w)
        handle.remove()
        assert seen == [1] and calls.forward == 3 * 3 + 3 * 6 + (3 * 3 + 1)
        handle = torch.nn.modules.module.register_module_forward_hook(lambda *_: None)
        net(x, w)
        handle.remove()
        assert calls.forward == 3 * 3 + 3 * 6 + (3 * 3 + 1) + 3 * 6
    assert all(m.share_pools for m in net.mixed_ops())


def test_partial_channels_keep_a_pool_per_edge():
    """Under partial channels (K > 1) each edge pools its own channel slice, as before."""
    net = _net("darts", torch.float32, partial_channels=2)
    with torch.no_grad(), _PoolCalls() as calls:
        net(torch.randn(2, 3, 8, 8), _weights(net, torch.float32))
    # 3 cells x 14 edges x 2 pools, plus the stride-2 bypass max pools of the reduction cell
    assert calls.forward >= 3 * 14 * 2


def test_pools_of_other_settings_are_not_shared():
    """Two pools of one state share only when every setting agrees (``pool_key``)."""
    from nas.supernet.mixed_op import pool_key
    from nas.supernet.network import SharedPools

    x = torch.randn(2, 3, 8, 8)
    a = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)
    b = torch.nn.AvgPool2d(3, 1, 1, count_include_pad=True)
    m = torch.nn.MaxPool2d(3, 1, 1)
    assert len({pool_key(a), pool_key(b), pool_key(m)}) == 3
    run = SharedPools([x]).of(0)
    ya, yb, ym = run(a), run(b), run(m)
    assert torch.equal(ya, a(x)) and torch.equal(yb, b(x)) and torch.equal(ym, m(x))
    assert run(torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)) is ya
