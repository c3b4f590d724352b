"""Fidelity of DARTS- (the ``darts_minus`` component with DARTS) against Meituan-AutoML/DARTS-.

Chu et al., "DARTS-: Robustly Stepping out of Performance Collapse Without Indicators", ICLR
2021. Every edge gets an auxiliary skip connection outside the mixing weights
(``src/search/model_search.py: MixedOp``):

    o_ij(x) = sum_k softmax(alpha_ij)_k o_k(x) + beta_e * aux(x),

``aux`` the identity on stride-1 edges and ``FactorizedReduce(C, C, affine=False)`` on stride-2
edges, with ``beta_e`` decayed linearly over the epochs (``src/utils.py: DecayScheduler``,
stepped at the start of every epoch): ``beta_e = beta0 (T_max - e) / (T_max - T_start)`` for
``T_start <= e <= T_stop`` (1 at epoch 0, 0.02 at epoch 49 with ``T_max = T_stop = 50``).
First-order DARTS otherwise (Adam 3e-4, betas (0.5, 0.999), wd 1e-3); the auxiliary op is not a
candidate, so the genotype is DARTS's.

Known answers (no checkout): the coefficient of epochs 0-49 equals ``(50 - e) / 50`` on every
mixed op; on the DARTS space the supernet's forward (at epoch 10, beta 0.8) equals the network
written out with ``beta * aux(x)`` added to each edge (identity at stride 1, the edge's
FactorizedReduce at stride 2), and the architecture gradient and step equal autograd through it
and Adam; on NAS-Bench-201 (``experiment=darts_minus_nb201``: every edge is stride 1) the
forward equals the cells written out with ``beta * x`` on each edge.

With ``--reference-root darts_minus=PATH`` (a checkout of github.com/Meituan-AutoML/DARTS-): the
reference's ``src/search/model_search.Network`` on its DARTS space ``s5`` and its
``Architect``, at float64 with our weights (its ``MixedOp`` registers ``_ops`` before
``auxiliary_op``, ours ``ops`` before ``aux``: the module orders agree), compared on the forward at
epochs 0 and 10, the architecture gradient and step, three whole steps at epoch 10 run by the
reference's own ``train()`` (``src/search/train_search.py``: architecture step, then weight step
with ``clip_grad_norm(model.parameters(), 5)``, auxiliary weights included), the coefficient
of every epoch (its ``DecayScheduler`` stepped as ``train_epochs`` steps it), the genotype
(``Network.genotype``) and the settings of ``src/search/args.py`` against
``experiment=darts_minus_darts_cifar10``. ``src/search/args.py`` parses the command line at
import; the script gives ``model_search`` an in-memory stand-in holding those defaults with the
flags of ``scripts/run_darts_minus.sh`` (``--auxiliary_skip --skip_beta 1 --decay linear``) and
``--space s5``. Deliberate differences: the script's ``--space s3`` (RobustDARTS's S3) is
replaced by ``s5``, the DARTS space of our experiment (the paper's DARTS-space result); the
reference has no NAS-Bench-201 code, so ``darts_minus_nb201`` is checked by its known answer only.

    python experiments/fidelity/darts_minus.py --reference-root darts_minus=~/src/DARTS-

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/darts_minus.pt`` (``--record`` with the checkout writes them); ours runs
the same either way.
"""

from __future__ import annotations

import os
import sys
import types
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
from nas.strategies.base import SearchContext
from nas.supernet import build_supernet
from search_spaces.space import get_space

METHOD = "DARTS-"
REFERENCES = {"darts_minus": F.Reference("Meituan-AutoML/DARTS-", "src/search/model_search.py")}
C, LAYERS, CLASSES = 4, 5, 10  # two reduction cells (at 1 and 3), as the 8-cell network
LR, MOMENTUM, WD, CLIP = 0.025, 0.9, 3e-4, 5.0
ARCH_LR, ARCH_BETAS, ARCH_WD = 3e-4, (0.5, 0.999), 1e-3
EPOCHS, EPOCH = 50, 10  # the steps are compared at epoch 10: beta = 0.8
CELLS = ("normal", "reduce")
RUN_SCRIPT_PATH = "scripts/run_darts_minus.sh"


