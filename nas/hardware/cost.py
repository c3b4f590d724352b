"""Expected cost of a supernet's mixing weights as a term of the architecture loss; budgets.

Hardware-aware search (``nas.hardware``). Because a latency table is additive, the cost of
the network a supernet stands for is linear in its mixing weights:

    E[cost](w) = L0 + sum_{cell type t} sum_{edge e} sum_{op o} w_{t,e,o} * l_{t,e,o}

with ``L0`` the fixed parts and ``l_{t,e,o}`` the cost that op o on edge e adds over every cell
of type t (NB201: its shared cell at the three stages, N times each). ``w`` are the weights the
strategy hands ``Supernet.forward`` (DARTS: softmax; DrNAS: the Dirichlet sample), so
``dE/dalpha_o = p_o (l_o - sum_o' p_o' l_o')`` under a softmax (ProxylessNAS, Cai et al., ICLR
2019, eq. 4; NNI's ``ExpectationProfilerPenalty``). For a DARTS cell the sum runs over all 14
edges, of which the discrete cell keeps 8: E is the mixed supernet's cost, as in FBNet.

Loss forms ``loss(CE, E)`` with target T (``CostObjective.forms``):

* ``mul_log``  (ProxylessNAS ``mul#log``):  alpha * CE * (log E / log T) ** beta
* ``add_linear`` (ProxylessNAS ``add#linear``): CE + lambda * (E - T) / T
* ``fbnet_pow`` (FBNet as written):          alpha * CE * (log E) ** beta
* ``fbnet_logpow`` (its re-implementations): alpha * CE * log(E ** beta)
* ``nni_add`` / ``nni_mul`` (NNI ``ProfilerPenalty``, n = phi(E / T - 1)):
  CE + scale * n  /  CE * (1 + n) ** scale, phi in linear, positive, negative, absolute.

Each is ``a(E) * CE + c(E)``. ``adjust_weight_grads`` rewrites the gradient of a process's
share of CE with respect to the mixing weights into that of the loss, so that the strategy's
own chain rule carries it to the architecture parameters: ``a(E) * g + CE_r * da/dw + dc/dw /
world_size`` (the ``c`` term once over all processes). It reads only the weights, so every
strategy that differentiates through its mixing weights gets it.

Budgets: ``budget_argmax_genotype`` derives the argmax genotype among those whose table cost
is at most a budget, by construction (section 2.4 (c) of the project's hardware notes):
decision by decision, most confident first, the best option whose cost, plus what is decided,
plus the cheapest completion of the undecided decisions, stays within the budget.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import torch
from torch import Tensor

from nas.hardware.parts import NetworkLayout
from nas.hardware.table import METRICS, LatencyTable
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype
from search_spaces.space import get_space

UNITS = {"latency": "ms", "flops": "M MACs", "params": "M"}


@dataclass
class CostModel:
    """Fixed cost and per-(cell type, edge, op) costs of one metric, from a table."""

    metric: str
    space: str
    fixed: float
    per_op: dict[str, Tensor]  # cell type -> [edges, ops], float64

    @staticmethod
    def from_table(
        table: LatencyTable, metric: str = "latency", *, calibrated: bool = True
    ) -> CostModel:
        """The model of ``metric``; latency through the table's calibration ``a * sum + b``
        (``nas-profile --calibrate``) unless ``calibrated`` is false. The correction is affine,
        so the model stays additive: ``a * fixed + b`` and ``a`` times every op's cost."""
        layout: NetworkLayout = table.layout()
        fixed = sum(table.value(p, metric) * n for p, n in layout.fixed)
        per_op = {}
        for ct, edges in layout.choices.items():
            per_op[ct] = torch.tensor(
                [[sum(table.value(p, metric) * n for p, n in op) for op in ops] for ops in edges],
                dtype=torch.float64,
            )
        if metric == "latency" and calibrated:
            a, b = table.correction()
            fixed = a * fixed + b
            per_op = {ct: a * t for ct, t in per_op.items()}
        return CostModel(metric, layout.space, float(fixed), per_op)

    def expected(self, weights: dict[str, Tensor]) -> Tensor:
        """E[cost] under ``weights`` (cell type -> [edges, ops]); differentiable."""
        total: Tensor | None = None
        for ct, table_EO in self.per_op.items():
            if ct not in weights:
                raise ValueError(f"the weights lack cell type {ct!r} of the {self.space} table")
            w = weights[ct]
            if tuple(w.shape) != tuple(table_EO.shape):
                raise ValueError(
                    f"weights of {ct!r} have shape {tuple(w.shape)}; the {self.space} table has "
                    f"{tuple(table_EO.shape)}"
                )
            term = (w * table_EO.to(device=w.device, dtype=w.dtype)).sum()
            total = term if total is None else total + term
        assert total is not None
        return total + self.fixed

    def of_genotype(self, genotype: AnyGenotype) -> float:
        """The table cost of a discrete network: the fixed parts plus every kept edge's op."""
        space = get_space(self.space)
        if getattr(genotype, "family", None) != space.family:
            raise ValueError(f"genotype {genotype} does not belong to the {self.space} table")
        if getattr(genotype, "sparse", False):
            raise ValueError(
                "a latency table lays out the DARTS network with every node in each cell's "
                "output; a sparse (FairDARTS threshold) genotype changes those channel counts, "
                "so it has no table cost: measure its network instead"
            )
        total = self.fixed
        for ct, per_op in self.per_op.items():
            cell = space.cells[ct]
            for op, src, dst in genotype.edges(ct):
                e = cell.edge(src, dst)
                if op not in e.ops:
                    raise ValueError(f"{ct} edge {src}->{dst} has no op {op!r} in {self.space}")
                total += float(per_op[e.index, e.ops.index(op)])
        return total


