"""Fidelity of DARTS, first and second order, against quark0/darts (``cnn/``).

Liu, Simonyan & Yang, "DARTS: Differentiable Architecture Search", ICLR 2019: the mixed op
``sum_k softmax(alpha)_k op_k(x)`` (eq. 2), the first-order architecture gradient (eq. 6 with
xi = 0) and the unrolled one (eqs. 6-8, ``architect.py``: one SGD-momentum step with weight
decay, then the finite-difference Hessian-vector product with ``R = 0.01 / ||v||``).

Known answers (no checkout): the supernet's forward equals the mixed-op sum written out over
its own op modules; a first-order step equals autograd through that sum plus Adam with weight
decay; a second-order step equals eqs. 6-8 computed on a copy of the network; the weight
learning rate of every epoch equals the cosine of ``CosineAnnealingLR``.

With ``--reference-root darts=PATH`` (a checkout of github.com/quark0/darts): the reference's
``model_search.Network`` and ``architect.Architect`` at float64 with our weights, compared on
the forward, an architecture step of each order, three whole steps (architecture then weights,
clipping at 5) of each order, the genotype it derives (``Network.genotype``) and the settings
of ``train_search.py`` against ``experiment=darts_cifar10``.

    python experiments/fidelity/darts.py --reference-root darts=~/src/darts
"""

from __future__ import annotations

import copy
import math
import sys
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch
from torch import nn

from nas.plugins import build_strategy
from nas.run.schedules import search_lr_factor
from nas.strategies.base import SearchContext
from nas.supernet import build_supernet

METHOD = "DARTS"
REFERENCES = {"darts": F.Reference("quark0/darts", "cnn/model_search.py")}
C, LAYERS, CLASSES = 4, 5, 10  # two reduction cells (at 1 and 3), as the 8-cell network
LR, MOMENTUM, WD, CLIP = 0.025, 0.9, 3e-4, 5.0


def ours(order: int, seed: int = 0) -> tuple[Any, nn.Module, torch.optim.SGD]:
    """Our DARTS strategy (its YAML, ``search.order``) on a float64 supernet."""
    cfg = F.compose(["search=darts", f"search.order={order}", "space=darts"])
    strategy = build_strategy(cfg)
    torch.manual_seed(seed)
    net = build_supernet("darts", C=C, layers=LAYERS, num_classes=CLASSES).double()
    F.randomise_affine(net, seed)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    strategy.attach(SearchContext(net, opt, grad_clip=CLIP, epochs=50))
    with torch.no_grad():  # alphas large enough that the softmax is far from uniform
        g = torch.Generator().manual_seed(seed + 1)
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=g, dtype=a.dtype))
    return strategy, net, opt


def alphas(strategy: Any) -> list[torch.Tensor]:
    return [strategy.arch_params[ct].detach().clone() for ct in ("normal", "reduce")]


def arch_grads(strategy: Any) -> list[torch.Tensor]:
    """The architecture gradient of the last step (Adam reads ``.grad`` and leaves it)."""
    return [strategy.arch_params[ct].grad.detach().clone() for ct in ("normal", "reduce")]


# ------------------------------------------------------------------------------ known answers


def mixed_forward(net: nn.Module, x: torch.Tensor, weights: dict[str, torch.Tensor]):
    """eq. 2 written out: each node the sum over its edges of ``sum_k w_k op_k(state)``."""
    s0 = s1 = net.stem(x)
    for cell in net.cells:
        w = weights[cell.cell_type]
        states = [cell.preprocess0(s0), cell.preprocess1(s1)]
        for edges in cell.edges_into:
            node = 0
            for e in edges:
                h = states[cell.edge_src[e]]
                mixed = cell.ops[e]  # ``none`` (zeros) adds nothing; its slot holds no op
                node = node + sum(
                    w[e, k] * op(h)
                    for k, (op, name) in enumerate(zip(mixed.ops, mixed.op_names))
                    if name != "none"
                )
            states.append(node)
        s0, s1 = s1, torch.cat(states[-cell.multiplier :], dim=1)
    return net.classifier(net.global_pooling(s1).flatten(1))


