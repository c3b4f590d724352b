"""Fidelity of GDAS against D-X-Y/AutoDL-Projects (NB201 and the DARTS space).

Dong & Yang, "Searching for A Robust Neural Architecture in Four GPU Hours", CVPR 2019: the
hard Gumbel-softmax sample (eqs. 3-5) ``h = softmax((log_softmax(alpha) + G) / tau)``,
``w = onehot(argmax h) - stopgrad(h) + h`` with ``G = -log E``, ``E ~ Exp(1)``, redrawn while
``G`` or ``h`` holds an inf / NaN (``search_model_gdas.py:114-129``): the value is one-hot and
the gradient ``dL/dalpha = J_softmax(y)^T (dL/dw) / tau`` through ``log_softmax``; only the
sampled op of an edge runs (NB201: the other ops' weights enter the node as scalars of value 0,
``search_cells.py:72-86``); ``tau_e = tau_max - (tau_max - tau_min) e / (T - 1)``
(``GDAS.py:237-239``); each iteration the weight step (its clip over ``network.parameters()``,
alpha included) then the architecture step, Adam(3e-4, (0.5, 0.999), wd 1e-3)
(``GDAS.py:40-76``).

Known answers (no checkout): the hard sample's value is the one-hot of ``argmax`` of
``(log_softmax(alpha) + G) / tau`` for given noise, and its gradient is the softmax Jacobian at
``tau`` (written out) times the upstream gradient; a non-finite draw is redrawn; tau of every
epoch of a 250-epoch run equals the linear formula; an architecture step's gradient equals
autograd through the NB201 network with the same one-hot sample and the unselected ops as
zero-valued scalars, written out over our op modules.

With ``--reference-root gdas=PATH`` (a checkout of github.com/D-X-Y/AutoDL-Projects):
``TinyNetworkGDAS`` (NB201, ``experiment=gdas_nb201``) and ``NASNetworkGDAS`` (the DARTS space,
``experiment=gdas_darts_cifar10``: ``space.lastact``, ``space.pool_bn``, ``selection=
gdas_topk``) at float64 with our weights, our alphas, and THE SAME Gumbel noise: ours draws
``E ~ Exp(1)`` from its step generator (``draw_seed()``; ``nas.strategies.gdas.gumbel`` is wrapped
to record each ``E``), and the reference's ``torch.empty_like(alpha).exponential_()`` is
patched in memory (``Tensor.exponential_`` inside the reference's calls only) to return the
recorded ``E`` in draw order (permuted to the reference's op order in the DARTS space).
Compared: the forward on a sample, the architecture gradient (``.grad`` before Adam), three
whole steps run by the reference's own ``search_func`` (GDAS.py, loaded with the shims; its
logging stubbed), the tau schedule and the cosine learning rate of its scheduler, the genotype
(``genotype()`` against ours: NB201 ``derived_genotype``, the DARTS space ``gdas_topk``) and the
settings of ``GDAS.config`` / ``GDAS-NASNet-CIFAR.config`` and ``GDAS.sh``. The weight
optimiser is SGD with Nesterov momentum on both sides (``optimizer.nesterov`` of the GDAS
experiments, the configs' ``nesterov 1``).

    python experiments/fidelity/gdas.py --reference-root gdas=~/src/AutoDL-Projects

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/gdas.pt`` (``--record`` with the checkout writes them); ours runs the
same either way.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
from collections.abc import Iterator
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch
from torch import nn

import nas.strategies.gdas as gdas_module
from nas.plugins import build_strategy
from nas.run.schedules import search_lr_factor
from nas.selection.base import derived_genotype
from nas.selection.gdas_topk import top_pairs
from nas.strategies.base import SearchContext
from nas.strategies.gdas import gdas_sample
from nas.supernet import build_supernet

METHOD = "GDAS"
REFERENCES = {
    "gdas": F.Reference("D-X-Y/AutoDL-Projects", "xautodl/models/cell_searchs/search_model_gdas.py")
}
C, CLASSES, EPOCHS = 4, 10, 250
LR, MOMENTUM, WD, CLIP = 0.025, 0.9, 5e-4, 5.0
EXPERIMENTS = {"nb201": "experiment=gdas_nb201", "darts": "experiment=gdas_darts_cifar10"}
# our op names -> the reference's DARTS_SPACE names (cell_operations.py:96-105)
REF_NAMES = {
    "none": "none",
    "max_pool_3x3": "max_pool_3x3",
    "avg_pool_3x3": "avg_pool_3x3",
    "skip_connect": "skip_connect",
    "sep_conv_3x3": "dua_sepc_3x3",
    "sep_conv_5x5": "dua_sepc_5x5",
    "dil_conv_3x3": "dil_sepc_3x3",
    "dil_conv_5x5": "dil_sepc_5x5",
}
OUR_NAMES = {v: k for k, v in REF_NAMES.items()}


def ours(space: str, seed: int = 0, epoch: int = 0) -> tuple[Any, nn.Module, Any]:
    """Our GDAS strategy (the experiment's config) on a float64 supernet with random alphas."""
    cfg = F.compose([EXPERIMENTS[space]])
    strategy = build_strategy(cfg)
    torch.manual_seed(seed)
    if space == "nb201":
        net = build_supernet("nb201", C=C, layers=1, num_classes=CLASSES)
    else:
        net = build_supernet("darts", C=C, layers=cfg.space.layers, num_classes=CLASSES,
                             lastact=cfg.space.lastact, pool_bn=cfg.space.pool_bn)  # fmt: skip
    net = net.double()
    F.randomise_affine(net, seed)
    with torch.no_grad():  # larger logits: the clip at 5 binds, so its norm is compared
        net.classifier.weight.mul_(30.0)
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD,
                          nesterov=True)  # fmt: skip
    strategy.attach(SearchContext(net, opt, grad_clip=CLIP, epochs=EPOCHS),
                    generator=torch.Generator().manual_seed(seed))  # fmt: skip
    strategy.epoch = epoch
    with torch.no_grad():  # alphas far from uniform, so that the samples differ
        g = torch.Generator().manual_seed(seed + 1)
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=g, dtype=a.dtype))
    return strategy, net, cfg


