"""GDAS: searching for a robust neural architecture in four GPU hours.

Third stage of the pipeline (``nas.strategies``). Dong & Yang, CVPR 2019, as the reference code
(D-X-Y/AutoDL-Projects; ``xautodl/models/cell_searchs/search_model_gdas.py:114-129``,
``search_model_gdas_nasnet.py:164-183``, ``exps/NAS-Bench-201-algos/GDAS.py``):

* hard Gumbel-softmax with the straight-through gradient, one sample per forward and cell type
  (shared by all its cells): ``y = (log_softmax(alpha) + G) / tau``, ``h = softmax(y)``,
  ``w = onehot(argmax h) - stopgrad(h) + h``: the value is one-hot, the gradient is
  ``dh/dalpha``. The whole draw is repeated while the noise or ``h`` holds an inf or a NaN.
  ``argmax y`` does not depend on ``tau``: the draws are exactly ``Cat(softmax(alpha))``, and
  ``tau`` only shapes the gradient;
* only the sampled op of an edge runs (the supernet skips zero-weight ops, and ``attach``
  keeps ``Supernet.zero_weight_ops_run`` off even where a component turned it on); with
  ``unselected_scalars`` the other ops' weights are added to the node as scalars of value 0,
  so that they too receive a gradient (the reference's NB201 cell, ``search_cells.py:72-86``);
  without, only the selected term (its DARTS-space cell, ``search_cells.py:236-251``, and the
  NB201 "gdas_v1"). The default follows the reference per space: on where every edge is kept
  (NB201), off where a node selects its inputs (the DARTS spaces);
* ``tau`` linear per epoch from ``tau_max`` = 10 to ``tau_min`` = 0.1 over the run's epochs
  (``GDAS.py:237-239``);
* each iteration takes the weight step first (on a fresh sample), then the architecture step
  (on another fresh sample, first order, no clipping; ``GDAS.py:40-76``); alpha starts at
  ``1e-3 * N(0, 1)`` and is trained by Adam(3e-4, (0.5, 0.999), wd 1e-3);
* the weight step's clip: the reference clips ``network.parameters()`` (``GDAS.py:54``), which
  hold alpha, whose gradient of the training loss (through the straight-through sample) thus
  enters the norm; ``clip_arch_with_weights: true`` does the same (off by default, on in the
  GDAS experiments).

Evaluation and derivation use ``softmax(alpha)``, the expected one-hot sample. The
reference's DARTS-space genotype (top-2 (op, input) pairs per node, which may share an input)
is the selector ``gdas_topk`` (``nas.selection.gdas_topk``); ``argmax`` and ``pt`` work too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from nas import distributed as D
from nas.strategies.base import Batch, Shards
from nas.strategies.sampling import SamplingStrategy, check_tau, gumbel, linear_tau
from nas.supernet import ArchWeights

# a draw that keeps producing inf/NaN is a broken alpha, not bad luck: say so instead of looping
MAX_REDRAWS = 100


def gdas_sample(alpha: Tensor, tau: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """One hard straight-through Gumbel-softmax sample per row of ``alpha``: ``(weights,
    index)``, redrawn while the noise or the soft sample is not finite (AutoDL
    ``search_model_gdas.py:114-129``)."""
    log_p = torch.log_softmax(alpha, dim=-1)
    for _ in range(MAX_REDRAWS):
        g = gumbel(alpha.shape, generator, alpha.device)
        h = torch.softmax((log_p + g) / tau, dim=-1)
        if bool(torch.isinf(g).any() or (~torch.isfinite(h)).any()):
            continue
        index = h.detach().argmax(-1, keepdim=True)
        one_hot = torch.zeros_like(h).scatter_(-1, index, 1.0)
        return one_hot - h.detach() + h, index.squeeze(-1)
    raise FloatingPointError(
        f"GDAS: {MAX_REDRAWS} Gumbel draws in a row gave a non-finite sample; the "
        "architecture parameters are not finite"
    )


class GDAS(SamplingStrategy):
    """GDAS: hard Gumbel-softmax samples, weight step then architecture step."""

    name = "gdas"
    mixing = "hard Gumbel-softmax samples"

    def __init__(
        self,
        *,
        arch_lr: float = 3e-4,
        arch_betas: tuple[float, float] | list[float] = (0.5, 0.999),
        arch_weight_decay: float = 1e-3,
        init_scale: float = 1e-3,
        fix_alpha: bool = False,
        arch_grad_clip: float | None = None,
        tau_max: float = 10.0,
        tau_min: float = 0.1,
        unselected_scalars: bool | None = None,
        clip_arch_with_weights: bool = False,
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
        self.tau_max, self.tau_min = check_tau(tau_max, tau_min)
        if unselected_scalars is not None and not isinstance(unselected_scalars, bool):
            raise ValueError(
                f"search.unselected_scalars must be true, false or null (the reference's "
                f"default for the space), got {unselected_scalars!r}"
            )
        self.unselected_scalars_setting = unselected_scalars
        if not isinstance(clip_arch_with_weights, bool):
            raise ValueError(
                "search.clip_arch_with_weights must be true or false, got "
                f"{clip_arch_with_weights!r}"
            )
        self.clip_arch_with_weights = clip_arch_with_weights
        self.check_clip_options()

    def attach(self, ctx: Any, *, generator: torch.Generator | None = None) -> None:
        super().attach(ctx, generator=generator)
        self.supernet.set_unselected_scalars(self.unselected_scalars)
        # the one-hot sample's zeros are the ops not drawn, which the reference never runs: a
        # component that asks for every op (SDARTS's perturbation) leaves the skip on here
        self.supernet.zero_weight_ops_run = False

    @property
    def unselected_scalars(self) -> bool:
        """The setting, or the reference's default for the space: the NB201 cell (every edge
        kept) adds the scalars, the DARTS-space cell (a node selects its inputs) does not."""
        if self.unselected_scalars_setting is not None:
            return self.unselected_scalars_setting
        return not self.supernet.space.selects_inputs

    @property
    def tau(self) -> float:
        return linear_tau(self.epoch, self.ctx.epochs, self.tau_max, self.tau_min)

    def log_state(self) -> dict[str, Any]:
        return {"tau": self.tau}

    def sampling_logits(self, cell_type: str) -> Tensor:
        """alpha with masked ops at -inf (they are never drawn)."""
        alpha = self.arch_params[cell_type]
        mask = self.supernet.op_mask(cell_type)
        return alpha if bool(mask.all()) else alpha.masked_fill(~mask, float("-inf"))

    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        if not sample:
            return {
                ct: self.apply_mask(ct, torch.softmax(alpha, dim=-1))
                for ct, alpha in self.arch_params.items()
            }
        # one draw (one generator) per forward, one sample per cell type
        gen = self.generator(next(iter(self.arch_params.values())).device)
        tau = self.tau
        return {ct: gdas_sample(self.sampling_logits(ct), tau, gen)[0] for ct in self.arch_params}

    def weight_step(self, train_batch: Batch | Shards) -> dict[str, Tensor]:
        """The weight step; with ``clip_arch_with_weights`` the clip norm also holds what the
        reference's ``alpha.grad`` holds at its clip (``GDAS.py:50-54``): ``w_optimizer.
        zero_grad()`` clears the weights only, so the training loss's gradient of alpha is
        added to the last architecture step's gradient, which the architecture optimiser left
        in ``.grad`` (``a_optimizer.zero_grad()`` runs only before the next architecture step,
        ``GDAS.py:65``). The base step clears ``.grad`` before its backward; a one-shot hook
        on each alpha adds that stale gradient back (1 / world of it per rank: the ranks'
        gradients are summed). The first step of a run (or of a resumed run) has none."""
        handles = []
        if self.clip_arch_with_weights:
            share = 1.0 / D.get_world_size()
            for a in self.arch_parameters():
                if a.grad is None:
                    continue
                pending = [a.grad.detach() * share]

                def add_stale(g: Tensor, pending: list[Tensor] = pending) -> Tensor:
                    return g + pending.pop() if pending else g

                handles.append(a.register_hook(add_stale))
        try:
            return super().weight_step(train_batch)
        finally:
            for h in handles:
                h.remove()

    def checkpoint_state(self) -> dict[str, Any]:
        """With ``clip_arch_with_weights``, also the gradient the last architecture step left
        in ``.grad`` (it enters the next weight step's clip): a resumed run clips as the
        uninterrupted one."""
        state = super().checkpoint_state()
        if self.clip_arch_with_weights:
            state["arch_grads"] = {
                ct: None if a.grad is None else a.grad.detach().clone()
                for ct, a in self.arch_params.items()
            }
        return state

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        super().load_checkpoint_state(state)
        for ct, g in (state.get("arch_grads") or {}).items():
            if ct in self.arch_params and g is not None:
                a = self.arch_params[ct]
                a.grad = g.to(device=a.device, dtype=a.dtype)

    def step(
        self, train_batch: Batch | Shards, val_batch: Batch | Shards, *, update_arch: bool = True
    ) -> dict[str, Tensor]:
        """The weight step first, then the architecture step (``GDAS.py:40-76``), each on its
        own sample."""
        metrics = self.weight_step(train_batch)
        if update_arch and not self.fix_alpha:
            metrics.update(self.arch_step(train_batch, val_batch))
        return metrics
