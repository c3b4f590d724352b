"""SDARTS-RS and SDARTS-ADV: smooth the architecture landscape by perturbing the weight step.

Third stage of the pipeline (``nas.strategies``), a component. Chen & Hsieh, "Stabilizing
Differentiable Architecture Search via Perturbation-based Regularization", ICML 2020; reference
xiangning-chen/SmoothDARTS (d3dbfed). The architecture step is the strategy's, on unperturbed
weights; the weight step trains the supernet under mixing weights ``A`` perturbed within an
L-infinity ball of radius epsilon around the strategy's ``A0`` (``sota/cnn/train_search.py``:
``softmax_arch_parameters`` -> ``perturb_alpha`` -> weight step -> ``restore_arch_parameters``),
so the supernet's weights become robust to the architecture moving:

* RS (``attacker/perturb.py: Random_alpha``): ``A = clip(A0 + U(-eps, eps))``, i.i.d. per entry;
* ADV (``Linf_PGD_alpha``): PGD on the training batch's loss with the supernet in eval mode
  (batch norm from its running statistics): random start ``clip(A0 + U(-eps, eps))``, 7 steps
  ``A += 2 eps / 7 * sign(dL/dA)`` (``attacker/linf_sgd.py``: sign-SGD on ``-L``), each followed
  by the projection onto the ball around ``A0`` and ``clip``; if the final loss is below the
  unperturbed one, ``A0`` is used instead (the revert rule).

``clip`` (``model_search.py: clip``) clamps each row to [0, 1]; a row that becomes all zero
gets a one at the entry that was largest before the clamp; then each row is divided by its sum.
It leaves exact zeros, whose ops the reference still runs (``MixedOp.forward``: ``sum(w *
op(x))`` over every op): both components set ``Supernet.zero_weight_ops_run``, so those ops'
parameters get zero gradients (weight decay and momentum move them, batch norm updates its
running statistics) and ADV's sign step sees the gradient of a zero entry. A strategy of one-hot
samples with an architecture step (GDAS, ReinMax) turns it off again in its ``attach``: its
own zeros are ops not drawn, so its perturbed weight steps skip the zero entries' ops.
Epsilon grows per epoch, ``eps_e = 0.03 + (eps_max - 0.03) * e / T`` (``train_search.py:170``),
so the last epoch uses ``0.03 + 0.27 * (T - 1) / T`` (~0.295 at T = 50).

Composition: the strategy's weight-step weights are perturbed whatever the strategy made them
(DARTS's softmax, DrNAS's Dirichlet sample): both are on the simplex. Ops that a mask switched
off (DrNAS's pruning, DARTS-PT's decisions) stay off: the noise is masked. The random draws
come from ``SearchStrategy.draw_seed`` (the same on every rank and after a resume); ADV's
gradients and losses are those of the global batch (summed over ranks and micro-batches), so
every rank takes the same step; but its eval-mode forward reads batch norm's running
statistics, which each rank updates from its own images within an epoch (rank 0's reach all
at the epoch's end), so a data-parallel ADV search differs from the one-process search of
the same global batch (RS and the other components do not: ``tests/search``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from nas import distributed as D
from nas.strategies.components.base import Component

if TYPE_CHECKING:
    from nas.strategies.base import SearchContext, SearchStrategy, Shards
    from nas.supernet import ArchWeights, Supernet


def clip_to_simplex(a_EO: Tensor) -> Tensor:
    """SDARTS's projection per row: clamp to [0, 1], an all-zero row gets a one at its former
    argmax, then divide by the row sum (reference ``model_search.py: clip``)."""
    top = torch.nn.functional.one_hot(a_EO.argmax(-1), a_EO.shape[-1]).to(torch.bool)
    clamped = a_EO.clamp(0, 1)
    empty = (clamped.sum(-1, keepdim=True) == 0) & top
    clamped = torch.where(empty, torch.ones_like(clamped), clamped)
    return clamped / clamped.sum(-1, keepdim=True)


def epsilon_at(epoch: int, epochs: int, epsilon_min: float, epsilon_max: float) -> float:
    """``eps_min + (eps_max - eps_min) * epoch / epochs`` (reference ``train_search.py:170``)."""
    return epsilon_min + (epsilon_max - epsilon_min) * epoch / epochs


class _Perturbation(Component):
    """The epsilon schedule and the checks both SDARTS variants share."""

    needs_simplex = True
    requires = frozenset({"perturb"})

    def __init__(
        self, *, epsilon_min: float = 0.03, epsilon_max: float = 0.3, epochs: int | None = None
    ) -> None:
        super().__init__()
        if not 0 <= epsilon_min <= epsilon_max:
            raise ValueError(
                f"components: epsilon_min={epsilon_min}, epsilon_max={epsilon_max}; expected "
                "0 <= epsilon_min <= epsilon_max"
            )
        if epochs is not None and (isinstance(epochs, bool) or epochs < 1):
            raise ValueError(f"components: epochs must be a positive int or null, got {epochs}")
        self.epsilon_min = float(epsilon_min)
        self.epsilon_max = float(epsilon_max)
        self.epochs = epochs
        self.epsilon = self.epsilon_min  # epoch 0's until begin_epoch says otherwise
        self._search_epochs: int | None = None

    def check(self, strategy: SearchStrategy, others: Sequence[Component]) -> None:
        name = self.name or type(self).__name__
        independent = [c.name or type(c).__name__ for c in others if not c.on_simplex]
        if independent:
            raise ValueError(
                f"{name} perturbs mixing weights on the simplex (its projection renormalises "
                f"every edge); {', '.join(independent)} mixes with independent weights that are "
                "not"
            )

    def prepare_supernet(self, supernet: Supernet) -> None:
        # the clip leaves exact zeros (near-uniform weights on 8 ops at epsilon 0.3: an entry
        # of 1/8 with noise below -1/8, 29 %); the reference
        # still computes w * op(x) for them (model_search.py: MixedOp.forward), so their ops
        # keep training (weight decay, momentum, batch-norm statistics) and ADV's attack gets
        # the gradient of a zero entry, <dL/do, op(x)>, and can move it off zero
        supernet.zero_weight_ops_run = True

    def attach(self, strategy: SearchStrategy, context: SearchContext) -> None:
        self._search_epochs = context.epochs

    def begin_epoch(self, epoch: int) -> None:
        total = self.epochs or self._search_epochs
        if total is None:
            raise ValueError(
                f"{self.name}: the epsilon schedule needs the number of epochs (set epochs)"
            )
        self.epsilon = epsilon_at(epoch, total, self.epsilon_min, self.epsilon_max)

    def log_state(self) -> dict[str, Any]:
        return {f"{self.name or 'sdarts'}_epsilon": self.epsilon}

    def _noise(self, strategy: SearchStrategy, like: Tensor, mask: Tensor) -> Tensor:
        gen = torch.Generator(like.device).manual_seed(strategy.draw_seed())
        u = torch.rand(like.shape, generator=gen, device=like.device, dtype=like.dtype)
        return (2 * u - 1) * self.epsilon * mask

    def _start(self, strategy: SearchStrategy, weights: ArchWeights) -> ArchWeights:
        """``clip(A0 + U(-eps, eps))`` per cell type; masked ops stay at zero."""
        out = {}
        for ct, a0 in weights.items():
            mask = strategy.supernet.op_mask(ct).to(a0.dtype)
            out[ct] = clip_to_simplex(a0 + self._noise(strategy, a0, mask)) * mask
        return out


class SDARTS_RS(_Perturbation):
    """SDARTS-RS: uniform noise of radius epsilon on the weight step's mixing weights."""

    def perturb(
        self, strategy: SearchStrategy, weights: ArchWeights, shards: Shards
    ) -> ArchWeights:
        with torch.no_grad():
            return self._start(strategy, weights)


