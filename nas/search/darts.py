"""DARTS: differentiable architecture search, first and second order.

Third stage of the pipeline (``nas.search``). Liu, Simonyan & Yang, "DARTS: Differentiable
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
network, which saves a model's worth of memory.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nas.search.base import STRATEGIES, Batch, SearchStrategy, accuracy
from nas.supernet import ArchWeights


@STRATEGIES.register("darts")
class DARTS(SearchStrategy):
    """DARTS with ``order`` 1 (first-order approximation) or 2 (unrolled)."""

    name = "darts"

    def __init__(
        self,
        *,
        order: int = 1,
        arch_lr: float = 3e-4,
        arch_betas: tuple[float, float] | list[float] = (0.5, 0.999),
        arch_weight_decay: float = 1e-3,
        init_scale: float = 1e-3,
        fix_alpha: bool = False,
        unrolled_r: float = 0.01,
    ) -> None:
        super().__init__(
            arch_lr=arch_lr,
            arch_betas=arch_betas,
            arch_weight_decay=arch_weight_decay,
            init_scale=init_scale,
            fix_alpha=fix_alpha,
        )
        if order not in (1, 2):
            raise ValueError(f"search.order must be 1 or 2, got {order!r}")
        self.order = order
        self.unrolled_r = float(unrolled_r)

    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        # DARTS is deterministic: `sample` changes nothing.
        return {
            ct: self.apply_mask(ct, torch.softmax(alpha, dim=-1))
            for ct, alpha in self.arch_params.items()
        }

    def arch_step(self, train_batch: Batch, val_batch: Batch) -> dict[str, Tensor]:
        if self.order == 1:
            return super().arch_step(train_batch, val_batch)
        assert self.arch_optimizer is not None
        grads, metrics = self.second_order_grads(train_batch, val_batch)
        self.arch_optimizer.zero_grad(set_to_none=True)
        for p, g in zip(self.arch_parameters(), grads):
            p.grad = g
        self.arch_optimizer.step()
        return metrics

    def _weight_params(self) -> list[torch.nn.Parameter]:
        return [p for g in self.ctx.weight_optimizer.param_groups for p in g["params"]]

    def _grads(self, loss: Tensor, inputs: list[torch.nn.Parameter]) -> list[Tensor]:
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(inputs, grads)]

    def second_order_grads(
        self, train_batch: Batch, val_batch: Batch
    ) -> tuple[list[Tensor], dict[str, Tensor]]:
        """The unrolled architecture gradient (reference ``_backward_step_unrolled``)."""
        opt = self.ctx.weight_optimizer
        group = opt.param_groups[0]
        eta, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
        params = self._weight_params()
        alphas = self.arch_parameters()

        # w' = w - eta * (mu * m + g + wd * w): one SGD-momentum step, without clipping
        with torch.no_grad():
            weights = self.arch_weights(sample=True)
        loss_train, _ = self.loss(train_batch, weights)
        g_train = self._grads(loss_train, params)
        with torch.no_grad():
            backup = [p.detach().clone() for p in params]
            moment = [
                opt.state[p]["momentum_buffer"] * mu
                if opt.state.get(p, {}).get("momentum_buffer") is not None
                else torch.zeros_like(p)
                for p in params
            ]
            for p, m, g in zip(params, moment, g_train):
                p.sub_(eta * (m + g + wd * p))

        try:
            # dalpha = grad_alpha L_val(w', alpha), v = grad_w' L_val(w', alpha)
            loss_val, logits = self.loss(val_batch, self.arch_weights(sample=True))
            reg = self.arch_regularizer()  # DrNAS's KL term depends on alpha only
            grads = self._grads(loss_val if reg is None else loss_val + reg, alphas + params)
            dalpha, v = grads[: len(alphas)], grads[len(alphas) :]
            hvp = self._hessian_vector_product(v, backup, train_batch)
        finally:
            with torch.no_grad():
                for p, b in zip(params, backup):
                    p.copy_(b)
        final = [da - eta * h for da, h in zip(dalpha, hvp)]
        return final, {
            "val_loss": loss_val.detach(),
            "val_acc": accuracy(logits.detach(), val_batch[1]),
        }

    def _hessian_vector_product(
        self, v: list[Tensor], w: list[Tensor], train_batch: Batch
    ) -> list[Tensor]:
        """(grad_alpha L_train(w + R v) - grad_alpha L_train(w - R v)) / 2R, R = r / ||v||."""
        params = self._weight_params()
        alphas = self.arch_parameters()
        R = self.unrolled_r / torch.cat([x.flatten() for x in v]).norm()
        out = []
        for sign in (1.0, -1.0):
            with torch.no_grad():
                for p, w0, vi in zip(params, w, v):
                    p.copy_(w0 + sign * R * vi)
            loss, _ = self.loss(train_batch, self.arch_weights(sample=True))
            out.append(self._grads(loss, alphas))
        return [(gp - gn) / (2 * R) for gp, gn in zip(out[0], out[1])]
