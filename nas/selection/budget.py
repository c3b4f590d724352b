"""Argmax selection under a hard cost budget, met by construction from a latency table and,
for latency, checked by timing the chosen network on this machine.

Fourth stage of the pipeline (``nas.selection``); hardware-aware search. The
genotype is the argmax of the strategy's derivation weights (``nas.selection.argmax``) among
the networks whose table cost (latency, FLOPs or parameters of the discrete network, from
``nas-profile``) is at most ``budget``: decisions are taken most confident first, and each
keeps room for the cheapest completion of the rest (``nas.hardware.cost
.budget_argmax_genotype``), so the table cost is always within budget. With a budget that does
not bind it is the plain argmax.

A latency table is a sum of parts timed apart (calibrated or not); the whole network can take
longer. So where the table was measured on this machine (``measure``: ``auto``, the default,
or ``true``), the chosen network is timed whole with the table's protocol
(``nas.hardware.validate.measure_network``: its batch, dtype, memory format and thread count;
the median of ``repeats`` calls). Over budget, the table budget is lowered by the ratio of
budget to measurement and the selection taken again, up to ``tries`` times, ending with the
network of least table cost; the result is the first network whose measured latency meets the
budget, or a one-line refusal naming the measured latency of the cheapest one. Each timing is
logged as a ``budget_measured`` event.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from nas.hardware.cost import (
    UNITS,
    allowed_ops,
    budget_argmax_genotype,
    cheapest_cost,
    load_budget,
)
from nas.hardware.table import LatencyTable, load_table
from nas.selection.base import SelectionContext, Selector
from nas.strategies.base import Batch, SearchStrategy
from search_spaces.genotype import AnyGenotype

MEASURE_CHOICES = ("auto", True, False)


@contextlib.contextmanager
def _threads(n: Any) -> Iterator[None]:
    """torch's intra-op threads set to the table's count for the timing, then restored."""
    before = torch.get_num_threads()
    if isinstance(n, int) and n >= 1:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class BudgetArgmax(Selector):
    """Argmax restricted to networks with table cost <= ``budget`` (and, for a latency table
    of this machine, measured latency <= ``budget``)."""

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
        measure: bool | str = "auto",
        tries: int = 6,
        warmup: int = 10,
        repeats: int = 30,
    ) -> None:
        self.model, self.budget = load_budget(
            table=table, budget=budget, metric=metric, force=force
        )
        if measure not in MEASURE_CHOICES:
            raise ValueError(f"selection.measure must be auto, true or false, got {measure!r}")
        counts = (("tries", tries, 1), ("warmup", warmup, 0), ("repeats", repeats, 1))
        for key, value, low in counts:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"selection.{key} must be an integer >= {low}, got {value!r}")
        self.table: LatencyTable | None = None
        if metric == "latency" and measure is not False:
            assert table is not None  # load_budget refused a missing table
            loaded = load_table(table, expect=None)
            here = _measured_here(loaded, table)
            if here is None:
                self.table = loaded
            elif measure is True:
                raise ValueError(f"selection.measure=true: {here}; set selection.measure=false")
        elif measure is True:
            raise ValueError(
                f"selection.measure=true times a network's latency; selection.metric is {metric} "
                "(a table's FLOPs and parameters are exact): set selection.measure=false"
            )
        self.tries, self.warmup, self.repeats = tries, warmup, repeats
        self.last_cost: float | None = None
        self.last_measured_ms: float | None = None

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
        if self.table is not None:
            genotype = self._meet_measured(genotype, weights, masks, context)
        self.last_cost = self.model.of_genotype(genotype)
        return genotype

    def _meet_measured(
        self,
        genotype: AnyGenotype,
        weights: Mapping[str, torch.Tensor],
        masks: Mapping[str, torch.Tensor],
        context: SelectionContext | None,
    ) -> AnyGenotype:
        """The first genotype, lowering the table budget, whose measured latency meets it."""
        from nas.hardware.validate import measure_network

        assert self.table is not None
        floor = cheapest_cost(self.model, allowed_ops(self.model.space))
        table_budget = self.budget
        for attempt in range(1, self.tries + 1):
            with _threads(self.table.environment.get("threads")):
                measured = measure_network(
                    self.table, genotype, warmup=self.warmup, repeats=self.repeats
                ).median_ms
            predicted = self.model.of_genotype(genotype)
            self.last_measured_ms = measured
            met = measured <= self.budget
            if context is not None:
                context.log(
                    "budget_measured", attempt=attempt, genotype=str(genotype),
                    table_budget_ms=table_budget, predicted_ms=predicted,
                    measured_ms=measured, budget_ms=self.budget, met=met,
                )  # fmt: skip
            print(
                f"selection budget: {genotype}  table {predicted:.4g} ms, measured "
                f"{measured:.4g} ms, budget {self.budget:g} ms" + ("" if met else ": over"),
                flush=True,
            )
            if met:
                return genotype
            at_floor = floor is not None and predicted <= floor + 1e-9 * max(1.0, floor)
            if at_floor or attempt == self.tries:
                break
            # lower the table budget by the measured overshoot (at least below this network)
            table_budget = min(table_budget * self.budget / measured, predicted * (1 - 1e-6))
            last_try = attempt == self.tries - 1  # the last try takes the cheapest network
            if floor is not None and (table_budget < floor or last_try):
                table_budget = floor
            genotype = budget_argmax_genotype(self.model, dict(weights), dict(masks), table_budget)
        raise ValueError(
            f"no network meets the budget of {self.budget:g} ms when timed here: "
            f"{genotype} (table {self.model.of_genotype(genotype):.4g} ms) measures "
            f"{self.last_measured_ms:.4g} ms after {attempt} tries; raise selection.budget, "
            "or re-measure the table (nas-profile --calibrate)"
        )

    def describe(self) -> str:
        text = f"budget {self.budget:g} {UNITS[self.model.metric]} ({self.model.metric})"
        return text + (", timed here" if self.table is not None else "")


def _measured_here(table: LatencyTable, path: str) -> str | None:
    """None where ``table`` was timed on this machine's kind of device with this software;
    else why its latency cannot be checked here."""
    from nas.hardware.lut import is_imported
    from nas.hardware.table import here_for, mismatch

    if is_imported(table):
        return f"{path} was imported from a lookup table of another device"
    here = here_for(table.environment)
    if here is None:
        return f"{path} was measured on a CUDA device and this machine has none"
    diff = mismatch(table.environment, here)
    return f"{path} was measured elsewhere ({'; '.join(diff)})" if diff else None
