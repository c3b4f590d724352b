"""The reference's forward pass of a discrete DARTS network, layer for layer, on our modules.

quark0/darts ``cnn/model.py`` (Liu et al., ICLR 2019) as it runs: every op applies its own ReLU,
``FactorizedReduce`` convolves the full ReLU'd map at stride 2 (and a copy shifted by one pixel),
drop-path divides by the keep probability and then multiplies by the mask (here out of place:
the reference's in-place ``div_`` / ``mul_`` break autograd on modern PyTorch), a node is the sum
of its two ops (FairDARTS's sparse cells: of its 0-2 ops, drop-path on the sum), a cell's output
is ``torch.cat`` of its nodes. ``NetworkCIFAR`` /
``NetworkImageNet.forward`` compute the same function in fewer passes over memory; this module
is the yardstick: tests hold the fast forward to it (float64) and ``train_step.py`` times it as
the reference.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from search_spaces.darts import Cell, NetworkCIFAR, NetworkImageNet
from search_spaces.ops import FactorizedReduce, Identity

# (h, drop_prob) -> mask of kept samples, shape (N, 1, 1, 1)
MaskFn = Callable[[Tensor, float], Tensor]


def bernoulli_mask(h: Tensor, drop_prob: float) -> Tensor:
    """The reference's mask: one Bernoulli(keep) draw per sample."""
    return torch.empty(h.shape[0], 1, 1, 1, dtype=h.dtype, device=h.device).bernoulli_(
        1.0 - drop_prob
    )


def _run(module: nn.Module, x: Tensor) -> Tensor:
    if isinstance(module, FactorizedReduce):
        x = torch.relu(x)
        return module.bn(torch.cat([module.conv_1(x), module.conv_2(x[:, :, 1:, 1:])], dim=1))
    return module(x)


def cell_forward(cell: Cell, s0: Tensor, s1: Tensor, drop_prob: float, mask: MaskFn) -> Tensor:
    states = [_run(cell.preprocess0, s0), _run(cell.preprocess1, s1)]
    if cell.sparse:  # FairDARTS's DCOCell: a node sums its ops, drop-path acts on the sum
        by_node = {0: states[0], 1: states[1]}
        for node, positions in cell._node_ops:
            out = sum(_run(cell._ops[j], by_node[cell._indices[j]]) for j in positions)
            assert isinstance(out, Tensor)
            if cell.training and drop_prob > 0.0:
                out = out / (1.0 - drop_prob) * mask(out, drop_prob)
            by_node[node] = out
        return torch.cat([by_node[i] for i in cell._concat], dim=1)
    for i in range(cell._steps):
        h1, h2 = (_run(cell._ops[j], states[cell._indices[j]]) for j in (2 * i, 2 * i + 1))
        if cell.training and drop_prob > 0.0:
            keep = 1.0 - drop_prob
            if not isinstance(cell._ops[2 * i], Identity):
                h1 = h1 / keep * mask(h1, drop_prob)
            if not isinstance(cell._ops[2 * i + 1], Identity):
                h2 = h2 / keep * mask(h2, drop_prob)
        states.append(h1 + h2)
    return torch.cat([states[i] for i in cell._concat], dim=1)


def reference_forward(
    net: NetworkCIFAR | NetworkImageNet, x: Tensor, mask: MaskFn = bernoulli_mask
) -> tuple[Tensor, Tensor | None]:
    """``(logits, logits_aux or None)`` of ``net`` on ``x``, computed as the reference does."""
    if isinstance(net, NetworkImageNet):
        s0 = net.stem0(x)
        s1 = net.stem1(s0)
    else:
        s0 = s1 = net.stem(x)
    logits_aux = None
    for i, cell in enumerate(net.cells):
        assert isinstance(cell, Cell)
        s0, s1 = s1, cell_forward(cell, s0, s1, net.drop_path_prob, mask)
        if i == 2 * net._layers // 3 and net.auxiliary_head is not None and net.training:
            logits_aux = net.auxiliary_head(s1)  # its first ReLU is in place, as in the reference
    return net.classifier(net.global_pooling(s1).flatten(1)), logits_aux
