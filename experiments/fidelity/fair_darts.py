"""Fidelity of FairDARTS (the ``fair_darts`` component with DARTS) against xiaomi-automl/FairDARTS.

Chu et al., "Fair DARTS: Eliminating Unfair Advantages in Differentiable Architecture Search",
ECCV 2020 (``fairdarts/``). Each op's weight is its own sigmoid, not a softmax over the edge, and
the op set has no ``none`` (``genotypes.py``: 7 ops; ours masks the DARTS space's ``none``
off):

    o_ij(x) = sum_k sigmoid(alpha_ij,k) o_k(x),
    L_arch  = CE_val + w01 * L_01,   L_01 = - mean_{all i,j,k} (sigmoid(alpha_ij,k) - 0.5)^2

(``separate_loss.py: ConvSeparateLoss``, ``- F.mse_loss(sigmoid, 0.5)`` over the 2 x 14 x 7
weights of both cell types, w01 = 10), so ``dL_01 / dalpha = -2 (s - 0.5) s (1 - s) / 196``:
it pushes every weight towards 0 or 1. First-order architecture step (``architect.py``: Adam
3e-3, betas (0.9, 0.999), wd 1e-3), alphas initialised to 0. The genotype is ``threshold_sparse``
(``utils.py: parse``): per node the top-2 inputs by their strongest op, each kept only if that
op's sigmoid is >= 0.85 (our ``selection=threshold``).

Known answers (no checkout): the mixing weights equal ``sigmoid(alpha)`` with ``none`` at 0;
the forward equals the network written out with them; the zero-one term equals
``-10 * mean((s - 0.5)^2)`` over the 196 kept weights and its gradient the closed form above;
the architecture gradient equals autograd through the written-out network plus the zero-one
term, and the step Adam(3e-3, (0.9, 0.999), wd 1e-3); the genotype of ``selection=threshold``
equals ``threshold_sparse`` written out.

With ``--reference-root fair_darts=PATH`` (a checkout of github.com/xiaomi-automl/FairDARTS):
the reference's ``fairdarts/model_search.Network`` and ``architect.Architect`` at float64 with
our weights and our alphas without the ``none`` column, compared on the forward, the
architecture gradient (the ``.grad`` Adam reads, CE + 10 x the zero-one loss) and step, three
whole steps run by the reference's own ``train()`` of ``train_search.py`` (architecture step,
then the weight step on ``ConvSeparateLoss`` with ``clip_grad_norm(model.parameters(), 5)``),
the genotype (``Network.genotype`` with ``threshold_sparse``, 0.85) against the selector of
``experiment=fair_darts_cifar10``, and the settings of ``train_search.py`` against that
experiment. The alphas are drawn far from 0 here (the reference's zeros give sigmoid 0.5, where
the zero-one gradient vanishes and no op reaches the threshold). Where the reference keeps an
edge from a node that kept no input (its ``DCOCell`` then fails), our selector drops it
(``nas.selection.threshold``); the compared weights avoid that case.

    python experiments/fidelity/fair_darts.py --reference-root fair_darts=~/src/FairDARTS

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/fair_darts.pt`` (``--record`` with the checkout writes them); ours runs
the same either way.
"""

from __future__ import annotations

import sys
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch
from torch import nn
from torch.nn import functional as TF

from nas.plugins import build_components, build_selector, build_strategy
from nas.strategies.base import SearchContext
from nas.supernet import build_supernet

METHOD = "FairDARTS"
REFERENCES = {"fair_darts": F.Reference("xiaomi-automl/FairDARTS", "fairdarts/model_search.py")}
C, LAYERS, CLASSES = 4, 5, 10  # two reduction cells (at 1 and 3), as the 8-cell network
LR, MOMENTUM, WD, CLIP = 0.005, 0.9, 3e-4, 5.0
ARCH_LR, ARCH_BETAS, ARCH_WD, W01, THRESHOLD = 3e-3, (0.9, 0.999), 1e-3, 10.0, 0.85
CELLS = ("normal", "reduce")
EXPERIMENT = ["experiment=fair_darts_cifar10"]


