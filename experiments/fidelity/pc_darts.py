"""Fidelity of PC-DARTS (the ``pc_darts`` component with DARTS) against yuhuixu1993/PC-DARTS.

Xu et al., "PC-DARTS: Partial Channel Connections for Memory-Efficient Architecture Search",
ICLR 2020. Partial channels (eq. 2, ``model_search.py: MixedOp``, K = 4): an edge's ops see the
first ``C/K`` channels ``x[:, :C/K]`` (a fixed slice, no random sampling), the other channels
bypass them (max-pooled 2x2 on stride-2 edges) and the concatenation is channel-shuffled with
``K`` groups:

    f_ij(x) = shuffle_K( cat[ sum_k softmax(alpha_ij)_k o_k(x[:, :C/K]),  bypass(x[:, C/K:]) ] )

Edge normalisation (eq. 4, ``Network.forward``): ``x_j = sum_{i<j} softmax_{i'<j}(beta_i'j)_i
f_ij(x_i)``, the betas an architecture parameter trained by the same Adam (lr 6e-4, betas
(0.5, 0.999), wd 1e-3); the genotype ranks ``W = softmax(alpha) * softmax(beta)`` (``genotype``:
top-2 inputs per node by their best op but ``none``, the best op but ``none`` on each). No
architecture step for the first 15 epochs (``train_search.py``: ``if epoch>=15``); first order.

Known answers (no checkout): one partial-channel edge of each stride equals the slice, the ops,
the 2x2 max-pool bypass and the shuffle written out with ``view``/``transpose``; the edge weights
equal the per-node softmax of the betas; the supernet's forward equals the network written out
from those edges with each edge scaled by its weight; the architecture gradient (alphas and
betas) equals autograd through it and the step equals Adam(6e-4, (0.5, 0.999), wd 1e-3); the
epochs with architecture steps are ``e >= 15``; the weight lr per epoch is the cosine 0.1 -> 0;
the genotype equals the reference's parse of ``W`` written out.

With ``--reference-root pc_darts=PATH`` (a checkout of github.com/yuhuixu1993/PC-DARTS): the
reference's ``model_search.Network`` (K = 4 fixed in its ``MixedOp``) and ``architect.Architect``
at float64 with our weights, alphas and betas, compared on the forward, the architecture
gradient (alphas and betas, the ``.grad`` Adam reads) and step, three whole steps run by the
reference's own ``train()`` of ``train_search.py`` (architecture step then weight step with
``clip_grad_norm(model.parameters(), 5)``), the warm-up (its ``train()`` at epochs 14 and 15),
the genotype (``Network.genotype``) and the settings of ``train_search.py`` against
``experiment=pc_darts_cifar10``. Our random architecture batch per step (``arch_batch: random``)
is the reference's ``next(iter(valid_queue))``; here both sides get the same given batches.

    python experiments/fidelity/pc_darts.py --reference-root pc_darts=~/src/PC-DARTS

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/pc_darts.pt`` (``--record`` with the checkout writes them); ours runs
the same either way (an architecture step at epoch 15 where ours takes one, as a run does).
"""

from __future__ import annotations

import math
import os
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

from nas.plugins import build_components, build_strategy
from nas.run.schedules import search_lr_factor
from nas.strategies.base import SearchContext
from nas.supernet import build_supernet

METHOD = "PC-DARTS"
REFERENCES = {"pc_darts": F.Reference("yuhuixu1993/PC-DARTS", "model_search.py")}
# C/K = 2 channels per op (stride-2 skip_connect, a FactorizedReduce, needs an even width);
# two reduction cells (at 1 and 3) as the 8-cell network
C, LAYERS, CLASSES, K = 8, 5, 10, 4
LR, MOMENTUM, WD, CLIP = 0.1, 0.9, 3e-4, 5.0
ARCH_LR, ARCH_BETAS, ARCH_WD = 6e-4, (0.5, 0.999), 1e-3
CELLS = ("normal", "reduce")


