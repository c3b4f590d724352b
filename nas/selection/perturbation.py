"""Perturbation-based architecture selection (DARTS-PT), for the supernet of any strategy.

Fourth stage of the pipeline (``nas.selection``). Wang, Cheng, Chen, Tang, Hsieh, "Rethinking
Architecture Selection in Differentiable NAS", ICLR 2021 (Alg. 1 and 2):

* operation projection, one undecided edge at a time (picked at random): for each candidate
  op, set its weight to zero (the others are not renormalised) and measure the supernet on the
  architecture split; the op whose removal lowers accuracy most (``criterion: acc``) or raises
  the loss most (``criterion: loss``) is kept, and the edge becomes one-hot on it;
* topology projection (DARTS-style spaces): for each node with more than two inputs (picked at
  random), score the removal of each input edge alone (the node's other edges present), then
  remove the edge whose removal leaves the highest accuracy (lowest loss), ties the later edge,
  until two remain: the two kept are the two whose removal hurts most. The scores are not
  re-evaluated after a removal, as the reference's loop (its rounds see the same weights);
* between projections the supernet is fine-tuned for ``proj_intv`` epochs: SGD with a fresh
  momentum at lr = search lr x ``tune_lr_factor``, held constant as the reference does on every
  space (``sota/cnn/projection.py`` builds a cosine scheduler but never steps it;
  ``nasbench201/projection.py`` builds none); ``tune_lr_schedule: cosine`` anneals it to
  ``tune_lr_min`` instead (what that unstepped scheduler would have done). The architecture
  keeps training unless the strategy fixes alpha.

The candidates of an edge are all its unmasked ops, ``none`` included (the reference tries
every op index). The tuning schedule is the reference's for each family: DARTS-style spaces
(14 op + 3 topology projections per cell type) tune ``16 * proj_intv + 1`` epochs with
projection k at epoch k * ``proj_intv`` (the last one at epoch 80 for ``proj_intv`` 5);
NB201 tunes ``proj_intv * (6 - 1)`` epochs with projection k at epoch
``min(k * proj_intv, tune_epochs - 1)``: 0, 5, 10, 15, 20 and 24 for ``proj_intv`` 5.

Unlike the reference, the edge and node order comes from a seeded generator stored in the
checkpoint, and every decision is saved there too, so an interrupted selection resumes to the
same genotype. Candidates of one decision are compared on the same validation batches without
autograd; ``num_val_batches`` bounds the cost; the cells before the first cell of the perturbed
cell type are computed once per batch for all candidates (``reuse_prefix``). The supernet is
evaluated with BN in batch-statistics mode and its running statistics left untouched.
``batch_candidates`` evaluates the candidates of one decision as one batch (the rest of the
supernet run once on the prefix's output repeated per candidate, ``nas.supernet.batched``):
the same scores to float rounding, meant for GPUs, where the small kernels of one candidate's
forward are bound by their launches; off by default (no faster on a CPU).

Under data parallelism (``torchrun``) every rank measures the candidates on its share of each
validation batch, the counts are summed over the ranks, rank 0 takes the decision and
broadcasts it, and the fine-tuning epochs are the data-parallel search steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from nas.run.seeds import PT_DECISION_STRIDE, PT_TUNE_BASE, VARIANT_BATCH_STRIDE
from nas.selection.base import SelectionContext, Selector, derive_genotype
from nas.selection.projection import EdgeProjection, install
from nas.strategies.base import Batch, SearchStrategy
from nas.supernet import ArchWeights, Supernet
from nas.supernet.batched import BatchedVariants, check_batchable, device_rng
from search_spaces.genotype import AnyGenotype


@contextmanager
def frozen_bn_statistics(module: nn.Module) -> Iterator[None]:
    """BN in batch-statistics mode whose running statistics do not move (momentum 0)."""
    bns = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    saved = [
        (m.momentum, None if m.num_batches_tracked is None else m.num_batches_tracked.clone())
        for m in bns
    ]
    try:
        for m in bns:
            m.momentum = 0.0
        yield
    finally:
        for m, (momentum, tracked) in zip(bns, saved):
            m.momentum = momentum
            if tracked is not None and m.num_batches_tracked is not None:
                m.num_batches_tracked.copy_(tracked)


@torch.no_grad()
def evaluate_variants(
    supernet: Supernet,
    variants: list[ArchWeights],
    cell_type: str,
    batches: Iterable[Batch],
    *,
    reuse_prefix: bool = True,
    batch_candidates: bool = False,
    seed: int = 0,
    all_reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> list[tuple[float, float]]:
    """(accuracy, loss) of the supernet under each weight variant, on the same batches.

    The variants differ only in ``cell_type``'s weights, so the stem and the cells before the
    first cell of that type are shared: with ``reuse_prefix`` they run once per batch. Random
    ops (S4's noise) start from the same generator state (the device's) for every variant, with
    or without reuse; a variant that does not run one draws nothing for it, so its later draws
    are not those of the other variants (batched, each chunk follows its variant's draws).
    ``batch_candidates``: the rest runs once per batch for all the variants, on the prefix's
    output repeated once per variant (``nas.supernet.batched``: per-variant batch statistics,
    mixing weights and random draws), the scores those of the variant-by-variant evaluation to
    float rounding; the prefix then runs once per batch whatever ``reuse_prefix`` says, and only
    decides where the prefix stops. Under data parallelism each rank passes its share of the
    batches and ``all_reduce_sum``, which sums the per-variant counts over the ranks, so every
    rank gets the scores of all the batches."""
    stop = supernet.first_cell_of(cell_type) if reuse_prefix else 0
    n = len(variants)
    correct = [0.0] * n
    loss = [0.0] * n
    count = 0
    was_training = supernet.training
    supernet.train()  # batch statistics, as the reference evaluates the projections
    device = next(supernet.parameters()).device
    devices = [device] if device.type == "cuda" else []
    try:
        with frozen_bn_statistics(supernet), torch.random.fork_rng(devices=devices):
            batched = BatchedVariants(supernet, variants, cell_type) if batch_candidates else None
            for b, (x, y) in enumerate(batches):
                torch.manual_seed(seed * VARIANT_BATCH_STRIDE + b)
                if batched is not None:
                    state = batched.repeat(supernet.run_prefix(x, variants[0], stop))
                    with batched.chunks(x.device):
                        logits = supernet.run_suffix(state, batched.weights, stop)
                    if logits.dtype in (torch.float16, torch.bfloat16):
                        logits = logits.float()
                    labels = y.repeat(n)
                    losses = F.cross_entropy(logits, labels, reduction="none").view(n, -1).sum(1)
                    hits = (logits.argmax(1) == labels).view(n, -1).sum(1)
                    for v, (lv, cv) in enumerate(zip(losses.tolist(), hits.tolist())):
                        loss[v] += float(lv)
                        correct[v] += float(cv)
                    count += int(y.shape[0])
                    continue
                rng = device_rng(x.device)
                prefix = supernet.run_prefix(x, variants[0], stop) if reuse_prefix else None
                after_prefix = rng.get()
                for v, weights in enumerate(variants):
                    if reuse_prefix:
                        rng.set(after_prefix)
                        state = prefix
                    else:
                        torch.manual_seed(seed * VARIANT_BATCH_STRIDE + b)
                        state = supernet.run_prefix(x, weights, 0)
                    logits = supernet.run_suffix(state, weights, stop)
                    if logits.dtype in (torch.float16, torch.bfloat16):
                        logits = logits.float()  # the loss of half-precision logits in fp32
                    loss[v] += float(F.cross_entropy(logits, y, reduction="sum"))
                    correct[v] += float((logits.argmax(1) == y).sum())
                count += int(y.shape[0])
    finally:
        supernet.train(was_training)
    sums = torch.tensor([*correct, *loss, float(count)], dtype=torch.float64)
    if all_reduce_sum is not None:
        sums = all_reduce_sum(sums.to(device)).cpu()
    total = float(sums[-1])
    if total == 0:
        raise ValueError("perturbation selection got no validation batches")
    return [(float(sums[v]) / total, float(sums[n + v]) / total) for v in range(n)]


class PerturbationSelection(Selector):
    """DARTS-PT: operation then topology projection, fine-tuning between projections."""

    name = "pt"
    decision_event = "pt_decision"

    @classmethod
    def decision_metric(cls, config: Mapping[str, Any]) -> str:
        return "loss" if config.get("criterion") == "loss" else "acc"

    @classmethod
    def cost_budget(cls, config: Mapping[str, Any]) -> float | None:
        budget = config.get("budget")
        return None if budget is None else float(budget)

    def __init__(
        self,
        *,
        proj_intv: int = 5,
        criterion: str = "acc",
        num_val_batches: int | None = None,
        tune_lr_factor: float = 0.1,
        tune_lr_schedule: str = "constant",
        tune_lr_min: float = 0.001,
        reuse_prefix: bool = True,
        batch_candidates: bool = False,
        seed: int = 0,
        budget: float | None = None,
        table: str | None = None,
        metric: str = "latency",
        force: bool = False,
    ) -> None:
        # a hard cost budget (hardware-aware search): None, or the table's cost model
        self.budget_model = None
        self.budget: float | None = None
        if budget is not None or table:
            from nas.hardware.cost import load_budget

            self.budget_model, self.budget = load_budget(
                table=table, budget=budget, metric=metric, force=force
            )
        if isinstance(proj_intv, bool) or not isinstance(proj_intv, int) or proj_intv < 0:
            raise ValueError(f"selection.proj_intv must be an int >= 0, got {proj_intv!r}")
        if criterion not in ("acc", "loss"):
            raise ValueError(f"selection.criterion must be 'acc' or 'loss', got {criterion!r}")
        if num_val_batches is not None and (
            isinstance(num_val_batches, bool)
            or not isinstance(num_val_batches, int)
            or num_val_batches < 1
        ):
            raise ValueError(
                f"selection.num_val_batches must be a positive int or null, got {num_val_batches!r}"
            )
        if tune_lr_factor <= 0 or tune_lr_min < 0:
            raise ValueError(
                f"selection.tune_lr_factor must be > 0 and tune_lr_min >= 0, got "
                f"{tune_lr_factor}, {tune_lr_min}"
            )
        if tune_lr_schedule not in ("constant", "cosine"):
            raise ValueError(
                "selection.tune_lr_schedule must be 'constant' (the reference) or 'cosine', "
                f"got {tune_lr_schedule!r}"
            )
        if not isinstance(batch_candidates, bool):
            raise ValueError(
                f"selection.batch_candidates must be true or false, got {batch_candidates!r}"
            )
        self.proj_intv = proj_intv
        self.criterion = criterion
        self.num_val_batches = num_val_batches
        self.tune_lr_factor = float(tune_lr_factor)
        self.tune_lr_min = float(tune_lr_min)
        self.tune_lr_schedule = tune_lr_schedule
        self.reuse_prefix = reuse_prefix
        self.batch_candidates = batch_candidates
        self.seed = int(seed)
        # progress, all of it in the checkpoint
        self.generator = torch.Generator().manual_seed(self.seed)
        self.tune_epoch = 0
        self.projections_done = 0  # projection events finished (each: one per cell type)
        self.decisions: list[dict[str, Any]] = []
        self.started = False
        self.projection: EdgeProjection | None = None  # the decided edges (attach)
        self._saved_projection: dict[str, Any] | None = None  # from a checkpoint, until attach

    # ----------------------------------------------------------------------- the plan

    @staticmethod
    def projection_plan(strategy: SearchStrategy) -> list[str]:
        """Projection events in order: ``op`` per edge, then ``edge`` per node with > 2 inputs.

        Each event projects one edge (or node) of every cell type."""
        space = strategy.supernet.space
        cells = list(space.cells.values())
        num_edges = max(c.num_edges for c in cells)
        plan = ["op"] * num_edges
        if space.selects_inputs:
            nodes = max(
                sum(
                    1
                    for n in c.intermediate_nodes
                    if len(c.edges_into(n)) > (c.inputs_per_node or 0)
                )
                for c in cells
            )
            plan += ["edge"] * nodes
        return plan

    def tune_epochs(self, strategy: SearchStrategy) -> int:
        """Fine-tuning epochs: ``proj_intv * (projections - 1)``, plus one on DARTS-style
        spaces (``sota/cnn/projection.py``: ``proj_intv * num_projs + 1``;
        ``nasbench201/projection.py``: ``proj_intv * (num_edges - 1)``)."""
        extra = 1 if strategy.supernet.space.selects_inputs else 0
        return self.proj_intv * (len(self.projection_plan(strategy)) - 1) + extra

    def projections_due(self, strategy: SearchStrategy, epoch: int) -> int:
        """How many projections are done once tuning epoch ``epoch`` has started: projection k
        at epoch ``min(k * proj_intv, tune_epochs - 1)``, the reference's ``epoch % proj_intv
        == 0 or epoch == tune_epochs - 1`` (all at once when ``proj_intv`` is 0)."""
        num = len(self.projection_plan(strategy))
        if self.proj_intv == 0 or epoch >= self.tune_epochs(strategy) - 1:
            return num
        return min(epoch // self.proj_intv + 1, num)

    # ---------------------------------------------------------------------- decisions

    def attach(self, strategy: SearchStrategy) -> EdgeProjection:
        """The projection state for ``strategy``'s supernet (the checkpoint's decisions after
        a resume), installed as the strategy's weight override."""
        if self.projection is None:
            self.projection = EdgeProjection.for_strategy(strategy)
            if self._saved_projection is not None:
                self.projection.load_state_dict(self._saved_projection)
                self._saved_projection = None
        install(strategy, self.projection)
        return self.projection

    def _undecided_edges(self, strategy: SearchStrategy, cell_type: str) -> list[int]:
        return self.attach(strategy).undecided(cell_type)

    def _pick(self, options: list[int]) -> int:
        return options[int(torch.randint(len(options), (1,), generator=self.generator))]

    def _eval(
        self,
        ctx: SelectionContext,
        strategy: SearchStrategy,
        cell_type: str,
        variants: list[ArchWeights],
    ) -> list[tuple[float, float]]:
        batches = ctx.val_batches(key=len(self.decisions), limit=self.num_val_batches)
        return evaluate_variants(
            strategy.supernet,
            variants,
            cell_type,
            batches,
            reuse_prefix=self.reuse_prefix,
            batch_candidates=self.batch_candidates,
            seed=self.seed * PT_DECISION_STRIDE + len(self.decisions),
            all_reduce_sum=ctx.all_reduce_sum,
        )

    def _base_weights(self, strategy: SearchStrategy) -> ArchWeights:
        with torch.no_grad():
            return {k: v.detach().clone() for k, v in strategy.arch_weights(sample=False).items()}

    # ------------------------------------------------------------------ the budget

    def _allowed(self, strategy: SearchStrategy) -> dict[str, torch.Tensor]:
        """Per cell type, the ops each edge may still end up with: the mask's on an undecided
        edge, the projected op on a decided one, none on a removed edge."""
        projection = self.attach(strategy)
        out = {}
        for ct, decided in projection.decided.items():
            mask = strategy.supernet.op_mask(ct).detach().cpu().clone()
            fixed = projection.weights_EO[ct].detach().cpu() != 0
            rows = decided.cpu()
            mask[rows] = fixed[rows]
            out[ct] = mask
        return out

    def _feasible(self, allowed: dict[str, torch.Tensor]) -> bool:
        """Whether the cheapest network the ``allowed`` ops leave is within the budget (the
        table is additive, so a choice that keeps this true keeps the final network within)."""
        from nas.hardware.cost import cheapest_cost

        assert self.budget_model is not None and self.budget is not None
        cost = cheapest_cost(self.budget_model, allowed)
        return cost is not None and cost <= self.budget + 1e-9 * max(1.0, abs(self.budget))

    def _keep_feasible(
        self, strategy: SearchStrategy, cell_type: str, edge: int, rows: list[torch.Tensor]
    ) -> list[bool]:
        """For each candidate row of edge ``edge`` (its allowed ops after a decision), whether
        the budget can still be met; all true without a budget."""
        if self.budget_model is None:
            return [True] * len(rows)
        base = self._allowed(strategy)
        out = []
        for row in rows:
            allowed = {ct: t.clone() for ct, t in base.items()}
            allowed[cell_type][edge] = row
            out.append(self._feasible(allowed))
        return out

    def project_op(
        self, ctx: SelectionContext, strategy: SearchStrategy, cell_type: str
    ) -> dict[str, Any]:
        edges = self._undecided_edges(strategy, cell_type)
        edge = self._pick(edges)
        space_edge = strategy.supernet.space.cells[cell_type].edges[edge]
        mask = strategy.supernet.op_mask(cell_type)[edge]
        # every op the edge still has, `none` included: the reference loops over all op
        # indices (sota/cnn/projection.py project_op). Removing `none` leaves the supernet as it
        # is, so `none` wins when no other op's removal lowers the accuracy.
        candidates = [k for k in range(len(space_edge.ops)) if bool(mask[k])]
        base = self._base_weights(strategy)
        variants = []
        for k in candidates:
            w = {ct: t.clone() for ct, t in base.items()}
            w[cell_type][edge, k] = 0.0  # remove op k; the others are not renormalised
            variants.append(w)
        scores = self._eval(ctx, strategy, cell_type, variants)
        n_ops = len(space_edge.ops)
        ok = self._keep_feasible(
            strategy, cell_type, edge,
            [torch.arange(n_ops) == k for k in candidates],
        )  # fmt: skip
        # with a budget, only ops that leave room for the cheapest completion of the rest
        feasible = [i for i in range(len(candidates)) if ok[i]]
        if self.criterion == "acc":  # the op whose removal hurts accuracy most
            best = min(feasible, key=lambda i: (scores[i][0], i))
        else:  # the op whose removal raises the loss most
            best = min(feasible, key=lambda i: (-scores[i][1], i))
        best = ctx.broadcast(best)  # taken once, on rank 0; all ranks project the same op
        op = candidates[best]
        self.attach(strategy).project_op(cell_type, edge, op)
        return {
            "kind": "op",
            "cell_type": cell_type,
            "edge": edge,
            "src": space_edge.src,
            "dst": space_edge.dst,
            "candidates": [space_edge.ops[k] for k in candidates],
            "acc": [s[0] for s in scores],
            "loss": [s[1] for s in scores],
            "chosen": space_edge.ops[op],
            "within_budget": [space_edge.ops[candidates[i]] for i in feasible],
        }

    def project_topology(
        self, ctx: SelectionContext, strategy: SearchStrategy, cell_type: str
    ) -> dict[str, Any]:
        cell = strategy.supernet.space.cells[cell_type]
        keep = cell.inputs_per_node or 0
        open_nodes = [
            n
            for n in cell.intermediate_nodes
            if len(cell.edges_into(n)) > keep
            and not any(
                d["kind"] == "edge" and d["cell_type"] == cell_type and d["node"] == n
                for d in self.decisions
            )
        ]
        node = self._pick(open_nodes)
        eids = [e.index for e in cell.edges_into(node)]
        # every input edge removed alone from the node as it is (all its edges present), once:
        # the reference (sota/cnn/projection.py project_edge) evaluates every round on
        # get_projected_weights, where the edges it has dropped from its list are still
        # present (they are zeroed only after the loop), so each round's scores are the first
        # round's for the edges left
        base = self._base_weights(strategy)
        variants = []
        for e in eids:
            w = {ct: t.clone() for ct, t in base.items()}
            w[cell_type][e] = 0.0
            variants.append(w)
        all_scores = dict(zip(eids, self._eval(ctx, strategy, cell_type, variants)))
        rounds = []
        while len(eids) > keep:
            scores = [all_scores[e] for e in eids]
            ok = [
                self.budget_model is None or self._removal_feasible(strategy, cell_type, e)
                for e in eids
            ]
            feasible = [i for i in range(len(eids)) if ok[i]]
            # remove the edge whose removal leaves the best supernet (ties: the later edge,
            # as the reference's `not compare(...)`); with a budget, among the removals that
            # leave room for it
            if self.criterion == "acc":
                i = max(feasible, key=lambda i: (scores[i][0], i))
            else:
                i = max(feasible, key=lambda i: (-scores[i][1], i))
            i = ctx.broadcast(i)
            rounds.append(
                {
                    "edges": list(eids),
                    "acc": [s[0] for s in scores],
                    "loss": [s[1] for s in scores],
                    "removed": eids[i],
                }
            )
            self.attach(strategy).remove_edge(cell_type, eids[i])
            del eids[i]
        return {
            "kind": "edge",
            "cell_type": cell_type,
            "node": node,
            "kept": eids,
            "rounds": rounds,
        }

    def _removal_feasible(self, strategy: SearchStrategy, cell_type: str, edge: int) -> bool:
        allowed = self._allowed(strategy)
        allowed[cell_type][edge] = False
        return self._feasible(allowed)

    # ---------------------------------------------------------------------- the loop

    def select(
        self,
        strategy: SearchStrategy,
        val_data: Iterable[Batch] | None = None,
        *,
        context: SelectionContext | None = None,
    ) -> AnyGenotype:
        if context is None:
            raise ValueError(
                "perturbation selection needs the search loop's context (run it from nas-search)"
            )
        ctx = context
        if self.batch_candidates:  # refused before anything runs, not at the first decision
            check_batchable(strategy.supernet)
        self.attach(strategy)
        if self.budget_model is not None:
            if strategy.supernet.space.name != self.budget_model.space:
                raise ValueError(
                    f"selection.table is a table of the {self.budget_model.space} space; the "
                    f"supernet is of {strategy.supernet.space.name}"
                )
            if not self._feasible(self._allowed(strategy)):
                from nas.hardware.cost import UNITS

                raise ValueError(
                    f"selection.budget {self.budget:g} {UNITS[self.budget_model.metric]} is "
                    "below the cheapest network the supernet can still become; expected a "
                    "larger budget"
                )
        plan = self.projection_plan(strategy)
        # proj_intv 0: one pass that projects everything and tunes nothing
        total = max(self.tune_epochs(strategy), 1)
        lr0 = ctx.search_lr * self.tune_lr_factor
        if not self.started:
            ctx.reset_weight_optimizer(lr0)  # the reference's reset_optimizer: fresh momentum
            self.started = True
        while self.tune_epoch < total:
            e = self.tune_epoch
            # after a resume in the middle of an epoch its projections are already done
            due = self.projections_due(strategy, e)
            if self.projections_done < due:
                while self.projections_done < due:
                    kind = plan[self.projections_done]
                    for ct in strategy.supernet.space.cell_types:
                        decision = (
                            self.project_op(ctx, strategy, ct)
                            if kind == "op"
                            else self.project_topology(ctx, strategy, ct)
                        )
                        decision["projection"] = self.projections_done
                        self.decisions.append(decision)
                        ctx.log(self.decision_event, **decision)
                    self.projections_done += 1
                    ctx.stop_point()  # a stop request: after the projection that was going
                ctx.checkpoint()
            if self.proj_intv == 0:  # no fine-tuning at all
                self.tune_epoch = total
                break
            if self.tune_lr_schedule == "constant":
                lr = lr0
            else:
                lr = (
                    self.tune_lr_min
                    + (lr0 - self.tune_lr_min) * (1 + math.cos(math.pi * e / total)) / 2
                )
            ctx.train_epoch(
                key=PT_TUNE_BASE + e,
                lr=lr,
                update_arch=not strategy.fix_alpha,
                desc=f"pt tune {e + 1}/{total}",
            )
            self.tune_epoch += 1
            ctx.checkpoint()
        with torch.no_grad():
            weights = strategy.derivation_weights()
        masks = {ct: strategy.supernet.op_mask(ct) for ct in weights}
        if self.budget_model is not None:
            # the projected network, read within the budget: the decisions kept room for it
            assert self.budget is not None
            from nas.hardware.cost import budget_argmax_genotype

            allowed = self._allowed(strategy)
            return budget_argmax_genotype(self.budget_model, weights, allowed, self.budget)
        return derive_genotype(strategy.supernet.space, weights, masks)

    # -------------------------------------------------------------------- checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "generator": self.generator.get_state(),
            "tune_epoch": self.tune_epoch,
            "projections_done": self.projections_done,
            "decisions": self.decisions,
            "started": self.started,
            "projection": None if self.projection is None else self.projection.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.tune_epoch = int(state["tune_epoch"])
        self.projections_done = int(state["projections_done"])
        self.decisions = list(state["decisions"])
        self.started = bool(state["started"])
        saved = state.get("projection")
        if saved is not None and self.projection is not None:
            self.projection.load_state_dict(saved)
        else:
            self._saved_projection = saved
