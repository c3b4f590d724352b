"""An exponential moving average (EMA) of a network's weights, evaluated next to the network.

Retraining stage (``nas.training``), an option the papers did not use (``ema.decay=null``, the
default, leaves it off). After every optimiser step ``ema = decay * ema + (1 - decay) * w`` for
every parameter (Polyak averaging as in timm's ``ModelEmaV3``); buffers (batch-norm running
statistics) are copied, since averaging them would mix statistics of different weights. The
copy lives on the model's device and is saved in every checkpoint.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


class EMA:
    """A frozen copy of ``model`` whose parameters follow an exponential moving average."""

    def __init__(self, model: nn.Module, *, decay: float) -> None:
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay < 1:
            raise ValueError(f"ema.decay must be a number in (0, 1) or null, got {decay!r}")
        self.decay = float(decay)
        self.module = copy.deepcopy(model).eval()
        self.module.requires_grad_(False)
        self.num_updates = 0

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """One averaging step towards ``model``'s weights (call after ``optimizer.step``)."""
        ema_params: list[torch.Tensor] = list(self.module.parameters())
        params: list[torch.Tensor] = [p.detach() for p in model.parameters()]
        torch._foreach_lerp_(ema_params, params, 1.0 - self.decay)
        for ema_buffer, buffer in zip(self.module.buffers(), model.buffers()):
            ema_buffer.copy_(buffer)
        self.num_updates += 1

    def state_dict(self) -> dict[str, Any]:
        return {
            "decay": self.decay,
            "num_updates": self.num_updates,
            "module": self.module.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state["module"])
        self.num_updates = int(state["num_updates"])
