"""A chain block whose every weight is 0 still has the block's output shape.

Architecture dropout can drop the one non-zero entry of a hard one-hot sample (GDAS, ReinMax);
on a block that changes the width or the stride, ``sum_k 0 * op_k(x)`` is a zero tensor of the
block's output shape, not the block's input (``nas.supernet.chain``): the first allowed op runs
at weight 0.
"""

from __future__ import annotations

import torch

from nas.supernet import build_supernet


def test_an_all_zero_block_keeps_the_network_whole():
    torch.manual_seed(0)
    net = build_supernet("fbnet_cifar", C=4, layers=3, num_classes=10)
    (cell_type,) = net.arch_shapes()
    mask = net.op_mask(cell_type)
    weights = mask.float() / mask.float().sum(1, keepdim=True)
    changing = [i for i in range(mask.shape[0]) if not net.shortcut[i]]
    assert changing
    weights[changing[0]] = 0.0
    w = weights.requires_grad_(True)
    logits = net(torch.randn(2, 3, 32, 32), {cell_type: w})
    assert logits.shape == (2, 10)
    logits.sum().backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()
