"""FBNet: hardware-aware efficient ConvNet design via differentiable neural architecture search.

Third stage of the pipeline (``nas.strategies``). Wu, Dai, Zhang, Wang, Sun, Wu, Tian, Vajda, Jia &
Keutzer, CVPR 2019. FBNet's search code was not released (facebookresearch/mobile-vision holds
the found networks' definitions, ``mobile_cv/arch/fbnet_v2/``, and no supernet training); this
follows the paper (section 3.3, section 4.1):

* each edge mixes all its candidates with a soft Gumbel-softmax sample of its sampling
  parameters theta (eq. 5-6): ``m = softmax((theta + G) / tau)``, ``G`` standard Gumbel
  noise, no straight-through, one sample per forward and cell type (shared by its cells);
  every op runs, an entry that underflows to 0 included (``Supernet.zero_weight_ops_run``);
* ``tau = tau0 * decay ** epoch``: tau0 = 5.0, decayed by exp(-0.045) every epoch of
  architecture training (after ``warmup_epochs`` of weights only the count starts: the
  warm-up's weight steps sample at tau0, as AnnaAraslanova/FBNet's ``TrainerSupernet``);
* bi-level: each step trains the weights (SGD, the run's optimiser) on a training batch, then
  theta on an architecture batch, first order, through the relaxed sample (the paper: in each
  epoch the weights first, then theta, on an 80 / 20 split of the training set); theta is
  trained by Adam with lr 0.01 and weight decay 5e-4 (the paper's settings, as the public
  re-implementations that follow it set them, AnnaAraslanova/FBNet
  ``supernet_functions/config_for_supernet.py``), theta ~ 1e-3 * N(0, 1);
* the latency-aware loss ``CE * alpha * log(LAT) ** beta`` (eq. 2, alpha 0.2, beta 0.6) with
  ``LAT = sum m * LAT_op`` under the same sample (eq. 6) is the hardware cost component:
  ``cost=latency cost.form=fbnet_pow cost.alpha=0.2 cost.beta=0.6`` (``nas.hardware.cost``).

Evaluation and derivation use ``softmax(theta)`` (the paper samples its final architectures
from it; ``selection=argmax`` takes its mode).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from nas.strategies.base import Batch, Shards
from nas.strategies.sampling import SamplingStrategy, gumbel
from nas.supernet import ArchWeights, Supernet


def fbnet_tau(epoch: int, epochs: int | None, tau0: float, decay: float) -> float:
    """``tau0 * decay ** epoch``; epochs past the run (a selector's tuning epochs) keep the
    last epoch's temperature."""
    if epochs is not None and epochs >= 1:
        epoch = min(epoch, epochs - 1)
    return tau0 * decay**epoch


def relaxed_sample(theta: Tensor, noise: Tensor, tau: float) -> Tensor:
    """FBNet's eq. 5: ``softmax((theta + noise) / tau)`` per row (the Gumbel-softmax of
    Jang et al. and Maddison et al. with logits theta)."""
    return torch.softmax((theta + noise) / tau, dim=-1)


class FBNet(SamplingStrategy):
    """FBNet: soft Gumbel-softmax samples, tau decayed per epoch, Adam on theta."""

    name = "fbnet"
    mixing = "soft Gumbel-softmax samples"

    def __init__(
        self,
        *,
        arch_lr: float = 0.01,
        arch_betas: tuple[float, float] | list[float] = (0.9, 0.999),
        arch_weight_decay: float = 5e-4,
        init_scale: float = 1e-3,
        fix_alpha: bool = False,
        arch_grad_clip: float | None = None,
        tau0: float = 5.0,
        tau_decay: float = 0.9559974818331,
        warmup_epochs: int = 0,
        clip_mixing_with_weights: bool = False,
    ) -> None:
        super().__init__(
            arch_lr=arch_lr,
            arch_betas=arch_betas,
            arch_weight_decay=arch_weight_decay,
            init_scale=init_scale,
            fix_alpha=fix_alpha,
            arch_grad_clip=arch_grad_clip,
            clip_mixing_with_weights=clip_mixing_with_weights,
        )
        for key, value in (("tau0", tau0), ("tau_decay", tau_decay)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"search.{key} must be a positive number, got {value!r}")
        if tau_decay > 1:
            raise ValueError(f"search.tau_decay must be at most 1, got {tau_decay!r}")
        if (
            isinstance(warmup_epochs, bool)
            or not isinstance(warmup_epochs, int)
            or warmup_epochs < 0
        ):
            raise ValueError(f"search.warmup_epochs must be an int >= 0, got {warmup_epochs!r}")
        self.tau0 = float(tau0)
        self.tau_decay = float(tau_decay)
        self.warmup_epochs = warmup_epochs

    def prepare_supernet(self, supernet: Supernet) -> None:
        super().prepare_supernet(supernet)
        # every candidate is mixed (eq. 6): an entry that underflows to 0 still runs
        supernet.zero_weight_ops_run = True

    def attach(self, ctx: Any, *, generator: torch.Generator | None = None) -> None:
        super().attach(ctx, generator=generator)
        epochs = ctx.epochs
        if not self.fix_alpha and epochs is not None and 0 < epochs <= self.warmup_epochs:
            raise ValueError(
                f"search.warmup_epochs={self.warmup_epochs} covers all {epochs} epochs, so the "
                f"architecture would never be trained; expected warmup_epochs < epochs"
            )

    def updates_arch(self, epoch: int) -> bool:
        return not self.fix_alpha and epoch >= self.warmup_epochs

    @property
    def tau(self) -> float:
        epochs = self.ctx.epochs
        trained = None if epochs is None else epochs - self.warmup_epochs
        return fbnet_tau(
            max(self.epoch - self.warmup_epochs, 0), trained, self.tau0, self.tau_decay
        )

    def log_state(self) -> dict[str, Any]:
        return {"tau": self.tau}

    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        if not sample:
            return {
                ct: self.apply_mask(ct, torch.softmax(theta, dim=-1))
                for ct, theta in self.arch_params.items()
            }
        gen = self.generator(next(iter(self.arch_params.values())).device)
        tau = self.tau
        out = {}
        for ct, theta in self.arch_params.items():
            g = gumbel(theta.shape, gen, theta.device).to(theta.dtype)
            out[ct] = self.apply_mask(ct, relaxed_sample(theta, g, tau))
        return out

    def step(
        self, train_batch: Batch | Shards, val_batch: Batch | Shards, *, update_arch: bool = True
    ) -> dict[str, Tensor]:
        """The weight step first, then the architecture step, each on its own sample."""
        metrics = self.weight_step(train_batch)
        if update_arch and not self.fix_alpha:
            metrics.update(self.arch_step(train_batch, val_batch))
        return metrics