def run_script_flags(path: str) -> dict[str, Any]:
    """The options the reference's run script passes to ``train_search.py``: its shell
    variables substituted into the command line's ``--flag value`` pairs; a bare flag is
    True, numbers are numbers."""
    import re
    import shlex

    with open(path, encoding="utf-8") as f:
        text = f.read()
    variables = dict(re.findall(r"^\s*([A-Za-z_]+)=['\"]?([^'\"\s]*)['\"]?\s*$", text, re.M))
    command = next(line for line in text.splitlines() if "train_search.py" in line)
    words = shlex.split(command.split(">")[0])
    out: dict[str, Any] = {}
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        nxt = words[i + 1] if i + 1 < len(words) else "--"
        if nxt.startswith("--"):
            out[word[2:]] = True
            continue
        value = re.sub(r"\$\{?([A-Za-z_]+)\}?", lambda m: variables.get(m.group(1), ""), nxt)
        try:
            out[word[2:]] = int(value)
        except ValueError:
            try:
                out[word[2:]] = float(value)
            except ValueError:
                out[word[2:]] = value
    return out


def run_script(root: str) -> dict[str, Any]:
    """What the comparison runs the reference with: its run script's options (read from
    ``scripts/run_darts_minus.sh``), with the DARTS space (s5) for its ``--space s3``."""
    flags = run_script_flags(os.path.join(root, RUN_SCRIPT_PATH))
    keys = ("auxiliary_skip", "skip_beta", "decay", "drop_path_prob")
    return {**{k: flags[k] for k in keys}, "space": "s5"}


def ours(space: str = "darts", seed: int = 0) -> tuple[Any, nn.Module, torch.optim.SGD]:
    """First-order DARTS with the ``darts_minus`` component, composed as the experiments compose
    them, on a float64 supernet; alphas drawn far from uniform."""
    cfg = F.compose(["search=darts", f"space={space}", "components=[darts_minus]"])
    strategy = build_strategy(cfg)
    strategy.add_components(build_components(cfg))
    torch.manual_seed(seed)
    if space == "nb201":
        net = build_supernet("nb201", C=4, layers=1, num_classes=CLASSES).double()
    else:
        net = build_supernet(space, C=C, layers=LAYERS, num_classes=CLASSES).double()
    strategy.prepare_supernet(net)  # the auxiliary ops, before the optimiser
    F.randomise_affine(net, seed)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    strategy.attach(SearchContext(net, opt, grad_clip=CLIP, epochs=EPOCHS),
                    generator=torch.Generator().manual_seed(seed))  # fmt: skip
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=g, dtype=a.dtype))
    return strategy, net, opt


def alphas(strategy: Any) -> list[torch.Tensor]:
    return [strategy.arch_params[ct].detach().clone() for ct in CELLS]


def arch_grads(strategy: Any) -> list[torch.Tensor]:
    return [strategy.arch_params[ct].grad.detach().clone() for ct in CELLS]


def trained(modules: list[nn.Module]) -> list[torch.Tensor]:
    return [t.detach().clone() for m in modules for n in ("weight", "bias")
            if isinstance(t := getattr(m, n, None), torch.Tensor)]  # fmt: skip


# ------------------------------------------------------------------------------ known answers


def edge_written_out(mixed: nn.Module, x: torch.Tensor, w: torch.Tensor, beta: float):
    """``sum_k w_k o_k(x) + beta * aux(x)``: identity at stride 1, FactorizedReduce at 2."""
    y = sum(w[k] * op(x) for k, (op, n) in enumerate(zip(mixed.ops, mixed.op_names))
            if n != "none")  # fmt: skip
    assert mixed.aux is not None
    aux = x if mixed.stride == 1 else mixed.aux(x)
    return y + beta * aux


