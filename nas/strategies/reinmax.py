"""ReinMax as an architecture sampler: one-hot samples with a second-order (Heun) gradient.

Third stage of the pipeline (``nas.strategies``). Liu, Zhao, Chen, Gao, Han, "Bridging Discrete and
Backpropagation: Straight-Through and Beyond", NeurIPS 2023; the estimator of the ``reinmax``
package (``reinmax/reinmax.py``, LiyuanLucasLiu/ReinMax), used for NAS as
automl/ConfigurableOptimizer's ``ReinMaxSampler`` does (a GDAS sampler with another estimator):

* forward: ``pi0 = softmax(theta)``, ``D ~ Cat(pi0)`` one-hot (a multinomial draw; no Gumbel
  noise, no temperature); outputs ``(D, pi0)``;
* backward, with ``g = dL/dD``, ``g_p = dL/dpi0``, ``J(pi) v = pi * v - pi (pi . v)`` and
  ``pi1 = (softmax(theta / tau) + D) / 2``:
  ``grad theta = J(pi1)(2 g) + J(pi0)(g_p - g / 2)``, minus its mean over the categories;
* everything else is GDAS's (``nas.strategies.gdas``): tau linear per epoch from ``tau_max`` to
  ``tau_min`` (10 -> 0.1, ConfigurableOptimizer's inherited schedule; the package advises
  tau >= 1, which this schedule leaves in the last ~10% of the epochs, so both ends are
  settings), the weight step before the architecture step, alpha ``1e-3 * N(0, 1)``, Adam.
  The supernet runs only the sampled op; ConfigurableOptimizer's mixed op adds the unselected
  ops' weights as zero-valued scalars in every space (``searchspace/common/mixop.py``), so
  ``unselected_scalars`` defaults to true here. There is no redraw loop (a multinomial draw
  has no infinite noise).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from nas.strategies.gdas import GDAS
from nas.supernet import ArchWeights


def _jvp_softmax(pi: Tensor, v: Tensor) -> Tensor:
    """``J(pi) v`` for the softmax Jacobian ``diag(pi) - pi pi^T``, per row."""
    return pi * v - pi * (pi * v).sum(-1, keepdim=True)


class ReinMaxSample(torch.autograd.Function):
    """``(D, pi0)``: a one-hot draw of ``Cat(softmax(theta))`` per row (from ``generator``)
    and the probabilities, with ReinMax's gradient."""

    @staticmethod
    def forward(
        ctx: Any, theta: Tensor, tau: float, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor]:
        pi0 = torch.softmax(theta, dim=-1)
        flat = pi0.reshape(-1, pi0.shape[-1])
        index = torch.multinomial(flat, 1, replacement=True, generator=generator)
        d = torch.zeros_like(flat).scatter_(-1, index, 1.0).reshape(pi0.shape)
        ctx.tau = float(tau)
        ctx.save_for_backward(theta, pi0, d)
        return d, pi0

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: Tensor, g_p: Tensor) -> tuple[Tensor, None, None]:
        theta, pi0, d = ctx.saved_tensors
        pi1 = 0.5 * (torch.softmax(theta / ctx.tau, dim=-1) + d)
        grad = _jvp_softmax(pi1, 2 * g) + _jvp_softmax(pi0, g_p - 0.5 * g)
        return grad - grad.mean(-1, keepdim=True), None, None


def reinmax_sample(
    theta: Tensor, tau: float, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """``(D, pi0)`` of ``ReinMaxSample``."""
    d, pi0 = ReinMaxSample.apply(theta, tau, generator)
    return d, pi0


class ReinMax(GDAS):
    """GDAS's loop and schedule with ReinMax's one-hot samples and gradient."""

    name = "reinmax"
    mixing = "ReinMax's one-hot samples"

    def __init__(self, *, unselected_scalars: bool | None = True, **settings: Any) -> None:
        # GDAS's settings; only the default of the unselected ops' scalar terms differs (on in
        # every space: ReinMax's NB201 code is GDAS's cell)
        super().__init__(unselected_scalars=unselected_scalars, **settings)

    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        if not sample:
            return super().strategy_weights(sample=False)
        gen = self.generator(next(iter(self.arch_params.values())).device)
        tau = self.tau
        return {
            ct: reinmax_sample(self.sampling_logits(ct), tau, gen)[0] for ct in self.arch_params
        }
