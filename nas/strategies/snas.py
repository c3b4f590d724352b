"""SNAS: stochastic neural architecture search.

Third stage of the pipeline (``nas.strategies``). Xie, Zheng, Liu, Lin, ICLR 2019, as the official
code (SNAS-Series/SNAS-Series, ``SNAS/``):

* the mixing weights are a soft Gumbel-softmax sample ``w = softmax((alpha + G) / tau)``, no
  straight-through (``model_search.py:665-670``), one sample per forward and cell type, every
  op of every edge mixed with it (``MixedOp.forward``: ``sum(w * op(x))``, so an entry that
  underflows to exactly 0 at a low tau still runs its op: ``Supernet.zero_weight_ops_run``);
  alpha starts at ``N(1, 0.01)`` (``--loc_mean 1 --loc_std 0.01``);
* tau is annealed linearly per epoch, ``tau = (1 - t / S) (tau0 - tau_min) + tau_min`` with
  ``t = e + 1`` (the reference steps it before each epoch, ``train_search.py:323-325``),
  tau0 = 1, tau_min = 0.03 (``utils.py:128-148``). The reference hard-codes S = 150
  (``utils.py:144``) whatever ``--epochs``; here S is the run's epochs (the last epoch at
  tau_min), and ``schedule_epochs: 150`` restores the reference's;
* training is single-level and joint (``train_search.py:443-512``): on one training batch,
  ``L = CE + lambda * R``, one backward, then the weight step (SGD, the run's clip, 5) and the
  architecture step (SGD lr 3e-4, no momentum, no weight decay, as the single-GPU reference;
  ``arch_optimizer: adam`` is its distributed mode's Adam(3e-4, (0.5, 0.999), 1e-3);
  ``arch_weight_decay`` applies to either, ``arch_betas`` only to Adam; the
  architecture gradient clipped to norm 10). The architecture split is not used for steps:
  by default the weight split (half of the training set) trains both; the reference trains on
  the whole training set, which ``data.train_portion=1.0`` gives (both splits are then the
  whole set, and the logged evaluation reads training images);
* the resource penalty R (``--resource_efficient --method reparametrization``, an option,
  ``resource_penalty``): per edge, from each op's parameter count ``size``, ``flops`` and
  memory access ``mac`` (the formulas of the reference's ``operations.py``, at the edge's
  channels and input resolution) weighted by the sample: ``log`` (the reference's
  ``--log_penalty``): ``(log|sum w size| + log|sum w flops| + log|sum w mac|) / 3``, a sum
  below 1 in magnitude counting as 1; ``linear``: ``0.43 sum w (2 size + flops/4000 +
  mac/100)``. Summed over the edges of every cell; the total is ``normal / n_normal +
  reduce_ratio * reduce / n_reduce`` over the cells of each type (the reference divides by
  its 6 normal and 2 reduction cells), ``lambda`` = 1.5e-3 (what the README's
  commands pass, ``--resource_lambda 1.5e-3``, single-GPU and multi-GPU; the "1e-2" in the
  single-GPU command's ``--remark`` label is not an argument).

Not reproduced: the reference's drop-path (0.3) on every edge of the search network (the
supernet has no drop-path); its policy-gradient and "discrete" resource variants. Evaluation
and derivation use ``softmax(alpha)``; the reference's "edge-all" child (every edge's argmax,
``none`` included) is ``selection=argmax`` on NB201 and not a DARTS-space genotype.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from nas import distributed as D
from nas.strategies.base import Batch, Shards, _zeros_for_none
from nas.strategies.sampling import SamplingStrategy, check_tau, gumbel
from nas.supernet import ArchWeights, Supernet
from nas.supernet.mixed_op import MixedOp


def op_cost(op: str, C: int, h: int, stride: int) -> tuple[float, float, float]:
    """(size, flops, mac) of one candidate op with C channels on an h x h input, by the
    formulas of SNAS's ``operations.py`` (``y`` the output side)."""
    y = h if stride == 1 else h // 2
    if op in ("none", "noise"):
        return 0.0, 0.0, 0.0
    if op in ("avg_pool_3x3", "max_pool_3x3"):
        return 0.0, 9.0 * y * y * C, (2.0 if stride == 1 else 5.0) * y * y * C
    if op == "skip_connect":
        if stride == 1:
            return 0.0, 0.0, 2.0 * C * h * h
        size = 2.0 * C * (C // 2)  # FactorizedReduce
        return size, size * y * y, 2.0 * y * y * (4 * C + C // 2) + size
    if op.startswith("sep_conv_"):
        k = int(op[-1])
        size = 2.0 * C * k * k + 2.0 * C * C
        return size, size * y * y, y * y * ((7 if stride == 1 else 10) * C + C) + size
    if op.startswith("dil_conv_"):
        k = int(op[-1])
        size = float(C * k * k + C * C)
        return size, size * y * y, y * y * ((3 if stride == 1 else 6) * C + C) + size
    if op.startswith("nor_conv_"):  # NB201's ReLU-conv-BN: the reference's ReLUConvBN
        k = int(op[-1])
        size = float(C * C * k * k)
        return size, size * y * y, y * y * ((1 if stride == 1 else 4) * C + C) + size
    raise ValueError(f"SNAS's resource penalty has no cost for operation {op!r}")


ADAM_BETAS = (0.5, 0.999)  # arch_optimizer=adam: the distributed mode's
RESOURCE_LAMBDA = 1.5e-3  # --resource_lambda of the README's commands


class SNAS(SamplingStrategy):
    """SNAS: soft Gumbel-softmax samples, single-level joint training, optional resources."""

    name = "snas"
    mixing = "soft Gumbel-softmax samples, trained in one single-level step"
    # the joint step: one backward for weights and alpha, on the (unperturbed) sample
    capabilities = frozenset({"arch_params", "arch_penalty", "direct_params", "masked_mixing"})
    refusal_hints = {"weight_grads": "; its own cost term is search.resource_penalty=log|linear"}
    single_level = True  # no architecture-split batches: only training metrics

    def __init__(
        self,
        *,
        arch_lr: float = 3e-4,
        arch_optimizer: str = "sgd",
        arch_betas: tuple[float, float] | list[float] = ADAM_BETAS,
        arch_weight_decay: float = 0.0,
        init_mean: float = 1.0,
        init_std: float = 0.01,
        fix_alpha: bool = False,
        arch_grad_clip: float | None = 10.0,
        tau_max: float = 1.0,
        tau_min: float = 0.03,
        schedule_epochs: int | None = None,
        resource_penalty: str | None = None,
        resource_lambda: float = RESOURCE_LAMBDA,
        reduce_ratio: float = 1.0,
    ) -> None:
        if arch_optimizer not in ("sgd", "adam"):
            raise ValueError(
                f"search.arch_optimizer must be 'sgd' or 'adam', got {arch_optimizer!r}"
            )
        if resource_penalty not in (None, "log", "linear"):
            raise ValueError(
                f"search.resource_penalty must be null, 'log' or 'linear', got {resource_penalty!r}"
            )
        if (
            isinstance(schedule_epochs, bool)
            or schedule_epochs is not None
            and (not isinstance(schedule_epochs, int) or schedule_epochs < 1)
        ):
            raise ValueError(
                f"search.schedule_epochs must be a positive int or null, got {schedule_epochs!r}"
            )
        if resource_lambda < 0 or init_std < 0:
            raise ValueError("search.resource_lambda and search.init_std must be >= 0")
        if arch_optimizer == "sgd" and tuple(arch_betas) != ADAM_BETAS:
            raise ValueError(
                f"search.arch_betas={list(arch_betas)} are Adam's, and search.arch_optimizer=sgd "
                f"has none; set arch_optimizer=adam, or leave arch_betas at {list(ADAM_BETAS)}"
            )
        if resource_penalty is None and (resource_lambda != RESOURCE_LAMBDA or reduce_ratio != 1.0):
            raise ValueError(
                f"search.resource_lambda={resource_lambda} and search.reduce_ratio={reduce_ratio} "
                "weigh the resource penalty, and search.resource_penalty is null; set "
                f"resource_penalty=log or linear, or leave them at {RESOURCE_LAMBDA} and 1.0"
            )
        super().__init__(
            arch_lr=arch_lr,
            arch_betas=arch_betas,
            arch_weight_decay=arch_weight_decay,
            init_scale=init_std,
            fix_alpha=fix_alpha,
            arch_grad_clip=arch_grad_clip,
        )
        self.arch_optimizer_kind = arch_optimizer
        self.init_mean = float(init_mean)
        self.tau_max, self.tau_min = check_tau(tau_max, tau_min)
        self.schedule_epochs = schedule_epochs
        self.resource_penalty = resource_penalty
        self.resource_lambda = float(resource_lambda)
        self.reduce_ratio = float(reduce_ratio)
        self._costs: dict[str, list[Tensor]] | None = None

    def prepare_supernet(self, supernet: Supernet) -> None:
        super().prepare_supernet(supernet)
        # at low temperatures the float32 softmax underflows to exact zeros (a quarter of the
        # entries of 8 equal logits at tau = 0.03); the reference mixes every op (model_search.py:
        # MixedOp.forward), so those ops still train (weight decay, momentum, batch norm)
        supernet.zero_weight_ops_run = True

    def attach(self, ctx: Any, *, generator: torch.Generator | None = None) -> None:
        super().attach(ctx, generator=generator)
        with torch.no_grad():  # N(init_mean, init_std): init_std * N(0, 1) + init_mean
            for p in self.arch_params.values():
                p.add_(self.init_mean)
        if self.arch_optimizer_kind == "sgd":
            self.arch_optimizer = torch.optim.SGD(
                self.arch_parameters(),
                lr=self.arch_lr,
                momentum=0.0,
                weight_decay=self.arch_weight_decay,  # the reference's: 0 (the default)
            )

    # ------------------------------------------------------------------- schedule

    @property
    def tau(self) -> float:
        span = self.schedule_epochs or self.ctx.epochs
        if span is None:
            return self.tau_max
        t = min(self.epoch + 1, span)
        return (1 - t / span) * (self.tau_max - self.tau_min) + self.tau_min

    def log_state(self) -> dict[str, Any]:
        return {"tau": self.tau}

    # -------------------------------------------------------------------- weights

    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        if not sample:
            return {
                ct: self.apply_mask(ct, torch.softmax(alpha, dim=-1))
                for ct, alpha in self.arch_params.items()
            }
        gen = self.generator(next(iter(self.arch_params.values())).device)
        tau = self.tau
        out = {}
        for ct, alpha in self.arch_params.items():
            g = gumbel(alpha.shape, gen, alpha.device)
            out[ct] = self.apply_mask(ct, torch.softmax((alpha + g) / tau, dim=-1))
        return out

    # ---------------------------------------------------------------------- steps

    def step(
        self, train_batch: Batch | Shards, val_batch: Batch | Shards, *, update_arch: bool = True
    ) -> dict[str, Tensor]:
        """One joint step on the training batch: one backward for the weights and alpha."""
        del val_batch
        shards = Shards.of(train_batch)
        params = self.weight_parameters()
        arch = update_arch and not self.fix_alpha
        if arch:
            weights = self.arch_weights(sample=True)
        else:
            with torch.no_grad():
                weights = self.arch_weights(sample=True)
        # the components' own architecture parameters (PC-DARTS's edge betas) act on the
        # supernet directly: their gradient comes from the same joint backward
        direct = self.direct_arch_parameters() if arch else []
        weight_grads, all_grads, metrics = self.shard_grads(
            shards,
            weights,
            [*params, *direct],
            tag="train",
            wrt_weights=arch,
            label_smoothing=self.ctx.label_smoothing,
        )
        param_grads, direct_grads = all_grads[: len(params)], all_grads[len(params) :]
        if arch:
            if self.resource_penalty is not None:
                if self._costs is None:  # counted at the data's side, as the reference does
                    self._image_side = int(shards.parts[0][0].shape[-1])
                weight_grads = self._add_penalty(weights, weight_grads, metrics)
            grads = self.through_weights(weights, weight_grads)
            self.apply_arch_grads(self.with_direct(grads, direct_grads))
        opt = self.ctx.weight_optimizer
        opt.zero_grad(set_to_none=True)
        for p, g in zip(params, param_grads):
            p.grad = g
        D.all_reduce_grads(params)
        with_grad = [p for p in params if p.grad is not None]
        if self.ctx.grad_clip is not None:
            nn.utils.clip_grad_norm_(with_grad, self.ctx.grad_clip, foreach=True)
        opt.step()
        return metrics

    def updates_arch(self, epoch: int) -> bool:
        return not self.fix_alpha

    def _cell_costs(self) -> dict[str, list[Tensor]]:
        """Per cell type, per cell: [edges, ops, 3] size / flops / mac from each edge's
        channels and input side, read once from a forward of one image of the side of the
        first training batch (the reference records them at its first forward)."""
        if self._costs is not None:
            return self._costs
        supernet = self.supernet
        sides: dict[MixedOp, int] = {}

        def record(mod: nn.Module, args: tuple[Any, ...]) -> None:
            assert isinstance(mod, MixedOp)
            sides.setdefault(mod, int(args[0].shape[-1]))

        hooks = [m.register_forward_pre_hook(record) for m in supernet.mixed_ops()]
        device = next(supernet.parameters()).device
        side = self._image_side
        was_training = supernet.training
        try:
            supernet.eval()
            with torch.no_grad():
                ones = {
                    ct: torch.ones(shape, device=device) / shape[1]
                    for ct, shape in supernet.arch_shapes().items()
                }
                supernet(torch.zeros(1, 3, side, side, device=device), ones)
        finally:
            supernet.train(was_training)
            for h in hooks:
                h.remove()
        costs: dict[str, list[Tensor]] = {ct: [] for ct in supernet.space.cells}
        for cell, ct in zip(supernet.cells, supernet.cell_types):
            mixed = [m for m in cell.modules() if isinstance(m, MixedOp)]
            if ct is None or not mixed:
                continue  # NB201's residual reduction blocks have no candidates
            rows = []
            for m in mixed:
                c = m.C // m.k
                rows.append([op_cost(op, c, sides[m], m.stride) for op in m.op_names])
            costs[ct].append(torch.tensor(rows, dtype=torch.float32, device=device))
        self._costs = costs
        return costs

    # the image side the costs are counted at: the first training batch's (set by ``step``),
    # 32 (CIFAR) for a penalty asked for before any step
    _image_side = 32

    def penalty(self, weights: ArchWeights) -> Tensor:
        """``normal / n_normal + reduce_ratio * reduce / n_reduce`` of the per-cell sums."""
        total: Tensor | float = 0.0
        for ct, cells in self._cell_costs().items():
            if not cells:
                continue
            w = weights[ct].unsqueeze(-1)  # [edges, ops, 1]
            per_type: Tensor | float = 0.0
            for cost in cells:
                expect = (w * cost).sum(1)  # [edges, 3]
                if self.resource_penalty == "log":
                    clean = torch.where(expect.abs() < 1, torch.ones_like(expect), expect)
                    per_edge = clean.abs().log().sum(-1) / 3
                else:
                    size, flops, mac = expect.unbind(-1)
                    per_edge = 0.43 * (2 * size + flops / 4000 + mac / 100)
                per_type = per_type + per_edge.sum()
            scale = self.reduce_ratio if self.supernet.space.cells[ct].reduction else 1.0
            total = total + scale * per_type / len(cells)
        assert isinstance(total, Tensor)
        return total

    def _add_penalty(
        self, weights: ArchWeights, weight_grads: list[Tensor | None], metrics: dict[str, Tensor]
    ) -> list[Tensor | None]:
        """Add lambda * dR/dw to this rank's share (1 / world of it: the ranks' shares are
        summed) and log R."""
        leaves = {ct: w.detach().requires_grad_() for ct, w in weights.items()}
        r = self.penalty(leaves)
        grads = torch.autograd.grad(r, list(leaves.values()), allow_unused=True)
        world = D.get_world_size()
        metrics["resource_penalty"] = r.detach() / world
        like = list(leaves.values())
        scale = self.resource_lambda / world
        return [
            g + scale * p
            for g, p in zip(_zeros_for_none(weight_grads, like), _zeros_for_none(grads, like))
        ]
