"""The component seam: robustness methods and objectives that compose with any strategy.

Third stage of the pipeline (``nas.strategies``). A *component* changes one part of a search
without owning it: the strategy (DARTS, DrNAS, ...) still owns the architecture parameters,
their optimiser and the bi-level step; a component plugs into named hooks of that step, so a
strategy and a component meet only here and no code is written for a pair. A config lists
components next to a strategy (``search=drnas components=[sdarts_rs]``, the Hydra config
group ``configs/components``); each is built from its YAML's ``_target_`` like a strategy
(``nas.plugins.build_components``) and named by its file.

The hooks (each a no-op by default; a component overrides the ones it needs):

* ``requires`` / ``needs()``: the strategy capabilities (``CAPABILITIES``) the component's
  hooks need; a strategy that does not declare one of them (``SearchStrategy.capabilities``,
  ``has``) refuses the component in one line when it is added, before the run starts, so
  no component is ever silently ignored (the hardware cost with SNAS, whose single-level step
  has no mixing-weight gradient to add a cost to);
* ``check(strategy, others)``: refuse a pair that makes no sense with a one-line
  ``ValueError`` saying why (FairDARTS's sigmoid with SDARTS's simplex projection);
* ``prepare_supernet(supernet)``: set a supernet option before the weight optimiser exists
  (DARTS-'s auxiliary skip ops, whose weights the optimiser trains; PC-DARTS's edge
  normalisation; SDARTS's ``zero_weight_ops_run``, which runs the ops of weight zero);
* ``attach(strategy, context)``: after the strategy made its architecture parameters, with the
  search context (``SearchContext``: the supernet, the number of epochs and of steps per epoch,
  for the schedules); a component's own
  ``nn.Parameter``s (PC-DARTS's edge betas) are architecture parameters too, optimised by the
  strategy's Adam and saved in its checkpoint (components are sub-modules of the strategy);
* ``partial_channels``: the partial-channel K the supernet starts with (PC-DARTS);
* ``mixing(alpha_EO)``: replace the softmax of a logit strategy (FairDARTS's sigmoid);
  ``on_simplex`` says whether the result still sums to one per edge;
* ``begin_epoch(epoch)``: per-epoch schedules, a pure function of the 0-based epoch, so a
  resumed run reaches the same values (SDARTS's epsilon, DARTS-'s beta, beta-DARTS's lambda);
* ``updates_arch(epoch)``: whether an epoch takes architecture steps (PC-DARTS's warm-up);
* ``perturb(strategy, weights, shards)``: transform the mixing weights of the weight step only
  (SDARTS-RS / -ADV);
* ``mask_weights(strategy, weights)``: transform the mixing weights of every sampled forward,
  weight and architecture step alike, differentiably (architecture dropout);
* ``arch_penalty(strategy)``: a term of the architecture loss that reads the architecture
  parameters only (Beta-Decay, FairDARTS's zero-one loss); added once after the sum over ranks;
* ``adjust_arch_grads(strategy, weights, grads, metrics)``: rewrite the gradient of the
  validation loss with respect to the mixing weights into that of a loss built from it (the
  hardware-cost objective ``a(E) * CE + c(E)``); returns the factor ``a(E)`` (or None);
* ``derivation_weights(strategy, weights)``: the weights a selector derives the genotype from
  (PC-DARTS: op weight x edge weight);
* ``val_weight_params(strategy)`` / ``observe_val_grads(strategy, params, grads)``: supernet
  weights whose gradient of the validation loss the component reads; the architecture step
  differentiates its loss with respect to them too (summed over the ranks) and hands the
  gradients over (operation-level early stopping's gradient matching);
* ``frozen_weights(strategy)``: supernet weights that take no step: the weight step drops their
  gradient before clipping, so they enter neither the clip norm nor the optimiser (no decay, no
  momentum), as a weight whose ``requires_grad`` is off (operation-level early stopping);
* ``observe_weight_grads(strategy)``: called by the weight step once its gradients are summed
  over the ranks and clipped, before the optimiser's step: the component reads ``.grad`` of the
  supernet weights it watches (the training side of the gradient matching);
* ``stop_reason(strategy, epoch)``: after epoch ``epoch`` (0-based), a reason to end the
  search there (early stopping on skip connections), or None;
* ``checkpoint_state()`` / ``load_checkpoint_state(state)``: a component's state that is not a
  parameter or buffer of fixed shape (OLES's window counts, kept gradients and frozen ops),
  saved in the strategy's checkpoint beside its ``state_dict`` and restored on resume;
* ``log_state()``: values worth logging every epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from torch import Tensor, nn

if TYPE_CHECKING:
    from nas.strategies.base import SearchContext, SearchStrategy, Shards
    from nas.supernet import ArchWeights, Supernet

#: What a strategy's steps may do with the components' hooks. A strategy declares the ones it
#: does (``SearchStrategy.capabilities``); a component lists the ones it needs (``requires``).
#: Each text completes "a strategy whose ...".
CAPABILITIES: dict[str, str] = {
    "arch_params": "architecture parameters are one value per op and edge, trained by "
    "architecture steps",
    "arch_penalty": "architecture step adds the components' penalty terms (arch_penalty)",
    "direct_params": "architecture step differentiates the loss with respect to the "
    "components' own parameters (a first-order step)",
    "perturb": "weight step runs on mixing weights the components may change (perturb)",
    "masked_mixing": "training steps mix with weights from arch_weights(sample=True), which "
    "the components may mask (mask_weights)",
    "softmax": "mixing weights are a softmax of its parameters, which a component may "
    "replace (mixing)",
    "val_weight_grads": "architecture step also differentiates the validation loss with "
    "respect to the supernet weights the components name (val_weight_params) and hands them "
    "the gradients (observe_val_grads)",
    "weight_grad_hooks": "weight step drops the gradients of the weights the components freeze "
    "(frozen_weights) before clipping and shows them the clipped ones (observe_weight_grads)",
    "weight_grads": "architecture step has the gradient of its loss with respect to the "
    "mixing weights, for a component to rewrite (adjust_arch_grads)",
}


def refuse_missing(strategy: SearchStrategy, needs: frozenset[str], label: str, name: str) -> None:
    """A one-line ``ValueError`` if ``strategy`` lacks one of the capabilities in ``needs``,
    naming what needs it (``label``) and what to drop (``name``)."""
    for capability in sorted(needs):
        if capability not in CAPABILITIES:
            raise AssertionError(f"{label} needs an unknown capability {capability!r}")
        if not strategy.has(capability):
            hint = strategy.refusal_hint(capability)
            raise ValueError(
                f"{label} needs a strategy whose {CAPABILITIES[capability]}; "
                f"{type(strategy).__name__}'s does not ({strategy.mixing}): drop {name} or "
                f"choose another strategy{hint}"
            )


class Component(nn.Module):
    """Base class of a search component (see the module doc for the hooks)."""

    #: the component's name: its YAML's file name (set by ``nas.plugins.build_components``)
    name: str = ""
    #: whether ``mixing`` keeps every edge's weights on the simplex (sums to one)
    on_simplex: ClassVar[bool] = True
    #: whether the component replaces the strategy's softmax (``mixing``)
    replaces_mixing: ClassVar[bool] = False
    #: whether the component reads the mixing weights as a simplex (SDARTS's projection)
    needs_simplex: ClassVar[bool] = False
    #: the strategy capabilities its hooks need (``CAPABILITIES``)
    requires: ClassVar[frozenset[str]] = frozenset()

    @property
    def label(self) -> str:
        """How the run's settings name the component, for messages."""
        return f"component {self.name or type(self).__name__}"

    def needs(self) -> frozenset[str]:
        """The capabilities this component needs with its settings (default: ``requires``)."""
        return self.requires

    def check_strategy(self, strategy: SearchStrategy) -> None:
        """Refuse, in one line, a strategy that lacks a capability this component needs."""
        refuse_missing(strategy, self.needs(), self.label, self.name or "it")

    def check(self, strategy: SearchStrategy, others: Sequence[Component]) -> None:
        """Raise a one-line ``ValueError`` if this component cannot run with ``strategy`` and
        the ``others`` components (beyond the capabilities, which ``check_strategy`` asks)."""

    def prepare_supernet(self, supernet: Supernet) -> None:
        """Set a supernet option (called before the weight optimiser is built)."""

    def attach(self, strategy: SearchStrategy, context: SearchContext) -> None:
        """Called once the strategy has its architecture parameters, before its Adam exists;
        ``context`` is the search's (the supernet, ``epochs``, ``steps_per_epoch``)."""

    @property
    def partial_channels(self) -> int | None:
        """The partial-channel K the supernet must start with, if the component fixes it."""
        return None

    def mixing(self, alpha_EO: Tensor) -> Tensor:
        """The mixing weights of one cell type's logits (only if ``replaces_mixing``)."""
        raise NotImplementedError

    def arch_parameters(self) -> list[nn.Parameter]:
        """The component's own architecture parameters (in the strategy's Adam)."""
        return list(self.parameters())

    def begin_epoch(self, epoch: int) -> None:
        """Set the schedules of 0-based epoch ``epoch``."""

    def updates_arch(self, epoch: int) -> bool:
        return True

    def perturb(
        self, strategy: SearchStrategy, weights: ArchWeights, shards: Shards
    ) -> ArchWeights:
        """The mixing weights the weight step uses (given: the strategy's, without autograd)."""
        return weights

    def mask_weights(self, strategy: SearchStrategy, weights: ArchWeights) -> ArchWeights:
        """The mixing weights of a sampled forward (given: the strategy's, differentiable)."""
        return weights

    def arch_penalty(self, strategy: SearchStrategy) -> Tensor | None:
        """A term of the architecture loss that reads only the architecture parameters."""
        return None

    def adjust_arch_grads(
        self,
        strategy: SearchStrategy,
        weights: ArchWeights,
        grads: list[Tensor | None],
        metrics: dict[str, Tensor],
    ) -> tuple[list[Tensor | None], Tensor | None]:
        """Gradients of this process's share of the validation loss w.r.t. the mixing weights
        -> those of the loss this component builds from it, and the loss's factor on CE."""
        return grads, None

    def derivation_weights(self, strategy: SearchStrategy, weights: ArchWeights) -> ArchWeights:
        return weights

    def val_weight_params(self, strategy: SearchStrategy) -> list[nn.Parameter]:
        """Supernet weights whose gradient of the validation loss ``observe_val_grads`` reads."""
        return []

    def observe_val_grads(
        self, strategy: SearchStrategy, params: list[nn.Parameter], grads: list[Tensor | None]
    ) -> None:
        """The architecture step's validation-loss gradients of ``val_weight_params`` (summed
        over the ranks; None where a weight took no part in the loss)."""

    def frozen_weights(self, strategy: SearchStrategy) -> list[nn.Parameter]:
        """Supernet weights that take no step (their gradient is dropped before clipping)."""
        return []

    def observe_weight_grads(self, strategy: SearchStrategy) -> None:
        """The weight step's gradients are summed over the ranks and clipped (in ``.grad``)."""

    def stop_reason(self, strategy: SearchStrategy, epoch: int) -> str | None:
        """After 0-based epoch ``epoch``: why the search should end there, or None."""
        return None

    def checkpoint_state(self) -> dict[str, Any] | None:
        """State to save with the strategy's checkpoint (tensors, numbers, strings, lists and
        dicts of them: it is loaded with ``weights_only=True``), or None (default: none)."""
        return None

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Restore what ``checkpoint_state`` returned."""

    def log_state(self) -> dict[str, Any]:
        return {}
