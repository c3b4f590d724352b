"""beta-DARTS: the Beta-Decay regulariser of the architecture loss.

Third stage of the pipeline (``nas.strategies``), a component. Ye et al., "beta-DARTS: Beta-Decay
Regularization for Differentiable Architecture Search", CVPR 2022; reference
Sunshine-Ye/Beta-DARTS (f307704), ``optimizers/darts/architect.py``:

    L_beta = mean over edges of logsumexp_k(alpha_{e,k})          (``mlc_loss``, on raw alpha)
    L_arch = L_val + lambda_e * L_beta,   lambda_e = 50 * e / 100   (``_backward_step``)

added to the first-order architecture step only: the unrolled (second-order) step
``_backward_step_unrolled`` (``architect.py:87-107``) has no Beta-Decay term, so by default
the component refuses a strategy whose architecture step is second order (one without the
first-order step's ``direct_params``: DARTS or DrNAS at ``order=2``), since it would add
nothing there; ``in_second_order: true`` adds the term to that step too. Its gradient per edge
is ``softmax(alpha_e) / E``: it pushes every logit down in proportion to its weight, keeping
the logits of an edge close (the paper's "decay" of the mixing weights' amplitude).

The ramp: the reference writes ``50 * epoch / 100`` with 100 literal (its NB201 search runs
100 epochs), i.e. ``lambda_max * e / ramp_epochs``; ``ramp_epochs: null`` ramps over the
search's own epochs (the same at 100 epochs, and 0 -> 49 over a 50-epoch DARTS-space search).
On the DARTS space the released script cannot run as released (``sota/cnn/train_search.py:213``
calls ``architect.step`` without ``epoch``, and ``mlc_loss`` would receive a Python list); the
term there is one mean over the edges of both cell types with the same lambda ramp, and the
experiment follows the script's defaults otherwise (space s5 and SDARTS-RS, ``:55-56``). The
parameters it reads are the strategy's own (DARTS's alpha, DrNAS's beta).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from nas.strategies.components.base import Component

if TYPE_CHECKING:
    from nas.strategies.base import SearchContext, SearchStrategy


def beta_decay(alphas: Sequence[Tensor]) -> Tensor:
    """Mean over the edges of every cell type of ``logsumexp`` of the edge's logits."""
    return torch.cat([torch.logsumexp(a, dim=-1) for a in alphas]).mean()


def lambda_at(epoch: int, ramp_epochs: int, lambda_max: float) -> float:
    """``lambda_max * epoch / ramp_epochs`` (reference: ``0 + 50 * epoch / 100``)."""
    return lambda_max * epoch / ramp_epochs


class BetaDecay(Component):
    """``lambda_e * mean_e logsumexp(alpha_e)`` added to the architecture loss."""

    # it regularises the strategy's per-op parameters through the architecture loss
    requires = frozenset({"arch_params", "arch_penalty"})

    def __init__(
        self,
        *,
        lambda_max: float = 50.0,
        ramp_epochs: int | None = 100,
        in_second_order: bool = False,
    ) -> None:
        super().__init__()
        if lambda_max < 0:
            raise ValueError(f"components: lambda_max must be >= 0, got {lambda_max}")
        if ramp_epochs is not None and (isinstance(ramp_epochs, bool) or ramp_epochs < 1):
            raise ValueError(
                f"components: ramp_epochs must be a positive int or null, got {ramp_epochs}"
            )
        if not isinstance(in_second_order, bool):
            raise ValueError(
                f"components: in_second_order must be true or false, got {in_second_order!r}"
            )
        self.lambda_max = float(lambda_max)
        self.ramp_epochs = ramp_epochs
        self.in_second_order = in_second_order
        self.weight = 0.0  # epoch 0's
        self._search_epochs: int | None = None

    def check_strategy(self, strategy: SearchStrategy) -> None:
        super().check_strategy(strategy)
        if not self.in_second_order and not strategy.has("direct_params"):
            raise ValueError(
                f"{self.label} needs a first-order architecture step (the reference's unrolled "
                "step has no Beta-Decay term): set search.order=1, or "
                f"components.{self.name or 'beta_darts'}.in_second_order=true to add it there"
            )
        if self.in_second_order and strategy.has("direct_params"):
            raise ValueError(
                f"components.{self.name or 'beta_darts'}.in_second_order=true adds the term to "
                f"a second-order (unrolled) step, and {type(strategy).__name__}'s is first "
                "order; set search.order=2, or leave in_second_order false"
            )

    def attach(self, strategy: SearchStrategy, context: SearchContext) -> None:
        self._search_epochs = context.epochs

    def begin_epoch(self, epoch: int) -> None:
        ramp = self.ramp_epochs or self._search_epochs
        if ramp is None:
            raise ValueError("beta_darts: the lambda ramp needs ramp_epochs or the search's epochs")
        self.weight = lambda_at(epoch, ramp, self.lambda_max)

    def arch_penalty(self, strategy: SearchStrategy) -> Tensor | None:
        if self.weight == 0:
            return None
        return self.weight * beta_decay(list(strategy.arch_params.values()))

    def log_state(self) -> dict[str, Any]:
        return {"beta_decay_lambda": self.weight}
