"""Zero-cost operation scoring: DARTS-PT's projection with a proxy instead of the accuracy drop.

Fourth stage of the pipeline (``nas.selection``). Xiang, Dudziak, Abdelfattah, Chau, Lane,
Wen, "Zero-Cost Operation Scoring in Differentiable Architecture Search", AAAI 2023
(zerocostptnas/zerocost_operation_score, ``nasbench201/init_projection.py: pt_project``,
``networks_proposal.py``, ``zerocostnas/post_validate.py``). On a supernet that is never
trained (``nas-search selection=zc epochs=0``):

* operation scoring, one undecided edge at a time (picked at random): for each candidate op o,
  the supernet with o removed is scored on a fresh training batch (one batch per edge, the same
  for all candidates). naswot (the paper's choice, ``proj_crit=jacob``): w[e, o] = 0, the others
  unchanged and not renormalised, BN in eval mode (the untrained running statistics, so the
  identity), and a zero-weight op still counts its ReLUs on a zeroed input as in the
  reference. Any other proxy (``pt_project``'s other branch): w[e, o] = 0 and 1/|O| for the
  rest of the edge, scored as the ZC harness does. The kept op is the argmin (the op whose
  removal hurts the score most); the edge becomes one-hot on it;
* topology (DARTS-style spaces, ``sota/cnn/init_projection.py``): for each node with more than
  two inputs, in random order, remove the edge whose zeroing leaves the highest score until two
  remain;
* a pool of ``pool_size`` such runs (default 10), each from a fresh alpha = 1e-3 randn and a
  new edge order, on the same supernet weights;
* post-validation: each distinct genotype of the pool becomes its discrete network (NB201: the
  benchmark's C=16, N=5; DARTS: ``post_C`` x ``post_layers``), freshly initialised, scored by
  the proxy on ``validate_rounds`` training batches (eval mode for naswot, as
  ``Scorers/scorer.py``); the sum decides (argmax).

Deviations, all of them choices where the reference is silent or broken: the reference routes
NB201 proxies other than naswot to its TE-NAS pruning (``networks_proposal.py:197-200``); we use
``pt_project``'s proxy branch for every proxy, with the projection batch in place of its
undefined ``train_queue`` (line 360). Edge order, alphas and network initialisations come from a
seeded generator stored in the checkpoint (an interrupted selection resumes to the same pool).
Every unmasked op of an edge is a candidate, ``none`` included, on every space: the reference
loops over all op indices (``sota/cnn/init_projection.py:60``, ``project_op``, as DARTS-PT's
``projection.py``); removing ``none`` leaves the supernet's output as it is. An edge decided
for ``none`` on a DARTS-style space derives as DARTS-PT's does (``none`` is never a derived op).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import Tensor

from nas.proxies import Proxy, ProxyError, Scorable, get_proxy
from nas.proxies.base import proxy_class
from nas.run.seeds import ZC_BATCH_BASE
from nas.selection.base import SelectionContext, Selector, derive_genotype
from nas.selection.projection import EdgeProjection, install
from nas.strategies.base import Batch, SearchStrategy
from nas.supernet import ArchWeights
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype, genotype_from_json


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"selection.{name} must be a positive int, got {value!r}")
    return value


class ZeroCostSelection(Selector):
    """Zero-Cost-PT: proxy-scored operation projection on an untrained supernet, a pool of
    runs, then post-validation of the distinct genotypes."""

    name = "zc"

    def __init__(
        self,
        *,
        proxy: str = "naswot",
        proxy_options: dict[str, Any] | None = None,
        pool_size: int = 10,
        batch_size: int = 256,
        validate_rounds: int = 100,
        validate_batch_size: int | None = None,
        post_C: int | None = None,
        post_layers: int | None = None,
        init_scale: float = 1e-3,
        seed: int = 0,
    ) -> None:
        self.proxy_name = str(proxy)
        self.proxy_options = dict(proxy_options or {})
        try:
            self.proxy: Proxy = self._make_proxy(supernet=True)
        except ProxyError as e:
            raise ValueError(f"selection.proxy: {e}") from None
        self.pool_size = _positive_int("pool_size", pool_size)
        self.batch_size = _positive_int("batch_size", batch_size)
        self.validate_rounds = _positive_int("validate_rounds", validate_rounds)
        self.validate_batch_size = _positive_int(
            "validate_batch_size", validate_batch_size or batch_size
        )
        self.post_C = None if post_C is None else _positive_int("post_C", post_C)
        self.post_layers = (
            None if post_layers is None else _positive_int("post_layers", post_layers)
        )
        if init_scale <= 0:
            raise ValueError(f"selection.init_scale must be > 0, got {init_scale!r}")
        self.init_scale = float(init_scale)
        self.seed = int(seed)
        # progress, all of it in the checkpoint
        self.generator = torch.Generator().manual_seed(self.seed)
        self.pool: list[dict[str, Any]] = []
        self.batches_drawn = 0
        # the current run's decided edges (each run of the pool starts with none)
        self.projection: EdgeProjection | None = None

    def _make_proxy(self, *, supernet: bool) -> Proxy:
        # the proxy's own Zero-Cost-PT defaults (naswot: BN in eval mode), then ours
        options = {
            **proxy_class(self.proxy_name).selection_options(supernet=supernet),
            **self.proxy_options,
        }
        return get_proxy(self.proxy_name, **options)

    # ------------------------------------------------------------------------------ data

    def _batch(
        self, ctx: SelectionContext | None, val_data: Iterator[Batch] | None, size: int
    ) -> Batch:
        """A fresh batch of ``size`` images from the architecture split (fewer if it is smaller)."""
        key = ZC_BATCH_BASE + self.batches_drawn
        self.batches_drawn += 1
        source: Iterable[Batch]
        if ctx is not None:
            source = ctx.val_batches(key=key, limit=None)
        elif val_data is not None:
            source = val_data
        else:
            raise ValueError("zero-cost selection needs the architecture split's batches")
        xs: list[Tensor] = []
        ys: list[Tensor] = []
        have = 0
        for x, y in source:
            xs.append(x)
            ys.append(y)
            have += int(x.shape[0])
            if have >= size:
                break
        if not xs:
            raise ValueError("zero-cost selection got no batches from the architecture split")
        return torch.cat(xs)[:size], torch.cat(ys)[:size]

    # ----------------------------------------------------------------------- one run

    def _score(self, strategy: SearchStrategy, weights: ArchWeights, batch: Batch) -> float:
        x, y = batch
        if self.proxy.data.kind == "ones":
            x = torch.ones_like(x[:1])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return self.proxy.score(Scorable(strategy.supernet, weights), x, y)

    def _variant(self, base: ArchWeights, cell_type: str, edge: int, op: int) -> ArchWeights:
        w = {ct: t.clone() for ct, t in base.items()}
        if self.proxy.removal == "uniform":
            # pt_project's branch for most proxies: the edge at 1/|O|, then o removed
            w[cell_type][edge] = 1.0 / w[cell_type].shape[1]
        w[cell_type][edge, op] = 0.0
        return w

    def _pick(self, options: list[int]) -> int:
        return options[int(torch.randint(len(options), (1,), generator=self.generator))]

    def _reset(self, strategy: SearchStrategy) -> None:
        """A fresh alpha (init_scale * randn) and no projection (networks_proposal.py:200)."""
        with torch.no_grad():
            for p in strategy.arch_params.values():
                p.copy_(self.init_scale * torch.randn(p.shape, generator=self.generator))
        if self.projection is None:
            self.projection = EdgeProjection.for_strategy(strategy)
        self.projection.reset()
        install(strategy, self.projection)

    def _base(self, strategy: SearchStrategy) -> ArchWeights:
        with torch.no_grad():
            return {k: v.detach().clone() for k, v in strategy.arch_weights(sample=False).items()}

    def _project_ops(
        self, ctx: SelectionContext | None, val_data: Any, strategy: SearchStrategy, cell_type: str
    ) -> list[dict[str, Any]]:
        supernet = strategy.supernet
        cell = supernet.space.cells[cell_type]
        decisions: list[dict[str, Any]] = []
        while True:
            assert self.projection is not None  # _reset made it
            undecided = self.projection.undecided(cell_type)
            if not undecided:
                return decisions
            edge = self._pick(undecided)
            mask = supernet.op_mask(cell_type)[edge]
            candidates = [k for k in range(len(cell.edges[edge].ops)) if bool(mask[k])]
            batch = self._batch(ctx, val_data, self.batch_size)
            base = self._base(strategy)
            scores = [
                self._score(strategy, self._variant(base, cell_type, edge, k), batch)
                for k in candidates
            ]
            # np.nanargmin: the first minimum, NaN ignored (all NaN: the first candidate)
            finite = [i for i, s in enumerate(scores) if s == s]
            best = min(finite, key=lambda i: (scores[i], i)) if finite else 0
            if ctx is not None:
                best = ctx.broadcast(best)
            assert self.projection is not None
            self.projection.project_op(cell_type, edge, candidates[best])
            decisions.append(
                {
                    "cell_type": cell_type,
                    "edge": edge,
                    "candidates": [cell.edges[edge].ops[k] for k in candidates],
                    "scores": scores,
                    "chosen": cell.edges[edge].ops[candidates[best]],
                }
            )

    def _project_topology(
        self, ctx: SelectionContext | None, val_data: Any, strategy: SearchStrategy, cell_type: str
    ) -> list[dict[str, Any]]:
        cell = strategy.supernet.space.cells[cell_type]
        keep = cell.inputs_per_node or 0
        nodes = [n for n in cell.intermediate_nodes if len(cell.edges_into(n)) > keep]
        decisions: list[dict[str, Any]] = []
        while nodes:
            node = self._pick(nodes)
            nodes.remove(node)
            eids = [e.index for e in cell.edges_into(node)]
            while len(eids) > keep:
                batch = self._batch(ctx, val_data, self.batch_size)
                base = self._base(strategy)
                scores = []
                for e in eids:
                    w = {ct: t.clone() for ct, t in base.items()}
                    w[cell_type][e] = 0.0
                    scores.append(self._score(strategy, w, batch))
                finite = [i for i, s in enumerate(scores) if s == s]
                i = max(finite, key=lambda i: (scores[i], -i)) if finite else 0
                if ctx is not None:
                    i = ctx.broadcast(i)
                decisions.append(
                    {"cell_type": cell_type, "node": node, "edges": list(eids), "scores": scores}
                )
                assert self.projection is not None
                self.projection.remove_edge(cell_type, eids[i])
                del eids[i]
        return decisions

    def _one_run(
        self, ctx: SelectionContext | None, val_data: Any, strategy: SearchStrategy
    ) -> AnyGenotype:
        self._reset(strategy)
        space = strategy.supernet.space
        decisions: list[dict[str, Any]] = []
        for ct in space.cell_types:
            decisions += self._project_ops(ctx, val_data, strategy, ct)
        if space.selects_inputs:
            for ct in space.cell_types:
                decisions += self._project_topology(ctx, val_data, strategy, ct)
        if ctx is not None:
            ctx.log("zc_run", run=len(self.pool), decisions=decisions)
        with torch.no_grad():
            weights = strategy.derivation_weights()
        masks = {ct: strategy.supernet.op_mask(ct) for ct in weights}
        return derive_genotype(space, weights, masks)

    # -------------------------------------------------------------------- post-validation

    def _network(self, strategy: SearchStrategy, genotype: AnyGenotype) -> torch.nn.Module:
        head = strategy.supernet.classifier
        assert isinstance(head, torch.nn.Linear)
        family = family_of(genotype)
        C, layers = family.paper_size
        net, _ = family.network(
            genotype, C=self.post_C or C, layers=self.post_layers or layers,
            num_classes=head.out_features,
        )  # fmt: skip
        return net

    def post_validate(
        self, ctx: SelectionContext | None, val_data: Any, strategy: SearchStrategy
    ) -> AnyGenotype:
        """The distinct genotypes of the pool, each its freshly initialised network, scored on
        ``validate_rounds`` batches; the highest sum wins (first on ties)."""
        distinct: list[str] = []
        for entry in self.pool:
            if entry["text"] not in distinct:
                distinct.append(entry["text"])
        genotypes = {e["text"]: e["genotype"] for e in self.pool}
        proxy = self._make_proxy(supernet=False)
        device = next(strategy.supernet.parameters()).device
        nets = {}
        for text in distinct:
            torch.manual_seed(int(torch.randint(2**31, (1,), generator=self.generator)))
            nets[text] = self._network(strategy, genotypes[text]).to(device)
        totals = dict.fromkeys(distinct, 0.0)
        for _ in range(self.validate_rounds):
            x, y = self._batch(ctx, val_data, self.validate_batch_size)
            if proxy.data.kind == "ones":
                x = torch.ones_like(x[:1])
            for text in distinct:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(self.seed)
                    totals[text] += proxy.score(Scorable(nets[text]), x, y)
        finite = [t for t in distinct if totals[t] == totals[t]]
        best = max(finite, key=lambda t: (totals[t], -distinct.index(t))) if finite else distinct[0]
        if ctx is not None:
            best = ctx.broadcast(best)
            ctx.log("zc_post_validation", genotypes=distinct, scores=[totals[t] for t in distinct])
        return genotypes[best]

    # --------------------------------------------------------------------------- select

    def select(
        self,
        strategy: SearchStrategy,
        val_data: Iterable[Batch] | None = None,
        *,
        context: SelectionContext | None = None,
    ) -> AnyGenotype:
        it = iter(val_data) if val_data is not None else None
        while len(self.pool) < self.pool_size:
            genotype = self._one_run(context, it, strategy)
            self.pool.append({"genotype": genotype, "text": str(genotype)})
            if context is not None:
                context.checkpoint()
                context.stop_point()  # a stop request: after the run that was going
        return self.post_validate(context, it, strategy)

    # ------------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "generator": self.generator.get_state(),
            "pool": [{"genotype": e["genotype"].to_json(), "text": e["text"]} for e in self.pool],
            "batches_drawn": self.batches_drawn,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.pool = [
            {"genotype": genotype_from_json(e["genotype"]), "text": e["text"]}
            for e in state["pool"]
        ]
        self.batches_drawn = int(state["batches_drawn"])


__all__ = ["ZeroCostSelection"]