def darts_written_out(net: nn.Module, x: torch.Tensor, alpha_list, beta: float):
    w = {ct: torch.softmax(a, -1) for ct, a in zip(CELLS, alpha_list)}
    s0 = s1 = net.stem(x)
    for cell in net.cells:
        ww = w[cell.cell_type]
        states = [cell.preprocess0(s0), cell.preprocess1(s1)]
        for edges in cell.edges_into:
            states.append(sum(edge_written_out(cell.ops[e], states[cell.edge_src[e]], ww[e], beta)
                              for e in edges))  # fmt: skip
        s0, s1 = s1, torch.cat(states[-cell.multiplier :], dim=1)
    return net.classifier(net.global_pooling(s1).flatten(1))


def nb201_written_out(net: nn.Module, x: torch.Tensor, alpha: torch.Tensor, beta: float):
    w = torch.softmax(alpha, -1)
    feature = net.stem(x)
    for cell in net.cells:
        if not isinstance(getattr(cell, "ops", None), nn.ModuleList):  # a ResNet block
            feature = cell(feature)
            continue
        nodes = [feature]
        for edges in cell.edges_into:
            nodes.append(sum(edge_written_out(cell.ops[e], nodes[cell.edge_src[e]], w[e], beta)
                             for e in edges))  # fmt: skip
        feature = nodes[-1]
    return net.classifier(net.global_pooling(net.lastact(feature)).flatten(1))


def known_answers(table: F.Table) -> None:
    (tb, vb) = F.batches(2)
    strategy, net, _ = ours()
    aux = strategy.component_list()[0]
    betas, scales = [], []
    for e in range(EPOCHS):
        strategy.begin_epoch(e)
        betas.append(aux.beta)
        scales.append(sorted({m.aux_scale for m in net.mixed_ops()}))
    table.add(METHOD, "beta of epochs 0-49 = (50 - e) / 50", betas,
              [(50 - e) / 50 for e in range(EPOCHS)])  # fmt: skip
    table.add_equal(METHOD, "every mixed op's aux scale = beta", scales, [[b] for b in betas])

    strategy.begin_epoch(EPOCH)
    beta = (50 - EPOCH) / 50
    a0 = alphas(strategy)
    with torch.no_grad():
        table.add(METHOD, "forward, epoch 10 = edges + beta * aux written out (DARTS space)",
                  net(vb[0], strategy.arch_weights(sample=False)),
                  darts_written_out(net, vb[0], a0, beta))  # fmt: skip
    leaves = [a.clone().requires_grad_(True) for a in a0]
    grads = torch.autograd.grad(
        TF.cross_entropy(darts_written_out(net, vb[0], leaves, beta), vb[1]), leaves
    )
    adam_leaves = [a.clone().requires_grad_(True) for a in a0]
    adam = torch.optim.Adam(adam_leaves, lr=ARCH_LR, betas=ARCH_BETAS, weight_decay=ARCH_WD)
    for p, g in zip(adam_leaves, grads):
        p.grad = g
    adam.step()
    strategy.arch_step(tb, vb)
    table.add(METHOD, "architecture gradient, epoch 10 = autograd", arch_grads(strategy),
              list(grads))  # fmt: skip
    table.add(METHOD, "architecture step = Adam(3e-4, (0.5, 0.999), wd 1e-3)", alphas(strategy),
              [p.detach() for p in adam_leaves])  # fmt: skip

    strategy, net, _ = ours("nb201")
    strategy.begin_epoch(EPOCH)
    alpha = strategy.arch_params["cell"].detach()
    with torch.no_grad():
        table.add(METHOD, "NB201 forward, epoch 10 = edges + beta * x written out",
                  net(vb[0], strategy.arch_weights(sample=False)),
                  nb201_written_out(net, vb[0], alpha, beta))  # fmt: skip


# ---------------------------------------------------------------------------- the reference


