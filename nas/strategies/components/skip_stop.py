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
strategy's derivation weights); ``max_skip_normal`` bounds its main cell type (DARTS's normal
cell, NB201's one cell, as confopt's ``skip_connections/normal``), ``max_skip_reduce`` the
second where there is one. A space without ``skip_connect`` (the block chains) is refused in
one line. A stopped search's checkpoint says so, and ``resume=true`` finishes it as stopped.
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
        self._title: Any = str

    def prepare_supernet(self, supernet: Supernet) -> None:
        space = supernet.space
        if not any(SKIP in e.ops for cell in space.cells.values() for e in cell.edges):
            raise ValueError(
                f"component skip_stop counts {SKIP} ops, and space {space.name} offers none; "
                f"expected a space whose cells offer {SKIP}"
            )
        if self.max_skip_reduce is not None and len(supernet.arch_shapes()) < 2:
            raise ValueError(
                f"skip_stop.max_skip_reduce={self.max_skip_reduce} bounds a second cell type, "
                f"and space {space.name} has one; expected max_skip_reduce=null"
            )

    def counts(self, strategy: SearchStrategy) -> dict[str, int]:
        """``skip_connect`` ops per cell type of the genotype the weights rank highest, the
        main cell type first (``Family.cell_types``)."""
        with torch.no_grad():
            weights = strategy.derivation_weights()
        supernet = strategy.supernet
        masks = {ct: supernet.op_mask(ct) for ct in weights}
        genotype: Any = family_of(supernet.space).derive(supernet.space, weights, masks)
        self._title = genotype.cell_title
        return {ct: sum(op == SKIP for op, *_ in genotype.edges(ct)) for ct in genotype.cell_types}

    def stop_reason(self, strategy: SearchStrategy, epoch: int) -> str | None:
        self._counts = self.counts(strategy)
        if epoch <= self.min_epochs:
            return None
        limits = [("max_skip_normal", self.max_skip_normal),
                  ("max_skip_reduce", self.max_skip_reduce)]  # fmt: skip
        # the main cell (DARTS's normal), then the second cell type where there is one
        for (ct, n), (key, limit) in zip(self._counts.items(), limits):
            if limit is not None and n > limit:
                return (
                    f"the {self._title(ct)} holds {n} skip connections (more than skip_stop."
                    f"{key}={limit})"
                )
        return None

    def log_state(self) -> dict[str, Any]:
        return {f"skip_connections_{ct}": n for ct, n in self._counts.items()}
