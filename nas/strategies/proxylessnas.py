"""ProxylessNAS: direct neural architecture search on target task and hardware (binary gates).

Third stage of the pipeline (``nas.strategies``). Cai, Zhu & Han, ICLR 2019, as the search code of
mit-han-lab/proxylessnas (``search/modules/mix_op.py``: ``MixedEdge``; ``search/nas_manager.py``:
``ArchSearchRunManager.train`` / ``gradient_step``, ``GradientArchSearchConfig``;
``search/imagenet_arch_search.py``: the paper's settings):

* each edge's candidates have probabilities ``p = softmax(alpha)`` and binary gates ``g``, one
  of them 1 (eq. 2-3): the path with gate 1 is the only one that runs and holds activations;
* the weight step samples one path per edge from ``p`` (``MixedEdge.binarize`` with mode None)
  and trains the weights of the sampled network (SGD, the run's optimiser and clip);
* the architecture step (eq. 4) samples the gates again, runs the sampled network on an
  architecture batch, takes each gate's gradient ``dL/dg_j = <dL/d out, o_j(x)>`` and carries
  it to alpha as ``dL/dalpha_i = sum_j dL/dg_j p_j (delta_ij - p_i)``
  (``MixedEdge.set_arch_param_grad``). ``mode`` says which gates get a gradient:

  - ``full_v2`` (the paper's script's default): every path; the outputs of the paths that did
    not run are recomputed, without autograd, in the backward (``ArchGradientFunction``), so
    the forward holds the sampled path's activations only;
  - ``full``: the same gradient, the other paths' outputs computed (detached) in the forward
    and held until the backward: more memory, the same numbers;
  - ``two``: two paths drawn from ``p`` without replacement, one of them made active with
    their renormalised probabilities ``q = softmax(alpha[pair])``; the formula runs over the
    pair with ``q``; after the Adam step the pair's logits are shifted by ``log(sum exp(new)
    / sum exp(old))`` so that the other paths keep their probabilities
    (``rescale_updated_arch_param``);

  an edge whose active path is ``none`` (the reference's zero layer) gets no architecture
  gradient at all (``set_arch_param_grad``);
* the schedule (``nas_manager.py: get_update_schedule``): one architecture step every
  ``update_every`` = 5 weight steps, after the weight step, each on a fresh sample (here after
  the 1st, 6th, ... weight step of an epoch, the reference's after the 5th, 10th, ...);
  Adam(1e-3, betas (0, 0.999), eps 1e-8, no weight decay) on alpha ~ 1e-3 * N(0, 1), each
  edge with its own state and step count (``EdgeAdam``: the reference has one parameter per
  block, and one whose active path is ``none`` has no gradient, so Adam skips it); every
  draw is over the edge's own candidates (``draw``: a masked op takes no random number);
  ``warmup_epochs`` leading epochs train the weights only (the paper's script: 40 warm-up
  epochs on random paths, then its search loop skips the architecture in its first epoch:
  ``warmup_epochs=41``).

The latency loss (``mul#log``: ``0.2 * CE * (log E / log T) ** 0.3``; ``add#linear``:
``CE + 0.1 (E - T) / T``, T = 80 ms) is the hardware cost component (``cost=latency
cost.form=mul_log cost.target=...``, ``nas.hardware.cost``): here its expectation ``E`` is
taken under the probabilities of the draw (``p``; in ``two`` the pair's ``q``, zero
elsewhere: ``current_prob_over_ops`` in ``SuperProxylessNASNets.expected_latency``), its
gradient reaches alpha through that softmax directly, and the gates' gradient (of
``a(E) * CE``) through the formula above, as the reference's ``loss.backward()`` then
``set_arch_param_grad`` do (the two Jacobians are the same one).

Evaluation and derivation use ``p`` (the reference validates the argmax path; ``selection=
argmax`` derives that path's genotype). One sample per cell type and edge is shared by the
cells of that type, which share their alpha (the reference has one alpha per block).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from nas.strategies.base import Batch, Shards, _zeros_for_none
from nas.strategies.sampling import SamplingStrategy
from nas.supernet import ArchWeights, Supernet
from nas.supernet.mixed_op import MixedOp

MODES = ("full_v2", "full", "two")


def gate_grad_to_alpha(alpha: Tensor, gate_grad: Tensor, support: Tensor) -> Tensor:
    """``dL/dalpha_i = sum_j gate_grad_j q_j (delta_ij - q_i)`` per row, with ``q`` the softmax
    of ``alpha`` over the ops in ``support`` (bool, same shape; at least one per row) and 0
    outside it: ProxylessNAS's eq. 4 (``set_arch_param_grad``); ``support`` is every unmasked
    op in the modes ``full`` / ``full_v2`` and the sampled pair in ``two``."""
    q = torch.softmax(alpha.masked_fill(~support, float("-inf")), dim=-1)
    g = gate_grad.to(q.dtype)
    return q * (g - (g * q).sum(-1, keepdim=True))


class ProxylessNAS(SamplingStrategy):
    """ProxylessNAS with binary gates: single-path weight steps, gated architecture steps."""

    name = "proxylessnas"
    mixing = "binary gates sampled from a softmax, one path per edge"
    # every hook but the softmax's replacement: the gates are drawn from a softmax
    capabilities = frozenset({"arch_params", "arch_penalty", "direct_params", "perturb",
                              "weight_grads"})  # fmt: skip

    def __init__(
        self,
        *,
        arch_lr: float = 1e-3,
        arch_betas: tuple[float, float] | list[float] = (0.0, 0.999),
        arch_weight_decay: float = 0.0,
        init_scale: float = 1e-3,
        fix_alpha: bool = False,
        arch_grad_clip: float | None = None,
        mode: str = "full_v2",
        update_every: int = 5,
        warmup_epochs: int = 0,
    ) -> None:
        super().__init__(
            arch_lr=arch_lr,
            arch_betas=arch_betas,
            arch_weight_decay=arch_weight_decay,
            init_scale=init_scale,
            fix_alpha=fix_alpha,
            arch_grad_clip=arch_grad_clip,
        )
        if mode not in MODES:
            raise ValueError(f"search.mode must be one of {', '.join(MODES)}, got {mode!r}")
        for key, value, least in (("update_every", update_every, 1),
                                  ("warmup_epochs", warmup_epochs, 0)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"search.{key} must be an int >= {least}, got {value!r}")
        self.mode = mode
        self.update_every = update_every
        self.warmup_epochs = warmup_epochs
        self.steps_in_epoch = 0  # weight steps taken in this epoch (the update schedule)
        self._last_val: dict[str, Tensor] = {}
        self._edges: dict[str, list[list[MixedOp]]] | None = None

    # ----------------------------------------------------------------------------- set-up

    def attach(self, ctx: Any, *, generator: torch.Generator | None = None) -> None:
        super().attach(ctx, generator=generator)
        epochs = ctx.epochs
        if not self.fix_alpha and epochs is not None and 0 < epochs <= self.warmup_epochs:
            raise ValueError(
                f"search.warmup_epochs={self.warmup_epochs} covers all {epochs} epochs, so the "
                f"architecture would never be trained; expected warmup_epochs < epochs"
            )
        # Adam with each edge's own state (the reference's one parameter per MixedEdge)
        self.arch_optimizer = EdgeAdam(
            self.arch_parameters(),
            lr=self.arch_lr,
            betas=self.arch_betas,
            weight_decay=self.arch_weight_decay,
        )
        self.supernet.set_unselected_scalars(False)
        # gates of 0 are paths not drawn: they never run (a component that asked for every
        # op, SDARTS, perturbs the weight step's gates away from 0 all the same)
        self.supernet.zero_weight_ops_run = False
        self._edges = edge_modules(self.supernet)

    def updates_arch(self, epoch: int) -> bool:
        return not self.fix_alpha and epoch >= self.warmup_epochs

    # -------------------------------------------------------------------------- weights

    def probabilities(self, cell_type: str) -> Tensor:
        """``p = softmax(alpha)`` over the unmasked ops of each edge (differentiable)."""
        alpha = self.arch_params[cell_type]
        mask = self.supernet.op_mask(cell_type)
        return torch.softmax(alpha.masked_fill(~mask, float("-inf")), dim=-1)

    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        if not sample:
            return {ct: self.probabilities(ct) for ct in self.arch_params}
        # the weight step's gates: one path per edge drawn from p (binarize, mode None)
        gen = self.generator(torch.device("cpu"))
        out = {}
        for ct, alpha in self.arch_params.items():
            p = self.probabilities(ct).detach().cpu()
            mask = self.supernet.op_mask(ct).cpu()
            index = [int(draw(row, allowed, 1, gen)[0]) for row, allowed in zip(p, mask)]
            out[ct] = _one_hot(index, alpha)
        return out

    def sample_gates(self, generator: torch.Generator) -> dict[str, tuple[list[int], Tensor]]:
        """The architecture step's draw per cell type: the active op of each edge and the
        support of the gradient formula (bool [edges, ops]): every unmasked op (``full``,
        ``full_v2``; one path drawn from p), or the pair drawn without replacement (``two``,
        the active one of them drawn from their renormalised probabilities), in the order of
        the reference's ``binarize`` calls."""
        out = {}
        for ct, alpha in self.arch_params.items():
            a = alpha.detach().cpu()
            mask = self.supernet.op_mask(ct).cpu()
            p = torch.softmax(a.masked_fill(~mask, float("-inf")), dim=-1)
            active, support = [], mask.clone()
            for e, row in enumerate(p):
                if self.mode != "two" or int(mask[e].sum()) < 2:
                    active.append(int(draw(row, mask[e], 1, generator)[0]))
                    continue
                pair = draw(row, mask[e], 2, generator)
                q = torch.softmax(a[e, pair], dim=0)
                c = int(torch.multinomial(q, 1, generator=generator))
                active.append(int(pair[c]))
                support[e] = False
                support[e, pair] = True
            out[ct] = (active, support)
        return out

    # ------------------------------------------------------------------------------ steps

    def step(
        self, train_batch: Batch | Shards, val_batch: Batch | Shards, *, update_arch: bool = True
    ) -> dict[str, Tensor]:
        """The weight step, then, at every ``update_every``-th step of an epoch (its 1st,
        6th, 11th, ...), an architecture step: the reference's order within a step and its
        frequency, its phase shifted by four steps (its architecture steps follow the 5th,
        10th, ... weight step of an epoch), so that an epoch's first step takes one. Steps
        without one report the epoch's last architecture step's ``val_*``, so that the epoch's
        means are those of its architecture steps."""
        metrics = self.weight_step(train_batch)
        if update_arch and not self.fix_alpha:
            if self.steps_in_epoch % self.update_every == 0:
                self._last_val = self.arch_step(train_batch, val_batch)
            metrics.update(self._last_val)
        self.steps_in_epoch += 1
        return metrics

    def arch_step(
        self, train_batch: Batch | Shards, val_batch: Batch | Shards
    ) -> dict[str, Tensor]:
        """One architecture step on binary gates (``gradient_step``)."""
        del train_batch
        draw = self.sample_gates(self.generator(torch.device("cpu")))
        decided = self._decided()
        gates: ArchWeights = {}
        for ct, alpha in self.arch_params.items():
            active = draw[ct][0]
            g = _one_hot(active, alpha)
            gates[ct] = self.overridden({ct: g})[ct].detach() if decided[ct].any() else g
        self._set_probes(draw, decided)
        try:
            direct = self.direct_arch_parameters()
            gate_grads, direct_grads, metrics = self.shard_grads(
                Shards.of(val_batch), gates, direct, tag="val"
            )
        finally:
            self._clear_probes()
        # the cost component's term: E under the probabilities the draw used (p; in `two`
        # the pair's renormalised q, zero elsewhere: the reference's current_prob_over_ops),
        # its gradient through that softmax, which is the gates' formula's own Jacobian
        with torch.no_grad():
            probs = {
                ct: torch.softmax(
                    alpha.masked_fill(~draw[ct][1].to(alpha.device), float("-inf")), dim=-1
                )
                for ct, alpha in self.arch_params.items()
            }
        n = len(probs)
        cost_grads, factor = self.add_cost(probs, [None] * n, metrics)
        grads: list[Tensor | None] = []
        alphas = list(self.arch_params.values())
        for i, (ct, alpha) in enumerate(self.arch_params.items()):
            active, support = draw[ct]
            a = alpha.detach()
            g = _zeros_for_none([gate_grads[i]], [a])[0]
            if factor is not None:
                g = g * factor.to(g.dtype)
            c = cost_grads[i]
            if c is not None:
                g = g + c.to(g.dtype)
            grad = gate_grad_to_alpha(a, g, support.to(a.device))
            dropped = self._no_grad_edges(ct, active, decided[ct]).to(a.device)
            grads.append(grad.masked_fill(dropped.unsqueeze(-1), 0.0).to(a.dtype))
            # no Adam step at all on those edges (the reference's None gradient)
            assert isinstance(self.arch_optimizer, EdgeAdam)
            self.arch_optimizer.skip_rows(alphas[i], dropped)
        old = [a.detach().clone() for a in alphas] if self.mode == "two" else []
        grads += [None] * len(direct)  # the components' parameters: their own gradients
        self.apply_arch_grads(self.with_direct(grads, direct_grads, factor))
        if self.mode == "two":
            self._rescale(draw, decided, old)
        return metrics

    # ---------------------------------------------------------------------------- helpers

    def _decided(self) -> dict[str, Tensor]:
        """Per cell type, the edges a selector's ``weight_override`` fixes (DARTS-PT): bool
        [edges], on the CPU."""
        out = {}
        for ct, alpha in self.arch_params.items():
            if self.weight_override is None:
                out[ct] = torch.zeros(alpha.shape[0], dtype=torch.bool)
                continue
            probe = torch.full_like(alpha.detach(), float("nan"))
            fixed = self.overridden({ct: probe})[ct]
            out[ct] = (~torch.isnan(fixed)).all(-1).cpu()
        return out

    def _no_grad_edges(self, ct: str, active: list[int], decided: Tensor) -> Tensor:
        """Edges whose active op is ``none`` (the reference's zero layer: no gradient) or
        that a selector decided."""
        edges = self.supernet.space.cells[ct].edges
        zero = torch.tensor([edges[e].ops[k] == "none" for e, k in enumerate(active)])
        return zero | decided

    def _set_probes(
        self, draw: dict[str, tuple[list[int], Tensor]], decided: dict[str, Tensor]
    ) -> None:
        """Tell every edge which of its ops get a gate gradient without running."""
        assert self._edges is not None
        for ct, per_edge in self._edges.items():
            active, support = draw[ct]
            skip = self._no_grad_edges(ct, active, decided[ct])
            for e, modules in enumerate(per_edge):
                probe = [] if bool(skip[e]) else [
                    k for k in support[e].nonzero().flatten().tolist() if k != active[e]
                ]  # fmt: skip
                for m in modules:
                    m.gate_probe = probe or None
                    m.gate_probe_recompute = self.mode == "full_v2"

    def _clear_probes(self) -> None:
        for m in self.supernet.mixed_ops():
            m.gate_probe = None

    def _rescale(
        self,
        draw: dict[str, tuple[list[int], Tensor]],
        decided: dict[str, Tensor],
        old: list[Tensor],
    ) -> None:
        """Mode ``two``: shift each sampled pair's logits by ``log(sum exp(new) / sum
        exp(old))``, so the paths not drawn keep their probabilities
        (``rescale_updated_arch_param``)."""
        with torch.no_grad():
            for (ct, alpha), before in zip(self.arch_params.items(), old):
                active, support = draw[ct]
                skip = self._no_grad_edges(ct, active, decided[ct])
                for e in range(alpha.shape[0]):
                    if bool(skip[e]):
                        continue
                    pair = support[e].nonzero().flatten().to(alpha.device)
                    offset = torch.logsumexp(alpha[e, pair], 0) - torch.logsumexp(
                        before[e, pair], 0
                    )
                    alpha[e, pair] -= offset

    def on_epoch_end(self, epoch: int) -> None:
        super().on_epoch_end(epoch)
        self.steps_in_epoch = 0
        self._last_val = {}

    def log_state(self) -> dict[str, Any]:
        """The mean entropy of p per edge (the reference logs the network's entropy)."""
        with torch.no_grad():
            total, edges = 0.0, 0
            for ct in self.arch_params:
                p = self.probabilities(ct)
                total += float(-(p * p.clamp_min(1e-30).log()).sum())
                edges += p.shape[0]
        return {"arch_entropy": total / max(edges, 1)}

    def checkpoint_state(self) -> dict[str, Any]:
        state = super().checkpoint_state()
        state["steps_in_epoch"] = self.steps_in_epoch
        state["last_val"] = {k: v.detach().cpu() for k, v in self._last_val.items()}
        return state

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        super().load_checkpoint_state(state)
        self.steps_in_epoch = int(state.get("steps_in_epoch", 0))
        device = next(iter(self.arch_params.values())).device
        self._last_val = {k: v.to(device) for k, v in (state.get("last_val") or {}).items()}