def cell_types(strategy: Any) -> list[str]:
    return list(strategy.arch_params)


def alphas(strategy: Any) -> list[torch.Tensor]:
    return [strategy.arch_params[ct].detach().clone() for ct in cell_types(strategy)]


def arch_grads(strategy: Any) -> list[torch.Tensor]:
    return [strategy.arch_params[ct].grad.detach().clone() for ct in cell_types(strategy)]


# ------------------------------------------------------------------------- the shared draws


@contextlib.contextmanager
def recording(draws: list[torch.Tensor]) -> Iterator[None]:
    """Our sampler's noise as before (``-log E``, E from the step's generator), each ``E``
    appended to ``draws``."""
    original = gdas_module.gumbel

    def gumbel(shape, generator, device):
        e = torch.empty(shape, device=device).exponential_(generator=generator)
        draws.append(e.detach().clone())
        return -e.log()

    gdas_module.gumbel = gumbel
    try:
        yield
    finally:
        gdas_module.gumbel = original


@contextlib.contextmanager
def replaying(draws: list[torch.Tensor], order: list[int] | None = None) -> Iterator[None]:
    """The reference's ``empty_like(alpha).exponential_()`` returns the recorded draws in turn
    (``order``: our op k is the reference's column ``order[k]``)."""
    original = torch.Tensor.exponential_

    def exponential_(self, *args, **kwargs):
        if not draws:
            raise SystemExit("gdas fidelity: the reference drew more noise than ours")
        e = draws.pop(0)
        if order is not None:
            fed = torch.empty_like(e)
            fed[:, order] = e
            e = fed
        if e.shape != self.shape:
            raise SystemExit(f"gdas fidelity: noise of shape {tuple(e.shape)} fed to "
                             f"{tuple(self.shape)}")  # fmt: skip
        with torch.no_grad():
            return self.copy_(e)

    torch.Tensor.exponential_ = exponential_  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.exponential_ = original  # type: ignore[method-assign]


# ------------------------------------------------------------------------------ known answers


