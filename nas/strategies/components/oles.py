"""Operation-level early stopping (OLES): an op's weights stop training once its training and
validation gradients stop agreeing.

Third stage of the pipeline (``nas.strategies``), a component. Jiang et al., "Operation-Level
Early Stopping for Robustifying Differentiable NAS" (NeurIPS 2023): a parametric op
that overfits the training data collects gradients that no longer point where the validation
loss's do; its gradient-matching score over a window of ``T`` steps,

    GM(o) = (1 / T) sum_t cos(g_train^t(w_o), g_val^t(w_o)),

falling below a threshold ``xi`` stops the training of its weights ``w_o`` for the rest of the
search. As confopt (automl/ConfigurableOptimizer, ``src/confopt/utils/__init__.py``:
``update_gradient_matching_scores``, ``preserve_gradients_in_module``, ``freeze``, called by
``train/configurable_trainer.py``: ``_train_epoch``), which follows the authors' code
(PasaLab/oles ``train_search.py``: ``check_grads_cosine``, ``preserve_grads``):

* every candidate op of every edge with weights is scored on its own (``MixedOp.ops``);
* ``g_train`` is the weight step's gradient after clipping, kept until the next architecture
  step; ``g_val`` is the architecture step's gradient of the validation loss. Both references
  read it from ``.grad``, where the architecture step's backward adds it to the kept training
  gradient (only the architecture optimiser is zeroed), so the cosine they take is
  ``cos(g_train + g_val, g_train)``: ``val_grad: accumulated`` (the default) does the same,
  ``val_grad: separate`` takes the paper's ``cos(g_val, g_train)``;
* the cosine of each weight tensor is ``torch.cosine_similarity(g, g_train, dim=0).mean()``
  (per slice along the first dimension, then averaged), and the op's score the mean over its
  weight tensors;
* the window: the scores are summed, and when ``frequency`` scores have been counted the next
  one is added, the sum divided by ``frequency`` (``frequency + 1`` scores, the references'
  count) and compared with ``threshold``; below it, the op is frozen; the sum and count restart;
* a frozen op still runs in every forward with its weights as they are, and passes gradients
  to its input and its mixing weight; its weights take no step (their gradient is dropped
  before clipping, as a tensor whose ``requires_grad`` is off) and it is scored no more.

The state (counts, sums, frozen ops and the kept training gradients) is in the checkpoint, so a
resumed run freezes what the uninterrupted one does. Needs a strategy whose architecture step
differentiates the validation loss at the weights themselves (not DARTS's second order) and
whose weight step lets a component drop gradients (``val_weight_grads``,
``weight_grad_hooks``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from nas.strategies.components.base import Component

if TYPE_CHECKING:
    from nas.strategies.base import SearchStrategy
    from nas.supernet import Supernet

VAL_GRADS = ("accumulated", "separate")


def tensor_cosine(g: Tensor, g_train: Tensor) -> Tensor:
    """The references' cosine of one weight tensor's gradients: along the first dimension, then
    the mean over the other positions."""
    return torch.cosine_similarity(g, g_train, dim=0).mean()


def op_score(
    grads: list[Tensor | None], kept: list[Tensor | None], accumulated: bool
) -> Tensor | None:
    """The gradient-matching score of one op: the mean over its weight tensors of the cosine
    of ``g`` and the kept training gradient, ``g = g_train + g_val`` (``accumulated``) or
    ``g_val``; None where no tensor has both."""
    sims = []
    for g_val, g_train in zip(grads, kept):
        if g_train is None:
            continue
        if g_val is None and not accumulated:
            continue
        g = g_train if g_val is None else (g_train + g_val if accumulated else g_val)
        if g.shape != g_train.shape or g.dim() == 0 or len(g) == 0:
            continue
        sims.append(tensor_cosine(g, g_train.to(g.device)))
    if not sims:
        return None
    total = sims[0]
    for sim in sims[1:]:  # in order, as the references add them
        total = total + sim
    return total / len(sims)


class OLES(Component):
    """Freeze an op's weights once its gradient-matching score falls below the threshold."""

    name = "oles"
    requires = frozenset({"val_weight_grads", "weight_grad_hooks"})

    def __init__(
        self, *, frequency: int = 20, threshold: float = 0.4, val_grad: str = "accumulated"
    ) -> None:
        super().__init__()
        if isinstance(frequency, bool) or not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"oles.frequency must be an int >= 1, got {frequency!r}")
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, (int, float))
            or not math.isfinite(threshold)
        ):
            raise ValueError(f"oles.threshold must be a finite number, got {threshold!r}")
        if val_grad not in VAL_GRADS:
            raise ValueError(f"oles.val_grad must be accumulated or separate, got {val_grad!r}")
        self.frequency = frequency
        self.threshold = float(threshold)
        self.accumulated = val_grad == "accumulated"
        # per op ("<mixed op index>.<op index>"): the window's count and sum, the training
        # gradient kept for the next architecture step, and the frozen ops in freezing order
        self._count: dict[str, int] = {}
        self._sum: dict[str, Tensor] = {}
        self._kept: dict[str, list[Tensor | None]] = {}
        self.frozen: list[str] = []
        self._epoch_total: Tensor | None = None  # the epoch's scores, summed, for the log
        self._epoch_n = 0

    # -------------------------------------------------------------------------- the ops

    @staticmethod
    def ops_of(supernet: Supernet) -> dict[str, list[nn.Parameter]]:
        """Every candidate op with weights, by ``"<mixed op index>.<op index>"``."""
        out = {}
        for i, mixed in enumerate(supernet.mixed_ops()):
            for k, op in enumerate(mixed.ops):
                params = list(op.parameters())
                if params:
                    out[f"{i}.{k}"] = params
        return out

    def prepare_supernet(self, supernet: Supernet) -> None:
        if not self.ops_of(supernet):
            raise ValueError(
                f"component oles freezes the weights of candidate ops, and space "
                f"{supernet.space.name} has no candidate op with weights; expected a space "
                "with parametric ops"
            )

    def _live(self, strategy: SearchStrategy) -> dict[str, list[nn.Parameter]]:
        frozen = set(self.frozen)
        return {k: ps for k, ps in self.ops_of(strategy.supernet).items() if k not in frozen}

    # ------------------------------------------------------------------------ the hooks

    def begin_epoch(self, epoch: int) -> None:
        self._epoch_total, self._epoch_n = None, 0

    def val_weight_params(self, strategy: SearchStrategy) -> list[nn.Parameter]:
        return [p for k, ps in self._live(strategy).items() if k in self._kept for p in ps]

    def observe_val_grads(
        self, strategy: SearchStrategy, params: list[nn.Parameter], grads: list[Tensor | None]
    ) -> None:
        by_param = {id(p): g for p, g in zip(params, grads)}
        for key, ps in self._live(strategy).items():
            kept = self._kept.pop(key, None)
            if kept is None:
                continue
            score = op_score([by_param.get(id(p)) for p in ps], kept, self.accumulated)
            if score is not None:
                self.update(key, score.detach())

    def update(self, key: str, score: Tensor) -> bool:
        """Add one score of op ``key`` to its window; True if the op is frozen by it."""
        self._epoch_n += 1
        self._epoch_total = score if self._epoch_total is None else self._epoch_total + score
        total = self._sum.get(key)
        total = score if total is None else total + score
        count = self._count.get(key, 0)
        if count == self.frequency:
            frozen = bool(total / count < self.threshold)
            if frozen:
                self.frozen.append(key)
            self._count[key], self._sum[key] = 0, torch.zeros_like(total)
            return frozen
        self._count[key], self._sum[key] = count + 1, total
        return False

    def frozen_weights(self, strategy: SearchStrategy) -> list[nn.Parameter]:
        if not self.frozen:
            return []
        ops = self.ops_of(strategy.supernet)
        return [p for k in self.frozen for p in ops.get(k, [])]

    def observe_weight_grads(self, strategy: SearchStrategy) -> None:
        for key, ps in self._live(strategy).items():
            kept = [None if p.grad is None else p.grad.detach().clone() for p in ps]
            if any(g is not None for g in kept):
                self._kept[key] = kept
            else:
                self._kept.pop(key, None)

    # ------------------------------------------------------------------- state and logs

    def checkpoint_state(self) -> dict[str, Any]:
        return {
            "count": dict(self._count),
            "sum": dict(self._sum),
            "kept": {k: list(v) for k, v in self._kept.items()},
            "frozen": list(self.frozen),
        }

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        self._count = {str(k): int(v) for k, v in state["count"].items()}
        self._sum = dict(state["sum"])
        self._kept = {str(k): list(v) for k, v in state["kept"].items()}
        self.frozen = [str(k) for k in state["frozen"]]

    def log_state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"oles_frozen_ops": len(self.frozen)}
        if self._epoch_total is not None:
            out["oles_gm_score"] = float(self._epoch_total) / self._epoch_n
        return out
