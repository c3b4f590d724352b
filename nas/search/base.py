"""The search-strategy seam: who owns the architecture parameters and how a bi-level step runs.

Third stage of the pipeline (``nas.search``). A strategy owns the architecture parameters (real
``nn.Parameter``s in its ``state_dict``) and their optimiser; ``arch_weights`` turns them into
the supernet's mixing weights, and ``step`` performs one bi-level update (Liu et al., ICLR 2019,
Alg. 1): an architecture step on a validation batch, then a weight step on a training batch.
Selection never lives here, so any strategy pairs with any selector.

Speed: the weight step computes the mixing weights without autograd (so the supernet does not
keep every op output alive for an architecture gradient nobody asks for), and the first-order
architecture step backpropagates only into the architecture parameters (``inputs=``), which
skips every weight-gradient kernel of the convolutions.

Legend: ``*_EO`` tensors are [edges, ops] of one cell type.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from nas.registry import Registry
from nas.supernet import ArchWeights, Supernet

Batch = tuple[Tensor, Tensor]

STRATEGIES: Registry[type[SearchStrategy]] = Registry("search strategy")


@dataclass
class SearchContext:
    """What a strategy needs from the search loop to take steps."""

    supernet: Supernet
    weight_optimizer: torch.optim.SGD
    grad_clip: float
    autocast_dtype: torch.dtype | None = None


def accuracy(logits: Tensor, target: Tensor) -> Tensor:
    return (logits.argmax(1) == target).float().mean()


class SearchStrategy(nn.Module, abc.ABC):
    """Base class: architecture parameters per cell type, their Adam optimiser, the weight step.

    Subclasses define ``arch_weights`` and may override ``arch_step``, ``arch_regularizer``
    and ``on_epoch_end``. ``fix_alpha`` freezes the architecture at its initialisation
    (DARTS-PT's "fix alpha" supernet training): no architecture steps at all.
    """

    name: ClassVar[str]

    def __init__(
        self,
        *,
        arch_lr: float,
        arch_betas: tuple[float, float] | list[float],
        arch_weight_decay: float,
        init_scale: float = 1e-3,
        fix_alpha: bool = False,
    ) -> None:
        super().__init__()
        if arch_lr <= 0:
            raise ValueError(f"search.arch_lr must be positive, got {arch_lr}")
        if len(arch_betas) != 2 or not all(0 <= b < 1 for b in arch_betas):
            raise ValueError(f"search.arch_betas must be two numbers in [0, 1), got {arch_betas}")
        if arch_weight_decay < 0:
            raise ValueError(f"search.arch_weight_decay must be >= 0, got {arch_weight_decay}")
        self.arch_lr = float(arch_lr)
        self.arch_betas = (float(arch_betas[0]), float(arch_betas[1]))
        self.arch_weight_decay = float(arch_weight_decay)
        self.init_scale = float(init_scale)
        self.fix_alpha = bool(fix_alpha)
        self.arch_params = nn.ParameterDict()
        self._ctx: SearchContext | None = None
        self.arch_optimizer: torch.optim.Optimizer | None = None

    # ----------------------------------------------------------------------------- set-up

    def attach(self, ctx: SearchContext, *, generator: torch.Generator | None = None) -> None:
        """Create the architecture parameters (``init_scale * randn``) for the supernet's shapes."""
        self._ctx = ctx
        device = next(ctx.supernet.parameters()).device
        for cell_type, (num_edges, num_ops) in ctx.supernet.arch_shapes().items():
            init = self.init_scale * torch.randn(num_edges, num_ops, generator=generator)
            self.arch_params[cell_type] = nn.Parameter(init.to(device))
            # DARTS-PT projections: decided edges use fixed weights (one-hot, or zero when the
            # topology projection removed the edge) instead of the strategy's
            self.register_buffer(
                f"proj_decided_{cell_type}", torch.zeros(num_edges, dtype=torch.bool, device=device)
            )
            self.register_buffer(
                f"proj_weights_{cell_type}", torch.zeros(num_edges, num_ops, device=device)
            )
        self.arch_optimizer = torch.optim.Adam(
            self.arch_params.values(),
            lr=self.arch_lr,
            betas=self.arch_betas,
            weight_decay=self.arch_weight_decay,
            foreach=True,
        )

    @property
    def ctx(self) -> SearchContext:
        if self._ctx is None:
            raise RuntimeError("the strategy is not attached to a supernet; call attach() first")
        return self._ctx

    @property
    def supernet(self) -> Supernet:
        return self.ctx.supernet

    def arch_parameters(self) -> list[nn.Parameter]:
        return list(self.arch_params.values())

    # --------------------------------------------------------------------------- weights

    @abc.abstractmethod
    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        """The strategy's own mixing weights per cell type (before projections)."""

    def arch_weights(self, *, sample: bool) -> ArchWeights:
        """Mixing weights per cell type. ``sample``: a stochastic strategy draws a sample
        (training), otherwise it returns its deterministic summary (evaluation). Edges that
        a DARTS-PT projection decided carry their projected weights."""
        return self.project(self.strategy_weights(sample=sample))

    def derivation_weights(self) -> ArchWeights:
        """The weights a selector derives the genotype from (default: the deterministic ones)."""
        return self.project(self.strategy_weights(sample=False))

    # ---------------------------------------------------------------------- projections

    def project(self, weights: ArchWeights) -> ArchWeights:
        out = {}
        for ct, w in weights.items():
            decided = self.projection_decided(ct)
            if bool(decided.any()):
                w = torch.where(decided.unsqueeze(-1), self.projection_weights(ct), w)
            out[ct] = w
        return out

    def projection_decided(self, cell_type: str) -> Tensor:
        decided: Tensor = getattr(self, f"proj_decided_{cell_type}")
        return decided

    def projection_weights(self, cell_type: str) -> Tensor:
        weights: Tensor = getattr(self, f"proj_weights_{cell_type}")
        return weights

    def project_edge_to_op(self, cell_type: str, edge: int, op: int) -> None:
        """Fix edge ``edge`` to the one-hot weight of op ``op`` (DARTS-PT operation projection)."""
        with torch.no_grad():
            self.projection_weights(cell_type)[edge].zero_()[op] = 1.0
            self.projection_decided(cell_type)[edge] = True

    def remove_edge(self, cell_type: str, edge: int) -> None:
        """Fix edge ``edge`` to zero weights (DARTS-PT topology projection)."""
        with torch.no_grad():
            self.projection_weights(cell_type)[edge].zero_()
            self.projection_decided(cell_type)[edge] = True

    def initial_partial_channels(self) -> int | None:
        """The partial-channel K the supernet must start with, if the strategy fixes it."""
        return None

    @property
    def total_epochs(self) -> int | None:
        """The number of epochs the strategy's schedule spans, if it has one."""
        return None

    def apply_mask(self, cell_type: str, weights_EO: Tensor) -> Tensor:
        """Zero the masked-out ops and renormalise each edge over the ops that remain."""
        mask = self.supernet.op_mask(cell_type)
        if bool(mask.all()):
            return weights_EO
        w = weights_EO * mask
        return w / w.sum(-1, keepdim=True).clamp_min(1e-12)

    def arch_regularizer(self) -> Tensor | None:
        """An extra term of the architecture loss (DrNAS's KL), or None."""
        return None

    # ------------------------------------------------------------------------------ steps

    def loss(self, batch: Batch, weights: ArchWeights) -> tuple[Tensor, Tensor]:
        x, y = batch
        with torch.autocast(
            x.device.type,
            dtype=self.ctx.autocast_dtype or torch.float32,
            enabled=self.ctx.autocast_dtype is not None,
        ):
            logits = self.supernet(x, weights)
        return F.cross_entropy(logits.float(), y), logits

    def step(
        self, train_batch: Batch, val_batch: Batch, *, update_arch: bool = True
    ) -> dict[str, Tensor]:
        """One bi-level update: architecture step (unless frozen), then weight step."""
        metrics: dict[str, Tensor] = {}
        if update_arch and not self.fix_alpha:
            metrics.update(self.arch_step(train_batch, val_batch))
        metrics.update(self.weight_step(train_batch))
        return metrics

    def weight_step(self, train_batch: Batch) -> dict[str, Tensor]:
        opt = self.ctx.weight_optimizer
        with torch.no_grad():
            weights = self.arch_weights(sample=True)
        loss, logits = self.loss(train_batch, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None]
        nn.utils.clip_grad_norm_(params, self.ctx.grad_clip, foreach=True)
        opt.step()
        return {"train_loss": loss.detach(), "train_acc": accuracy(logits.detach(), train_batch[1])}

    def arch_step(self, train_batch: Batch, val_batch: Batch) -> dict[str, Tensor]:
        """First-order step: backpropagate the validation loss into the architecture only."""
        assert self.arch_optimizer is not None
        weights = self.arch_weights(sample=True)
        loss, logits = self.loss(val_batch, weights)
        total = loss
        reg = self.arch_regularizer()
        if reg is not None:
            total = loss + reg
        self.arch_optimizer.zero_grad(set_to_none=True)
        total.backward(inputs=self.arch_parameters())
        self.arch_optimizer.step()
        return {"val_loss": loss.detach(), "val_acc": accuracy(logits.detach(), val_batch[1])}

    def log_state(self) -> dict[str, Any]:
        """Strategy state worth logging every epoch (stage, K, how evaluation weights are made)."""
        return {}

    def updates_arch(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` (0-based) takes architecture steps (DrNAS warms up first)."""
        return not self.fix_alpha

    def on_epoch_end(self, epoch: int) -> None:
        """Per-epoch schedules (progressive stages, pruning); nothing for plain DARTS."""

    # ------------------------------------------------------------------------ checkpoints

    def checkpoint_state(self) -> dict[str, Any]:
        assert self.arch_optimizer is not None
        return {"module": self.state_dict(), "arch_optimizer": self.arch_optimizer.state_dict()}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        assert self.arch_optimizer is not None
        self.load_state_dict(state["module"])
        self.arch_optimizer.load_state_dict(state["arch_optimizer"])