@dataclass
class CostObjective:
    """A cost term of the architecture loss (see the module doc for the forms)."""

    model: CostModel
    form: str
    target: float
    alpha: float = 0.2
    beta: float = 0.3
    reg_lambda: float = 0.1
    scale: float = 1.0
    nonlinear: str = "linear"

    forms = ("mul_log", "add_linear", "fbnet_pow", "fbnet_logpow", "nni_add", "nni_mul")
    nonlinears = ("linear", "positive", "negative", "absolute")

    def __post_init__(self) -> None:
        if self.form not in self.forms:
            raise ValueError(f"cost.form {self.form!r} is unknown; expected one of {self.forms}")
        if self.nonlinear not in self.nonlinears:
            raise ValueError(
                f"cost.nonlinear {self.nonlinear!r} is unknown; expected one of {self.nonlinears}"
            )
        if not (isinstance(self.target, (int, float)) and self.target > 0):
            raise ValueError(f"cost.target must be a positive number, got {self.target!r}")
        if self.form == "mul_log" and self.target <= 1:
            raise ValueError(
                f"cost.form=mul_log divides by log(target): the target must exceed 1 "
                f"{UNITS[self.model.metric]}, got {self.target}"
            )

    def _log(self, E: Tensor) -> Tensor:
        # log forms need E > 1 in the table's unit; clamp so that a tiny E gives no NaN
        return torch.log(E.clamp_min(1.0 + 1e-6))

    def factor_and_penalty(self, E: Tensor) -> tuple[Tensor | float, Tensor | float]:
        """``(a(E), c(E))`` with loss = a(E) * CE + c(E)."""
        f, T = self.form, float(self.target)
        if f == "mul_log":
            return self.alpha * (self._log(E) / math.log(T)) ** self.beta, 0.0
        if f == "fbnet_pow":
            return self.alpha * self._log(E) ** self.beta, 0.0
        if f == "fbnet_logpow":
            return self.alpha * self.beta * self._log(E), 0.0
        if f == "add_linear":
            return 1.0, self.reg_lambda * (E - T) / T
        n = E / T - 1
        if self.nonlinear == "positive":
            n = n.clamp_min(0)
        elif self.nonlinear == "negative":
            n = n.clamp_max(0)
        elif self.nonlinear == "absolute":
            n = n.abs()
        if f == "nni_add":
            return 1.0, self.scale * n
        return (1 + n) ** self.scale, 0.0

    def loss(self, ce: Tensor, weights: dict[str, Tensor]) -> Tensor:
        """The whole architecture loss (for tests and for strategies that build it directly)."""
        a, c = self.factor_and_penalty(self.model.expected(weights))
        return a * ce + c

    def adjust_weight_grads(
        self,
        weights: dict[str, Tensor],
        grads: Sequence[Tensor | None],
        ce_share: Tensor,
        world_size: int = 1,
    ) -> tuple[list[Tensor | None], Tensor, Tensor]:
        """Gradients of this process's share of CE w.r.t. the mixing weights (``grads``, in
        ``weights`` order) -> those of its share of the loss; also ``a(E)`` and ``E``."""
        leaves = {ct: w.detach().double().requires_grad_(True) for ct, w in weights.items()}
        with torch.enable_grad():
            E = self.model.expected(leaves)
            a, c = self.factor_and_penalty(E)
            obj = a * ce_share.detach().double() + c / world_size
            extra = torch.autograd.grad(obj, list(leaves.values()), allow_unused=True)
        factor = a.detach() if isinstance(a, Tensor) else torch.tensor(float(a))
        out: list[Tensor | None] = []
        for w, g, d in zip(weights.values(), grads, extra):
            total = None if g is None else g * factor.to(g.dtype)
            if d is not None:
                d = d.to(w.dtype)
                total = d if total is None else total + d
            out.append(total)
        return out, factor, E.detach()

    def describe(self) -> str:
        unit = UNITS[self.model.metric]
        return f"{self.form} on expected {self.model.metric}, target {self.target:g} {unit}"


