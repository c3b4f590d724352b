"""Early stopping on skip connections: the search ends once its cells collect too many.

Third stage of the pipeline (``nas.strategies``), a component. DARTS+ (Liang et al., "DARTS+:
Improved Differentiable Architecture Search with Early Stopping", arXiv 1909.06035) stops the
search when the normal cell of the derived genotype holds two or more skip connections, the
sign of DARTS's collapse onto parameter-free ops. As confopt (automl/ConfigurableOptimizer,
``src/confopt/oneshot/early_stopper.py``: ``SkipConnectionEarlyStopper``, checked by
``train/configurable_trainer.py`` after each epoch), the toolkit's peer: after epoch ``e``
(0-based) with ``e > min_epochs``, the search ends if the derived normal cell holds more than
``max_skip_normal`` ``skip_connect`` ops, or (when set) the reduction cell more than
``max_skip_reduce``; selection then runs on the supernet as it stands. The default
``max_skip_normal: 1`` is DARTS+'s "two or more".

The genotype counted is the one the run logs every epoch (the family's derivation rule on the
strategy's derivation weights). DARTS cells only (the spaces ``darts`` and ``s1``-``s5``);
other spaces are refused in one line, as confopt counts DARTS cells only. A stopped search's
checkpoint says so, and ``resume=true`` finishes it as stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from nas.strategies.components.base import Component
from search_spaces.families import family_of

if TYPE_CHECKING:
    from nas.strategies.base import SearchStrategy
    from nas.supernet import Supernet

SKIP = "skip_connect"


class SkipConnectionStop(Component):
    """End the search once the derived cells hold too many skip connections."""

    name = "skip_stop"
    cell_types = ("normal", "reduce")

    def __init__(
        self, *, max_skip_normal: int = 1, max_skip_reduce: int | None = None, min_epochs: int = 0
    ) -> None:
        super().__init__()
        for key, value, optional in (("max_skip_normal", max_skip_normal, False),
                                     ("max_skip_reduce", max_skip_reduce, True),
                                     ("min_epochs", min_epochs, False)):  # fmt: skip
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"skip_stop.{key} must be an int >= 0, got {value!r}")
        self.max_skip_normal = max_skip_normal
        self.max_skip_reduce = max_skip_reduce
        self.min_epochs = min_epochs
        self._counts: dict[str, int] = {}

    def prepare_supernet(self, supernet: Supernet) -> None:
        cell_types = family_of(supernet.space).cell_types
        if cell_types != self.cell_types:
            raise ValueError(
                f"component skip_stop counts the skip connections of DARTS cells; space "
                f"{supernet.space.name} has cells {', '.join(cell_types)}; expected a DARTS cell "
                "space (darts, s1-s5)"
            )

    def counts(self, strategy: SearchStrategy) -> dict[str, int]:
        """``skip_connect`` ops per cell type of the genotype the weights rank highest."""
        with torch.no_grad():
            weights = strategy.derivation_weights()
        supernet = strategy.supernet
        masks = {ct: supernet.op_mask(ct) for ct in weights}
        genotype: Any = family_of(supernet.space).derive(supernet.space, weights, masks)
        return {ct: sum(op == SKIP for op, *_ in genotype.cell(ct)) for ct in ("normal", "reduce")}

    def stop_reason(self, strategy: SearchStrategy, epoch: int) -> str | None:
        self._counts = self.counts(strategy)
        if epoch <= self.min_epochs:
            return None
        normal, reduce = self._counts["normal"], self._counts["reduce"]
        if normal > self.max_skip_normal:
            return (
                f"the normal cell holds {normal} skip connections (more than skip_stop."
                f"max_skip_normal={self.max_skip_normal})"
            )
        if self.max_skip_reduce is not None and reduce > self.max_skip_reduce:
            return (
                f"the reduction cell holds {reduce} skip connections (more than skip_stop."
                f"max_skip_reduce={self.max_skip_reduce})"
            )
        return None

    def log_state(self) -> dict[str, Any]:
        return {f"skip_connections_{ct}": n for ct, n in self._counts.items()}