def _global_loss(strategy: SearchStrategy, shards: Shards, weights: ArchWeights) -> float:
    """The global batch's mean training loss under ``weights`` (no autograd)."""
    with torch.no_grad():
        total: Tensor | float = 0.0
        for batch, share in shards.weighted():
            loss, _ = strategy.loss(batch, weights)
            total = loss.double() * share + total
        summed = D.all_reduce_sum(torch.as_tensor(total, dtype=torch.float64).reshape(1))
    return float(summed[0])


class SDARTS_ADV(_Perturbation):
    """SDARTS-ADV: the worst-case mixing weights of the epsilon ball by PGD on the training
    loss (7 sign steps of 2 eps / 7, random start, revert if the loss did not rise)."""

    def __init__(
        self,
        *,
        epsilon_min: float = 0.03,
        epsilon_max: float = 0.3,
        epochs: int | None = None,
        steps: int = 7,
        random_start: bool = True,
    ) -> None:
        super().__init__(epsilon_min=epsilon_min, epsilon_max=epsilon_max, epochs=epochs)
        if isinstance(steps, bool) or steps < 1:
            raise ValueError(f"components: steps must be a positive int, got {steps}")
        self.steps = int(steps)
        self.random_start = bool(random_start)

    def perturb(
        self, strategy: SearchStrategy, weights: ArchWeights, shards: Shards
    ) -> ArchWeights:
        supernet = strategy.supernet
        training = supernet.training
        supernet.eval()  # the attack reads batch norm's running statistics, as the reference
        try:
            return self._attack(strategy, weights, shards)
        finally:
            supernet.train(training)

    def _attack(self, strategy: SearchStrategy, a0: ArchWeights, shards: Shards) -> ArchWeights:
        eps = self.epsilon
        step_size = 2 * eps / self.steps
        loss_before = _global_loss(strategy, shards, a0)
        with torch.no_grad():
            a = self._start(strategy, a0) if self.random_start else dict(a0)
        names = list(a0)
        for _ in range(self.steps):
            grads, _, _ = strategy.shard_grads(shards, a, [], tag="adv")
            like = [a[ct] for ct in names]
            grads = D.sum_over_ranks(grads, like)  # the global batch's gradient
            with torch.no_grad():
                nxt = {}
                for ct, g in zip(names, grads):
                    mask = supernet_mask(strategy, ct, a0[ct])
                    step = a[ct] if g is None else a[ct] + step_size * torch.sign(g)
                    step = a0[ct] + (step - a0[ct]).clamp(-eps, eps)
                    nxt[ct] = clip_to_simplex(step) * mask
                a = nxt
        loss_after = _global_loss(strategy, shards, a)
        return dict(a0) if loss_before > loss_after else a


def supernet_mask(strategy: SearchStrategy, cell_type: str, like: Tensor) -> Tensor:
    """The op mask of ``cell_type`` as ones and zeros of ``like``'s dtype."""
    return strategy.supernet.op_mask(cell_type).to(like.dtype)