#: the parameters each form reads (``CostObjective.factor_and_penalty``) beside the target
FORM_PARAMETERS: dict[str, tuple[str, ...]] = {
    "mul_log": ("alpha", "beta"),
    "fbnet_pow": ("alpha", "beta"),
    "fbnet_logpow": ("alpha", "beta"),
    "add_linear": ("reg_lambda",),
    "nni_add": ("scale", "nonlinear"),
    "nni_mul": ("scale", "nonlinear"),
}
#: their values in ``configs/cost/*.yaml``: a form refuses another value of one it does not read
FORM_PARAMETER_DEFAULTS: dict[str, Any] = {
    "alpha": 0.2,
    "beta": 0.3,
    "reg_lambda": 0.1,
    "scale": 1.0,
    "nonlinear": "positive",
}


def build_objective(cfg: Any) -> CostObjective:
    """A ``CostObjective`` from the ``cost`` config group (see ``configs/cost``)."""
    from nas.hardware.table import load_table  # table imports torch-heavy profiling parts

    allowed = {
        "table", "metric", "form", "target", "alpha", "beta", "reg_lambda", "scale",
        "nonlinear", "force",
    }  # fmt: skip
    unknown = sorted(set(cfg) - allowed)
    if unknown:
        raise ValueError(f"unknown cost keys {unknown}; cost takes {sorted(allowed)}")
    if not cfg.get("table"):
        raise ValueError("cost.table is required: the JSON file nas-profile wrote")
    metric = str(cfg.get("metric", "latency"))
    if metric not in METRICS:
        raise ValueError(f"cost.metric {metric!r} is unknown; expected one of {METRICS}")
    # FLOPs and parameters do not depend on the machine: only latency needs a matching table
    expect = "here" if metric == "latency" else None
    table = load_table(str(cfg["table"]), expect=expect, force=bool(cfg.get("force", False)),
                       force_hint="force it with cost.force=true")  # fmt: skip
    if cfg.get("target") is None:
        raise ValueError(f"cost.target is required ({UNITS[metric]})")
    form = str(cfg.get("form", "mul_log"))
    for key, default in FORM_PARAMETER_DEFAULTS.items():
        value = cfg.get(key, default)
        if form in FORM_PARAMETERS and key not in FORM_PARAMETERS[form] and value != default:
            raise ValueError(
                f"cost.{key}={value} is not a parameter of cost.form={form}, which reads "
                f"{', '.join(FORM_PARAMETERS[form])}; leave cost.{key} at {default} or choose "
                f"a form that reads it"
            )
    if metric != "latency" and cfg.get("force", False):
        raise ValueError(
            f"cost.force=true accepts a latency table measured elsewhere; {metric} does not "
            "depend on the machine and needs no force: leave cost.force=false"
        )
    return CostObjective(
        CostModel.from_table(table, metric),
        form=str(cfg.get("form", "mul_log")),
        target=float(cfg["target"]),
        alpha=float(cfg.get("alpha", 0.2)),
        beta=float(cfg.get("beta", 0.3)),
        reg_lambda=float(cfg.get("reg_lambda", 0.1)),
        scale=float(cfg.get("scale", 1.0)),
        nonlinear=str(cfg.get("nonlinear", "linear")),
    )


