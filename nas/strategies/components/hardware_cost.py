"""The hardware-cost term of the architecture loss as a search component.

Hardware-aware search (``nas.hardware.cost``: ProxylessNAS / FBNet / NNI loss forms). The
objective ``loss = a(E) * CE + c(E)`` reads only the mixing weights (``E`` is the expected
cost under them), so it is a component: it rewrites the gradient of the validation loss with
respect to the mixing weights (``CostObjective.adjust_weight_grads``), and the strategy's own
chain rule carries it to the architecture parameters, whatever the strategy. ``cost=latency``
(the config group ``cost``) composes it with the search; ``attach`` checks that the table is
of the supernet's space.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch import Tensor

from nas import distributed as D
from nas.strategies.components.base import Component, refuse_missing

if TYPE_CHECKING:
    from nas.hardware.cost import CostObjective
    from nas.strategies.base import SearchContext, SearchStrategy
    from nas.supernet import ArchWeights


LABEL = "the hardware cost (cost=)"


class HardwareCost(Component):
    """``a(E) * CE + c(E)`` with ``E`` the expected cost under the mixing weights.

    Built from the ``cost`` config (``from_config``) or from an objective (tests)."""

    def __init__(self, *, objective: CostObjective, table: str | None = None) -> None:
        super().__init__()
        self.objective = objective
        self.table = table
        self.name = "cost"

    # a term of the architecture loss, added through its gradient w.r.t. the mixing weights
    requires = frozenset({"weight_grads"})

    @property
    def label(self) -> str:
        return LABEL

    @staticmethod
    def from_config(cfg: Any, strategy: SearchStrategy | None = None) -> HardwareCost:
        """The component of the ``cost`` config group (``nas.hardware.cost.build_objective``);
        with ``strategy``, a strategy that cannot take it is refused first, before the table
        is read."""
        from nas.hardware.cost import build_objective

        if strategy is not None:
            refuse_missing(strategy, HardwareCost.requires, LABEL, "cost=")
        return HardwareCost(objective=build_objective(cfg), table=str(cfg.get("table")))

    def check(self, strategy: SearchStrategy, others: Sequence[Component]) -> None:
        independent = [c.name or type(c).__name__ for c in others if not c.on_simplex]
        if independent:
            raise ValueError(
                "the hardware cost is an expectation under mixing weights that sum to one per "
                f"edge; {', '.join(independent)} mixes with independent weights, which have none"
            )

    def attach(self, strategy: SearchStrategy, context: SearchContext) -> None:
        space = strategy.supernet.space.name
        model = self.objective.model
        if model.space != space:
            raise ValueError(
                f"cost.table {self.table} is a table of the {model.space} space; this search "
                f"is of {space}: profile {space} (nas-profile space={space})"
            )
        shapes = strategy.supernet.arch_shapes()
        for ct, per_op in model.per_op.items():
            if tuple(shapes.get(ct, ())) != tuple(per_op.shape):
                raise ValueError(
                    f"cost.table {self.table}: cell {ct!r} has shape {tuple(per_op.shape)}, "
                    f"the supernet's {shapes.get(ct)}"
                )

    def adjust_arch_grads(
        self,
        strategy: SearchStrategy,
        weights: ArchWeights,
        grads: list[Tensor | None],
        metrics: dict[str, Tensor],
    ) -> tuple[list[Tensor | None], Tensor | None]:
        world = D.get_world_size()
        out, factor, expected = self.objective.adjust_weight_grads(
            weights, grads, metrics["val_loss"], world
        )
        # shares of a global value: the loop sums the metrics over the ranks
        metrics[f"expected_{self.objective.model.metric}"] = expected / world
        return out, factor
