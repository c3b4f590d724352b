"""DARTS: differentiable architecture search, first and second order.

Third stage of the pipeline (``nas.strategies``). Liu, Simonyan & Yang, "DARTS: Differentiable
Architecture Search", ICLR 2019. Mixing weights are ``softmax(alpha)`` over each edge's ops
(eq. 1). The architecture gradient is either first order (eq. 6 with xi = 0: the validation
loss at the current weights) or second order (eqs. 6-8):

    w' = w - eta * (mu * m + grad_w L_train(w, alpha) + wd * w)      (one SGD-momentum step)
    grad = grad_alpha L_val(w', alpha) - eta * hvp,
    hvp  = (grad_alpha L_train(w+, alpha) - grad_alpha L_train(w-, alpha)) / (2 R),
    w+-  = w +- R v,  v = grad_w' L_val(w', alpha),  R = 0.01 / ||v||

exactly as the reference ``architect.py`` (momentum buffer and weight decay included, no
clipping, eta = the current weight learning rate). Unlike the reference, the unrolled weights
are written into the supernet in place and restored afterwards instead of building a second
network, which saves a model's worth of memory. Every gradient is taken with respect to the
mixing weights (and the supernet weights where needed) and carried to alpha in one small
backward, so micro-batches and ranks add up exactly (``SearchStrategy.shard_grads``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from nas import distributed as D
from nas.strategies.base import Batch, SearchStrategy, Shards, _zeros_for_none
from nas.supernet import ArchWeights

UNROLLED_R = 0.01  # the reference's R = 0.01 / ||v|| (cnn/architect.py, _hessian_vector_product)


class DARTS(SearchStrategy):
    """DARTS with ``order`` 1 (first-order approximation) or 2 (unrolled)."""

    name = "darts"
    mixing = "a softmax of logits"
    capabilities = SearchStrategy.capabilities | {"softmax"}
    refusal_hints = {"direct_params": " (search.order=1)", "val_weight_grads": " (search.order=1)"}

    def __init__(
        self,
        *,
        order: int = 1,
        arch_lr: float = 3e-4,
        arch_betas: tuple[float, float] | list[float] = (0.5, 0.999),
        arch_weight_decay: float = 1e-3,
        init_scale: float = 1e-3,
        fix_alpha: bool = False,
        unrolled_r: float = UNROLLED_R,
        arch_grad_clip: float | None = None,
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
        if order not in (1, 2):
            raise ValueError(f"search.order must be 1 or 2, got {order!r}")
        self.order = order
        if order == 1 and unrolled_r != UNROLLED_R:
            raise ValueError(
                f"search.unrolled_r={unrolled_r} is the second-order finite difference's "
                f"radius, and search.order=1 takes no such step; set search.order=2 or leave "
                f"unrolled_r at {UNROLLED_R}"
            )
        self.unrolled_r = float(unrolled_r)

    def has(self, capability: str) -> bool:
        # the unrolled (second-order) gradient carries only the mixing weights, and its
        # validation loss is taken at the unrolled weights w', not at the weights themselves
        if capability in ("direct_params", "val_weight_grads") and self.order != 1:
            return False
        return super().has(capability)

    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        # DARTS is deterministic: `sample` changes nothing.
        # softmax, unless a component replaces it (FairDARTS's sigmoid)
        return {ct: self.apply_mask(ct, self.mix(alpha)) for ct, alpha in self.arch_params.items()}

    def arch_step(
        self, train_batch: Batch | Shards, val_batch: Batch | Shards
    ) -> dict[str, Tensor]:
        if self.order == 1:
            return super().arch_step(train_batch, val_batch)
        grads, metrics = self.second_order_grads(train_batch, val_batch)
        self.apply_arch_grads(grads)
        return metrics

    def second_order_grads(
        self, train_batch: Batch | Shards, val_batch: Batch | Shards
    ) -> tuple[list[Tensor | None], dict[str, Tensor]]:
        """This process's share of the unrolled architecture gradient (reference
        ``_backward_step_unrolled``), without the regulariser, which ``apply_arch_grads`` adds
        once after the sum over ranks.

        Under data parallelism the two weight-shaped gradients are summed over the ranks where
        every rank needs the global value: ``g_train`` (so that every rank unrolls to the same
        w') and ``v`` (so that every rank perturbs to the same w+- with the same R); the
        validation and Hessian-vector terms are linear in the per-rank losses and are summed
        with the result."""
        train, val = Shards.of(train_batch), Shards.of(val_batch)
        opt = self.ctx.weight_optimizer
        group = opt.param_groups[0]
        eta, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
        params = self.weight_parameters()

        # w' = w - eta * (mu * m + g + wd * w): one SGD-momentum step, without clipping
        with torch.no_grad():
            weights = self.arch_weights(sample=True)
        _, g_local, _ = self.shard_grads(train, weights, params, tag="train", wrt_weights=False)
        g_train = _zeros_for_none(D.sum_over_ranks(g_local, params), params)
        del g_local
        with torch.no_grad():
            backup = [p.detach().clone() for p in params]
            for p, g in zip(params, g_train):
                buf = opt.state.get(p, {}).get("momentum_buffer")
                step = g + wd * p if buf is None else buf * mu + g + wd * p
                p.sub_(eta * step)
        del g_train

        try:
            # dalpha = grad_alpha L_val(w', alpha), v = grad_w' L_val(w', alpha)
            weights = self.arch_weights(sample=True)
            weight_grads, v, metrics = self.shard_grads(val, weights, params, tag="val")
            # cost-aware loss a(E) * CE + c(E): the unrolled term scales by a(E)
            weight_grads, cost_factor = self.add_cost(weights, weight_grads, metrics)
            dalpha = self.through_weights(weights, weight_grads)
            v_global = _zeros_for_none(D.sum_over_ranks(v, params), params)
            hvp = self._hessian_vector_product(v_global, backup, train)
        finally:
            with torch.no_grad():
                for p, b in zip(params, backup):
                    p.copy_(b)
        alphas = self.arch_parameters()
        if cost_factor is not None:
            hvp = [None if h is None else h * cost_factor.to(h.dtype) for h in hvp]
        final = [
            da - eta * h
            for da, h in zip(_zeros_for_none(dalpha, alphas), _zeros_for_none(hvp, alphas))
        ]
        return list(final), metrics

    def _hessian_vector_product(
        self, v: list[Tensor], w: list[Tensor], train: Shards
    ) -> list[Tensor | None]:
        """(grad_alpha L_train(w + R v) - grad_alpha L_train(w - R v)) / 2R, R = r / ||v||,
        for this process's share of the training batch."""
        params = self.weight_parameters()
        alphas = self.arch_parameters()
        R = self.unrolled_r / torch.cat([x.flatten() for x in v]).norm()
        out = []
        for sign in (1.0, -1.0):
            with torch.no_grad():
                for p, w0, vi in zip(params, w, v):
                    p.copy_(w0 + sign * R * vi)
            weights = self.arch_weights(sample=True)
            weight_grads, _, _ = self.shard_grads(train, weights, [], tag="train")
            out.append(_zeros_for_none(self.through_weights(weights, weight_grads), alphas))
        return [(gp - gn) / (2 * R) for gp, gn in zip(out[0], out[1])]