# ------------------------------------------------------------------------------ budgets


def _too_small(model: CostModel, budget: float, cheapest: float) -> ValueError:
    unit = UNITS[model.metric]
    return ValueError(
        f"budget {budget:g} {unit} is below the cheapest network of the {model.space} table "
        f"({cheapest:.4g} {unit}); expected a budget >= that"
    )


Choice = tuple[tuple[str, int, int], ...]  # (cell type, edge index, op index) per kept edge
Option = tuple[float, float, Choice]  # (score, cost, choice)


def _decisions(model: CostModel, w: dict[str, Tensor]) -> list[list[Option]]:
    """The decisions a discrete cell is made of, each a list of ``(score, cost, choice)``.

    A cell that keeps every edge (``inputs_per_node`` None: NB201) decides each edge's op; one
    that keeps ``k`` edges per node (DARTS: 2) decides each node's ``k`` incoming edges with a
    non-``none`` op each, scored by the sum of their weights (the argmax's choice when the
    budget does not bind), strongest edge first."""
    space = get_space(model.space)
    out = []
    for ct, cost in model.per_op.items():
        cell = space.cells[ct]
        wt = w[ct]
        for node in cell.intermediate_nodes:
            per_edge: list[list[Option]] = [
                [
                    (float(wt[e.index, k]), float(cost[e.index, k]), ((ct, e.index, k),))
                    for k, op in enumerate(e.ops)
                    if math.isfinite(float(wt[e.index, k]))
                    and (cell.inputs_per_node is None or op != "none")
                ]
                for e in cell.edges_into(node)
            ]
            if cell.inputs_per_node is None:
                out.extend(per_edge)
                continue
            options: list[Option] = []
            for group in combinations(per_edge, cell.inputs_per_node):
                for picks in itertools.product(*group):
                    ranked = sorted(picks, key=lambda o: -o[0])
                    options.append(
                        (math.fsum(o[0] for o in picks), math.fsum(o[1] for o in picks),
                         tuple(c for o in ranked for c in o[2]))
                    )  # fmt: skip
            if not options:
                raise ValueError(
                    f"{ct} node {node} has fewer than {cell.inputs_per_node} edges with an "
                    "allowed op"
                )
            out.append(options)
    return out


def allowed_ops(space: str) -> dict[str, Tensor]:
    """Per cell type, bool ``[edges, ops]``: the ops a discrete network of ``space`` may hold
    on each edge (``Family.allowed_ops``; e.g. a block that cannot be skipped has no ``none``)."""
    sp = get_space(space)
    return {
        ct: torch.tensor(rows, dtype=torch.bool)
        for ct, rows in family_of(sp).allowed_ops(sp).items()
    }


def cheapest_cost(model: CostModel, allowed: dict[str, Tensor]) -> float | None:
    """The table cost of the cheapest network that uses only ``allowed`` ops (cell type ->
    bool [edges, ops]); None if no network does."""
    family = allowed_ops(model.space)
    w = {
        ct: torch.zeros(t.shape, dtype=torch.float64).masked_fill(
            ~(t.cpu() & family[ct]), float("-inf")
        )
        for ct, t in allowed.items()
    }
    try:
        decisions = _decisions(model, w)
    except ValueError:  # a node without enough edges to keep
        return None
    if any(not opts for opts in decisions):
        return None
    return model.fixed + math.fsum(min(c for _, c, _ in opts) for opts in decisions)