def _nb201_forward(net: nn.Module, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The reference's NB201 forward written out over our modules: per edge
    ``w[k*] op_k*(x) + sum_{k != k*} w[k]``."""
    feature = net.stem(x)
    for cell in net.cells:
        if not hasattr(cell, "edges_into"):
            feature = cell(feature)
            continue
        nodes = [feature]
        for edges in cell.edges_into:
            node = 0
            for e in edges:
                mixed, h = cell.ops[e], nodes[cell.edge_src[e]]
                k_star = int(w[e].detach().argmax())
                for k, name in enumerate(mixed.op_names):
                    if k != k_star:
                        node = node + w[e, k]
                    elif name == "none":
                        node = node + w[e, k] * torch.zeros_like(h)
                    else:
                        node = node + w[e, k] * mixed.ops[k](h)
            nodes.append(node)
        feature = nodes[-1]
    return net.classifier(net.global_pooling(net.lastact(feature)).flatten(1))


def known_answers(table: F.Table) -> None:
    g = torch.Generator().manual_seed(3)
    alpha = torch.randn(6, 5, generator=g, dtype=torch.float64).requires_grad_(True)
    upstream = torch.randn(6, 5, generator=g, dtype=torch.float64)
    for tau in (10.0, 1.0, 0.1):
        draws: list[torch.Tensor] = []
        with recording(draws):
            w, index = gdas_sample(alpha, tau, torch.Generator().manual_seed(4))
        (grad,) = torch.autograd.grad((w * upstream).sum(), alpha)
        gum = -draws[0].log()
        y = (torch.log_softmax(alpha.detach(), -1) + gum) / tau
        h = torch.softmax(y, -1)
        table.add_equal(METHOD, f"tau={tau:g}: sample = onehot(argmax (log_softmax(a)+G)/tau)",
                        index.tolist(), y.argmax(-1).tolist())  # fmt: skip
        table.add(METHOD, f"tau={tau:g}: sample value is one-hot", w,
                  nn.functional.one_hot(index, 5).double())  # fmt: skip
        # dL/dy = J_softmax(h) u / tau, then through log_softmax: (I - softmax(alpha)) ^T
        dy = (h * upstream - h * (h * upstream).sum(-1, keepdim=True)) / tau
        p = torch.softmax(alpha.detach(), -1)
        expected = dy - p * dy.sum(-1, keepdim=True)
        table.add(METHOD, f"tau={tau:g}: straight-through gradient = J_softmax / tau", grad,
                  expected)  # fmt: skip

    # a draw with an infinite noise entry is redrawn (E = 0 gives G = inf)
    calls = {"n": 0}
    original = gdas_module.gumbel

    def broken_once(shape, generator, device):
        calls["n"] += 1
        out = original(shape, generator, device)
        if calls["n"] == 1:
            out[0, 0] = math.inf
        return out

    gdas_module.gumbel = broken_once
    try:
        w, _ = gdas_sample(alpha, 1.0, torch.Generator().manual_seed(5))
    finally:
        gdas_module.gumbel = original
    table.add_equal(METHOD, "an inf draw is redrawn (draws, finite)",
                    (calls["n"], bool(torch.isfinite(w).all())), (2, True))  # fmt: skip

    strategy, _, _ = ours("nb201")
    taus = []
    for e in range(EPOCHS):
        strategy.epoch = e
        taus.append(strategy.tau)
    table.add(METHOD, "tau of epochs 0-249 = 10 - 9.9 e / 249", taus,
              [10 - (10 - 0.1) * e / (EPOCHS - 1) for e in range(EPOCHS)])  # fmt: skip

    # the architecture gradient of one step = autograd through the written-out NB201 forward
    strategy, net, _ = ours("nb201")
    (tb, vb) = F.batches(2, seed=3)
    a0 = alphas(strategy)[0]
    draws = []
    strategy.begin_step(0)
    with recording(draws):
        strategy.arch_step(tb, vb)
    leaf = a0.clone().requires_grad_(True)
    y = (torch.log_softmax(leaf, -1) - draws[0].log()) / strategy.tau
    h = torch.softmax(y, -1)
    one = nn.functional.one_hot(h.detach().argmax(-1), 5).double()
    w = one - h.detach() + h
    loss = nn.functional.cross_entropy(_nb201_forward(net, vb[0], w), vb[1])
    (expected,) = torch.autograd.grad(loss, leaf)
    table.add(METHOD, "NB201 architecture gradient = written-out forward",
              arch_grads(strategy), [expected])  # fmt: skip


# ---------------------------------------------------------------------------- the reference


def _copy_module(ours_m: nn.Module, ref_m: nn.Module) -> None:
    """Convolutions, batch norms, linear layers in order, matched by base kind
    (``F.base_kind``); a reference bias ours lacks (its ``bias=not affine`` convolutions, each
    followed by a BN) is set to 0."""
    a, b = F.modules_in_order(ours_m), F.modules_in_order(ref_m)
    if [F.base_kind(m) for m in a] != [F.base_kind(m) for m in b]:
        raise SystemExit(f"gdas fidelity: {type(ours_m).__name__} and {type(ref_m).__name__} "
                         "differ in layout")  # fmt: skip
    with torch.no_grad():
        for m, r in zip(a, b):
            for name in ("weight", "bias", "running_mean", "running_var"):
                x, y = getattr(m, name, None), getattr(r, name, None)
                if y is None:
                    continue
                if x is None:
                    if name == "bias":
                        y.zero_()
                    continue
                y.copy_(x)


def _darts_order(net: nn.Module) -> list[int]:
    ref_space = list(REF_NAMES.values())
    return [ref_space.index(REF_NAMES[n]) for n in net.cells[0].ops[0].op_names]


def _copy_darts(net: nn.Module, ref: nn.Module) -> None:
    ref_space = list(REF_NAMES.values())
    _copy_module(net.stem, ref.stem)
    for cell, rcell in zip(net.cells, ref.cells):
        _copy_module(cell.preprocess0, rcell.preprocess0)
        _copy_module(cell.preprocess1, rcell.preprocess1)
        for node, edges in enumerate(cell.edges_into):
            for e in edges:
                theirs = rcell.edges[f"{node}<-{cell.edge_src[e]}"]
                if rcell.edge2index[f"{node}<-{cell.edge_src[e]}"] != e:
                    raise SystemExit("gdas fidelity: the edge orders differ")
                for k, name in enumerate(cell.ops[e].op_names):
                    _copy_module(cell.ops[e].ops[k], theirs._ops[ref_space.index(REF_NAMES[name])])
    _copy_module(net.lastact, ref.lastact)
    _copy_module(net.classifier, ref.classifier)


class _Meter:
    def __init__(self) -> None:
        self.val = self.avg = self.sum = 0.0

    def update(self, val: float, n: int = 1) -> None:
        self.val = self.avg = val


class _Logger:
    def log(self, *args: Any) -> None:
        pass


class _Scheduler:
    def update(self, *args: Any) -> None:
        pass


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("gdas")  # else the reference's values come from its recording
    ref_label = refs.label("gdas")
    with refs.imports("gdas", ".", ["."]), F.float64():
        classes: dict[str, Any] = {}
        search_func = None
        if live:
            root = refs.root("gdas")
            from xautodl.models.cell_operations import (  # type: ignore[import-not-found]
                NAS_BENCH_201,
            )
            from xautodl.models.cell_searchs.search_model_gdas import (  # type: ignore[import-not-found]
                TinyNetworkGDAS,
            )
            from xautodl.models.cell_searchs.search_model_gdas_nasnet import (  # type: ignore[import-not-found]
                NASNetworkGDAS,
            )
            from xautodl.procedures.optimizers import (  # type: ignore[import-not-found]
                CosineAnnealingLR,
            )

            classes = {"TinyNetworkGDAS": TinyNetworkGDAS, "NASNetworkGDAS": NASNetworkGDAS,
                       "NAS_BENCH_201": NAS_BENCH_201}  # fmt: skip
            script = os.path.join(root, "exps", "NAS-Bench-201-algos", "GDAS.py")
            search_func = F.load_function(script, "search_func", {
                "torch": torch, "time": __import__("time"), "AverageMeter": _Meter,
                "obtain_accuracy": lambda *a, **k: (torch.zeros(()), torch.zeros(())),
                "time_string": lambda: ""})  # fmt: skip

        for space in ("nb201", "darts"):
            _compare_space(table, space, ref_label, live, search_func, classes)

        # tau and the learning rate per epoch, as GDAS.py:233-239 sets them (GDAS.sh's
        # --tau_max 10 --tau_min 0.1, GDAS.config's epochs and warmup); ours over its own
        # config's epochs
        strategy, _, cfg = ours("nb201")
        our_tau = []
        for epoch in range(cfg.epochs):
            strategy.epoch = epoch
            our_tau.append(strategy.tau)
        factor = search_lr_factor(epochs=cfg.epochs, lr=cfg.optimizer.lr,
                                  lr_min=cfg.optimizer.lr_min)  # fmt: skip
        our_lr = [cfg.optimizer.lr * factor(e) for e in range(cfg.epochs)]

        def ref_schedules() -> tuple[list[float], list[float]]:
            config = _config(root, "configs/nas-benchmark/algos/GDAS.config")
            total = config["epochs"] + config["warmup"]
            model = classes["TinyNetworkGDAS"](C, 1, 4, CLASSES, classes["NAS_BENCH_201"],
                                               False, True)  # fmt: skip
            ref_tau = []
            for epoch in range(total):
                model.set_tau(10.0 - (10.0 - 0.1) * epoch / (total - 1))
                ref_tau.append(model.get_tau())
            opt = torch.optim.SGD(model.get_weights(), lr=config["LR"])
            sched = CosineAnnealingLR(opt, config["warmup"], config["epochs"], config["epochs"],
                                      config["eta_min"])  # fmt: skip
            ref_lr = []
            for epoch in range(total):
                sched.update(epoch, 0.0)
                ref_lr.append(opt.param_groups[0]["lr"])
            return ref_tau, ref_lr

        schedules: list[tuple[list[float], list[float]]] = []

        def ref_schedule(i: int) -> list[float]:
            if not schedules:
                schedules.append(ref_schedules())
            return schedules[0][i]

        table.add(METHOD, "tau of epochs 0-249 (GDAS.py:237-239)", our_tau,
                  lambda: ref_schedule(0), ref_label)  # fmt: skip
        table.add(METHOD, "weight lr of epochs 0-249 (CosineAnnealingLR)", our_lr,
                  lambda: ref_schedule(1), ref_label)  # fmt: skip

    _settings(table, refs, ref_label)


def _compare_space(table: F.Table, space: str, ref_label: str, live: bool, search_func: Any,
                   classes: dict[str, Any]) -> None:  # fmt: skip
    """Ours runs whether or not the reference does; the reference (``live``) is fed our
    weights, our alphas and our recorded draws."""
    tag = "NB201" if space == "nb201" else "DARTS space"
    strategy, net, cfg = ours(space, epoch=40)
    order = None if space == "nb201" else _darts_order(net)
    model: Any = None
    ref_alphas: list[torch.Tensor] = []
    if live:
        if space == "nb201":
            model = classes["TinyNetworkGDAS"](C, 1, 4, CLASSES, classes["NAS_BENCH_201"],
                                               False, True).double()  # fmt: skip
            _copy_module(net, model)
            ref_alphas = [model.arch_parameters]
        else:
            space_ops = list(REF_NAMES.values())
            model = classes["NASNetworkGDAS"](C, cfg.space.layers // 3, 4, 4, 3, CLASSES,
                                              space_ops, False, True).double()  # fmt: skip
            _copy_darts(net, model)
            ref_alphas = [model.arch_normal_parameters, model.arch_reduce_parameters]
        with torch.no_grad():
            for r, a in zip(ref_alphas, alphas(strategy)):
                if order is None:
                    r.copy_(a)
                else:
                    r[:, order] = a
        model.set_tau(10.0 - (10.0 - 0.1) * 40 / (EPOCHS - 1))  # GDAS.py:237-239, epoch 40
        model.train()
    net.train()

    def ref_view(ts: list[torch.Tensor]) -> list[torch.Tensor]:
        """The reference's tensors in our op order."""
        return [t.detach()[:, order] if order is not None else t.detach().clone() for t in ts]

    # forward on one sample
    x = F.batches(1, seed=7)[0][0]
    draws: list[torch.Tensor] = []
    strategy.begin_step(100)
    with recording(draws):
        logits = net(x, strategy.arch_weights(sample=True))
    ref_logits = None
    if live:
        with replaying(draws, order):
            _, ref_logits = model(x)
    table.add(METHOD, f"{tag}: forward (hard sample, tau of epoch 40)", logits,
              lambda: ref_logits, ref_label)  # fmt: skip

    # three whole steps: ours (recording its draws), then the reference's search_func on the
    # same batches (replaying them); its a-optimizer's step records alpha's .grad before Adam
    train, val = F.batches(3, seed=1), F.batches(3, seed=2)
    ours_grads = []
    draws = []
    with recording(draws):
        for i, (tb, vb) in enumerate(zip(train, val)):
            strategy.begin_step(i)
            strategy.step(tb, vb)
            ours_grads.append(arch_grads(strategy))
    ref_grads: list[list[torch.Tensor]] = []
    if live:
        w_optimizer = torch.optim.SGD(model.get_weights(), lr=LR, momentum=MOMENTUM,
                                      weight_decay=WD, nesterov=True)  # fmt: skip
        a_optimizer = torch.optim.Adam(model.get_alphas(), lr=3e-4, betas=(0.5, 0.999),
                                       weight_decay=1e-3)  # fmt: skip
        adam_step = a_optimizer.step

        def recorded_step(*args: Any, **kwargs: Any) -> Any:
            ref_grads.append(ref_view([p.grad for p in ref_alphas]))
            return adam_step(*args, **kwargs)

        a_optimizer.step = recorded_step  # type: ignore[method-assign]
        loader = [(tb[0], tb[1], vb[0], vb[1]) for tb, vb in zip(train, val)]
        with replaying(draws, order):
            search_func(loader, model, nn.CrossEntropyLoss(), _Scheduler(), w_optimizer,
                        a_optimizer, "000-250", 100, _Logger())  # fmt: skip
    table.add(METHOD, f"{tag}: architecture gradient, step 1", ours_grads[0],
              lambda: ref_grads[0], ref_label)  # fmt: skip
    table.add(METHOD, f"{tag}: architecture gradients, steps 2-3", ours_grads[1:],
              lambda: ref_grads[1:], ref_label)  # fmt: skip
    table.add(METHOD, f"{tag}: alphas after 3 steps", alphas(strategy),
              lambda: ref_view(ref_alphas), ref_label)  # fmt: skip
    if space == "nb201":
        table.add(METHOD, f"{tag}: weights after 3 steps", F.trained(net),
                  lambda: F.trained(model), ref_label)  # fmt: skip
    else:  # the reference's op order differs: compare op by op
        table.add(METHOD, f"{tag}: weights after 3 steps", _darts_trained(net, None),
                  lambda: _darts_trained(net, model), ref_label)  # fmt: skip

    # derivation
    if space == "nb201":
        g = derived_genotype(strategy)
        ours_geno = [[(op, src) for op, src in node] for node in g.nodes]

        def ref_geno() -> Any:
            return [list(node) for node in model.genotype().nodes]
    else:
        with torch.no_grad():
            w = strategy.derivation_weights()
        sp = strategy.supernet.space
        ours_geno = [top_pairs(sp.cells[ct], w[ct], strategy.supernet.op_mask(ct), 2)
                     for ct in ("normal", "reduce")]  # fmt: skip

        def ref_geno() -> Any:
            rg = model.genotype()
            return [[(OUR_NAMES[op], j) for node in rg[ct] for op, j, _ in node]
                    for ct in ("normal", "reduce")]  # fmt: skip

    table.add_equal(METHOD, f"{tag}: genotype (genotype())", ours_geno, ref_geno, ref_label)


def _darts_trained(net: nn.Module, model: nn.Module | None) -> list[torch.Tensor]:
    """The trained tensors of our DARTS-space network op by op (``model`` None), or the
    reference's matching ones in the same order (its op order differs)."""
    ref_space = list(REF_NAMES.values())

    def theirs(get: Any) -> Any:
        return None if model is None else get(model)

    pairs = [(net.stem, theirs(lambda m: m.stem)), (net.lastact, theirs(lambda m: m.lastact)),
             (net.classifier, theirs(lambda m: m.classifier))]  # fmt: skip
    for c, cell in enumerate(net.cells):
        rcell = theirs(lambda m, c=c: m.cells[c])
        pairs += [(cell.preprocess0, None if rcell is None else rcell.preprocess0),
                  (cell.preprocess1, None if rcell is None else rcell.preprocess1)]  # fmt: skip
        for node, edges in enumerate(cell.edges_into):
            for e in edges:
                for k, name in enumerate(cell.ops[e].op_names):
                    r = None
                    if rcell is not None:
                        edge = rcell.edges[f"{node}<-{cell.edge_src[e]}"]
                        r = edge._ops[ref_space.index(REF_NAMES[name])]
                    pairs.append((cell.ops[e].ops[k], r))
    out: list[torch.Tensor] = []
    for m, r in pairs:
        mods = F.modules_in_order(m)
        rmods = mods if r is None else F.modules_in_order(r)
        for x, y in zip(mods, rmods):
            for name in ("weight", "bias"):
                if isinstance(getattr(x, name, None), torch.Tensor):
                    out.append(getattr(y, name).detach().clone())
    return out


def _config(root: str, path: str) -> dict[str, Any]:
    """An AutoDL config file (``{"name": [type, value]}``) as {name: value}."""
    with open(os.path.join(root, path), encoding="utf-8") as f:
        raw = json.load(f)
    kinds = {"int": int, "float": float, "str": str, "bool": lambda v: bool(int(v))}
    return {k: kinds[t](v) for k, (t, v) in raw.items()}


def _sh_args(root: str, path: str) -> dict[str, str]:
    """The ``--name value`` pairs of a reference shell script's command line."""
    with open(os.path.join(root, path), encoding="utf-8") as f:
        text = f.read()
    shell = dict(re.findall(r"^(\w+)=(\S+)$", text, flags=re.M))  # channel=16
    words = text.replace("\\\n", " ").split()
    return {
        w[2:]: re.sub(r"\$\{(\w+)\}", lambda m: shell.get(m.group(1), m.group(0)), v)
        for w, v in zip(words, words[1:])
        if w.startswith("--")
    }


def _settings(table: F.Table, refs: F.Refs, ref_label: str) -> None:
    for space, path in (("NB201", "configs/nas-benchmark/algos/GDAS.config"),
                        ("DARTS space",
                         "configs/search-opts/GDAS-NASNet-CIFAR.config")):  # fmt: skip
        cfg = F.compose([EXPERIMENTS["nb201" if space == "NB201" else "darts"]])

        def theirs(space: str = space, path: str = path) -> dict[str, Any]:
            root = refs.root("gdas")
            sh = _sh_args(root, "scripts-search/NAS-Bench-201-algos/GDAS.sh")
            ref = _config(root, path)
            out = {
                "epochs": ref["epochs"] + ref["warmup"],
                "batch_size": ref["batch_size"],
                "LR": ref["LR"],
                "eta_min": ref["eta_min"],
                "momentum": ref["momentum"],
                "nesterov": ref["nesterov"],
                "decay": ref["decay"],
                "scheduler (cos)": ref["scheduler"] == "cos",
                "tau_max (GDAS.sh)": float(sh["tau_max"]),
                "tau_min (GDAS.sh)": float(sh["tau_min"]),
                "arch_learning_rate (GDAS.sh)": float(sh["arch_learning_rate"]),
                "arch_weight_decay (GDAS.sh)": float(sh["arch_weight_decay"]),
                "arch betas (GDAS.py:171-176)": [0.5, 0.999],
                "grad clip (GDAS.py:54)": 5.0,
                "clip over network.parameters() (GDAS.py:54)": True,
            }
            if space == "NB201":
                out["channel (GDAS.sh)"] = int(sh["channel"])
                out["num_cells (GDAS.sh)"] = int(sh["num_cells"])
            return {f"{space} {k}": v for k, v in out.items()}

        mine = {
            "epochs": cfg.epochs,
            "batch_size": cfg.batch_size,
            "LR": cfg.optimizer.lr,
            "eta_min": cfg.optimizer.lr_min,
            "momentum": cfg.optimizer.momentum,
            "nesterov": cfg.optimizer.nesterov,
            "decay": cfg.optimizer.weight_decay,
            "scheduler (cos)": cfg.optimizer.get("stage_lr", "cosine") == "cosine",
            "tau_max (GDAS.sh)": cfg.search.tau_max,
            "tau_min (GDAS.sh)": cfg.search.tau_min,
            "arch_learning_rate (GDAS.sh)": cfg.search.arch_lr,
            "arch_weight_decay (GDAS.sh)": cfg.search.arch_weight_decay,
            "arch betas (GDAS.py:171-176)": list(cfg.search.arch_betas),
            "grad clip (GDAS.py:54)": cfg.optimizer.grad_clip,
            "clip over network.parameters() (GDAS.py:54)": cfg.search.clip_arch_with_weights,
        }
        if space == "NB201":
            mine["channel (GDAS.sh)"] = cfg.space.C
            mine["num_cells (GDAS.sh)"] = cfg.space.layers
        F.add_settings(table, METHOD, {f"{space} {k}": v for k, v in mine.items()}, theirs,
                       ref_label)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