def ours(seed: int = 0, warmup: int = 15) -> tuple[Any, nn.Module, torch.optim.SGD]:
    """DARTS (first order) with the ``pc_darts`` component, as ``experiment=pc_darts_cifar10``
    composes them, on a float64 supernet; alphas and betas drawn far from uniform."""
    cfg = F.compose(
        ["search=darts", "space=darts", "components=[pc_darts]", f"search.arch_lr={ARCH_LR}",
         f"components.pc_darts.warmup_epochs={warmup}"]
    )  # fmt: skip
    strategy = build_strategy(cfg)
    strategy.add_components(build_components(cfg))
    torch.manual_seed(seed)
    net = build_supernet("darts", C=C, layers=LAYERS, num_classes=CLASSES,
                         partial_channels=strategy.initial_partial_channels()).double()  # fmt: skip
    strategy.prepare_supernet(net)
    F.randomise_affine(net, seed)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    strategy.attach(SearchContext(net, opt, grad_clip=CLIP, epochs=50),
                    generator=torch.Generator().manual_seed(seed))  # fmt: skip
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for p in strategy.arch_parameters():  # alphas, then the edge betas
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return strategy, net, opt


def component(strategy: Any) -> Any:
    return strategy.component_list()[0]


def arch_state(strategy: Any) -> list[torch.Tensor]:
    """alphas normal, reduce, betas normal, reduce (the reference's ``arch_parameters()``)."""
    betas = component(strategy).edge_betas
    return [t.detach().clone() for t in (*strategy.arch_params.values(), *betas.values())]


def arch_grads(strategy: Any) -> list[torch.Tensor]:
    """The ``.grad`` of alphas and betas (zeros where there is none: no architecture step)."""
    betas = component(strategy).edge_betas
    return [
        torch.zeros_like(t) if t.grad is None else t.grad.detach().clone()
        for t in (*strategy.arch_params.values(), *betas.values())
    ]


def updates_arch(strategy: Any, epoch: int) -> bool:
    """Whether a run's epoch ``epoch`` takes architecture steps (``SearchRun.run_epoch``)."""
    return bool(strategy.updates_arch(epoch) and strategy.components_update_arch(epoch))


# ------------------------------------------------------------------------------ known answers