def _loss(net, x, y, alpha_list):
    w = {ct: torch.softmax(a, -1) for ct, a in zip(("normal", "reduce"), alpha_list)}
    return nn.functional.cross_entropy(mixed_forward(net, x, w), y)


def _adam_step(alpha_list, grads, lr=3e-4, betas=(0.5, 0.999), wd=1e-3):
    leaves = [a.detach().clone().requires_grad_(True) for a in alpha_list]
    adam = torch.optim.Adam(leaves, lr=lr, betas=betas, weight_decay=wd)
    for p, g in zip(leaves, grads):
        p.grad = g.detach().clone()
    adam.step()
    return [p.detach() for p in leaves]


def known_answers(table: F.Table) -> None:
    (tb, vb) = F.batches(2)
    strategy, net, _ = ours(order=1)
    a0 = alphas(strategy)
    weights = {ct: torch.softmax(a, -1) for ct, a in zip(("normal", "reduce"), a0)}
    with torch.no_grad():
        table.add(METHOD, "forward = eq. 2 written out", net(vb[0], weights),
                  mixed_forward(net, vb[0], weights))  # fmt: skip

    # first order: grad_alpha L_val(w, alpha), Adam(3e-4, (0.5, 0.999), wd 1e-3)
    leaves = [a.clone().requires_grad_(True) for a in a0]
    grads = torch.autograd.grad(_loss(net, *vb, leaves), leaves)
    expected = _adam_step(a0, grads)
    strategy.arch_step(tb, vb)
    table.add(METHOD, "1st-order architecture gradient = autograd", arch_grads(strategy), grads)
    table.add(METHOD, "1st-order architecture step = Adam", alphas(strategy), expected)

    # second order, eqs. 6-8 on a copy of the network, after a weight step (momentum buffers)
    strategy, net, opt = ours(order=2)
    strategy.weight_step(F.batches(1, seed=5)[0])
    a0 = alphas(strategy)
    copy_net = copy.deepcopy(net)
    params = list(copy_net.parameters())
    w0 = [p.detach().clone() for p in params]
    g_train = torch.autograd.grad(_loss(copy_net, *tb, a0), params)
    moments = [opt.state[p]["momentum_buffer"] for p in net.parameters()]
    with torch.no_grad():
        for p, g, m in zip(params, g_train, moments):
            p.sub_(LR * (MOMENTUM * m + g + WD * p))
    leaves = [a.clone().requires_grad_(True) for a in a0]
    grads = torch.autograd.grad(_loss(copy_net, *vb, leaves), [*leaves, *params])
    dalpha, v = grads[:2], grads[2:]
    R = 0.01 / torch.cat([t.flatten() for t in v]).norm()
    hv = []
    for sign in (1, -1):
        with torch.no_grad():
            for p, w, vi in zip(params, w0, v):
                p.copy_(w + sign * R * vi)
        leaves = [a.clone().requires_grad_(True) for a in a0]
        hv.append(torch.autograd.grad(_loss(copy_net, *tb, leaves), leaves))
    final = [d - LR * (gp - gn) / (2 * R) for d, gp, gn in zip(dalpha, *hv)]
    expected = _adam_step(a0, final)
    strategy.arch_step(tb, vb)
    table.add(METHOD, "2nd-order architecture gradient = eqs. 6-8", arch_grads(strategy), final)
    table.add(METHOD, "2nd-order architecture step = Adam", alphas(strategy), expected)

    # the weight learning rate per epoch: CosineAnnealingLR(T=50, eta_min=0.001), stepped at
    # the start of each epoch (train_search.py)
    factor = search_lr_factor(epochs=50, lr=LR, lr_min=1e-3, warmup_epochs=0, stage_lr="cosine",
                              stage_starts=[0])  # fmt: skip
    cosine = [1e-3 + (LR - 1e-3) * (1 + math.cos(math.pi * e / 50)) / 2 for e in range(50)]
    table.add(METHOD, "weight lr of epochs 0-49 = cosine", [LR * factor(e) for e in range(50)],
              cosine)  # fmt: skip