def ours(seed: int = 0, scale: float = 2.0) -> tuple[Any, nn.Module, torch.optim.SGD]:
    """DARTS with the ``fair_darts`` component as ``experiment=fair_darts_cifar10`` composes
    them, on a float64 supernet; alphas ``scale * N(0, 1)`` (sigmoids spread over (0, 1))."""
    cfg = F.compose(EXPERIMENT)
    strategy = build_strategy(cfg)
    strategy.add_components(build_components(cfg))
    torch.manual_seed(seed)
    net = build_supernet("darts", C=C, layers=LAYERS, num_classes=CLASSES).double()
    strategy.prepare_supernet(net)  # masks 'none' off
    F.randomise_affine(net, seed)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    strategy.attach(SearchContext(net, opt, grad_clip=CLIP, epochs=50),
                    generator=torch.Generator().manual_seed(seed))  # fmt: skip
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for a in strategy.arch_params.values():
            a.copy_(scale * torch.randn(a.shape, generator=g, dtype=a.dtype))
    assert net.cells[0].ops[0].op_names[0] == "none"
    return strategy, net, opt


def alphas(strategy: Any, drop_none: bool = True) -> list[torch.Tensor]:
    """The alphas of both cell types, without the ``none`` column (the reference's 7 ops)."""
    out = [strategy.arch_params[ct].detach().clone() for ct in CELLS]
    return [a[:, 1:] for a in out] if drop_none else out


def arch_grads(strategy: Any) -> list[torch.Tensor]:
    return [strategy.arch_params[ct].grad.detach()[:, 1:].clone() for ct in CELLS]


def trained(module: nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for m in F.modules_in_order(module) for n in ("weight", "bias")
            if isinstance(t := getattr(m, n, None), torch.Tensor)]  # fmt: skip


def genotype(strategy: Any) -> list[list[tuple[str, int, int]]]:
    """``selection=threshold`` of the experiment, as the reference's (op, node, input)."""
    g = build_selector(F.compose(EXPERIMENT)).select(strategy)
    return [
        [(op, node, src) for (op, src), node in zip(g.normal, g.normal_nodes)],
        [(op, node, src) for (op, src), node in zip(g.reduce, g.reduce_nodes)],
    ]


# ------------------------------------------------------------------------------ known answers


def network_written_out(net: nn.Module, x: torch.Tensor, alpha_list) -> torch.Tensor:
    """Each node the sum over its edges of ``sum_k sigmoid(alpha)_k op_k(state)``, no none."""
    w = {ct: torch.sigmoid(a) for ct, a in zip(CELLS, alpha_list)}  # [E, 7]
    s0 = s1 = net.stem(x)
    for cell in net.cells:
        ww = w[cell.cell_type]
        states = [cell.preprocess0(s0), cell.preprocess1(s1)]
        for edges in cell.edges_into:
            node = 0
            for e in edges:  # op 0 is ``none``: never run
                h = states[cell.edge_src[e]]
                node = node + sum(ww[e, k - 1] * op(h) for k, op in enumerate(cell.ops[e].ops) if k)
            states.append(node)
        s0, s1 = s1, torch.cat(states[-cell.multiplier :], dim=1)
    return net.classifier(net.global_pooling(s1).flatten(1))


def zero_one_written_out(alpha_list) -> torch.Tensor:
    s = torch.cat([torch.sigmoid(a).reshape(-1) for a in alpha_list])
    return -W01 * ((s - 0.5) ** 2).sum() / s.numel()


def threshold_sparse_written_out(ops: tuple[str, ...], alpha_list) -> list[list[tuple]]:
    """``utils.parse(..., 'threshold_sparse')``: per node the top-2 inputs by their best op,
    the best op kept if its sigmoid >= 0.85."""
    genes = []
    for a in alpha_list:
        W = torch.sigmoid(a).tolist()
        gene, start = [], 0
        for i in range(4):
            rows = W[start : start + i + 2]
            for j in sorted(range(i + 2), key=lambda j: -max(rows[j]))[:2]:
                k = max(range(len(rows[j])), key=lambda k: (rows[j][k], -k))
                if rows[j][k] >= THRESHOLD:
                    gene.append((ops[k], i + 2, j))
            start += i + 2
        genes.append(gene)
    return genes