class _Recorder:
    """The reference's architect, recording its first gradient and step."""

    def __init__(self, architect: Any, model: Any) -> None:
        self.architect, self.model = architect, model
        self.first: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def step(self, *args: Any, **kwargs: Any) -> None:
        self.architect.step(*args, **kwargs)
        if self.first is None:
            params = self.model.arch_parameters()
            self.first = ([p.grad.detach().clone() for p in params],
                          [p.detach().clone() for p in params])  # fmt: skip


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("darts_minus")  # else the reference's values come from its recording
    ref_label = refs.label("darts_minus")
    train_batches, val_batches = F.batches(3, seed=1), F.batches(3, seed=2)

    with refs.imports("darts_minus", ".", ["."]), F.float64():
        if live:
            import logging
            from types import SimpleNamespace

            import src.search  # type: ignore[import-not-found]  # noqa: F401
            from src import utils  # type: ignore[import-not-found]
            from torch.autograd import Variable

            defaults = F.script_defaults("src/search/args.py")
            script = run_script(refs.root("darts_minus"))
            args = SimpleNamespace(**{**defaults, **script, "disable_cuda": True})
            # src/search/args.py parses the command line and creates folders at import: a
            # stand-in
            scheduler = utils.DecayScheduler(
                base_lr=args.skip_beta,
                T_max=args.decay_max_epoch,
                T_start=args.decay_start_epoch,
                T_stop=args.decay_stop_epoch,
                decay_type=args.decay,
            )
            stand_in = types.ModuleType("src.search.args")
            stand_in.args = args  # type: ignore[attr-defined]
            stand_in.beta_decay_scheduler = scheduler  # type: ignore[attr-defined]
            sys.modules["src.search.args"] = stand_in
            from src.search.architect import Architect  # type: ignore[import-not-found]
            from src.search.model_search import Network  # type: ignore[import-not-found]
            from src.spaces import spaces_dict  # type: ignore[import-not-found]

            primitives = spaces_dict[args.space]
            train = F.load_function("src/search/train_search.py", "train",
                                    {"args": args, "utils": utils, "Variable": Variable, "nn": nn,
                                     "torch": torch, "logging": logging})  # fmt: skip
        criterion = nn.CrossEntropyLoss()

        def reference(strategy: Any, net: nn.Module):
            if not live:
                return None, None, None
            model = Network(C, CLASSES, LAYERS, criterion, primitives, steps=args.nodes,
                            args=args).double()  # fmt: skip
            F.copy_weights(net, model)
            with torch.no_grad():
                model.alphas_normal.copy_(strategy.arch_params["normal"])
                model.alphas_reduce.copy_(strategy.arch_params["reduce"])
            optimizer = torch.optim.SGD(model.parameters(), LR, momentum=args.momentum,
                                        weight_decay=args.weight_decay)  # fmt: skip
            return model, optimizer, Architect(model, args)

        # the coefficient: the reference's scheduler stepped at the start of every epoch
        strategy, net, _ = ours()
        ref_beta, our_beta = [], []
        for e in range(EPOCHS):
            if live:
                scheduler.step(e)
                ref_beta.append(scheduler.decay_rate)
            strategy.begin_epoch(e)
            our_beta.append(strategy.component_list()[0].beta)
        table.add(METHOD, "beta of epochs 0-49 (DecayScheduler.step)", our_beta,
                  lambda: ref_beta, ref_label)  # fmt: skip

        model, _, _ = reference(strategy, net)
        x = val_batches[0][0]
        for e in (0, EPOCH):
            if live:
                scheduler.step(e)
            strategy.begin_epoch(e)
            with torch.no_grad():
                ours_out = net(x, strategy.arch_weights(sample=False))
                # the name holds the paper's beta, not either side's (a bug must not rename it)
                table.add(METHOD, f"forward, epoch {e} (beta {(EPOCHS - e) / EPOCHS:g})",
                          ours_out, lambda: model(x), ref_label)  # fmt: skip
        table.add_equal(METHOD, "genotype (Network.genotype)", F.our_genotype(strategy),
                        lambda: F.reference_genotype(model), ref_label)  # fmt: skip

        # three whole steps at epoch 10: the reference's own train()
        strategy, net, _ = ours()
        model, optimizer, architect = reference(strategy, net)
        strategy.begin_epoch(EPOCH)
        if live:
            scheduler.step(EPOCH)
            recorder = _Recorder(architect, model)
            train(EPOCH, primitives, train_batches, val_batches, model, recorder, criterion,
                  optimizer, LR, None, None)  # fmt: skip
            assert recorder.first is not None
        for i, (tb, vb) in enumerate(zip(train_batches, val_batches)):
            strategy.begin_step(i)
            strategy.arch_step(tb, vb)
            if i == 0:
                table.add(METHOD, "architecture gradient, epoch 10", arch_grads(strategy),
                          lambda: recorder.first[0], ref_label)  # fmt: skip
                table.add(METHOD, "architecture step, epoch 10", alphas(strategy),
                          lambda: recorder.first[1], ref_label)  # fmt: skip
            strategy.weight_step(tb)
        table.add(METHOD, "alphas after 3 steps", alphas(strategy),
                  lambda: [model.alphas_normal, model.alphas_reduce], ref_label)  # fmt: skip
        table.add(METHOD, "weights after 3 steps (auxiliary ops included)",
                  trained(F.modules_in_order(net)), lambda: trained(F.modules_in_order(model)),
                  ref_label)  # fmt: skip
        table.add_equal(METHOD, "genotype after 3 steps", F.our_genotype(strategy),
                        lambda: F.reference_genotype(model), ref_label)  # fmt: skip

    cfg = F.compose(["experiment=darts_minus_darts_cifar10"])
    dm = cfg.components.darts_minus
    t_max = dm.t_max if dm.t_max is not None else cfg.epochs
    F.add_settings(
        table,
        METHOD,
        {
            "space (run script: s3; ours the DARTS space, s5)": {"darts": "s5"}.get(
                str(cfg.space.name), str(cfg.space.name)
            ),
            "epochs": cfg.epochs,
            "batch_size": cfg.batch_size,
            "learning_rate": cfg.optimizer.lr,
            "learning_rate_min": cfg.optimizer.lr_min,
            "momentum": cfg.optimizer.momentum,
            "weight_decay": cfg.optimizer.weight_decay,
            "grad_clip": cfg.optimizer.grad_clip,
            "train_portion": cfg.data.train_portion,
            "arch_learning_rate": cfg.search.arch_lr,
            "arch_weight_decay": cfg.search.arch_weight_decay,
            "arch betas (architect.py)": list(cfg.search.arch_betas),
            "unrolled": cfg.search.order == 2,
            "init_channels": cfg.space.C,
            "layers": cfg.space.layers,
            "nodes": len(get_space(str(cfg.space.name)).cells["normal"].intermediate_nodes),
            "cutout": bool(cfg.data.cutout),
            "drop_path_prob (our search has no drop path)": 0.0,
            "auxiliary_skip (run script)": "darts_minus" in (cfg.get("components") or {}),
            "auxiliary_operation": dm.operation,
            "skip_beta (run script)": dm.beta0,
            "decay (run script)": dm.decay,
            "decay_start_epoch": dm.t_start,
            "decay_max_epoch": t_max,
            "decay_stop_epoch": dm.t_stop if dm.t_stop is not None else t_max,
        },
        lambda: {
            **defaults,
            "space (run script: s3; ours the DARTS space, s5)": "s5",
            "drop_path_prob (our search has no drop path)": defaults["drop_path_prob"],
            "arch betas (architect.py)": [0.5, 0.999],
            "auxiliary_skip (run script)": script["auxiliary_skip"],
            "skip_beta (run script)": float(script["skip_beta"]),
            "decay (run script)": script["decay"],
        },
        ref_label,
    )


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