# ---------------------------------------------------------------------------- the reference


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("darts")  # else the reference's values come from its recording
    ref_label = refs.label("darts")
    train_batches, val_batches = F.batches(3, seed=1), F.batches(3, seed=2)

    with refs.imports("darts", "cnn", ["cnn"]), F.float64():
        from types import SimpleNamespace

        if live:
            from architect import Architect  # type: ignore[import-not-found]
            from model_search import Network  # type: ignore[import-not-found]

            defaults = F.script_defaults("train_search.py")
            args = SimpleNamespace(**defaults)
        criterion = nn.CrossEntropyLoss()

        def reference(strategy: Any, net: nn.Module):
            if not live:
                return None, None, None
            model = Network(C, CLASSES, LAYERS, criterion).double()
            F.copy_weights(net, model)
            with torch.no_grad():
                model.alphas_normal.copy_(strategy.arch_params["normal"])
                model.alphas_reduce.copy_(strategy.arch_params["reduce"])
            optimizer = torch.optim.SGD(model.parameters(), LR, momentum=args.momentum,
                                        weight_decay=args.weight_decay)  # fmt: skip
            return model, optimizer, Architect(model, args)

        strategy, net, _ = ours(order=1)
        model, _, _ = reference(strategy, net)
        x = val_batches[0][0]
        table.add(METHOD, "forward (softmax mixing)", net(x, strategy.arch_weights(sample=False)),
                  lambda: model(x), ref_label)  # fmt: skip
        table.add_equal(METHOD, "genotype (Network.genotype)", F.our_genotype(strategy),
                        lambda: F.reference_genotype(model), ref_label)  # fmt: skip

        for order in (1, 2):
            strategy, net, _ = ours(order=order)
            model, optimizer, architect = reference(strategy, net)
            for i, (tb, vb) in enumerate(zip(train_batches, val_batches)):
                if live:
                    architect.step(*tb, *vb, LR, optimizer, unrolled=order == 2)
                strategy.begin_step(i)
                strategy.arch_step(tb, vb)
                if i == 0:
                    table.add(METHOD, f"order {order}: architecture gradient",
                              arch_grads(strategy),
                              lambda: [model.alphas_normal.grad, model.alphas_reduce.grad],
                              ref_label)  # fmt: skip
                    table.add(METHOD, f"order {order}: architecture step",
                              alphas(strategy), lambda: [model.alphas_normal, model.alphas_reduce],
                              ref_label)  # fmt: skip
                if live:
                    optimizer.zero_grad()
                    loss = criterion(model(tb[0]), tb[1])
                    loss.backward()
                    nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
                    optimizer.step()
                strategy.weight_step(tb)
            table.add(METHOD, f"order {order}: alphas after 3 steps", alphas(strategy),
                      lambda: [model.alphas_normal, model.alphas_reduce], ref_label)  # fmt: skip
            table.add(METHOD, f"order {order}: weights after 3 steps", F.trained(net),
                      lambda: F.trained(model), ref_label)  # fmt: skip

    cfg = F.compose(["experiment=darts_cifar10"])
    F.add_settings(
        table,
        METHOD,
        {
            "epochs": cfg.epochs,
            "batch_size": cfg.batch_size,
            "learning_rate": cfg.optimizer.lr,
            "learning_rate_min": cfg.optimizer.lr_min,
            "momentum": cfg.optimizer.momentum,
            "weight_decay": cfg.optimizer.weight_decay,
            "grad_clip": cfg.optimizer.grad_clip,
            "init_channels": cfg.space.C,
            "layers": cfg.space.layers,
            "arch_learning_rate": cfg.search.arch_lr,
            "arch_weight_decay": cfg.search.arch_weight_decay,
            "unrolled (the paper's second order: --unrolled)": cfg.search.order == 2,
        },
        lambda: {**defaults, "unrolled (the paper's second order: --unrolled)": True},
        ref_label,
    )


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
