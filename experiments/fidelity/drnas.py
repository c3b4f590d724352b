"""Fidelity of DrNAS against xiangning-chen/DrNAS (``DARTS-space/`` and ``201-space/``).

Chen, Wang, Cheng, Tang, Hsieh, "DrNAS: Dirichlet Neural Architecture Search", ICLR 2021. Each
edge's mixing weights are one sample ``w ~ Dir(a)`` per forward with the concentration
``a = elu(beta) + 1`` (eq. 2; the code's ``process_step_vector``), ops masked by progressive
pruning zeroed and the sample renormalised over the rest. The architecture gradient is the
pathwise one (eq. 3): ``dL/dbeta = (dw/da)^T dL/dw * elu'(beta)``, where ``dw/da`` is the
implicit reparameterisation gradient of the Gamma-normalisation sampler
(``torch.distributions.Dirichlet.rsample``). The regulariser is either L2 on beta (Adam weight
decay ``reg_scale``, the default) or ``reg_scale * sum_edges KL(Dir(a) || Dir(1))`` (eq. 5) with

    KL(Dir(a) || Dir(1)) = lnG(a0) - sum_i lnG(a_i) - lnG(n) + sum_i (a_i - 1)(psi(a_i) - psi(a0)),
    dKL/da_i = (a_i - 1) psi'(a_i) - (a0 - n) psi'(a0),          a0 = sum_i a_i, n ops.

Partial channels (K, PC-DARTS without edge normalisation): the ops see the first C/K channels,
the rest bypass them (max-pooled 2x2 at stride 2), and the concatenation is shuffled with K
groups. Progressive learning (section 3.3): between stages every edge keeps its top-k ops by
beta (the others masked, their beta set to 0 as the code's ``utils.prune`` does) and each op is
widened from C/K_old to C/K_new channels by Net2Wider (momentum buffers widened alike).

Known answers (no checkout): the Dirichlet sample of a step is ``torch._sample_dirichlet`` of
``elu(beta) + 1`` from the generator seeded by ``draw_seed()``; the forward at that sample
equals the mixed sum written out; a partial-channel edge (K = 6, stride 1 and 2) equals split,
ops, bypass, concatenation and shuffle written out; the architecture gradient equals autograd
through ``torch.distributions.Dirichlet(elu(beta) + 1).rsample()`` replaying the same sample,
and the step is Adam with L2; the KL regulariser's value and gradient equal the closed forms
above; the weight step with ``clip_arch_with_weights`` equals one clip over the weights and
beta's gradient written out; pruning keeps the top-k of beta and zeroes the others; the epochs
that update the architecture are those ``>= 10`` into each stage.

With ``--reference-root drnas=PATH`` (a checkout of github.com/xiangning-chen/DrNAS): the
reference's ``DARTS-space/model_search.Network`` (K = 6) and ``architect.Architect``, and its
``201-space/search_model.TinyNetwork`` (K = 1), at float64 with our weights copied in. The same
Dirichlet samples on both sides: ours draws through its own seam (``draw_seed()``), and while
the reference runs, ``torch._sample_dirichlet`` (which its ``Dirichlet(...).rsample()`` calls,
once per edge row) is patched in memory to return our draw's rows in order; the reference's
own pathwise backward (``torch.distributions.dirichlet._Dirichlet``) differentiates them, and
the concentrations it asked for are compared with ours (a row). Compared: the forward, the
architecture gradient (``.grad`` before Adam) and step, three whole steps (architecture then
weights; the DARTS space clips the weights alone at 5, as its ``train_search.py``; NB201 clips
``model.parameters()``, which hold beta, so ours runs with ``search.clip_arch_with_weights``
as ``experiment=drnas_nb201`` sets it), a step with the KL regulariser, the genotypes, the
stage change of the DARTS space (``model.pruning(4)``, ``model.wider(4)`` and
``net2wider.configure_optimizer``; the reference's ``torch.randint`` channel draws are patched
to return our Net2Wider maps, op by op, and its ``configure_optimizer`` reads the old
optimiser's ``state_dict`` keyed by ``id(p)``, as PyTorch <= 1.4 packed it) followed by two
whole steps at K = 4, the weight learning rate of every epoch (its two SGD optimisers and
chained cosine schedulers, against ``optimizer.stage_lr=reference``: the experiment's default
``cosine`` is the intended single cosine, a documented option) and the settings of both
``train_search.py`` against ``experiment=drnas_darts_cifar10`` / ``drnas_nb201``. The
reference's stage-change BN map of a stride-2 ``FactorizedReduce`` is misaligned (indices of
one half applied to the whole); it touches only running statistics (affine-free BN in training
mode), which are not compared. Our NB201 ``nor_conv`` convolutions carry a bias (NAS-Bench-201's
``bias=not affine``) that DrNAS's ``201-space`` ReLUConvBN lacks; before an affine-free BN in
training mode it changes nothing (the forward row), and the weight rows compare the tensors
both sides have.

Found and fixed (``nas/strategies/drnas.py``): at a stage change the pruned ops' beta was kept;
the reference's ``utils.prune`` sets it to 0, and since a pruned op still enters its edge's
Dirichlet draw before the mask, the sample, the pathwise gradient (through the total
concentration) and the KL term depended on it (rows "stage change" and after: 1e-1 and more).

    python experiments/fidelity/drnas.py --reference-root drnas=~/src/DrNAS

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/drnas.pt`` (``--record`` with the checkout writes them); ours runs the
same either way (its own draws, Net2Wider maps and stage-1 ``K`` / keep).
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
import re
import sys
from collections import deque
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch
from torch import nn
from torch.distributions import Dirichlet

from nas.plugins import build_components, build_strategy
from nas.run.schedules import search_lr_factor
from nas.selection.base import derived_genotype
from nas.strategies.base import SearchContext
from nas.supernet import build_supernet
from nas.supernet import widen as widen_module
from search_spaces.ops import FactorizedReduce

METHOD = "DrNAS"
REFERENCES = {"drnas": F.Reference("xiangning-chen/DrNAS", "DARTS-space/model_search.py")}
C, LAYERS, CLASSES, K = 12, 5, 10, 6  # reductions at 1 and 3; K = 6 (DARTS-space --k)
NB_C, NB_N = 8, 1
ARCH_START = 10  # architecture updates start 10 epochs into each stage (train_search.py)
_SAMPLE = torch._sample_dirichlet


def ours(experiment: str, *overrides: str, seed: int = 0) -> tuple[Any, nn.Module, Any]:
    """Our DrNAS of ``experiment`` (its YAML) on a small float64 supernet, beta ~ N(0, 1)."""
    cfg = F.compose([f"experiment={experiment}", *overrides])
    strategy = build_strategy(cfg)
    strategy.add_components(build_components(cfg))
    torch.manual_seed(seed)
    if cfg.space.name == "nb201":
        net = build_supernet("nb201", C=NB_C, layers=NB_N, num_classes=CLASSES).double()
    else:
        net = build_supernet(
            cfg.space.name, C=C, layers=LAYERS, num_classes=CLASSES, partial_channels=K
        ).double()
    F.randomise_affine(net, seed)
    o = cfg.optimizer
    opt = torch.optim.SGD(
        net.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay
    )
    ctx = SearchContext(net, opt, grad_clip=o.grad_clip, epochs=cfg.epochs, steps_per_epoch=3)
    strategy.attach(ctx, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():  # concentrations far from 1, so that the sample is far from uniform
        g = torch.Generator().manual_seed(seed + 1)
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=g, dtype=a.dtype))
    return strategy, net, cfg


def betas(strategy: Any) -> list[torch.Tensor]:
    return [a.detach().clone() for a in strategy.arch_params.values()]


def arch_grads(strategy: Any) -> list[torch.Tensor]:
    return [a.grad.detach().clone() for a in strategy.arch_params.values()]


# ---------------------------------------------------------------------- the same samples


class Draws:
    """``torch._sample_dirichlet`` wrapped: ``recording()`` keeps ours' draws row by row (and
    ours' concentrations, ``ours``); ``replaying()`` answers the reference's calls (one per edge
    row) with them, in order, and keeps the concentrations it asked for (``theirs``)."""

    def __init__(self) -> None:
        self.rows: deque[tuple[torch.Tensor, torch.Tensor]] = deque()
        self.ours: list[torch.Tensor] = []
        self.theirs: list[torch.Tensor] = []

    def _record(self, conc: torch.Tensor, generator: Any = None) -> torch.Tensor:
        x = _SAMPLE(conc, generator=generator)
        n = conc.shape[-1]
        for c, s in zip(conc.detach().reshape(-1, n), x.detach().reshape(-1, n)):
            self.rows.append((c.clone(), s.clone()))
            self.ours.append(c.clone())
        return x

    def _replay(self, conc: torch.Tensor, generator: Any = None) -> torch.Tensor:
        if not self.rows:
            raise SystemExit("Draws: the reference drew more Dirichlet samples than ours")
        rows = [self.rows.popleft() for _ in range(conc.numel() // conc.shape[-1])]
        self.theirs.extend(conc.detach().reshape(-1, conc.shape[-1]).clone())
        return torch.stack([s for _, s in rows]).reshape(conc.shape)

    @contextlib.contextmanager
    def _patched(self, fn: Any) -> Iterator[None]:
        torch._sample_dirichlet = fn  # type: ignore[assignment]
        try:
            yield
        finally:
            torch._sample_dirichlet = _SAMPLE  # type: ignore[assignment]

    def recording(self) -> contextlib.AbstractContextManager[None]:
        return self._patched(self._record)

    @contextlib.contextmanager
    def replaying(self) -> Iterator[None]:
        with self._patched(self._replay):
            yield
        if self.rows:
            raise SystemExit(f"Draws: {len(self.rows)} of ours' sample rows left unused")


# ------------------------------------------------------------------------------ known answers


def _mixed_edge(mixed: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """One edge written out: ``sum_k w_k op_k(x[:, :C/K])``, the bypass (max-pooled 2x2 at
    stride 2), ``cat`` and ``channel_shuffle`` with K groups."""
    c = x.shape[1] // mixed.k
    head, rest = x[:, :c], x[:, c:]
    out = sum(
        w[k] * op(head)
        for k, (op, name) in enumerate(zip(mixed.ops, mixed.op_names))
        if name != "none" and w[k] != 0
    )
    if mixed.k == 1:
        return out  # type: ignore[return-value]
    if mixed.stride == 2:
        rest = nn.functional.max_pool2d(rest, 2, 2)
    cat = torch.cat([out, rest], dim=1)  # type: ignore[list-item]
    n, ch, h, ww = cat.shape
    return cat.view(n, mixed.k, ch // mixed.k, h, ww).transpose(1, 2).reshape(n, ch, h, ww)


def mixed_forward(net: nn.Module, x: torch.Tensor, weights: dict[str, torch.Tensor]):
    """The DARTS-space supernet written out: each node the sum of its edges' mixed outputs."""
    s0 = s1 = net.stem(x)
    for cell in net.cells:
        w = weights[cell.cell_type]
        states = [cell.preprocess0(s0), cell.preprocess1(s1)]
        for edges in cell.edges_into:
            states.append(
                sum(_mixed_edge(cell.ops[e], states[cell.edge_src[e]], w[e]) for e in edges)
            )
        s0, s1 = s1, torch.cat(states[-cell.multiplier :], dim=1)
    return net.classifier(net.global_pooling(s1).flatten(1))