def budget_argmax_genotype(
    model: CostModel,
    weights: dict[str, Tensor],
    masks: dict[str, Tensor] | None,
    budget: float,
) -> AnyGenotype:
    """The argmax genotype restricted to networks whose table cost is <= ``budget``.

    Decisions (``_decisions``: NB201 edges, DARTS nodes' pairs of edges) in order of their best
    score, each the best-scoring option that keeps decided + this option + the cheapest
    options of the undecided decisions within budget. The genotype is then read from the
    choices by the space family's own derivation (``search_spaces.families``)."""
    space = get_space(model.space)
    w = {ct: v.detach().double().cpu() for ct, v in weights.items()}
    if masks is not None:
        w = {ct: v.masked_fill(~masks[ct].cpu(), float("-inf")) for ct, v in w.items()}
    # the ops the family never lets a discrete network hold (whatever the masks say)
    family = allowed_ops(model.space)
    w = {ct: v.masked_fill(~family[ct], float("-inf")) for ct, v in w.items()}
    tol = 1e-9 * max(1.0, abs(budget))
    decisions = _decisions(model, w)
    for i, opts in enumerate(decisions):
        if not opts:
            raise ValueError(f"decision {i} of the {model.space} cell has no allowed op")
    cheapest = [min(c for _, c, _ in opts) for opts in decisions]
    if model.fixed + sum(cheapest) > budget + tol:
        raise _too_small(model, budget, model.fixed + sum(cheapest))
    order = sorted(range(len(decisions)), key=lambda i: -max(s for s, _, _ in decisions[i]))
    spent, rest = model.fixed, sum(cheapest)
    # one-hot weights of the choices, the first (strongest) edge of a group highest, so that
    # the family's argmax derivation returns exactly these edges, ops and order
    chosen = {ct: torch.zeros_like(t) for ct, t in model.per_op.items()}
    for i in order:
        rest -= cheapest[i]
        for _score, c, picks in sorted(decisions[i], key=lambda o: -o[0]):
            if spent + c + rest <= budget + tol:
                for rank, (ct, e, k) in enumerate(picks):
                    chosen[ct][e, k] = 2.0 - rank / len(picks)
                spent += c
                break
        else:  # unreachable: the cheapest option always fits
            raise AssertionError("no feasible option")
    masks_all = {ct: torch.ones_like(t, dtype=torch.bool) for ct, t in chosen.items()}
    return family_of(space).derive(space, chosen, masks_all)


def load_budget(
    *, table: str | None, budget: float | None, metric: str, force: bool
) -> tuple[CostModel, float]:
    """The cost model and budget of a selector's hard budget (``selection.table``,
    ``selection.budget``, ``selection.metric``, ``selection.force``), each value checked with a
    one-line ``ValueError``; a latency table must have been measured here unless ``force``."""
    from nas.hardware.table import METRICS, load_table

    if not table:
        raise ValueError("selection.table is required: the JSON file nas-profile wrote")
    if metric not in METRICS:
        raise ValueError(f"selection.metric {metric!r} is unknown; expected one of {METRICS}")
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0:
        raise ValueError(
            f"selection.budget must be a positive number ({UNITS[metric]}), got {budget!r}"
        )
    expect = "here" if metric == "latency" else None
    loaded = load_table(
        table, expect=expect, force=force, force_hint="force it with selection.force=true"
    )
    model = CostModel.from_table(loaded, metric)
    # before the search: a budget no network of the table meets would only be found after it
    cheapest = cheapest_cost(model, allowed_ops(model.space))
    if cheapest is not None and float(budget) < cheapest - 1e-9 * max(1.0, abs(float(budget))):
        raise _too_small(model, float(budget), cheapest)
    return model, float(budget)
