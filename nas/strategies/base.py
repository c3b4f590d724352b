"""The search-strategy seam: who owns the architecture parameters and how a bi-level step runs.

Third stage of the pipeline (``nas.strategies``). A strategy owns the architecture parameters (real
``nn.Parameter``s in its ``state_dict``) and their optimiser; ``arch_weights`` turns them into
the supernet's mixing weights, and ``step`` performs one bi-level update (Liu et al., ICLR 2019,
Alg. 1): an architecture step on a validation batch, then a weight step on a training batch.
Selection never lives here, so any strategy pairs with any selector.

Speed: the weight step computes the mixing weights without autograd (so the supernet does not
keep every op output alive for an architecture gradient nobody asks for), and the first-order
architecture step differentiates with respect to the mixing weights only, which skips every
weight-gradient kernel of the convolutions.

Data parallelism: a step takes ``Shards``, this process's micro-batches of a global batch.
Each micro-batch's mean loss is weighted by its share of the global batch, the gradients are
summed over micro-batches and then over the ranks (``nas.distributed.sum_over_ranks``), so a
step is the step on the global batch's mean loss whatever the number of ranks and
micro-batches; only batch-norm statistics see the smaller groups. Random draws of a step
(DrNAS's Dirichlet samples) come from ``draw_seed()``, a pure function of the seed the loop
passes to ``begin_step`` (same on every rank), never from the global generator.

Legend: ``*_EO`` tensors are [edges, ops] of one cell type.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from nas import distributed as D
from nas.strategies.components.base import Component
from nas.supernet import ArchWeights, Supernet

Batch = tuple[Tensor, Tensor]


@dataclass
class SearchContext:
    """What a strategy needs from the search loop to take steps.

    ``epochs`` and ``steps_per_epoch`` (weight steps in one epoch of the search) are what a
    strategy's own schedule needs (a temperature annealed per step, a regulariser ramped per
    epoch); ``None`` where the caller runs steps outside an epoch loop (tests, notebooks).
    """

    supernet: Supernet
    weight_optimizer: torch.optim.SGD
    grad_clip: float | None  # the weights' gradient norm clip; None: not clipped
    autocast_dtype: torch.dtype | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    # the weight step's loss only (ProxylessNAS's script smooths its weights' loss, not the
    # architecture's: nas_manager.py train / gradient_step)
    label_smoothing: float = 0.0


def accuracy(logits: Tensor, target: Tensor) -> Tensor:
    return (logits.argmax(1) == target).float().mean()


@dataclass(frozen=True)
class Shards:
    """This process's part of one global batch, as micro-batches.

    ``global_size`` counts the images of the whole global batch (every rank, every micro-batch).
    ``weighted()`` pairs each micro-batch with its share ``n_j / global_size``: weighting each
    micro-batch's mean loss by it makes the sum over micro-batches and ranks the global mean.
    """

    parts: tuple[Batch, ...]
    global_size: int

    @staticmethod
    def of(batch: Batch | Shards) -> Shards:
        """``batch`` itself, or a plain ``(x, y)`` batch as the whole of a one-process batch."""
        if isinstance(batch, Shards):
            return batch
        return Shards((batch,), int(batch[1].shape[0]))

    def weighted(self) -> Iterator[tuple[Batch, float]]:
        for x, y in self.parts:
            yield (x, y), int(y.shape[0]) / self.global_size


def _accumulate(total: list[Tensor | None], grads: Sequence[Tensor | None]) -> list[Tensor | None]:
    return [g if t is None else (t if g is None else t + g) for t, g in zip(total, grads)]


class ShardSums(list[Tensor | None]):
    """The mixing-weight gradients of ``shard_grads``, summed over the micro-batches, with
    each micro-batch's own in ``parts``: ``through_weights`` takes the chain rule per part and
    sums after, as the ranks of a distributed run do (each its micro-batch, then the sum over
    ranks), so micro-batches and ranks add the same terms in the same order."""

    parts: list[list[Tensor | None]]


def _zeros_for_none(grads: Sequence[Tensor | None], like: Sequence[Tensor]) -> list[Tensor]:
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, like)]


class SearchStrategy(nn.Module, abc.ABC):
    """Base class: architecture parameters per cell type, their Adam optimiser, the weight step.

    Subclasses define ``strategy_weights`` and may override ``arch_step``, ``arch_regularizer``
    and ``on_epoch_end``. ``fix_alpha`` freezes the architecture at its initialisation
    (DARTS-PT's "fix alpha" supernet training): no architecture steps at all.
    """

    name: ClassVar[str]
    #: how the mixing weights come from the architecture parameters, in words (for messages)
    mixing: ClassVar[str] = "mixing weights of its own making"
    #: what the strategy's steps do with the components' hooks
    #: (``nas.strategies.components.base.CAPABILITIES``): the base class's steps call every hook
    #: but ``mixing`` (a strategy says "softmax" where its weights go through ``mix``); a
    #: strategy whose own ``step`` skips a hook must leave that capability out, and the
    #: components that need it are then refused before the run (``add_components``)
    capabilities: ClassVar[frozenset[str]] = frozenset(
        {"arch_params", "arch_penalty", "direct_params", "perturb", "weight_grads",
         "masked_mixing", "val_weight_grads", "weight_grad_hooks"}
    )  # fmt: skip
    #: per capability the strategy lacks, a hint appended to the refusal (what to use instead)
    refusal_hints: ClassVar[dict[str, str]] = {}
    #: True for a strategy that trains weights and architecture on the training batch alone
    #: (SNAS): its steps report no validation metrics
    single_level: ClassVar[bool] = False
    #: the weight step clips the weights' gradient together with the architecture parameters'
    #: gradient of the same training loss (one norm over both, as references that clip
    #: ``model.parameters()`` holding the architecture: GDAS, DrNAS on NB201); the latter is
    #: then dropped. A strategy that offers it sets it from its own option
    clip_arch_with_weights: bool = False
    #: the weight step clips the weights' gradient together with the training loss's gradient
    #: of the mixing weights it feeds the supernet (one norm over both, as the DARTS-family
    #: NB201 references whose ``nn.Parameter`` holds the softmax during the weight step:
    #: Beta-DARTS ``nasbench201/model.py:221-223, 239``, ``train_search.py:248``); the latter
    #: is then dropped, it never reaches the architecture parameters; an op the supernet does
    #: not run (masked, or of weight exactly 0 without ``zero_weight_ops_run``) adds nothing.
    #: Constructor option
    clip_mixing_with_weights: bool = False

    @classmethod
    def concentrations_of(cls, params_EO: Tensor) -> Tensor | None:
        """Where the mixing weights are samples of a distribution with one concentration per op
        (DrNAS's Dirichlet), those concentrations for the architecture parameters ``params_EO``
        of one cell type, as analysis draws them; None for a strategy without one (default)."""
        del params_EO
        return None

    def __init__(
        self,
        *,
        arch_lr: float,
        arch_betas: tuple[float, float] | list[float],
        arch_weight_decay: float,
        init_scale: float = 1e-3,
        fix_alpha: bool = False,
        arch_grad_clip: float | None = None,
        clip_mixing_with_weights: bool = False,
    ) -> None:
        super().__init__()
        if arch_lr <= 0:
            raise ValueError(f"search.arch_lr must be positive, got {arch_lr}")
        if len(arch_betas) != 2 or not all(0 <= b < 1 for b in arch_betas):
            raise ValueError(f"search.arch_betas must be two numbers in [0, 1), got {arch_betas}")
        if arch_weight_decay < 0:
            raise ValueError(f"search.arch_weight_decay must be >= 0, got {arch_weight_decay}")
        if arch_grad_clip is not None and (
            isinstance(arch_grad_clip, bool)
            or not isinstance(arch_grad_clip, (int, float))
            or arch_grad_clip <= 0
        ):
            raise ValueError(
                f"search.arch_grad_clip must be a positive number or null, got {arch_grad_clip!r}"
            )
        if not isinstance(clip_mixing_with_weights, bool):
            raise ValueError(
                "search.clip_mixing_with_weights must be true or false, got "
                f"{clip_mixing_with_weights!r}"
            )
        self.arch_lr = float(arch_lr)
        self.arch_betas = (float(arch_betas[0]), float(arch_betas[1]))
        self.arch_weight_decay = float(arch_weight_decay)
        self.init_scale = float(init_scale)
        self.fix_alpha = bool(fix_alpha)
        self.arch_grad_clip = None if arch_grad_clip is None else float(arch_grad_clip)
        self.clip_mixing_with_weights = clip_mixing_with_weights
        self.check_clip_options()
        self.arch_params = nn.ParameterDict()
        self._ctx: SearchContext | None = None
        self.arch_optimizer: torch.optim.Optimizer | None = None
        self._step_seed = 0
        self._draws = 0
        # What a selector lays over the weights (DARTS-PT's decided edges:
        # nas.selection.projection); it owns that state, the strategy only applies it.
        self.weight_override: Callable[[ArchWeights], ArchWeights] | None = None
        # the components listed next to the strategy (nas.strategies.components), in order; their
        # parameters are architecture parameters and their state is in the checkpoint
        self.components = nn.ModuleList()

    def check_clip_options(self) -> None:
        """Refuse ``clip_arch_with_weights`` and ``clip_mixing_with_weights`` together (a
        strategy that sets the former calls this once it has)."""
        if self.clip_arch_with_weights and self.clip_mixing_with_weights:
            raise ValueError(
                "search.clip_arch_with_weights and search.clip_mixing_with_weights are both "
                "true; a reference clips one of them with the weights: choose one"
            )

    # ------------------------------------------------------------------------ components

    def add_components(self, components: Sequence[Component]) -> None:
        """Compose ``components`` with this strategy (before ``attach``); each checks that it
        can run with the strategy and the others (a one-line ``ValueError`` if not)."""
        if self._ctx is not None:
            raise RuntimeError("components are added before the strategy is attached")
        everything = [*self.components, *components]
        for c in everything:
            c.check_strategy(self)  # the capabilities its hooks need
            c.check(self, [o for o in everything if o is not c])
        replacing = [c.name or type(c).__name__ for c in everything if c.replaces_mixing]
        if len(replacing) > 1:
            raise ValueError(
                f"components {', '.join(replacing)} each replace the mixing function; choose one"
            )
        self.components.extend(components)

    def component_list(self) -> list[Component]:
        return list(self.components)  # type: ignore[arg-type]

    def stop_reason(self, epoch: int) -> str | None:
        """After 0-based epoch ``epoch``: the first component's reason to end the search."""
        for c in self.component_list():
            reason = c.stop_reason(self, epoch)
            if reason is not None:
                return reason
        return None

    #: what an architecture step does, none of which happens under ``fix_alpha``: components
    #: that act only through it (Beta-Decay, FairDARTS's zero-one loss, a hardware cost) are
    #: refused rather than carried along doing nothing
    ARCH_STEP_CAPABILITIES: ClassVar[frozenset[str]] = frozenset(
        {"arch_penalty", "weight_grads", "val_weight_grads"}
    )

    def has(self, capability: str) -> bool:
        """Whether this strategy, with its settings, does what ``capability`` says
        (``capabilities``; a strategy whose settings change it overrides this). With
        ``fix_alpha`` no architecture step runs, so it lacks ``ARCH_STEP_CAPABILITIES``."""
        if self.fix_alpha and capability in self.ARCH_STEP_CAPABILITIES:
            return False
        return capability in self.capabilities

    def refusal_hint(self, capability: str) -> str:
        """Appended to a component's refusal for a missing ``capability``: what to do instead."""
        if self.fix_alpha and capability in self.ARCH_STEP_CAPABILITIES & self.capabilities:
            return " (search.fix_alpha=true: no architecture step runs)"
        return self.refusal_hints.get(capability, "")

    @property
    def mixing_on_simplex(self) -> bool:
        """Whether the mixing weights sum to one per edge (False under FairDARTS's sigmoid)."""
        return all(c.on_simplex for c in self.component_list())

    def mix(self, alpha_EO: Tensor) -> Tensor:
        """A logit strategy's mixing weights: softmax, unless a component replaces it."""
        for c in self.component_list():
            if c.replaces_mixing:
                return c.mixing(alpha_EO)
        return torch.softmax(alpha_EO, dim=-1)

    def prepare_supernet(self, supernet: Supernet) -> None:
        """Let the components set their supernet options (before the weight optimiser)."""
        for c in self.component_list():
            c.prepare_supernet(supernet)

    def begin_epoch(self, epoch: int) -> None:
        """Set the components' per-epoch schedules for 0-based epoch ``epoch`` (the loop
        calls it before every epoch, and after a resume)."""
        for c in self.component_list():
            c.begin_epoch(epoch)

    # ----------------------------------------------------------------------------- set-up

    def attach(self, ctx: SearchContext, *, generator: torch.Generator | None = None) -> None:
        """Create the architecture parameters (``init_scale * randn``) for the supernet's shapes."""
        self._ctx = ctx
        device = next(ctx.supernet.parameters()).device
        for cell_type, (num_edges, num_ops) in ctx.supernet.arch_shapes().items():
            init = self.init_scale * torch.randn(num_edges, num_ops, generator=generator)
            self.arch_params[cell_type] = nn.Parameter(init.to(device))
        for c in self.component_list():
            c.attach(self, ctx)
        self.arch_optimizer = torch.optim.Adam(
            self.arch_parameters(),
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
        """The strategy's architecture parameters, then the components' own (PC-DARTS's edge
        betas), all optimised by the architecture optimiser."""
        return list(self.arch_params.values()) + self.direct_arch_parameters()

    def direct_arch_parameters(self) -> list[nn.Parameter]:
        """The components' architecture parameters: they act on the supernet directly, not
        through the mixing weights, so their gradient comes from the loss itself."""
        return [p for c in self.component_list() for p in c.arch_parameters()]

    def weight_parameters(self) -> list[nn.Parameter]:
        return [p for g in self.ctx.weight_optimizer.param_groups for p in g["params"]]

    # ------------------------------------------------------------------- random draws

    def begin_step(self, seed: int) -> None:
        """Seed the random draws of the next step (the loop derives it from the run seed and
        the global step, so it is the same on every rank and after every resume)."""
        self._step_seed = int(seed)
        self._draws = 0

    def draw_seed(self) -> int:
        """The seed of the step's next random draw: the k-th draw of a step gets
        ``SeedSequence([step seed, k])``, whatever the rank or the number of micro-batches."""
        seed = np.random.SeedSequence([self._step_seed, self._draws]).generate_state(1, np.uint64)
        self._draws += 1
        return int(seed[0] >> np.uint64(1))

    # --------------------------------------------------------------------------- weights

    @abc.abstractmethod
    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        """The strategy's own mixing weights per cell type (before projections)."""

    def arch_weights(self, *, sample: bool) -> ArchWeights:
        """Mixing weights per cell type. ``sample``: a stochastic strategy draws a sample
        (training), otherwise it returns its deterministic summary (evaluation). A sample
        goes through the components' ``mask_weights`` (architecture dropout). A selector's
        ``weight_override`` (DARTS-PT's decided edges) is laid over them."""
        weights = self.strategy_weights(sample=sample)
        if sample:
            for c in self.component_list():
                weights = c.mask_weights(self, weights)
        return self.overridden(weights)

    def derivation_weights(self) -> ArchWeights:
        """The weights a selector derives the genotype from (default: the deterministic ones)."""
        return self.overridden(self.for_derivation(self.strategy_weights(sample=False)))

    def for_derivation(self, weights: ArchWeights) -> ArchWeights:
        """``weights`` as the components derive from them (PC-DARTS: x the edge weights)."""
        for c in self.component_list():
            weights = c.derivation_weights(self, weights)
        return weights

    def overridden(self, weights: ArchWeights) -> ArchWeights:
        """``weights`` under the selector's ``weight_override``, if one is installed."""
        return weights if self.weight_override is None else self.weight_override(weights)

    def initial_partial_channels(self) -> int | None:
        """The partial-channel K the supernet must start with, if the strategy (or one of its
        components: PC-DARTS) fixes it."""
        for c in self.component_list():
            if c.partial_channels is not None:
                return c.partial_channels
        return None

    @property
    def stage_start_epochs(self) -> list[int]:
        """The epochs at which a new stage of the strategy's schedule starts (none by default)."""
        return []

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
        if not self.mixing_on_simplex:  # independent weights (FairDARTS): nothing to share
            return w
        return w / w.sum(-1, keepdim=True).clamp_min(1e-12)

    def arch_regularizer(self) -> Tensor | None:
        """An extra term of the architecture loss (DrNAS's KL), or None."""
        return None

    # ------------------------------------------------------------------------------ steps

    def loss(
        self, batch: Batch, weights: ArchWeights, *, label_smoothing: float = 0.0
    ) -> tuple[Tensor, Tensor]:
        x, y = batch
        with torch.autocast(
            x.device.type,
            dtype=self.ctx.autocast_dtype or torch.float32,
            enabled=self.ctx.autocast_dtype is not None,
        ):
            logits = self.supernet(x, weights)
        # the loss in at least float32 (bf16 / fp16 logits under autocast), float64 kept
        return F.cross_entropy(
            logits.to(torch.promote_types(logits.dtype, torch.float32)),
            y,
            label_smoothing=label_smoothing,
        ), logits

    def step(
        self, train_batch: Batch | Shards, val_batch: Batch | Shards, *, update_arch: bool = True
    ) -> dict[str, Tensor]:
        """One bi-level update: architecture step (unless frozen), then weight step.

        Returns this process's share of the global batch's mean metrics (the means themselves
        in a single process); the loop sums them over the ranks."""
        metrics: dict[str, Tensor] = {}
        if update_arch and not self.fix_alpha:
            metrics.update(self.arch_step(train_batch, val_batch))
        metrics.update(self.weight_step(train_batch))
        return metrics

    def weight_step(self, train_batch: Batch | Shards) -> dict[str, Tensor]:
        shards = Shards.of(train_batch)
        opt = self.ctx.weight_optimizer
        # clip_arch_with_weights: the training loss's gradient of the architecture parameters
        # enters the norm the weight gradient is clipped to, and is then dropped
        joint = self.clip_arch_with_weights
        alphas = self.arch_parameters() if joint else []
        with torch.set_grad_enabled(joint):
            weights = self.arch_weights(sample=True)
        for c in self.component_list():  # SDARTS: perturbed weights, for this step only
            weights = c.perturb(self, weights, shards)
        # clip_mixing_with_weights: the supernet runs on leaf copies of the weights it is fed
        # (after any perturbation) whose gradient of the training loss enters the same norm and
        # is then dropped with them; off, the weights need no gradient (op outputs not kept)
        mixing: list[Tensor] = []
        if self.clip_mixing_with_weights:
            weights = {ct: w.detach().requires_grad_(True) for ct, w in weights.items()}
            mixing = list(weights.values())
        opt.zero_grad(set_to_none=True)
        for a in alphas:
            a.grad = None
        loss_sum: Tensor | float = 0.0
        acc_sum: Tensor | float = 0.0
        for batch, share in shards.weighted():
            loss, logits = self.loss(batch, weights, label_smoothing=self.ctx.label_smoothing)
            (loss if share == 1.0 else loss * share).backward()
            loss_sum = loss.detach() * share + loss_sum
            acc_sum = accuracy(logits.detach(), batch[1]) * share + acc_sum
            del loss, logits  # free this micro-batch's graph before the next forward
        params = self.weight_parameters()
        D.all_reduce_grads([*params, *alphas])
        D.all_reduce_grads(mixing)  # each rank's share, summed as the weights' (own dtype)
        for p in self.frozen_weights():  # frozen ops (OLES): no clip share, no step
            p.grad = None
        clipped = [p for p in [*params, *alphas, *mixing] if p.grad is not None]
        if self.ctx.grad_clip is not None:
            nn.utils.clip_grad_norm_(clipped, self.ctx.grad_clip, foreach=True)
        for t in [*alphas, *mixing]:  # only their share of the norm is kept (the references
            t.grad = None  # zero them before the architecture step)
        del mixing, weights
        for c in self.component_list():  # the clipped gradients, before the step takes them
            c.observe_weight_grads(self)
        opt.step()
        return {"train_loss": torch.as_tensor(loss_sum), "train_acc": torch.as_tensor(acc_sum)}

    def shard_grads(
        self,
        shards: Shards,
        weights: ArchWeights,
        params: Sequence[Tensor],
        *,
        tag: str,
        wrt_weights: bool = True,
        label_smoothing: float = 0.0,
    ) -> tuple[list[Tensor | None], list[Tensor | None], dict[str, Tensor]]:
        """Gradients of this process's share of the global batch's mean loss with respect to
        the mixing weights (per cell type, if ``wrt_weights``) and to ``params``, summed over
        the micro-batches, plus the share of the mean loss and accuracy (``{tag}_loss``,
        ``{tag}_acc``). The supernet runs on detached copies of ``weights``, so nothing flows
        into the architecture parameters here: ``through_weights`` takes the mixing-weight
        gradient there in one backward for all micro-batches. ``label_smoothing``: of the
        loss (a single-level strategy's joint step on the training batch, which trains the
        weights)."""
        leaves = {ct: w.detach().requires_grad_(wrt_weights) for ct, w in weights.items()}
        inputs: list[Tensor] = (list(leaves.values()) if wrt_weights else []) + list(params)
        total: list[Tensor | None] = [None] * len(inputs)
        n = len(leaves) if wrt_weights else 0
        parts: list[list[Tensor | None]] = []
        loss_sum: Tensor | float = 0.0
        acc_sum: Tensor | float = 0.0
        for batch, share in shards.weighted():
            loss, logits = self.loss(batch, leaves, label_smoothing=label_smoothing)
            grads = torch.autograd.grad(
                loss if share == 1.0 else loss * share, inputs, allow_unused=True
            )
            total = _accumulate(total, grads)
            parts.append(list(grads[:n]))
            loss_sum = loss.detach() * share + loss_sum
            acc_sum = accuracy(logits.detach(), batch[1]) * share + acc_sum
            del loss, logits, grads
        metrics = {f"{tag}_loss": torch.as_tensor(loss_sum), f"{tag}_acc": torch.as_tensor(acc_sum)}
        weight_grads = ShardSums(total[:n])
        weight_grads.parts = parts
        return weight_grads, total[n:], metrics

    def through_weights(
        self, weights: ArchWeights, weight_grads: Sequence[Tensor | None]
    ) -> list[Tensor | None]:
        """Chain rule from the mixing weights to the architecture parameters; for gradients of
        several micro-batches (``ShardSums``), per micro-batch, then summed."""
        alphas = self.arch_parameters()
        parts = getattr(weight_grads, "parts", None)
        if parts is None or len(parts) < 2:
            parts = [list(weight_grads)]
        total: list[Tensor | None] = [None] * len(alphas)
        for j, part in enumerate(parts):
            pairs = [
                (w, g) for w, g in zip(weights.values(), part) if g is not None and w.requires_grad
            ]
            if not pairs:
                continue
            outputs, grad_outputs = zip(*pairs)
            grads = torch.autograd.grad(
                list(outputs),
                alphas,
                grad_outputs=list(grad_outputs),
                allow_unused=True,
                retain_graph=j < len(parts) - 1,
            )
            total = _accumulate(total, grads)
        return total

    def regularizer_grads(self) -> list[Tensor | None]:
        """The gradient of ``arch_regularizer`` (the same on every rank: it depends on the
        architecture parameters only, so it is added once, after the sum over ranks)."""
        alphas = self.arch_parameters()
        reg = self.arch_regularizer()
        for c in self.component_list():  # Beta-Decay, the zero-one loss
            term = c.arch_penalty(self)
            if term is not None:
                reg = term if reg is None else reg + term
        if reg is None:
            return [None] * len(alphas)
        return list(torch.autograd.grad(reg, alphas, allow_unused=True))

    def apply_arch_grads(self, grads: Sequence[Tensor | None]) -> None:
        """Sum ``grads`` (this process's share) over the ranks, add the regulariser's
        gradient, clip the whole to norm ``arch_grad_clip`` if set (DrNAS's ImageNet search,
        train_search_imagenet.py), and take the Adam step."""
        assert self.arch_optimizer is not None
        alphas = self.arch_parameters()
        summed = D.sum_over_ranks(grads, alphas)
        total = _accumulate(summed, self.regularizer_grads())
        self.arch_optimizer.zero_grad(set_to_none=True)
        for p, g in zip(alphas, total):
            p.grad = g  # None (no rank had a gradient): Adam leaves the parameter alone
        if self.arch_grad_clip is not None:
            with_grad = [p for p in alphas if p.grad is not None]
            if with_grad:
                nn.utils.clip_grad_norm_(with_grad, self.arch_grad_clip, foreach=True)
        self.arch_optimizer.step()

    def arch_step(
        self, train_batch: Batch | Shards, val_batch: Batch | Shards
    ) -> dict[str, Tensor]:
        """First-order step: the validation loss differentiated in the architecture only."""
        weights = self.arch_weights(sample=True)
        direct = self.direct_arch_parameters()
        watched = self.val_watched()
        extra = [p for _, ps in watched for p in ps]
        weight_grads, direct_grads, metrics = self.shard_grads(
            Shards.of(val_batch), weights, direct + extra, tag="val"
        )
        direct_grads, val_grads = direct_grads[: len(direct)], direct_grads[len(direct) :]
        weight_grads, factor = self.add_cost(weights, weight_grads, metrics)
        grads = self.through_weights(weights, weight_grads)
        self.apply_arch_grads(self.with_direct(grads, direct_grads, factor))
        self.hand_val_grads(watched, val_grads)
        return metrics

    def frozen_weights(self) -> list[nn.Parameter]:
        """The supernet weights the components freeze (``Component.frozen_weights``)."""
        return [p for c in self.component_list() for p in c.frozen_weights(self)]

    def val_watched(self) -> list[tuple[Component, list[nn.Parameter]]]:
        """Each component with the supernet weights whose validation-loss gradient it reads
        (``Component.val_weight_params``), for the components that name any."""
        out = []
        for c in self.component_list():
            params = c.val_weight_params(self)
            if params:
                out.append((c, params))
        return out

    def hand_val_grads(
        self,
        watched: list[tuple[Component, list[nn.Parameter]]],
        grads: Sequence[Tensor | None],
    ) -> None:
        """Sum this process's share of the validation-loss gradients of the ``watched`` weights
        over the ranks and hand each component its own (``Component.observe_val_grads``)."""
        if not watched:
            return
        params = [p for _, ps in watched for p in ps]
        summed = D.sum_over_ranks(list(grads), params)
        start = 0
        for c, ps in watched:
            c.observe_val_grads(self, ps, summed[start : start + len(ps)])
            start += len(ps)

    def with_direct(
        self,
        grads: list[Tensor | None],
        direct_grads: Sequence[Tensor | None],
        factor: Tensor | None = None,
    ) -> list[Tensor | None]:
        """``grads`` (one per ``arch_parameters()``) with the components' parameters' own
        gradients in their places (scaled by the loss's factor on CE, if any)."""
        if not direct_grads:
            return grads
        n = len(grads) - len(direct_grads)
        scaled = [
            g if g is None or factor is None else g * factor.to(g.dtype) for g in direct_grads
        ]
        return [*grads[:n], *_accumulate(list(grads[n:]), scaled)]

    def add_cost(
        self,
        weights: ArchWeights,
        weight_grads: list[Tensor | None],
        metrics: dict[str, Tensor],
    ) -> tuple[list[Tensor | None], Tensor | None]:
        """The components' loss transforms (the hardware cost, ``nas.strategies.components.
        hardware_cost``): turn the gradients of this process's share of the validation loss
        (w.r.t. the mixing weights) into those of the loss they build; returns them and the
        loss's factor on CE (None where no component scales it)."""
        factor: Tensor | None = None
        for c in self.component_list():
            weight_grads, f = c.adjust_arch_grads(self, weights, weight_grads, metrics)
            if f is not None:
                factor = f if factor is None else factor * f
        return weight_grads, factor

    def log_state(self) -> dict[str, Any]:
        """Strategy state worth logging every epoch (stage, K, how evaluation weights are made)."""
        return {}

    def component_log_state(self) -> dict[str, Any]:
        """The components' values worth logging every epoch (epsilon, beta, lambda)."""
        out: dict[str, Any] = {}
        for c in self.component_list():
            out.update(c.log_state())
        return out

    def updates_arch(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` (0-based) takes architecture steps (DrNAS warms up first)."""
        return not self.fix_alpha

    def components_update_arch(self, epoch: int) -> bool:
        """Whether every component lets epoch ``epoch`` take architecture steps (PC-DARTS's
        warm-up)."""
        return all(c.updates_arch(epoch) for c in self.component_list())

    def on_epoch_end(self, epoch: int) -> None:
        """Per-epoch schedules (progressive stages, pruning); nothing for plain DARTS."""

    # ------------------------------------------------------------------------ checkpoints

    def checkpoint_state(self) -> dict[str, Any]:
        """The parameters and buffers (components' too), the architecture optimiser, and the
        components' own ``checkpoint_state`` (by their index, where they have one)."""
        assert self.arch_optimizer is not None
        state = {"module": self.state_dict(), "arch_optimizer": self.arch_optimizer.state_dict()}
        components = {}
        for i, c in enumerate(self.component_list()):
            own = c.checkpoint_state()
            if own is not None:
                components[str(i)] = own
        if components:
            state["components"] = components
        return state

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        assert self.arch_optimizer is not None
        self.load_state_dict(state["module"])
        self.arch_optimizer.load_state_dict(state["arch_optimizer"])
        saved = state.get("components") or {}
        for i, c in enumerate(self.component_list()):
            if str(i) in saved:
                c.load_checkpoint_state(saved[str(i)])