def known_answers(table: F.Table) -> None:
    (tb, vb) = F.batches(2)
    strategy, net, _ = ours()
    a_full = alphas(strategy, drop_none=False)
    a0 = alphas(strategy)
    fair = strategy.component_list()[0]
    with torch.no_grad():
        expected = [torch.cat([torch.zeros(a.shape[0], 1), torch.sigmoid(a)], 1) for a in a0]
        w = strategy.arch_weights(sample=False)
        table.add(METHOD, "mixing weights = sigmoid(alpha), none 0", [w[ct] for ct in CELLS],
                  expected)  # fmt: skip
        table.add(METHOD, "forward = sigmoid-mixed network written out", net(vb[0], w),
                  network_written_out(net, vb[0], a0))  # fmt: skip
        table.add(METHOD, "zero-one term = -10 mean((s - 0.5)^2) over 196",
                  fair.arch_penalty(strategy), zero_one_written_out(a0))  # fmt: skip

    params = list(strategy.arch_params.values())
    g01 = torch.autograd.grad(fair.arch_penalty(strategy), params)
    closed = []
    for a in a0:
        s = torch.sigmoid(a)
        closed.append(-W01 * 2 * (s - 0.5) * s * (1 - s) / (2 * a.numel()))
    table.add(METHOD, "zero-one gradient = -20 (s - 0.5) s (1 - s) / 196",
              [g[:, 1:] for g in g01], closed)  # fmt: skip
    table.add(METHOD, "zero-one gradient of none = 0", [g[:, :1] for g in g01],
              [torch.zeros(g.shape[0], 1) for g in g01])  # fmt: skip

    leaves = [a.clone().requires_grad_(True) for a in a_full]
    loss = TF.cross_entropy(network_written_out(net, vb[0], [x[:, 1:] for x in leaves]), vb[1])
    loss = loss + zero_one_written_out([x[:, 1:] for x in leaves])
    grads = torch.autograd.grad(loss, leaves)
    adam_leaves = [a.clone().requires_grad_(True) for a in a_full]
    adam = torch.optim.Adam(adam_leaves, lr=ARCH_LR, betas=ARCH_BETAS, weight_decay=ARCH_WD)
    for p, g in zip(adam_leaves, grads):
        p.grad = g
    adam.step()
    strategy.arch_step(tb, vb)
    table.add(METHOD, "architecture gradient = autograd (CE + 10 L_01)",
              [strategy.arch_params[ct].grad for ct in CELLS], list(grads))  # fmt: skip
    table.add(METHOD, "architecture step = Adam(3e-3, (0.9, 0.999), wd 1e-3)",
              alphas(strategy), [p.detach()[:, 1:] for p in adam_leaves])  # fmt: skip
    ops = net.cells[0].ops[0].op_names[1:]
    table.add_equal(METHOD, "genotype (selection=threshold) = threshold_sparse written out",
                    genotype(strategy),
                    threshold_sparse_written_out(ops, alphas(strategy)))  # fmt: skip


# ---------------------------------------------------------------------------- the reference


class _Recorder:
    """The reference's architect, recording its first gradient and step."""

    def __init__(self, architect: Any, model: Any) -> None:
        self.architect, self.model = architect, model
        self.first: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def step(self, *args: Any, **kwargs: Any) -> Any:
        out = self.architect.step(*args, **kwargs)
        if self.first is None:
            params = self.model.arch_parameters()
            self.first = ([p.grad.detach().clone() for p in params],
                          [p.detach().clone() for p in params])  # fmt: skip
        return out