class EdgeAdam(torch.optim.Optimizer):
    """Adam (torch's single-tensor arithmetic, no amsgrad) with the state of each row of a
    2-D parameter kept apart, its step count included: each edge's logits are their own
    parameter, as the reference's ``AP_path_alpha`` of each ``MixedEdge`` under one
    ``torch.optim.Adam``. The rows given to ``skip_rows`` before a step take no step at all
    (moments and count unchanged), as a parameter whose gradient is None: an edge whose
    active path is ``none`` (``set_arch_param_grad``). A parameter of another rank (a
    component's) is one row."""

    def __init__(
        self,
        params: Any,
        *,
        lr: float,
        betas: tuple[float, float] | list[float],
        weight_decay: float = 0.0,
        eps: float = 1e-8,
    ) -> None:
        defaults = {"lr": lr, "betas": tuple(betas), "weight_decay": weight_decay, "eps": eps}
        super().__init__(params, defaults)
        self._skip: dict[int, Tensor] = {}

    def skip_rows(self, param: Tensor, rows: Tensor) -> None:
        """The rows (bool, one per row) of ``param`` that the next ``step`` leaves alone."""
        self._skip[id(param)] = rows.detach().to(torch.bool).flatten().cpu()

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        assert closure is None, "EdgeAdam takes no closure"
        skip, self._skip = self._skip, {}
        for group in self.param_groups:
            lr, (beta1, beta2) = group["lr"], group["betas"]
            wd, eps = group["weight_decay"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                rows = p.shape[0] if p.dim() == 2 else 1
                state = self.state[p]
                if not state or state["step"].dim() == 0:  # new, or torch Adam's one count
                    count = float(state["step"]) if state else 0.0
                    state["step"] = torch.full((rows,), count, dtype=torch.float64)
                    for key in ("exp_avg", "exp_avg_sq"):
                        if key not in state:
                            state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
                take = ~skip.get(id(p), torch.zeros(rows, dtype=torch.bool))
                steps: Tensor = state["step"]
                steps[take] += 1
                param, grad = p.view(rows, -1), p.grad.view(rows, -1)
                m_all, v_all = state["exp_avg"].view(rows, -1), state["exp_avg_sq"].view(rows, -1)
                for count in sorted(set(steps[take].tolist())):
                    idx = (take & (steps == count)).nonzero().flatten().to(p.device)
                    g = grad[idx]
                    if wd != 0:
                        g = g.add(param[idx], alpha=wd)
                    m, v = m_all[idx], v_all[idx]
                    m.lerp_(g, 1 - beta1)
                    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                    step_size = lr / (1 - beta1**count)
                    denom = (v.sqrt() / (1 - beta2**count) ** 0.5).add_(eps)
                    param[idx] = param[idx].addcdiv(m, denom, value=-step_size)
                    m_all[idx], v_all[idx] = m, v


def draw(p: Tensor, allowed: Tensor, n: int, generator: torch.Generator) -> Tensor:
    """``n`` ops of one edge drawn from ``p`` without replacement among the ``allowed`` ones
    only (indices into the edge's ops): the reference's ``torch.multinomial`` over its own
    candidates, which lack the ops masked here (a block that cannot be skipped has no zero
    layer), so that the same generator draws the same paths (``torch.multinomial`` consumes
    one number per entry, masked or not)."""
    where = allowed.nonzero().flatten()
    return where[torch.multinomial(p[where], n, replacement=False, generator=generator)]


def _one_hot(index: list[int], like: Tensor) -> Tensor:
    out = torch.zeros(like.shape, dtype=like.dtype)
    out[torch.arange(len(index)), torch.tensor(index, dtype=torch.long)] = 1.0
    return out.to(like.device)


def edge_modules(supernet: Supernet) -> dict[str, list[list[MixedOp]]]:
    """Per cell type and edge, the ``MixedOp`` of that edge in every cell of the type. Two
    layouts: each cell holds every edge of its type (the cell spaces: a cell's mixed ops, in
    module order, are its edges in order, as SNAS's cost tables read them), or the cells of a
    type are its edges, one mixed op each, in order (a chain of blocks: the ProxylessNAS
    family). A one-line error for a supernet laid out otherwise."""
    shapes = supernet.arch_shapes()
    per_cell: dict[str, list[list[MixedOp]]] = {ct: [] for ct in shapes}
    for cell, ct in zip(supernet.cells, supernet.cell_types):
        if ct is not None:
            per_cell[ct].append([m for m in cell.modules() if isinstance(m, MixedOp)])
    out: dict[str, list[list[MixedOp]]] = {}
    for ct, cells in per_cell.items():
        edges = shapes[ct][0]
        if cells and all(len(mixed) == edges for mixed in cells):
            out[ct] = [[mixed[e] for mixed in cells] for e in range(edges)]
        elif sum(len(mixed) for mixed in cells) == edges:
            out[ct] = [[m] for mixed in cells for m in mixed]
        else:
            raise ValueError(
                f"ProxylessNAS: the supernet's {ct!r} cells hold "
                f"{[len(mixed) for mixed in cells]} mixed ops, which match neither "
                f"{edges} edges per cell nor {edges} edges in all"
            )
    return out
