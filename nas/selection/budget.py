"""Argmax selection under a hard cost budget, met by construction from a latency table.

Fourth stage of the pipeline (``nas.selection``); hardware-aware search. The
genotype is the argmax of the strategy's derivation weights (``nas.selection.argmax``) among
the networks whose table cost (latency, FLOPs or parameters of the discrete network, from
``nas-profile``) is at most ``budget``: decisions are taken most confident first, and each
keeps room for the cheapest completion of the rest (``nas.hardware.cost
.budget_argmax_genotype``), so the result is always within budget. With a budget that does not
bind it is the plain argmax.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from nas.hardware.cost import UNITS, budget_argmax_genotype, load_budget
from nas.search.base import Batch, SearchStrategy
from nas.selection.base import SelectionContext, Selector
from search_spaces.genotype import AnyGenotype


class BudgetArgmax(Selector):
    """Argmax restricted to networks with table cost <= ``budget``."""

    name = "budget"
    selects_from_weights = True

    @classmethod
    def cost_budget(cls, config: Mapping[str, Any]) -> float | None:
        budget = config.get("budget")
        return None if budget is None else float(budget)

    def __init__(
        self,
        *,
        table: str | None = None,
        budget: float | None = None,
        metric: str = "latency",
        force: bool = False,
    ) -> None:
        self.model, self.budget = load_budget(
            table=table, budget=budget, metric=metric, force=force
        )
        self.last_cost: float | None = None

    def select(
        self,
        strategy: SearchStrategy,
        val_data: Iterable[Batch] | None = None,
        *,
        context: SelectionContext | None = None,
    ) -> AnyGenotype:
        supernet = strategy.supernet
        if supernet.space.name != self.model.space:
            raise ValueError(
                f"selection.table is a table of the {self.model.space} space; the supernet is "
                f"of {supernet.space.name}"
            )
        with torch.no_grad():
            weights = strategy.derivation_weights()
        masks = {ct: supernet.op_mask(ct) for ct in weights}
        genotype = budget_argmax_genotype(self.model, weights, masks, self.budget)
        self.last_cost = self.model.of_genotype(genotype)
        return genotype

    def describe(self) -> str:
        return f"budget {self.budget:g} {UNITS[self.model.metric]} ({self.model.metric})"