class _Draws:
    """``next(iter(valid_queue))`` gives the next of the given batches."""

    def __init__(self, items: list[Any]) -> None:
        self.items, self.i = items, 0

    def __iter__(self):
        item = self.items[self.i]
        self.i += 1
        return iter([item])


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("fair_darts")  # else the reference's values come from its recording
    ref_label = refs.label("fair_darts")
    train_batches, val_batches = F.batches(3, seed=1), F.batches(3, seed=2)

    with refs.imports("fair_darts", "fairdarts", ["fairdarts"]), F.float64():
        if live:
            import logging
            from types import SimpleNamespace

            import utils  # type: ignore[import-not-found]
            from architect import Architect  # type: ignore[import-not-found]
            from model_search import Network  # type: ignore[import-not-found]
            from separate_loss import ConvSeparateLoss  # type: ignore[import-not-found]
            from torch.autograd import Variable

            defaults = F.script_defaults("train_search.py")
            args = SimpleNamespace(**defaults)
            criterion = ConvSeparateLoss(weight=args.aux_loss_weight)
            train = F.load_function("train_search.py", "train",
                                    {"args": args, "utils": utils, "Variable": Variable,
                                     "nn": nn, "logging": logging, "torch": torch,
                                     "F": TF})  # fmt: skip

        def reference(strategy: Any, net: nn.Module):
            if not live:
                return None, None, None
            model = Network(C, CLASSES, LAYERS, criterion, parse_method=args.parse_method,
                            op_threshold=args.op_threshold).double()  # fmt: skip
            F.copy_weights(net, model)
            with torch.no_grad():
                for p, a in zip(model.arch_parameters(), alphas(strategy)):
                    p.copy_(a)
            optimizer = torch.optim.SGD(model.parameters(), LR, momentum=args.momentum,
                                        weight_decay=args.weight_decay)  # fmt: skip
            return model, optimizer, Architect(model, args)

        strategy, net, _ = ours()
        model, _, _ = reference(strategy, net)
        x = val_batches[0][0]
        with torch.no_grad():
            table.add(METHOD, "forward (sigmoid mixing)",
                      net(x, strategy.arch_weights(sample=False)), lambda: model(x),
                      ref_label)  # fmt: skip
        table.add_equal(METHOD, "genotype (threshold_sparse, 0.85)", genotype(strategy),
                        lambda: F.reference_genotype(model), ref_label)  # fmt: skip

        strategy, net, _ = ours()
        model, optimizer, architect = reference(strategy, net)
        if live:
            recorder = _Recorder(architect, model)
            train(train_batches, _Draws(val_batches), model, recorder, criterion, optimizer,
                  None)  # fmt: skip
            assert recorder.first is not None
        for i, (tb, vb) in enumerate(zip(train_batches, val_batches)):
            strategy.begin_step(i)
            strategy.arch_step(tb, vb)
            if i == 0:
                table.add(METHOD, "architecture gradient (CE + 10 L_01)", arch_grads(strategy),
                          lambda: recorder.first[0], ref_label)  # fmt: skip
                table.add(METHOD, "architecture step", alphas(strategy),
                          lambda: recorder.first[1], ref_label)  # fmt: skip
            strategy.weight_step(tb)
        table.add(METHOD, "alphas after 3 steps", alphas(strategy),
                  lambda: [p.detach() for p in model.arch_parameters()], ref_label)  # fmt: skip
        table.add(METHOD, "weights after 3 steps", trained(net), lambda: trained(model),
                  ref_label)  # fmt: skip
        table.add_equal(METHOD, "genotype after 3 steps", genotype(strategy),
                        lambda: F.reference_genotype(model), ref_label)  # fmt: skip

    cfg = F.compose(EXPERIMENT)
    fair = cfg.components.fair_darts
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
            "train_portion": cfg.data.train_portion,
            "init_channels": cfg.space.C,
            "layers": cfg.space.layers,
            "cutout": bool(cfg.data.cutout),
            "arch_learning_rate": cfg.search.arch_lr,
            "arch_lr_gamma (Adam beta1)": cfg.search.arch_betas[0],
            "arch_weight_decay": cfg.search.arch_weight_decay,
            "aux_loss_weight (w01)": fair.w01,
            "sep_loss (l2: the squared zero-one loss)": "l2",
            "single_level": build_strategy(cfg).single_level,
            "parse_method": {"threshold": "threshold_sparse"}.get(
                str(cfg.selection.get("_target_", "")).rsplit(".", 1)[-1].lower(), "other"
            ),
            "op_threshold": cfg.selection.threshold,
            "alpha init (torch.zeros)": cfg.search.init_scale,
            "no 'none' op (genotypes.py PRIMITIVES)": fair.drop_none,
        },
        lambda: {
            **defaults,
            "arch_lr_gamma (Adam beta1)": defaults["arch_lr_gamma"],
            "aux_loss_weight (w01)": defaults["aux_loss_weight"],
            "alpha init (torch.zeros)": 0.0,
            "no 'none' op (genotypes.py PRIMITIVES)": True,
            "sep_loss (l2: the squared zero-one loss)": defaults["sep_loss"],
        },
        ref_label,
    )


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