def edge_written_out(mixed: nn.Module, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """eq. 2: the first C/K channels through the ops (``none`` adds nothing), the rest bypass
    (2x2 max-pool at stride 2), concatenated and shuffled with K groups."""
    c = x.shape[1] // K
    x_op, x_rest = x[:, :c], x[:, c:]
    y = sum(w[k] * op(x_op) for k, (op, n) in enumerate(zip(mixed.ops, mixed.op_names))
            if n != "none")  # fmt: skip
    if mixed.stride == 2:
        x_rest = TF.max_pool2d(x_rest, 2, 2)
    out = torch.cat([y, x_rest], dim=1)
    n, ch, h, w_ = out.shape
    return out.view(n, K, ch // K, h, w_).transpose(1, 2).reshape(n, ch, h, w_)


def node_softmax_written_out(beta: torch.Tensor) -> torch.Tensor:
    """``Network.forward``: softmax over betas[0:2], [2:5], [5:9], [9:14]."""
    return torch.cat([torch.softmax(beta[s:e], -1) for s, e in ((0, 2), (2, 5), (5, 9), (9, 14))])


def network_written_out(net: nn.Module, x: torch.Tensor, alphas, betas) -> torch.Tensor:
    w = {ct: torch.softmax(a, -1) for ct, a in zip(CELLS, alphas)}
    ew = {ct: node_softmax_written_out(b) for ct, b in zip(CELLS, betas)}
    s0 = s1 = net.stem(x)
    for cell in net.cells:
        ct = cell.cell_type
        states = [cell.preprocess0(s0), cell.preprocess1(s1)]
        for edges in cell.edges_into:
            states.append(sum(ew[ct][e] * edge_written_out(cell.ops[e], states[cell.edge_src[e]],
                                                           w[ct][e]) for e in edges))  # fmt: skip
        s0, s1 = s1, torch.cat(states[-cell.multiplier :], dim=1)
    return net.classifier(net.global_pooling(s1).flatten(1))


def parse_written_out(ops: tuple[str, ...], alphas, betas) -> list[list[tuple[str, int]]]:
    """``Network.genotype``: W = softmax(alpha) * softmax(beta) per node; top-2 inputs by their
    best op but ``none``, the best op but ``none`` on each (``ops``: ``none`` first)."""
    assert ops[0] == "none"
    genes = []
    for a, b in zip(alphas, betas):
        W = (torch.softmax(a, -1) * node_softmax_written_out(b).unsqueeze(-1)).tolist()
        gene, start = [], 0
        for i in range(4):
            rows = W[start : start + i + 2]
            edges = sorted(range(i + 2), key=lambda j: -max(rows[j][1:]))[:2]
            for j in edges:
                k = max(range(1, len(rows[j])), key=lambda k: (rows[j][k], -k))
                gene.append((ops[k], j))
            start += i + 2
        genes.append(gene)
    return genes


def known_answers(table: F.Table) -> None:
    (tb, vb) = F.batches(2)
    strategy, net, _ = ours()
    a0 = arch_state(strategy)
    g = torch.Generator().manual_seed(3)
    for cell in (net.cells[0], net.cells[1]):  # a normal cell (stride 1), a reduction cell
        e = 0  # the edge from s0: stride 2 in the reduction cell
        mixed = cell.ops[e]
        x = torch.randn(4, mixed.C, 8, 8, generator=g, dtype=torch.float64)
        w = torch.softmax(torch.randn(len(mixed.ops), generator=g, dtype=torch.float64), -1)
        with torch.no_grad():
            table.add(METHOD, f"partial-channel edge, stride {mixed.stride} = eq. 2 written out",
                      mixed(x, w, [True] * len(w)), edge_written_out(mixed, x, w))  # fmt: skip
    with torch.no_grad():
        table.add(METHOD, "edge weights = softmax(beta) per node",
                  list(component(strategy).edge_weights().values()),
                  [node_softmax_written_out(b) for b in a0[2:]])  # fmt: skip
        table.add(METHOD, "forward = edge-normalised network written out",
                  net(vb[0], strategy.arch_weights(sample=False)),
                  network_written_out(net, vb[0], a0[:2], a0[2:]))  # fmt: skip

    leaves = [t.clone().requires_grad_(True) for t in a0]
    loss = TF.cross_entropy(network_written_out(net, vb[0], leaves[:2], leaves[2:]), vb[1])
    grads = torch.autograd.grad(loss, leaves)
    adam_leaves = [t.clone().requires_grad_(True) for t in a0]
    adam = torch.optim.Adam(adam_leaves, lr=ARCH_LR, betas=ARCH_BETAS, weight_decay=ARCH_WD)
    for p, gr in zip(adam_leaves, grads):
        p.grad = gr
    adam.step()
    strategy.arch_step(tb, vb)
    table.add(METHOD, "architecture gradient (alphas, betas) = autograd", arch_grads(strategy),
              list(grads))  # fmt: skip
    table.add(METHOD, "architecture step = Adam(6e-4, (0.5, 0.999), wd 1e-3)",
              arch_state(strategy), [p.detach() for p in adam_leaves])  # fmt: skip
    table.add_equal(METHOD, "genotype = parse of softmax(alpha) x softmax(beta)",
                    F.our_genotype(strategy),
                    parse_written_out(net.cells[0].ops[0].op_names, arch_state(strategy)[:2],
                                      arch_state(strategy)[2:]))  # fmt: skip
    table.add_equal(METHOD, "epochs with architecture steps = e >= 15",
                    [strategy.components_update_arch(e) for e in range(50)],
                    [e >= 15 for e in range(50)])  # fmt: skip
    factor = search_lr_factor(epochs=50, lr=LR, lr_min=0.0, warmup_epochs=0, stage_lr="cosine",
                              stage_starts=[0])  # fmt: skip
    cosine = [LR * (1 + math.cos(math.pi * e / 50)) / 2 for e in range(50)]
    table.add(METHOD, "weight lr of epochs 0-49 = cosine 0.1 -> 0",
              [LR * factor(e) for e in range(50)], cosine)  # fmt: skip
    # ImageNet (train_search_imagenet.py): lr 0.5 * (e + 1) / 5 for e < 5, then the cosine
    factor = search_lr_factor(epochs=50, lr=0.5, lr_min=0.0, warmup_epochs=5, stage_lr="cosine",
                              stage_starts=[0])  # fmt: skip
    expected = [0.5 * (e + 1) / 5 if e < 5 else 0.5 * (1 + math.cos(math.pi * e / 50)) / 2
                for e in range(50)]  # fmt: skip
    table.add(METHOD, "ImageNet weight lr of epochs 0-49 = warm-up 5, cosine 0.5 -> 0",
              [0.5 * factor(e) for e in range(50)], expected)  # fmt: skip


# ---------------------------------------------------------------------------- the reference


class _Recorder:
    """The reference's architect, recording whether it stepped and its first gradient."""

    def __init__(self, architect: Any, model: Any) -> None:
        self.architect, self.model = architect, model
        self.calls = 0
        self.first_grads: list[torch.Tensor] | None = None
        self.first_state: list[torch.Tensor] | None = None

    def step(self, *args: Any, **kwargs: Any) -> None:
        self.architect.step(*args, **kwargs)
        if self.calls == 0:
            params = self.model.arch_parameters()
            self.first_grads = [p.grad.detach().clone() for p in params]
            self.first_state = [p.detach().clone() for p in params]
        self.calls += 1


class _Draws:
    """``next(iter(valid_queue))`` gives the next of the given batches (the reference's random
    architecture batch, here the same batch as ours)."""

    def __init__(self, items: list[Any]) -> None:
        self.items, self.i = items, 0

    def __iter__(self):
        item = self.items[self.i]
        self.i += 1
        return iter([item])


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("pc_darts")  # else the reference's values come from its recording
    ref_label = refs.label("pc_darts")
    train_batches, val_batches = F.batches(3, seed=1), F.batches(3, seed=2)

    with refs.imports("pc_darts", ".", ["."]), F.float64():
        if live:
            import logging
            from types import SimpleNamespace

            import utils  # type: ignore[import-not-found]
            from architect import Architect  # type: ignore[import-not-found]
            from model_search import Network  # type: ignore[import-not-found]
            from torch.autograd import Variable

            defaults = F.script_defaults("train_search.py")
            args = SimpleNamespace(**defaults)
            train = F.load_function("train_search.py", "train",
                                    {"args": args, "utils": utils, "Variable": Variable,
                                     "nn": nn, "logging": logging, "torch": torch})  # fmt: skip
        criterion = nn.CrossEntropyLoss()

        def reference(strategy: Any, net: nn.Module):
            if not live:
                return None, None, None
            model = Network(C, CLASSES, LAYERS, criterion).double()
            F.copy_weights(net, model)
            with torch.no_grad():
                for p, q in zip(model.arch_parameters(), arch_state(strategy)):
                    p.copy_(q)
            optimizer = torch.optim.SGD(model.parameters(), LR, momentum=args.momentum,
                                        weight_decay=args.weight_decay)  # fmt: skip
            return model, optimizer, Architect(model, args)

        strategy, net, _ = ours()
        model, _, _ = reference(strategy, net)
        x = val_batches[0][0]
        table.add(METHOD, "forward (partial channels, edge normalisation)",
                  net(x, strategy.arch_weights(sample=False)), lambda: model(x),
                  ref_label)  # fmt: skip
        table.add_equal(METHOD, "genotype (Network.genotype)", F.our_genotype(strategy),
                        lambda: F.reference_genotype(model), ref_label)  # fmt: skip

        # three whole steps: the reference's own train() at epoch 15 (the first with
        # architecture steps); ours: the loop's arch_step (where ours updates the architecture
        # at epoch 15) then weight_step
        strategy, net, _ = ours()
        model, optimizer, architect = reference(strategy, net)
        if live:
            recorder = _Recorder(architect, model)
            train(train_batches, _Draws(val_batches), model, recorder, criterion, optimizer,
                  LR, 15)  # fmt: skip
        for i, (tb, vb) in enumerate(zip(train_batches, val_batches)):
            strategy.begin_step(i)
            if updates_arch(strategy, 15):
                strategy.arch_step(tb, vb)
            if i == 0:
                table.add(METHOD, "architecture gradient (alphas, betas)", arch_grads(strategy),
                          lambda: recorder.first_grads, ref_label)  # fmt: skip
                table.add(METHOD, "architecture step (alphas, betas)", arch_state(strategy),
                          lambda: recorder.first_state, ref_label)  # fmt: skip
            strategy.weight_step(tb)
        table.add(METHOD, "alphas and betas after 3 steps", arch_state(strategy),
                  lambda: [p.detach().clone() for p in model.arch_parameters()],
                  ref_label)  # fmt: skip
        table.add(METHOD, "weights after 3 steps", F.trained(net), lambda: F.trained(model),
                  ref_label)  # fmt: skip
        table.add_equal(METHOD, "genotype after 3 steps", F.our_genotype(strategy),
                        lambda: F.reference_genotype(model), ref_label)  # fmt: skip

        # the warm-up: the reference's train() at epochs 14 and 15 (one batch each)
        steps = []
        for epoch in (14, 15):
            strategy, net, _ = ours()
            model, optimizer, architect = reference(strategy, net)
            if live:
                recorder = _Recorder(architect, model)
                train(train_batches[:1], _Draws(val_batches), model, recorder, criterion,
                      optimizer, LR, epoch)  # fmt: skip
                steps.append(recorder.calls == 1)
        table.add_equal(METHOD, "architecture steps at epochs 14, 15 (train(): epoch>=15)",
                        [updates_arch(strategy, e) for e in (14, 15)], lambda: steps,
                        ref_label)  # fmt: skip

    cfg = F.compose(["experiment=pc_darts_cifar10"])
    pc = cfg.components.pc_darts
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
            "train_portion": cfg.data.train_portion,
            "cutout": bool(cfg.data.cutout),
            "arch_learning_rate": cfg.search.arch_lr,
            "arch_weight_decay": cfg.search.arch_weight_decay,
            "arch betas (architect.py)": list(cfg.search.arch_betas),
            "unrolled": cfg.search.order == 2,
            "K (MixedOp.k)": pc.partial_channels,
            "warm-up epochs (train(): epoch>=15)": pc.warmup_epochs,
            "edge normalisation": pc.edge_normalisation,
            "beta init scale (1e-3*randn)": pc.init_scale,
            "architecture batch (next(iter(valid_queue)))": cfg.arch_batch,
        },
        lambda: {
            **defaults,
            "arch betas (architect.py)": [0.5, 0.999],
            "K (MixedOp.k)": 4,
            "warm-up epochs (train(): epoch>=15)": 15,
            "edge normalisation": True,
            "beta init scale (1e-3*randn)": 1e-3,
            "architecture batch (next(iter(valid_queue)))": "random",
        },
        ref_label,
    )

    # the ImageNet search (train_search_imagenet.py) against experiment=pc_darts_imagenet
    if live:
        im = F.script_defaults(os.path.join(refs.root("pc_darts"), "train_search_imagenet.py"))
    cfg = F.compose(["experiment=pc_darts_imagenet"])
    pc = cfg.components.pc_darts
    F.add_settings(
        table,
        METHOD,
        {
            "imagenet: epochs": cfg.epochs,
            "imagenet: batch_size": cfg.batch_size,
            "imagenet: learning_rate": cfg.optimizer.lr,
            "imagenet: learning_rate_min": cfg.optimizer.lr_min,
            "imagenet: lr warm-up epochs (epoch < 5 and batch_size > 256)": (
                cfg.optimizer.warmup_epochs
            ),
            "imagenet: momentum": cfg.optimizer.momentum,
            "imagenet: weight_decay": cfg.optimizer.weight_decay,
            "imagenet: grad_clip": cfg.optimizer.grad_clip,
            "imagenet: init_channels": cfg.space.C,
            "imagenet: layers": cfg.space.layers,
            "imagenet: arch_learning_rate": cfg.search.arch_lr,
            "imagenet: arch_weight_decay": cfg.search.arch_weight_decay,
            "imagenet: arch gradient clip (clip_grad_norm_(arch_parameters(), grad_clip))": (
                cfg.search.arch_grad_clip
            ),
            "imagenet: begin (warm-up epochs)": pc.warmup_epochs,
            "imagenet: K (MixedOp: C//2)": pc.partial_channels,
        },
        lambda: {
            **{f"imagenet: {k}": v for k, v in im.items()},
            "imagenet: lr warm-up epochs (epoch < 5 and batch_size > 256)": 5,
            "imagenet: arch gradient clip (clip_grad_norm_(arch_parameters(), grad_clip))": (
                im["grad_clip"]
            ),
            "imagenet: begin (warm-up epochs)": im["begin"],
            "imagenet: K (MixedOp: C//2)": 2,
        },
        ref_label,
    )


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
