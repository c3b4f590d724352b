"""naswot: the log-determinant of the activation-pattern kernel (Mellor et al., ICML 2021).

Zero-cost proxy (``nas.proxies``), as BayesWatch/nas-without-training computes it
(``score_networks.py``, ``scores.py``; NASWOT v2): a hook on every module whose type name
contains ``ReLU`` reads the ReLU's *input* x and, per image, the binary code c = [x > 0]; the
kernel K = sum over those layers of ``c c^T + (1 - c)(1 - c)^T`` (the number of units minus the
Hamming distance between two images' codes); the score is ``log |det K|`` (``slogdet``).
Protocol: a batch of 128 CIFAR-10 training images without augmentation, train mode (BN with
batch statistics). In the reference a first forward and backward only arm the hooks and K
comes from a second forward of the same batch, so one forward without autograd gives the
same K (the first forward changes only BN running statistics, which train mode never reads).

Which modules: as the reference's ``'ReLU' in str(type(module))``, wrappers whose class name
holds "ReLU" (``ReLUConvBN``) count as well as the ``nn.ReLU`` inside them, both reading the same
input (the reference's NB201 and DARTS operations have the same class names as ours).

Supernets: ZPT (zerocost_operation_score ``search_cells.py:49``) still runs an op whose
weight is zero, as ``op(x, block_input=True)``, which zeroes x inside: the op's own hook (a
``ReLUConvBN``) sees x, each ReLU inside sees zeros and adds its unit count to every entry of
K. Our supernet skips such ops; we add the same terms (the unit counts measured once per op
and shape).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from nas.proxies.base import (
    PROXIES,
    DataSpec,
    Proxy,
    ProxyError,
    Scorable,
    bn_mode,
    check_images,
    module_calls,
)
from nas.supernet.mixed_op import MixedOp


def _is_relu(m: nn.Module) -> bool:
    return "ReLU" in type(m).__name__


def _relu_units(op: nn.Module, shape: tuple[int, ...], cache: dict[Any, int]) -> int:
    """Per-image units that the ReLU modules inside ``op`` (not ``op`` itself) see on an input
    of ``shape``."""
    key = (id(op), shape)
    if key not in cache:
        units = 0

        def pre(m: nn.Module, inp: tuple[Tensor, ...]) -> None:
            nonlocal units
            units += inp[0][0].numel()

        handles = [
            m.register_forward_pre_hook(pre) for m in op.modules() if _is_relu(m) and m is not op
        ]
        try:
            if handles:
                with torch.no_grad(), module_calls(op), bn_mode(op, "eval"):
                    p = next(op.parameters(), None)
                    op(torch.zeros((1, *shape), device=None if p is None else p.device))
        finally:
            for h in handles:
                h.remove()
        cache[key] = units
    return cache[key]


def hamming_kernel(x: Tensor) -> Tensor:
    """K_ij = c_i . c_j + (1 - c_i) . (1 - c_j) for the binary codes c = [x > 0] of the images
    of ``x`` (float64 [N, N]), with one product instead of two: the second term is
    U - |c_i| - |c_j| + c_i . c_j (U units). Every entry is an integer below 2^24, so float32
    products are exact whatever the summation order."""
    units = x[0].numel()
    exact = torch.float32 if units < 2**24 else torch.float64
    c = (x.reshape(x.shape[0], -1) > 0).to(exact)
    same = c @ c.t()
    ones = c.sum(dim=1)
    return (2.0 * same - ones[:, None] - ones[None, :] + float(c.shape[1])).double()


def naswot_kernel(
    net: Scorable, x: Tensor, *, bn: str = "train", zero_ops_run: bool = True
) -> np.ndarray:
    """K [N, N] (float64) of ``net`` on ``x``; ``bn`` as in ``bn_mode``."""
    n = x.shape[0]
    kernel = torch.zeros(n, n, dtype=torch.float64, device=x.device)
    constant = 0
    relus = [m for m in net.net.modules() if _is_relu(m)]
    if not relus:
        raise ProxyError(f"naswot hooks ReLU modules, and a {net.kind} has none")

    measuring = False  # while _relu_units runs an op on zeros, the kernel's hooks keep out

    # A wrapper whose name holds "ReLU" (ReLUConvBN) and the nn.ReLU inside it read the same
    # input tensor: its kernel term is computed once and added twice, as the reference adds it.
    last: list[Any] = [None, None]  # (the input tensor, its term); holding it keeps its id

    def add(x_in: Tensor) -> None:
        nonlocal kernel
        if last[0] is not x_in:
            last[0], last[1] = x_in, hamming_kernel(x_in)
        kernel = kernel + last[1]

    def pre(m: nn.Module, inp: tuple[Tensor, ...]) -> None:
        if not measuring:
            add(inp[0])

    cache: dict[Any, int] = {}

    def mixed_pre(m: nn.Module, args: tuple[Any, ...]) -> None:
        # ZPT calls an op of weight 0 as op(x, block_input=True), which zeroes x inside: a
        # hook on the op itself (its class name holds "ReLU": ReLUConvBN) still sees x, the
        # ReLUs inside see zeros, each adding its unit count to every entry of K
        nonlocal constant, measuring
        assert isinstance(m, MixedOp)
        x_in, weights_o, active_o = args[0], args[1], args[2]
        x_op = x_in[:, : m.C // m.k]
        zero = (weights_o.detach() == 0).tolist()
        for k, op in enumerate(m.ops):
            if m._runnable[k] and not active_o[k] and zero[k]:
                if _is_relu(op):
                    add(x_op)
                measuring = True
                try:
                    constant += _relu_units(op, tuple(x_op.shape[1:]), cache)
                finally:
                    measuring = False

    handles = [m.register_forward_pre_hook(pre) for m in relus]
    if net.is_supernet and zero_ops_run:
        handles += [
            m.register_forward_pre_hook(mixed_pre)
            for m in net.net.modules()
            if isinstance(m, MixedOp)
        ]
    try:
        with torch.no_grad(), bn_mode(net.net, bn):
            net.logits(x)
    finally:
        for h in handles:
            h.remove()
    return (kernel + float(constant)).cpu().numpy()


def logdet(kernel: np.ndarray) -> float:
    """``log |det K|`` as the reference (``np.linalg.slogdet``)."""
    return float(np.linalg.slogdet(kernel)[1])


@PROXIES.register("naswot")
class NASWOT(Proxy):
    name = "naswot"
    data = DataSpec(kind="data", batch_size=128, augment=False)
    removal = "remove"  # Zero-Cost-PT's naswot branch: only the op's weight zeroed

    @classmethod
    def selection_options(cls, *, supernet: bool) -> dict[str, Any]:
        # Zero-Cost-PT scores in eval() (op_score.py, Scorers/scorer.py): BN with the untrained
        # running statistics; on the supernet, zero-weight ops still count their ReLUs
        return {"bn": "eval", "zero_ops_run": supernet}

    def __init__(self, *, bn: str = "train", zero_ops_run: bool = True) -> None:
        self.bn = bn
        self.zero_ops_run = zero_ops_run

    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        check_images(self.name, x)
        return logdet(naswot_kernel(net, x, bn=self.bn, zero_ops_run=self.zero_ops_run))
