"""DrNAS: architecture search as Dirichlet distribution learning, with progressive learning.

Third stage of the pipeline (``nas.strategies``). Chen, Wang, Cheng, Tang, Hsieh, "DrNAS:
Dirichlet Neural Architecture Search", ICLR 2021:

* each edge's mixing weights are a sample ``w ~ Dir(elu(beta) + 1)`` (eq. 2), drawn with the
  pathwise (reparameterised) gradient, one sample per forward and cell type; masked (pruned)
  ops are zeroed and the sample renormalised. The sample comes from a generator seeded by
  ``draw_seed()`` (run seed, global step, draw), so every rank of a data-parallel search draws
  the same one and a resumed search draws what the uninterrupted one did;
* the regulariser is either L2 on beta (Adam weight decay, the default) or
  ``reg_scale * sum_edges KL(Dir(elu(beta) + 1) || Dir(1))`` (eq. 5) added to the architecture
  loss, in which case Adam applies no weight decay;
* progressive learning (section 3.3): a list of stages, each with a partial-channel K, the
  number of ops kept per edge and its epochs. Between stages every edge is pruned to its top-k
  ops by beta (the others masked, their beta set to 0 as the reference's ``utils.prune`` does;
  they cost no compute), every op is widened from C/K_old to
  C/K_new channels (Net2Wider, ``nas.supernet.widen``) with the weight optimiser's momentum
  buffers expanded the same way, and the architecture optimiser keeps its state. Architecture
  updates start ``arch_start_epoch`` epochs into each stage.

The weight step's clip: the NB201 reference clips ``model.parameters()``
(``201-space/train_search.py:273``), which hold beta (an ``nn.Parameter``,
``201-space/search_model.py:50``), so beta's gradient of the training loss through the Dirichlet
sample enters the norm; ``clip_arch_with_weights: true`` does the same (on in the NB201
experiments). Its DARTS-space code keeps beta outside the module's parameters (``Variable``s,
``DARTS-space/model_search.py:215-217``) and clips the weights alone (the default).

Evaluation uses the Dirichlet mean unless ``eval_weights: sample`` (the reference silently
samples, which makes its logged accuracies noisy); derivation uses ``derive_weights``: the
reference's softmax of beta (default) or the Dirichlet mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from nas.strategies.darts import DARTS, UNROLLED_R
from nas.supernet import ArchWeights


@dataclass(frozen=True)
class Stage:
    """One progressive-learning stage."""

    epochs: int
    partial_channels: int
    keep: int


def dirichlet_kl_to_uniform(concentration: Tensor) -> Tensor:
    """KL(Dir(a) || Dir(1)) per row, in closed form.

    KL(Dir(a) || Dir(b)) = lnG(a0) - sum lnG(a_i) - lnG(b0) + sum lnG(b_i)
                           + sum (a_i - b_i) (psi(a_i) - psi(a0)),  with b = 1.
    """
    a = concentration
    a0 = a.sum(-1)
    k = a.shape[-1]
    return (
        torch.lgamma(a0)
        - torch.lgamma(a).sum(-1)
        - torch.lgamma(torch.tensor(float(k), dtype=a.dtype, device=a.device))
        + ((a - 1) * (torch.digamma(a) - torch.digamma(a0).unsqueeze(-1))).sum(-1)
    )


class _DirichletSample(torch.autograd.Function):
    """``Dirichlet(concentration).rsample()`` from a given generator: the same sample on every
    rank for the same seed. The backward is PyTorch's implicit reparameterisation gradient
    (``torch.distributions.dirichlet._Dirichlet``), which has no generator argument."""

    @staticmethod
    def forward(ctx: Any, concentration: Tensor, generator: torch.Generator) -> Tensor:
        x = torch._sample_dirichlet(concentration, generator=generator)
        ctx.save_for_backward(x, concentration)
        return x

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor, None]:
        x, concentration = ctx.saved_tensors
        total = concentration.sum(-1, True).expand_as(concentration)
        grad = torch._dirichlet_grad(x, concentration, total)
        return grad * (grad_output - (x * grad_output).sum(-1, True)), None


def dirichlet_rsample(concentration: Tensor, generator: torch.Generator) -> Tensor:
    """One reparameterised sample of ``Dir(concentration)`` per row, drawn from ``generator``."""
    sample: Tensor = _DirichletSample.apply(concentration, generator)
    return sample


def _parse_stages(stages: Any) -> list[Stage]:
    if not stages:
        raise ValueError(
            "search.stages must list at least one stage {epochs, partial_channels, keep}"
        )
    out = []
    for i, s in enumerate(stages):
        if not isinstance(s, dict) or set(s) != {"epochs", "partial_channels", "keep"}:
            raise ValueError(
                f"search.stages[{i}] = {s!r}; expected {{epochs, partial_channels, keep}}"
            )
        for key in ("epochs", "partial_channels", "keep"):
            v = s[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"search.stages[{i}].{key} must be a positive int, got {v!r}")
        out.append(Stage(s["epochs"], s["partial_channels"], s["keep"]))
    for prev, nxt in zip(out, out[1:]):
        if nxt.partial_channels > prev.partial_channels:
            raise ValueError(
                "search.stages: partial_channels must not grow between stages "
                f"({prev.partial_channels} -> {nxt.partial_channels}); widening needs "
                "K_new <= K_old"
            )
        if nxt.keep > prev.keep:
            raise ValueError(
                f"search.stages: keep must not grow between stages ({prev.keep} -> {nxt.keep})"
            )
    return out


ARCH_WEIGHT_DECAY = 1e-3  # the L2 regulariser on beta (reg_type l2): the NB201 script's
REG_SCALE = 1e-3  # the KL regulariser's scale (reg_type kl): the reference's --reg_scale


class DrNAS(DARTS):
    """DrNAS (first order by default; ``order=2`` uses the unrolled DARTS gradient)."""

    name = "drnas"
    mixing = "Dirichlet samples"
    capabilities = DARTS.capabilities - {"softmax"}

    @classmethod
    def concentrations_of(cls, params_EO: Tensor) -> Tensor:
        """The Dirichlet concentration ``elu(beta) + 1`` of every op (eq. 2)."""
        return F.elu(params_EO) + 1

    def __init__(
        self,
        *,
        order: int = 1,
        arch_lr: float = 3e-4,
        arch_betas: tuple[float, float] | list[float] = (0.5, 0.999),
        arch_weight_decay: float = ARCH_WEIGHT_DECAY,
        init_scale: float = 1e-3,
        fix_alpha: bool = False,
        unrolled_r: float = UNROLLED_R,
        arch_grad_clip: float | None = None,
        reg_type: str = "l2",
        reg_scale: float = REG_SCALE,
        stages: list[dict[str, int]] | None = None,
        arch_start_epoch: int = 0,
        eval_weights: str = "mean",
        derive_weights: str = "softmax",
        widen_seed: int = 0,
        clip_arch_with_weights: bool = False,
        clip_mixing_with_weights: bool = False,
    ) -> None:
        if reg_type not in ("l2", "kl"):
            raise ValueError(f"search.reg_type must be 'l2' or 'kl', got {reg_type!r}")
        if reg_scale < 0:
            raise ValueError(f"search.reg_scale must be >= 0, got {reg_scale}")
        if eval_weights not in ("mean", "sample"):
            raise ValueError(
                f"search.eval_weights must be 'mean' or 'sample', got {eval_weights!r}"
            )
        if derive_weights not in ("softmax", "mean"):
            raise ValueError(
                f"search.derive_weights must be 'softmax' or 'mean', got {derive_weights!r}"
            )
        if (
            isinstance(arch_start_epoch, bool)
            or not isinstance(arch_start_epoch, int)
            or arch_start_epoch < 0
        ):
            raise ValueError(
                f"search.arch_start_epoch must be an int >= 0, got {arch_start_epoch!r}"
            )
        if not isinstance(clip_arch_with_weights, bool):
            raise ValueError(
                "search.clip_arch_with_weights must be true or false, got "
                f"{clip_arch_with_weights!r}"
            )
        super().__init__(
            order=order,
            arch_lr=arch_lr,
            arch_betas=arch_betas,
            # KL replaces the L2 regulariser: no weight decay on beta then
            arch_weight_decay=arch_weight_decay if reg_type == "l2" else 0.0,
            init_scale=init_scale,
            fix_alpha=fix_alpha,
            unrolled_r=unrolled_r,
            arch_grad_clip=arch_grad_clip,
            clip_mixing_with_weights=clip_mixing_with_weights,
        )
        self.reg_type = reg_type
        self.reg_scale = float(reg_scale)
        self.stages = _parse_stages(stages) if stages is not None else None
        # settings that act only with another one: refused rather than carried along unused
        if reg_type == "l2" and reg_scale != REG_SCALE:
            raise ValueError(
                f"search.reg_scale={reg_scale} scales the KL regulariser of reg_type=kl; with "
                f"reg_type=l2 the regulariser is search.arch_weight_decay (set reg_type=kl, or "
                f"leave reg_scale at {REG_SCALE})"
            )
        if reg_type == "kl" and arch_weight_decay != ARCH_WEIGHT_DECAY:
            raise ValueError(
                f"search.arch_weight_decay={arch_weight_decay} is the L2 regulariser, which "
                f"reg_type=kl replaces (no weight decay on beta); set reg_scale instead, or leave "
                f"arch_weight_decay at {ARCH_WEIGHT_DECAY}"
            )
        widens = self.stages is not None and any(
            b.partial_channels != a.partial_channels for a, b in zip(self.stages, self.stages[1:])
        )
        if widen_seed != 0 and not widens:
            raise ValueError(
                f"search.widen_seed={widen_seed} seeds the channel choice of a stage that "
                f"changes partial_channels, and search.stages has none; leave widen_seed at 0"
            )
        self.arch_start_epoch = arch_start_epoch
        self.eval_weights = eval_weights
        self.derive_weights_kind = derive_weights
        self.widen_seed = int(widen_seed)
        self.clip_arch_with_weights = clip_arch_with_weights
        self.check_clip_options()
        self.stage = 0
        self._generators: dict[torch.device, torch.Generator] = {}

    # ----------------------------------------------------------------------- schedule

    @property
    def total_epochs(self) -> int | None:
        return sum(s.epochs for s in self.stages) if self.stages else None

    @property
    def stage_start_epochs(self) -> list[int]:
        starts, start = [], 0
        for s in (self.stages or [])[:-1]:
            start += s.epochs
            starts.append(start)
        return starts

    def initial_partial_channels(self) -> int | None:
        return (
            self.stages[0].partial_channels if self.stages else super().initial_partial_channels()
        )

    def _stage_of(self, epoch: int) -> tuple[int, int]:
        """(stage index, epoch within the stage) of a 0-based epoch."""
        if not self.stages:
            return 0, epoch
        start = 0
        for i, s in enumerate(self.stages):
            if epoch < start + s.epochs:
                return i, epoch - start
            start += s.epochs
        return len(self.stages) - 1, epoch - (start - self.stages[-1].epochs)

    def log_state(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "partial_channels": self.supernet.partial_channels,
            "eval_weights": f"dirichlet {self.eval_weights}",
            "derive_weights": self.derive_weights_kind,
        }

    def updates_arch(self, epoch: int) -> bool:
        return not self.fix_alpha and self._stage_of(epoch)[1] >= self.arch_start_epoch

    def attach(self, ctx: Any, *, generator: torch.Generator | None = None) -> None:
        super().attach(ctx, generator=generator)
        if self.stages:
            for s in self.stages:
                ctx.supernet.check_partial_channels(s.partial_channels)
            if ctx.supernet.partial_channels != self.stages[0].partial_channels:
                raise ValueError(
                    f"the supernet has partial_channels={ctx.supernet.partial_channels}, but "
                    f"search.stages starts with {self.stages[0].partial_channels}"
                )
            num_ops = min(shape[1] for shape in ctx.supernet.arch_shapes().values())
            if self.stages[0].keep > num_ops:
                raise ValueError(
                    f"search.stages[0].keep={self.stages[0].keep}, but edges have {num_ops} ops"
                )

    def on_epoch_end(self, epoch: int) -> None:
        if not self.stages:
            return
        stage, in_stage = self._stage_of(epoch)
        if in_stage == self.stages[stage].epochs - 1 and stage + 1 < len(self.stages):
            self.enter_stage(stage + 1)

    def enter_stage(self, stage: int) -> None:
        """Prune to the next stage's ``keep`` ops per edge and widen to its K (Net2Wider)."""
        assert self.stages is not None
        nxt = self.stages[stage]
        with torch.no_grad():
            for ct, beta in self.arch_params.items():
                mask = self.supernet.op_mask(ct)
                ranked = beta.masked_fill(~mask, float("-inf"))
                keep = ranked.topk(nxt.keep, dim=-1).indices
                new_mask = torch.zeros_like(mask).scatter_(-1, keep, True)
                self.supernet.set_op_mask(ct, new_mask)
                # as the reference's ``utils.prune``: the pruned ops' beta is set to 0 (their
                # concentration to 1). They still enter each edge's Dirichlet draw before it
                # is masked and renormalised, so the sample and its pathwise gradient (through
                # the total concentration), and the KL term, depend on them.
                beta.masked_fill_(~new_mask, 0.0)
        if nxt.partial_channels != self.supernet.partial_channels:
            # The same generator on every rank and every resume: identical widening.
            generator = torch.Generator().manual_seed(self.widen_seed * 1000 + stage)
            expanders = self.supernet.set_partial_channels(nxt.partial_channels, generator)
            opt = self.ctx.weight_optimizer
            for p, expand in expanders.items():
                state = opt.state.get(p)
                if state and state.get("momentum_buffer") is not None:
                    state["momentum_buffer"] = expand(state["momentum_buffer"])
        self.stage = stage

    # ------------------------------------------------------------------------ weights

    def concentration(self, cell_type: str) -> Tensor:
        return self.concentrations_of(self.arch_params[cell_type])

    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        out = {}
        for ct in self.arch_params:
            conc = self.concentration(ct)
            if sample or self.eval_weights == "sample":
                w = dirichlet_rsample(conc, self._generator(conc.device, self.draw_seed()))
            else:
                w = conc / conc.sum(-1, keepdim=True)
            out[ct] = self.apply_mask(ct, w)
        return out

    def _generator(self, device: torch.device, seed: int) -> torch.Generator:
        gen = self._generators.get(device)
        if gen is None:
            gen = self._generators[device] = torch.Generator(device)
        return gen.manual_seed(seed)

    def derivation_weights(self) -> ArchWeights:
        if self.derive_weights_kind == "mean":
            conc = {ct: self.concentration(ct) for ct in self.arch_params}
            w = {ct: self.apply_mask(ct, c / c.sum(-1, keepdim=True)) for ct, c in conc.items()}
        else:
            w = {
                ct: self.apply_mask(ct, torch.softmax(beta, dim=-1))
                for ct, beta in self.arch_params.items()
            }
        return self.overridden(self.for_derivation(w))

    def arch_regularizer(self) -> Tensor | None:
        if self.reg_type != "kl":
            return None
        kl = sum(dirichlet_kl_to_uniform(self.concentration(ct)).sum() for ct in self.arch_params)
        return self.reg_scale * kl  # type: ignore[return-value]

    # -------------------------------------------------------------------- checkpoints

    def checkpoint_state(self) -> dict[str, Any]:
        state = super().checkpoint_state()
        state["stage"] = self.stage
        state["partial_channels"] = self.supernet.partial_channels
        return state

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        # Widen the freshly built supernet to the checkpoint's K first, so that its weights
        # (and the weight optimiser's momentum) load into tensors of the right shapes.
        k = int(state.get("partial_channels", self.supernet.partial_channels))
        if k != self.supernet.partial_channels:
            self.supernet.set_partial_channels(k, torch.Generator().manual_seed(0))
        self.stage = int(state.get("stage", 0))
        super().load_checkpoint_state(state)