def _sample_of(strategy: Any, seed: int) -> dict[str, torch.Tensor]:
    """The step's sample written out: ``torch._sample_dirichlet(elu(beta) + 1)`` from the
    generator seeded by the k-th ``draw_seed()`` of step ``seed``, one draw per cell type."""
    probe = SimpleNamespace(_step_seed=seed, _draws=0)
    out = {}
    for ct, beta in strategy.arch_params.items():
        s = type(strategy).draw_seed(probe)
        conc = nn.functional.elu(beta.detach()) + 1
        out[ct] = _SAMPLE(conc, generator=torch.Generator().manual_seed(s))
    return out


def _replayed_rsample(conc: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
    """``Dirichlet(conc).rsample()`` (torch.distributions: the reference's call) returning
    ``sample``: its pathwise backward on our draw."""
    torch._sample_dirichlet = lambda c, generator=None: sample.clone()  # type: ignore[assignment]
    try:
        return Dirichlet(conc).rsample()
    finally:
        torch._sample_dirichlet = _SAMPLE  # type: ignore[assignment]


def _adam_l2(beta: list[torch.Tensor], grads: list[torch.Tensor], lr: float, wd: float):
    leaves = [b.detach().clone().requires_grad_(True) for b in beta]
    adam = torch.optim.Adam(leaves, lr=lr, betas=(0.5, 0.999), weight_decay=wd)
    for p, g in zip(leaves, grads):
        p.grad = g.detach().clone()
    adam.step()
    return [p.detach() for p in leaves]


def known_answers(table: F.Table) -> None:
    (tb, vb) = F.batches(2)
    strategy, net, cfg = ours("drnas_darts_cifar10")
    seed = 7
    expected = _sample_of(strategy, seed)
    strategy.begin_step(seed)
    with torch.no_grad():
        got = strategy.arch_weights(sample=True)
    table.add(METHOD, "sample = Dir(elu(beta)+1) drawn at draw_seed()", got, expected)
    with torch.no_grad():
        table.add(
            METHOD,
            f"forward (K={K}) = mixed sum written out",
            net(vb[0], got),
            mixed_forward(net, vb[0], got),
        )
    cell = net.cells[1]  # a reduction cell: stride-2 edges 0-1, stride-1 edges from node 2
    x = torch.randn(4, cell.ops[0].C, 8, 8, generator=torch.Generator().manual_seed(3))
    w = got[cell.cell_type]
    with torch.no_grad():
        for stride in (2, 1):
            e = next(i for i, m in enumerate(cell.ops) if m.stride == stride)
            mixed = cell.ops[e]
            active = [True] * len(mixed.ops)
            h = x if stride == 2 else x[:, :, ::2, ::2]
            table.add(
                METHOD,
                f"partial-channel edge K={K}, stride {mixed.stride}, written out",
                mixed(h, w[e], active),
                _mixed_edge(mixed, h, w[e]),
            )

    # the architecture gradient: autograd through Dirichlet(elu(beta)+1).rsample() replaying
    # the step's sample, then Adam(arch_lr, (0.5, 0.999), wd = reg_scale) (architect.py)
    b0 = betas(strategy)
    leaves = [b.clone().requires_grad_(True) for b in b0]
    ws = {
        ct: _replayed_rsample(nn.functional.elu(b) + 1, expected[ct])
        for ct, b in zip(strategy.arch_params, leaves)
    }
    loss = nn.functional.cross_entropy(mixed_forward(net, *vb[:1], ws), vb[1])
    grads = list(torch.autograd.grad(loss, leaves))
    strategy.begin_step(seed)
    strategy.arch_step(tb, vb)
    table.add(
        METHOD, "architecture gradient = autograd through rsample", arch_grads(strategy), grads
    )
    table.add(
        METHOD,
        "architecture step = Adam with L2 1e-3",
        betas(strategy),
        _adam_l2(b0, grads, cfg.search.arch_lr, cfg.search.reg_scale),
    )

    # the KL regulariser (eq. 5) and its gradient in closed form
    strategy, net, cfg = ours("drnas_darts_cifar10", "search.reg_type=kl", "search.reg_scale=0.5")
    kl, dkl = [], []
    for beta in strategy.arch_params.values():
        b = beta.detach()
        a = nn.functional.elu(b) + 1
        a0, n = a.sum(-1, keepdim=True), a.shape[-1]
        kl.append(
            (
                torch.lgamma(a0[:, 0])
                - torch.lgamma(a).sum(-1)
                - math.lgamma(n)
                + ((a - 1) * (torch.digamma(a) - torch.digamma(a0))).sum(-1)
            ).sum()
        )
        da = (a - 1) * torch.polygamma(1, a) - (a0 - n) * torch.polygamma(1, a0)
        dkl.append(0.5 * da * torch.where(b > 0, torch.ones_like(b), torch.exp(b)))
    table.add(METHOD, "KL regulariser = closed form", strategy.arch_regularizer(), 0.5 * sum(kl))
    table.add(METHOD, "KL gradient = closed form", strategy.regularizer_grads(), dkl)

    # the NB201 weight step: one clip over the weights and beta's gradient of the training loss
    strategy, net, cfg = ours("drnas_nb201")
    snapshot = [p.detach().clone() for p in net.parameters()]
    b = strategy.arch_params["cell"]
    strategy.begin_step(3)
    sample = _sample_of(strategy, 3)["cell"]
    leaf = b.detach().clone().requires_grad_(True)
    w_ = _replayed_rsample(nn.functional.elu(leaf) + 1, sample)
    params = list(net.parameters())
    loss = nn.functional.cross_entropy(net(tb[0], {"cell": w_}), tb[1])
    g = torch.autograd.grad(loss, [*params, leaf], allow_unused=True)
    norm = torch.cat([t.flatten() for t in g if t is not None]).norm()
    coef = min(1.0, cfg.optimizer.grad_clip / (float(norm) + 1e-6))
    o = cfg.optimizer  # SGD's first step: p - lr (clipped g + wd p)
    expected_w = [
        p0 if gi is None else p0 - o.lr * (gi * coef + o.weight_decay * p0)
        for p0, gi in zip(snapshot, g)
    ]
    with torch.no_grad():
        for p, p0 in zip(params, snapshot):
            p.copy_(p0)
    strategy.begin_step(3)
    strategy.weight_step(tb)
    table.add(
        METHOD,
        "NB201 weight step = joint clip (weights + beta) written out",
        [p.detach() for p in net.parameters()],
        expected_w,
    )

    # pruning (section 3.3): the top-4 of beta kept, the others masked and their beta set to 0
    strategy, net, _ = ours("drnas_darts_cifar10")
    b0 = betas(strategy)
    strategy.enter_stage(1)
    keep = [
        torch.zeros_like(b, dtype=torch.bool).scatter(1, b.topk(4, -1).indices, True) for b in b0
    ]
    table.add_equal(
        METHOD,
        "pruning: masks = top-4 of beta",
        [net.op_mask(ct).tolist() for ct in strategy.arch_params],
        [m.tolist() for m in keep],
    )
    table.add(
        METHOD,
        "pruning: beta of pruned ops = 0",
        betas(strategy),
        [b * m for b, m in zip(b0, keep)],
    )
    table.add_equal(
        METHOD,
        "architecture updates: epochs >= 10 into each stage",
        [strategy.updates_arch(e) for e in range(50)],
        [e % 25 >= ARCH_START for e in range(50)],
    )


# ---------------------------------------------------------------------------- the reference


def _main_assignments(path: str) -> dict[str, Any]:
    """The literal lists assigned in a reference script's ``main()`` (``ks = [6, 4]``; for
    ``[2, 2] if 'debug' in args.save else [25, 25]`` the non-debug branch), and the epoch
    from which ``train()`` steps the architecture (``if epoch >= 10``)."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    out: dict[str, Any] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t, v = node.targets[0], node.value
            if isinstance(t, ast.Name) and t.id in ("ks", "num_keeps", "train_epochs"):
                out[t.id] = ast.literal_eval(v.orelse if isinstance(v, ast.IfExp) else v)
    m = re.search(r"if epoch >= (\d+):\s*\n\s*architect\.step", source)
    out["arch_start"] = int(m.group(1)) if m else 0
    return out


@contextlib.contextmanager
def _old_state_dict(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """``optimizer.state_dict()['state']`` keyed by ``id(p)``, as PyTorch <= 1.4 packed it
    (``net2wider.configure_optimizer`` looks states up by ``p.raw_id = id(old weight)``)."""
    optimizer.state_dict = lambda: {"state": {id(p): s for p, s in optimizer.state.items()}}  # type: ignore[method-assign]
    try:
        yield
    finally:
        del optimizer.state_dict


def _our_widening(strategy: Any, stage: int) -> list[list[dict[int, torch.Tensor]]]:
    """``strategy.enter_stage(stage)``, recording our Net2Wider channel maps: per mixed op and
    op, ``{c_old: new channels' sources}`` (and ``{c_old / 2: ...}`` for a FactorizedReduce)."""
    calls: list[tuple[int, torch.Tensor]] = []
    original = widen_module._channel_map

    def record(c_old: int, c_new: int, generator: torch.Generator) -> torch.Tensor:
        m = original(c_old, c_new, generator)
        calls.append((c_old, m[c_old:].clone()))
        return m

    widen_module._channel_map = record  # type: ignore[assignment]
    try:
        strategy.enter_stage(stage)
    finally:
        widen_module._channel_map = original  # type: ignore[assignment]
    queue = deque(calls)
    maps = []
    for mixed in strategy.supernet.mixed_ops():
        per_op = []
        for name, op in zip(mixed.op_names, mixed.ops):
            d: dict[int, torch.Tensor] = {}
            if name != "none":
                d.update([queue.popleft()])
                if any(isinstance(m, FactorizedReduce) for m in op.modules()):
                    d.update([queue.popleft()])
            per_op.append(d)
        maps.append(per_op)
    assert not queue
    return maps


def _wider_with(
    model: nn.Module, mixed_cls: type, maps: list[list[dict[int, torch.Tensor]]], k: int
) -> None:
    """The reference's ``model.wider(k)`` with each op's ``torch.randint`` answered by our map
    of the channel count it widens (``high`` = the old count)."""
    mixed_ops = [m for m in model.modules() if isinstance(m, mixed_cls)]
    assert len(mixed_ops) == len(maps)
    randint = torch.randint
    current: dict[int, torch.Tensor] = {}

    def answer(low: int = 0, high: int | None = None, size: Any = None, **kw: Any):
        idx = current[int(high)]  # type: ignore[arg-type]
        assert tuple(idx.shape) == tuple(size), (idx.shape, size)
        return idx.clone()

    for mixed, per_op in zip(mixed_ops, maps):
        for op, d in zip(mixed._ops, per_op):
            wider = op.wider

            def patched(c_in: int, c_out: int, _wider=wider, _d=d) -> None:
                current.clear()
                current.update(_d)
                _wider(c_in, c_out)

            op.wider = patched
    torch.randint = answer  # type: ignore[assignment]
    try:
        model.wider(k)
    finally:
        torch.randint = randint  # type: ignore[assignment]
        for mixed in mixed_ops:
            for op in mixed._ops:
                del op.wider


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("drnas")  # else the reference's values come from its recording
    ref_label = refs.label("drnas")
    _compare_darts_space(table, refs, live, ref_label)
    _compare_nb201(table, refs, live, ref_label)


def _compare_darts_space(table: F.Table, refs: F.Refs, live: bool, ref_label: str) -> None:
    train_batches, val_batches = F.batches(5, seed=1), F.batches(5, seed=2)
    with refs.imports("drnas", "DARTS-space", ["DARTS-space", ""]), F.float64():
        if live:
            import net2wider  # type: ignore[import-not-found]
            from architect import Architect  # type: ignore[import-not-found]
            from model_search import MixedOp, Network  # type: ignore[import-not-found]

            defaults = F.script_defaults("train_search.py")
            body = _main_assignments("train_search.py")
        criterion = nn.CrossEntropyLoss()

        def reference(strategy: Any, net: nn.Module, reg_type: str, reg_scale: float):
            if not live:
                return None, None, None, None
            args = SimpleNamespace(**{**defaults, "reg_type": reg_type, "reg_scale": reg_scale})
            model = Network(
                C, CLASSES, LAYERS, criterion, k=K, reg_type=reg_type, reg_scale=reg_scale
            ).double()
            F.copy_weights(net, model)
            with torch.no_grad():
                model.alphas_normal.copy_(strategy.arch_params["normal"])
                model.alphas_reduce.copy_(strategy.arch_params["reduce"])
            optimizer = torch.optim.SGD(
                model.parameters(),
                args.learning_rate,
                momentum=args.momentum,
                weight_decay=args.weight_decay,
            )
            return model, optimizer, Architect(model, args), args

        def ref_weight_step(model, optimizer, architect, args, tb) -> None:
            # train_search.py train(): zero both, forward, backward, clip the weights, step
            optimizer.zero_grad()
            architect.optimizer.zero_grad()
            loss = criterion(model(tb[0]), tb[1])
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            optimizer.step()
            optimizer.zero_grad()
            architect.optimizer.zero_grad()

        def alphas(model) -> list[torch.Tensor]:
            return [model.alphas_normal.detach().clone(), model.alphas_reduce.detach().clone()]

        def grads(model) -> list[torch.Tensor]:
            return [model.alphas_normal.grad.clone(), model.alphas_reduce.grad.clone()]

        draws = Draws()

        def step(i, strategy, model, optimizer, architect, args, tb, vb, tag, first):
            strategy.begin_step(100 + i)
            with draws.recording():
                strategy.arch_step(tb, vb)
            if live:
                with draws.replaying():
                    architect.step(*tb, *vb, args.learning_rate, optimizer, unrolled=False)
            if first:
                table.add(
                    METHOD,
                    f"{tag}: architecture gradient",
                    arch_grads(strategy),
                    lambda: grads(model),
                    ref_label,
                )
                table.add(
                    METHOD,
                    f"{tag}: architecture step",
                    betas(strategy),
                    lambda: alphas(model),
                    ref_label,
                )
            with draws.recording():
                strategy.weight_step(tb)
            if live:
                with draws.replaying():
                    ref_weight_step(model, optimizer, architect, args, tb)

        # the forward at one sample, and the genotype
        strategy, net, cfg = ours("drnas_darts_cifar10")
        model, optimizer, architect, args = reference(strategy, net, "l2", 1e-3)
        x = val_batches[0][0]
        strategy.begin_step(1)
        with draws.recording(), torch.no_grad():
            ours_logits = net(x, strategy.arch_weights(sample=True))
        ref_logits = None
        if live:
            with draws.replaying(), torch.no_grad():
                ref_logits = model(x)
        table.add(
            METHOD,
            f"DARTS space K={K}: forward at one Dirichlet sample",
            ours_logits,
            lambda: ref_logits,
            ref_label,
        )
        table.add_equal(
            METHOD,
            "DARTS space: genotype (Network.genotype)",
            F.our_genotype(strategy),
            lambda: F.reference_genotype(model),
            ref_label,
        )

        # three whole steps (L2: Adam weight decay), then the stage change and two more
        for i, (tb, vb) in enumerate(zip(train_batches[:3], val_batches[:3])):
            step(
                i, strategy, model, optimizer, architect, args, tb, vb, f"DARTS space K={K}", i == 0
            )
        table.add(
            METHOD,
            f"DARTS space K={K}: beta after 3 steps",
            betas(strategy),
            lambda: alphas(model),
            ref_label,
        )
        table.add(
            METHOD,
            f"DARTS space K={K}: weights after 3 steps",
            F.trained(net),
            lambda: F.trained(model),
            ref_label,
        )

        # the stage change: ours enters its stage 1; the reference prunes and widens to its
        # main()'s second ks / num_keeps (the settings rows compare them with ours)
        stage2 = cfg.search.stages[1]
        k2, keep2 = stage2.partial_channels, stage2.keep
        maps = _our_widening(strategy, 1)
        if live:
            model.pruning(body["num_keeps"][1])
            _wider_with(model, MixedOp, maps, body["ks"][1])
            with _old_state_dict(optimizer), contextlib.redirect_stdout(io.StringIO()):
                optimizer = net2wider.configure_optimizer(
                    optimizer,
                    torch.optim.SGD(
                        model.parameters(),
                        args.learning_rate,
                        momentum=args.momentum,
                        weight_decay=args.weight_decay,
                    ),
                )
        table.add_equal(
            METHOD,
            f"stage change: masks (model.pruning({keep2}))",
            [net.op_mask(ct).tolist() for ct in ("normal", "reduce")],
            lambda: [model.mask_normal.tolist(), model.mask_reduce.tolist()],
            ref_label,
        )
        table.add(
            METHOD,
            "stage change: beta after pruning",
            betas(strategy),
            lambda: alphas(model),
            ref_label,
        )
        table.add(
            METHOD,
            f"stage change: weights widened to K={k2}",
            F.trained(net),
            lambda: F.trained(model),
            ref_label,
        )
        momentum_ours = [
            optimizer_state(strategy.ctx.weight_optimizer, p) for p in _trained_params(net)
        ]
        table.add(
            METHOD,
            "stage change: momentum buffers widened",
            momentum_ours,
            lambda: [optimizer_state(optimizer, p) for p in _trained_params(model)],
            ref_label,
        )
        for i, (tb, vb) in enumerate(zip(train_batches[3:], val_batches[3:])):
            step(
                3 + i,
                strategy,
                model,
                optimizer,
                architect,
                args,
                tb,
                vb,
                f"after the stage change (K={k2}, keep {keep2})",
                i == 0,
            )
        table.add(
            METHOD,
            "after the stage change: beta after 2 steps",
            betas(strategy),
            lambda: alphas(model),
            ref_label,
        )
        table.add(
            METHOD,
            "after the stage change: weights after 2 steps",
            F.trained(net),
            lambda: F.trained(model),
            ref_label,
        )
        table.add(
            METHOD,
            "DARTS space: concentrations at every draw, ours vs asked",
            torch.stack(draws.ours),  # one (draws, ops) tensor: a compact recording
            lambda: torch.stack(draws.theirs),
            ref_label,
        )

        # the KL regulariser (reg_type=kl): one architecture step
        strategy, net, _ = ours("drnas_darts_cifar10", "search.reg_type=kl", "search.reg_scale=0.5")
        model, optimizer, architect, args = reference(strategy, net, "kl", 0.5)
        step(
            0,
            strategy,
            model,
            optimizer,
            architect,
            args,
            train_batches[0],
            val_batches[0],
            "DARTS space, reg_type=kl",
            True,
        )

        # the weight learning rate of every epoch: train_search.py's loop (a fresh SGD and
        # configure_scheduler at the stage change), against optimizer.stage_lr=reference
        def ref_lrs() -> list[float]:
            p = nn.Parameter(torch.zeros(1))
            sgd = torch.optim.SGD([p], args.learning_rate, momentum=args.momentum)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(
                sgd, float(sum(body["train_epochs"])), eta_min=args.learning_rate_min
            )
            out = []
            for i, epochs in enumerate(body["train_epochs"]):
                for _ in range(epochs):
                    out.append(sgd.param_groups[0]["lr"])
                    sgd.step()
                    sched.step()
                if i < len(body["train_epochs"]) - 1:
                    sgd = torch.optim.SGD([p], args.learning_rate, momentum=args.momentum)
                    fresh = torch.optim.lr_scheduler.CosineAnnealingLR(
                        sgd, float(sum(body["train_epochs"])), eta_min=args.learning_rate_min
                    )
                    with contextlib.redirect_stdout(io.StringIO()):  # its "scheduler loaded"
                        sched = net2wider.configure_scheduler(sched, fresh)
            return out

        o = cfg.optimizer
        factor = search_lr_factor(
            epochs=cfg.epochs,
            lr=o.lr,
            lr_min=o.lr_min,
            warmup_epochs=o.warmup_epochs,
            stage_lr="reference",
            stage_starts=strategy.stage_start_epochs,
        )
        table.add(
            METHOD,
            f"weight lr of epochs 0-{cfg.epochs - 1} (optimizer.stage_lr=reference)",
            [o.lr * factor(e) for e in range(cfg.epochs)],
            ref_lrs,
            ref_label,
        )

    stages = list(cfg.search.stages)
    F.add_settings(
        table,
        METHOD,
        {
            "DARTS space: batch_size": cfg.batch_size,
            "DARTS space: learning_rate": cfg.optimizer.lr,
            "DARTS space: learning_rate_min": cfg.optimizer.lr_min,
            "DARTS space: momentum": cfg.optimizer.momentum,
            "DARTS space: weight_decay": cfg.optimizer.weight_decay,
            "DARTS space: grad_clip": cfg.optimizer.grad_clip,
            "DARTS space: init_channels": cfg.space.C,
            "DARTS space: layers": cfg.space.layers,
            "DARTS space: arch_learning_rate": cfg.search.arch_lr,
            "DARTS space: reg_type": cfg.search.reg_type,
            "DARTS space: reg_scale (L2: Adam weight decay)": cfg.search.arch_weight_decay,
            "DARTS space: unrolled": cfg.search.order == 2,
            "DARTS space: k (first stage's K)": stages[0].partial_channels,
            "DARTS space: ks (main)": [s.partial_channels for s in stages],
            "DARTS space: num_keeps (main)": [s.keep for s in stages],
            "DARTS space: train_epochs (main)": [s.epochs for s in stages],
            "DARTS space: architecture from epoch (train)": cfg.search.arch_start_epoch,
            "DARTS space: clip includes beta": cfg.search.clip_arch_with_weights,
        },
        lambda: {
            **{f"DARTS space: {k}": v for k, v in defaults.items()},
            "DARTS space: reg_scale (L2: Adam weight decay)": defaults["reg_scale"],
            "DARTS space: k (first stage's K)": defaults["k"],
            "DARTS space: ks (main)": body["ks"],
            "DARTS space: num_keeps (main)": body["num_keeps"],
            "DARTS space: train_epochs (main)": body["train_epochs"],
            "DARTS space: architecture from epoch (train)": body["arch_start"],
            "DARTS space: clip includes beta": False,  # alphas are Variables, not parameters
        },
        ref_label,
    )


def _compare_nb201(table: F.Table, refs: F.Refs, live: bool, ref_label: str) -> None:
    train_batches, val_batches = F.batches(3, seed=3), F.batches(3, seed=4)
    with refs.imports("drnas", "201-space", ["201-space", ""]), F.float64():
        criterion = nn.CrossEntropyLoss()
        strategy, net, cfg = ours("drnas_nb201")
        if live:
            from architect import Architect  # type: ignore[import-not-found]
            from cell_operations import NAS_BENCH_201  # type: ignore[import-not-found]
            from search_model import TinyNetwork  # type: ignore[import-not-found]

            defaults = F.script_defaults("train_search.py")
            args = SimpleNamespace(**defaults)
            model = TinyNetwork(
                C=NB_C,
                N=NB_N,
                max_nodes=4,
                num_classes=CLASSES,
                criterion=criterion,
                search_space=NAS_BENCH_201,
                k=args.k,
                species=args.method,
                reg_type=args.reg_type,
                reg_scale=args.reg_scale,
            ).double()
            F.copy_weights(net, model)
            with torch.no_grad():
                model._arch_parameters.copy_(strategy.arch_params["cell"])
            optimizer = torch.optim.SGD(
                model.get_weights(),
                args.learning_rate,
                momentum=args.momentum,
                weight_decay=args.weight_decay,
            )
            architect = Architect(model, args)
        draws = Draws()

        x = val_batches[0][0]
        strategy.begin_step(1)
        with draws.recording(), torch.no_grad():
            ours_logits = net(x, strategy.arch_weights(sample=True))
        ref_logits = None
        if live:
            with draws.replaying(), torch.no_grad():
                ref_logits = model(x)
        table.add(
            METHOD,
            "NB201: forward at one Dirichlet sample",
            ours_logits,
            lambda: ref_logits,
            ref_label,
        )
        table.add_equal(
            METHOD,
            "NB201: genotype (TinyNetwork.genotype)",
            [list(n) for n in derived_genotype(strategy).nodes],
            lambda: [list(n) for n in model.genotype().nodes],
            ref_label,
        )

        for i, (tb, vb) in enumerate(zip(train_batches, val_batches)):
            strategy.begin_step(200 + i)
            with draws.recording():
                strategy.arch_step(tb, vb)
            if live:
                with draws.replaying():
                    architect.step(*tb, *vb, args.learning_rate, optimizer, unrolled=args.unrolled)
            if i == 0:
                table.add(
                    METHOD,
                    "NB201: architecture gradient",
                    arch_grads(strategy),
                    lambda: [model._arch_parameters.grad],
                    ref_label,
                )
                table.add(
                    METHOD,
                    "NB201: architecture step",
                    betas(strategy),
                    lambda: [model._arch_parameters],
                    ref_label,
                )
            with draws.recording():
                strategy.weight_step(tb)
            if live:
                with draws.replaying():  # 201-space/train_search.py train(), lines 266-276
                    optimizer.zero_grad()
                    architect.optimizer.zero_grad()
                    loss = criterion(model(tb[0]), tb[1])
                    loss.backward()
                    nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
                    optimizer.step()
                    optimizer.zero_grad()
                    architect.optimizer.zero_grad()
        table.add(
            METHOD,
            "NB201: beta after 3 steps (joint clip)",
            betas(strategy),
            lambda: [model._arch_parameters],
            ref_label,
        )
        table.add(
            METHOD,
            "NB201: weights after 3 steps (joint clip)",
            _trained_but_conv_bias(net),
            lambda: _trained_but_conv_bias(model),
            ref_label,
        )
        table.add(
            METHOD,
            "NB201: concentrations at every draw, ours vs asked",
            torch.stack(draws.ours),  # one (draws, ops) tensor: a compact recording
            lambda: torch.stack(draws.theirs),
            ref_label,
        )

        def ref_settings() -> dict[str, Any]:
            clips_beta = any(p is model._arch_parameters for p in model.parameters())
            return {
                **{f"NB201: {k}": v for k, v in defaults.items()},
                "NB201: reg_scale (L2: Adam weight decay)": defaults["reg_scale"],
                "NB201: clip includes beta (model.parameters())": clips_beta,
            }

        settings = ref_settings() if live else {}

    F.add_settings(
        table,
        METHOD,
        {
            "NB201: epochs": cfg.epochs,
            "NB201: batch_size": cfg.batch_size,
            "NB201: learning_rate": cfg.optimizer.lr,
            "NB201: learning_rate_min": cfg.optimizer.lr_min,
            "NB201: momentum": cfg.optimizer.momentum,
            "NB201: weight_decay": cfg.optimizer.weight_decay,
            "NB201: grad_clip": cfg.optimizer.grad_clip,
            "NB201: init_channels": cfg.space.C,
            "NB201: arch_learning_rate": cfg.search.arch_lr,
            "NB201: reg_type": cfg.search.reg_type,
            "NB201: reg_scale (L2: Adam weight decay)": cfg.search.arch_weight_decay,
            "NB201: unrolled": cfg.search.order == 2,
            "NB201: k": cfg.search.stages[0].partial_channels,
            "NB201: clip includes beta (model.parameters())": cfg.search.clip_arch_with_weights,
        },
        lambda: settings,
        ref_label,
    )


def _trained_params(module: nn.Module) -> list[torch.Tensor]:
    return [
        t
        for m in F.modules_in_order(module)
        for n in ("weight", "bias")
        if isinstance(t := getattr(m, n, None), nn.Parameter)
    ]


def _trained_but_conv_bias(module: nn.Module) -> list[torch.Tensor]:
    """``F.trained`` less the convolutions' biases: our NB201 ``nor_conv`` convs carry one
    (NAS-Bench-201's ``bias=not affine``) that DrNAS's ``201-space`` ReLUConvBN lacks
    (``bias=False``); before an affine-free BN in training mode it changes nothing. Each side
    selects its own tensors (the reference has no convolution bias either)."""
    return [
        t.detach().clone()
        for m in F.modules_in_order(module)
        for n in ("weight", "bias")
        if isinstance(t := getattr(m, n, None), torch.Tensor)
        and not (n == "bias" and isinstance(m, nn.Conv2d))
    ]


def optimizer_state(optimizer: torch.optim.Optimizer, p: torch.Tensor) -> torch.Tensor:
    state = optimizer.state.get(p) or {}
    buf = state.get("momentum_buffer")
    return buf.detach().clone() if buf is not None else torch.zeros(0)


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
