"""What the sampling strategies share: seeded draws, the temperature schedule, the epoch count.

Third stage of the pipeline (``nas.strategies``). GDAS (Dong & Yang, CVPR 2019), SNAS (Xie et al.,
ICLR 2019), ReinMax (Liu et al., NeurIPS 2023) and RS-WS (Li & Talwalkar, UAI 2019) draw a
random architecture (or a relaxed one) at every forward. Every draw comes from a
``torch.Generator`` seeded by ``SearchStrategy.draw_seed()`` (the run seed, the global step and
the draw's index in the step), never from the global generator: every rank of a data-parallel
search draws the same sample, and a resumed search draws what the uninterrupted one did.

The temperature of GDAS, SNAS and ReinMax is annealed per epoch; the epoch a strategy is in is
counted by ``on_epoch_end`` and kept in its checkpoint, so a search resumed mid-epoch anneals
as the uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from nas.strategies.base import SearchStrategy


def check_tau(tau_max: float, tau_min: float) -> tuple[float, float]:
    """``(tau_max, tau_min)`` as floats, or a one-line error."""
    for name, v in (("tau_max", tau_max), ("tau_min", tau_min)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"search.{name} must be a positive number, got {v!r}")
    if tau_min > tau_max:
        raise ValueError(f"search.tau_min={tau_min} must not exceed search.tau_max={tau_max}")
    return float(tau_max), float(tau_min)


def linear_tau(epoch: int, epochs: int | None, tau_max: float, tau_min: float) -> float:
    """GDAS's schedule (AutoDL ``exps/NAS-Bench-201-algos/GDAS.py:237-239``):
    ``tau_max - (tau_max - tau_min) * e / (T - 1)``, exactly ``tau_min`` at the last epoch.
    Epochs past the run (a selector's tuning epochs) stay at ``tau_min``; a one-epoch run (or
    steps outside a run: ``epochs`` None) uses ``tau_max``, the reference's initial value."""
    if epochs is None or epochs <= 1:
        return tau_max
    e = min(epoch, epochs - 1)
    return tau_max - (tau_max - tau_min) * e / (epochs - 1)


def gumbel(shape: torch.Size, generator: torch.Generator, device: torch.device) -> Tensor:
    """Standard Gumbel noise ``-log(Exp(1))`` drawn from ``generator`` (AutoDL's form)."""
    return -torch.empty(shape, device=device).exponential_(generator=generator).log()


class SamplingStrategy(SearchStrategy):
    """A strategy that draws from seeded generators and counts the epochs it has trained.

    ``epoch`` is the 0-based epoch being trained (``on_epoch_end`` advances it); it is saved
    with the checkpoint. Subclasses use ``generator(device)`` for each draw: a generator on
    that device, seeded by the step's next ``draw_seed()``."""

    epoch: int = 0

    def generator(self, device: torch.device) -> torch.Generator:
        generators: dict[torch.device, torch.Generator] = self.__dict__.setdefault(
            "_sampling_generators", {}
        )
        gen = generators.get(device)
        if gen is None:
            gen = generators[device] = torch.Generator(device)
        return gen.manual_seed(self.draw_seed())

    def on_epoch_end(self, epoch: int) -> None:
        self.epoch = epoch + 1

    def checkpoint_state(self) -> dict[str, Any]:
        state = super().checkpoint_state()
        state["epoch"] = self.epoch
        return state

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        super().load_checkpoint_state(state)
        self.epoch = int(state.get("epoch", 0))
