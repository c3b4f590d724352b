"""SNAS counts its op costs at the side of the data's images, as the reference records them at
its first forward (found by ``experiments/fidelity/snas.py``: ours counted at 32 whatever the
data, a 1.6e-2 difference of the penalty's gradient on 16x16 images)."""

from __future__ import annotations

import torch

from nas.strategies import SearchContext
from nas.strategies.snas import SNAS
from nas.supernet import build_supernet


def _penalty_costs(side: int):
    strategy = SNAS(resource_penalty="log", resource_lambda=1.5e-3)
    torch.manual_seed(0)
    net = build_supernet("darts", C=4, layers=3, num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.025)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=2),
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    g = torch.Generator().manual_seed(1)
    batch = torch.randn(4, 3, side, side, generator=g), torch.randint(0, 10, (4,), generator=g)
    strategy.begin_step(0)
    strategy.step(batch, batch)
    return strategy._image_side, strategy._cell_costs()


def test_costs_are_counted_at_the_side_of_the_training_images():
    side16, costs16 = _penalty_costs(16)
    side32, costs32 = _penalty_costs(32)
    assert (side16, side32) == (16, 32)
    # flops and macs of a conv scale with the area: a quarter at 16x16
    ratio = costs16["normal"][0][..., 1].sum() / costs32["normal"][0][..., 1].sum()
    assert abs(float(ratio) - 0.25) < 0.05
