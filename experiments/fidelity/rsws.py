"""Fidelity of RS-WS (random search with weight sharing) against liamcli/randomNAS_release.

Li & Talwalkar, "Random Search and Reproducibility for Neural Architecture Search", UAI 2019
(``searchers/random_weight_share.py``, ``benchmarks/cnn/darts/darts_wrapper_discrete.py``).
Training: every step draws an architecture uniformly (``sample_arch``: for each intermediate
node i, two distinct inputs ``np.random.choice(range(i + 2), 2, replace=False)`` and for each
an op ``np.random.choice(range(8))``, ``none`` included, normal and reduction cells
independently), sets the mixing weights to its one-hot encoding (``get_weights_from_arch``:
``w[e, o] = 1`` at each picked (edge, op), 0 elsewhere, used without a softmax:
``model(x, discrete=True)``) and takes one SGD step on a training batch (momentum 0.9, weight
decay 3e-4, gradient norm clipped at 0.25). Selection (``get_eval_arch``): random
architectures scored by their accuracy with the shared weights in eval mode (10 batches each,
then the top 10 on the whole validation split), the best kept.

Known answers (no checkout): our architecture draws are uniform as the reference's code draws
them (over 3000 draws: each input of a node with probability 2 / (i + 2), two distinct inputs
per node, each of the 8 ops with probability 1/8; a statistical row, tolerance 0.1); the mixing
weights of a draw are its one-hot encoding, written out as ``get_weights_from_arch``; a weight
step equals the step written out (forward with the one-hot weights, cross-entropy, gradient
clipped at 0.25, SGD with momentum and weight decay) on a copy of the network; the score of a
given architecture equals its eval-mode accuracy computed by hand.

With ``--reference-root rsws=PATH`` (a checkout of github.com/liamcli/randomNAS_release; Python
2 era code): the class ``DartsWrapper`` is compiled from ``darts_wrapper_discrete.py`` with the
shims and built without its ``__init__`` (which loads CIFAR-10 from a fixed path); the network
it trains, ``model_search.Network`` with ``forward(x, discrete=True)``, comes from the authors'
unpublished DARTS fork (``sys.path.append('/home/liamli4465/darts/cnn')``), so a float64 copy
of our supernet stands in for it (its forward with the given weights, no softmax). Compared:
its ``get_weights_from_arch`` on our drawn architectures against our one-hot weights, its
``sample_arch`` (3000 draws, ``np.random`` seeded) against the same uniform frequencies, its op
list against our space's, one ``train_batch`` (its SGD, scheduler and clipping) with the
architecture our step drew, ``evaluate`` of a given architecture on the same batches, and the
settings of ``random_weight_share.py`` / ``DartsWrapper`` against ``experiment=rsws_darts_cifar10``.
Not run: ``Random_NAS.get_eval_arch`` (1000 architectures a round; ours keeps the best over all
rounds, the reference returns round 0's: a documented deviation, ``nas/selection/rsws.py``) and
the PTB wrapper. Its learning rate: ``train_batch`` calls ``scheduler.step()`` before each
epoch's first batch. On the PyTorch of its time (before 1.1) the scheduler's constructor left
``last_epoch`` at -1, so epoch e ran at cosine(e), as ours; on current PyTorch the constructor
takes a step itself and the unchanged code runs one epoch ahead (cosine(e + 1)). The row
compares its first step's lr with our epoch 1's for that reason, and our weight step runs at
our epoch 1's lr.

    python experiments/fidelity/rsws.py --reference-root rsws=~/src/randomNAS_release

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/rsws.pt`` (``--record`` with the checkout writes them); ours runs the
same either way (the reference is given our draws and a copy of our network).
"""

from __future__ import annotations

import ast
import copy
import os
import re
import sys
from collections import Counter
from types import SimpleNamespace
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch
from torch import nn

from experiments.benchmarks import reference_shims
from nas.plugins import build_strategy
from nas.run.schedules import search_lr_factor
from nas.selection.rsws import RandomWeightSharingSelection
from nas.strategies.base import SearchContext
from nas.strategies.rsws import Arch, arch_weights_of, sample_arch

METHOD = "RS-WS"
REFERENCES = {
    "rsws": F.Reference(
        "liamcli/randomNAS_release", "benchmarks/cnn/darts/darts_wrapper_discrete.py"
    )
}
C, LAYERS, CLASSES = 4, 3, 10
LR, MOMENTUM, WD, CLIP = 0.025, 0.9, 3e-4, 0.25
# DARTS's genotypes.PRIMITIVES (the reference's num_ops = len(genotypes.PRIMITIVES))
PRIMITIVES = ["none", "max_pool_3x3", "avg_pool_3x3", "skip_connect", "sep_conv_3x3",
              "sep_conv_5x5", "dil_conv_3x3", "dil_conv_5x5"]  # fmt: skip
DRAWS, FREQ_TOL = 3000, 0.1


def ours(seed: int = 0, epochs: int = 100) -> tuple[Any, nn.Module, torch.optim.SGD]:
    """Our RS-WS strategy (its YAML: grad clip 0.25) on a float64 DARTS-space supernet."""
    strategy = build_strategy(F.compose(["search=rsws", "space=darts"]))
    torch.manual_seed(seed)
    net = build_supernet_d(seed)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=epochs))
    return strategy, net, opt


def build_supernet_d(seed: int) -> nn.Module:
    from nas.supernet import build_supernet

    net = build_supernet("darts", C=C, layers=LAYERS, num_classes=CLASSES).double()
    F.randomise_affine(net, seed)
    return net


def to_reference(net: nn.Module, arch: Arch) -> tuple[list[Any], list[Any]]:
    """Our architecture as the reference's ``(normal, reduction)``: per node two
    ``(input, op)`` pairs."""
    out = []
    for ct in ("normal", "reduce"):
        edges = net.space.cells[ct].edges
        out.append([(edges[e].src, k) for e, k in arch[ct]])
    return out[0], out[1]


def from_reference(net: nn.Module, ref_arch: Any) -> Arch:
    arch: Arch = {}
    for ct, pairs in zip(("normal", "reduce"), ref_arch):
        cell = net.space.cells[ct]
        picks = []
        for i, (src, k) in enumerate(pairs):
            node = 2 + i // 2
            e = next(e for e in cell.edges_into(node) if e.src == int(src))
            picks.append((e.index, int(k)))
        arch[ct] = picks
    return arch


def frequencies(net: nn.Module, archs: list[Arch]) -> tuple[list[float], list[float]]:
    """(observed / expected) of every (cell type, edge) being picked and of every op, and the
    fraction of (cell type, node) draws with two distinct inputs."""
    edge_count: Counter[tuple[str, int]] = Counter()
    op_count: Counter[int] = Counter()
    for arch in archs:
        for ct, picks in arch.items():
            for e, k in picks:
                edge_count[(ct, e)] += 1
                op_count[k] += 1
    ratios = []
    for ct in ("normal", "reduce"):
        for edge in net.space.cells[ct].edges:
            expected = len(archs) * 2 / edge.dst  # node i (dst i + 2) has i + 2 inputs
            ratios.append(edge_count[(ct, edge.index)] / expected)
    picks_total = sum(op_count.values())
    ratios += [op_count[k] / (picks_total / len(PRIMITIVES)) for k in range(len(PRIMITIVES))]
    distinct = [
        float(len({e for e, _ in picks[2 * i : 2 * i + 2]}) == 2)
        for arch in archs
        for picks in arch.values()
        for i in range(len(picks) // 2)
    ]
    return ratios, distinct


def one_hot_written_out(net: nn.Module, arch: Arch) -> dict[str, torch.Tensor]:
    """``get_weights_from_arch`` restated: zeros [14, 8], a 1 at each node's two (input, op)."""
    out = {}
    for ct, pairs in zip(("normal", "reduce"), to_reference(net, arch)):
        w = torch.zeros(14, len(PRIMITIVES), dtype=torch.float64)
        offset = 0
        for i in range(4):
            for src, k in pairs[2 * i : 2 * i + 2]:
                w[offset + src, k] = 1
            offset += i + 2
        out[ct] = w
    return out


def drawn_step(strategy: Any, batch: Any) -> tuple[Arch, dict[str, torch.Tensor]]:
    """One weight step of ours; returns the architecture it drew and its weights."""
    seen: list[dict[str, torch.Tensor]] = []
    original = strategy.strategy_weights

    def recording(*, sample: bool) -> Any:
        w = original(sample=sample)
        seen.append({k: v.detach().clone() for k, v in w.items()})
        return w

    strategy.strategy_weights = recording
    try:
        strategy.begin_step(0)
        strategy.weight_step(batch)
    finally:
        del strategy.strategy_weights
    w = seen[-1]
    arch = {ct: [(int(e), int(w[ct][e].argmax())) for e in (w[ct].sum(1) > 0).nonzero().flatten()]
            for ct in w}  # fmt: skip
    return arch, w


def params(net: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in net.parameters()]


def accuracy_by_hand(net: nn.Module, weights: Any, batches: Any) -> float:
    net.eval()
    with torch.no_grad():
        correct = sum(float((net(x, weights).argmax(1) == y).sum()) for x, y in batches)
    net.train()
    return correct / sum(int(y.shape[0]) for _, y in batches)


# ------------------------------------------------------------------------------ known answers


def known_answers(table: F.Table) -> None:
    strategy, net, opt = ours()
    gen = torch.Generator().manual_seed(0)
    archs = [sample_arch(net, gen) for _ in range(DRAWS)]
    ratios, distinct = frequencies(net, archs)
    table.add(METHOD, f"draws: edge and op frequencies / uniform ({DRAWS} draws)",
              ratios, [1.0] * len(ratios), tolerance=FREQ_TOL)  # fmt: skip
    table.add_equal(METHOD, "draws: two distinct inputs per node", min(distinct), 1.0)
    table.add(METHOD, "mixing weights = one-hot (get_weights_from_arch written out)",
              arch_weights_of(archs[0], net.arch_shapes(), "cpu"),
              one_hot_written_out(net, archs[0]))  # fmt: skip

    # a weight step: forward with the drawn one-hot weights, CE, clip 0.25, SGD
    batch = F.batches(1, hw=8, seed=4)[0]
    copy_net = copy.deepcopy(net)
    arch, w = drawn_step(strategy, batch)
    table.add(METHOD, "the step's weights = one-hot of its draw", w,
              one_hot_written_out(net, arch))  # fmt: skip
    ps = list(copy_net.parameters())
    loss = nn.functional.cross_entropy(copy_net(batch[0], w), batch[1])
    grads = torch.autograd.grad(loss, ps, allow_unused=True)
    used = [(p, g) for p, g in zip(ps, grads) if g is not None]
    norm = torch.cat([g.flatten() for _, g in used]).norm()
    scale = min(1.0, CLIP / (float(norm) + 1e-6))
    with torch.no_grad():
        for p, g in used:  # fresh momentum: the buffer is the first gradient
            p.sub_(LR * (g * scale + WD * p))
    table.add(METHOD, "weight step = CE, clip 0.25, SGD written out", params(net), params(copy_net))

    # the score of a given architecture: eval-mode accuracy with the shared weights
    val = F.batches(2, hw=8, seed=5)
    sel = RandomWeightSharingSelection(rounds=1, archs=2, batches_per_arch=1, top_k=0)
    weights = arch_weights_of(archs[1], net.arch_shapes(), "cpu")
    net.eval()
    score = sel._score(strategy, weights, iter(val), lambda t: t)
    net.train()
    table.add(METHOD, "score of an architecture = eval-mode accuracy by hand", score,
              accuracy_by_hand(net, weights, val))  # fmt: skip


# ---------------------------------------------------------------------------- the reference


def _load_class(path: str, name: str, namespace: dict[str, Any]) -> Any:
    """A top-level class of a reference module that cannot be imported, compiled with the
    shims (``reference_shims.shim_tree``), its globals ``namespace``."""
    with open(path, encoding="utf-8") as f:
        tree, _ = reference_shims.shim_tree(f.read(), path)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            module = ast.Module(body=[node], type_ignores=[])
            exec(compile(module, path, "exec", dont_inherit=True), namespace)
            return namespace[name]
    raise SystemExit(f"reference: no class {name} in {path}; expected the reference's module")


class Discrete(nn.Module):
    """Stands in for the authors' ``model_search.Network``: our supernet's forward with the
    weights the wrapper sets (``alphas_normal`` / ``alphas_reduce``), no softmax."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self._steps = 4
        self.alphas_normal = self.alphas_reduce = None

    def forward(self, x: torch.Tensor, discrete: bool = False) -> torch.Tensor:
        assert discrete
        return self.net(x, {"normal": self.alphas_normal, "reduce": self.alphas_reduce})


def compare(table: F.Table, refs: F.Refs) -> None:
    import logging
    import warnings

    import numpy as np

    live = refs.live("rsws")  # else the reference's values come from its recording
    ref_label = refs.label("rsws")

    class Meter:  # DARTS utils.AvgrageMeter
        def __init__(self) -> None:
            self.avg = self.sum = self.cnt = 0.0

        def update(self, val: Any, n: int = 1) -> None:
            self.sum += float(val) * n
            self.cnt += n
            self.avg = self.sum / self.cnt

    def accuracy(output: torch.Tensor, target: torch.Tensor, topk=(1,)) -> list[torch.Tensor]:
        # DARTS utils.accuracy (percent)
        maxk = max(topk)
        _, pred = output.topk(maxk, 1, True, True)
        correct = pred.t().eq(target.reshape(1, -1).expand_as(pred.t()))
        return [correct[:k].reshape(-1).double().sum(0) * (100.0 / target.size(0)) for k in topk]

    logging.disable(logging.INFO)
    strategy, net, _ = ours()
    wrapper: Any = None
    if live:
        path = os.path.join(refs.root("rsws"), REFERENCES["rsws"].marker)
        utils = SimpleNamespace(AvgrageMeter=Meter, accuracy=accuracy)
        namespace = {"np": np, "torch": torch, "nn": nn, "logging": logging, "utils": utils,
                     "Variable": lambda x, **k: x,
                     "genotypes": SimpleNamespace(PRIMITIVES=PRIMITIVES),
                     "copy": copy, "time": __import__("time")}  # fmt: skip
        Wrapper = _load_class(path, "DartsWrapper", namespace)
        wrapper = object.__new__(Wrapper)
        wrapper.model = Discrete(net)

    # the reference's op list is DARTS's genotypes.PRIMITIVES (restated above: its
    # genotypes module is the authors' unpublished fork's), which its wrapper is given
    ops = list(net.space.cells["normal"].edges[0].ops)
    table.add_equal(METHOD, "op list (genotypes.PRIMITIVES, none included)", ops, PRIMITIVES,
                    ref_label)  # fmt: skip

    # the same architectures: ours drawn, encoded by its get_weights_from_arch
    gen = torch.Generator().manual_seed(0)
    ours_archs = [sample_arch(net, gen) for _ in range(20)]
    table.add(METHOD, "one-hot weights of 20 of our draws (get_weights_from_arch)",
              [arch_weights_of(a, net.arch_shapes(), "cpu") for a in ours_archs],
              lambda: [dict(zip(("normal", "reduce"),
                                wrapper.get_weights_from_arch(to_reference(net, a))))
                       for a in ours_archs], ref_label)  # fmt: skip
    ours_ratios, _ = frequencies(net, [sample_arch(net, gen) for _ in range(DRAWS)])
    ratios: list[float] = []
    distinct: list[float] = []
    if live:
        np.random.seed(0)
        ref_archs = [from_reference(net, wrapper.sample_arch()) for _ in range(DRAWS)]
        ratios, distinct = frequencies(net, ref_archs)
    # the uniform frequencies (what ours draws, its known answer) against the reference's
    table.add(METHOD, f"its sample_arch frequencies / uniform ({DRAWS} draws)",
              [1.0] * len(ours_ratios), lambda: ratios, ref_label,
              tolerance=FREQ_TOL)  # fmt: skip
    table.add(METHOD, f"our frequencies / its frequencies ({DRAWS} draws each)", ours_ratios,
              lambda: ratios, ref_label, tolerance=2 * FREQ_TOL)  # fmt: skip
    table.add_equal(METHOD, "its draws: two distinct inputs per node", 1.0,
                    lambda: min(distinct), ref_label)  # fmt: skip

    # one train_batch with the architecture our step drew, on a copy of our supernet; ours at
    # our cosine of epoch 1, the lr of its first step on current PyTorch (see below)
    batch = F.batches(1, hw=8, seed=4)[0]
    epochs, steps_per_epoch = 100, 5
    model: Any = None
    if live:
        model = Discrete(copy.deepcopy(net))
        wrapper.model = model
        wrapper.args = SimpleNamespace(grad_clip=CLIP, report_freq=50)
        wrapper.optimizer = torch.optim.SGD(model.parameters(), LR, momentum=MOMENTUM,
                                            weight_decay=WD)  # fmt: skip
        wrapper.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            wrapper.optimizer, float(epochs), eta_min=0.001
        )
        wrapper.train_queue = [batch] * steps_per_epoch
        wrapper.train_iter = iter(wrapper.train_queue)
        wrapper.criterion = nn.CrossEntropyLoss()
        wrapper.steps = 0
    arch, w = drawn_step(strategy, batch)
    if live:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its clip_grad_norm, get_lr() and step order
            wrapper.train_batch(to_reference(net, arch))
    table.add(METHOD, "the step's mixing weights (get_weights_from_arch of our draw)",
              w, lambda: [model.alphas_normal, model.alphas_reduce], ref_label)  # fmt: skip
    # run on current PyTorch its epoch e is at cosine(e + 1) (the constructor steps once, then
    # train_batch steps before the epoch's first batch); before PyTorch 1.1 the constructor
    # left last_epoch at -1 and epoch e ran at cosine(e), as ours (see the module docstring)
    factor = search_lr_factor(epochs=epochs, lr=LR, lr_min=0.001)
    redo, redo_net, redo_opt = ours()
    for group in redo_opt.param_groups:
        group["lr"] = LR * factor(1)
    redo.strategy_weights = lambda *, sample: {k: v.clone() for k, v in w.items()}
    redo.begin_step(0)
    redo.weight_step(batch)
    table.add(METHOD, "weight step with one drawn architecture (its train_batch; ours at "
              "cosine of epoch 1)", params(redo_net), lambda: params(model.net),
              ref_label)  # fmt: skip
    table.add(METHOD, "lr of its first step = our cosine of epoch 1 (current PyTorch's "
              "scheduler constructor steps once)", LR * factor(1),
              lambda: wrapper.optimizer.param_groups[0]["lr"], ref_label)  # fmt: skip

    # evaluate a given architecture with the shared weights (eval mode), whole split
    val = F.batches(2, hw=8, seed=5)
    sel = RandomWeightSharingSelection(rounds=1, archs=2, batches_per_arch=1, top_k=0)
    a = ours_archs[1]
    net.eval()
    score = sel._score(strategy, arch_weights_of(a, net.arch_shapes(), "cpu"), iter(val),
                       lambda t: t)  # fmt: skip
    err = None
    if live:
        wrapper.model = Discrete(net)
        wrapper.valid_queue = val
        wrapper.valid_iter = iter(val)
        wrapper.args = SimpleNamespace(report_freq=50)
        err = wrapper.evaluate(to_reference(net, a), split="valid")
    net.train()
    table.add(METHOD, "evaluate(arch, split='valid'): accuracy %", 100 * score,
              lambda: 1 - err, ref_label)  # fmt: skip
    logging.disable(logging.NOTSET)

    # settings: random_weight_share.py's argparse and DartsWrapper's args dict
    cfg = F.compose(["experiment=rsws_darts_cifar10"])
    B = int(cfg.epochs * 25000 / cfg.batch_size)

    def theirs() -> dict[str, Any]:
        root = refs.root("rsws")
        defaults = F.script_defaults(os.path.join(root, "searchers", "random_weight_share.py"))
        with open(os.path.join(root, REFERENCES["rsws"].marker), encoding="utf-8") as f:
            wrapper_args = dict(
                (k, ast.literal_eval(v))
                for k, v in re.findall(r"args\['(\w+)'\] = ([0-9.e+-]+)\n", f.read())
            )
        return {
            "epochs": defaults["epochs"],
            "batch_size": defaults["batch_size"],
            "grad_clip": defaults["grad_clip"],
            "learning_rate": wrapper_args["learning_rate"],
            "learning_rate_min": wrapper_args["learning_rate_min"],
            "momentum": wrapper_args["momentum"],
            "weight_decay": wrapper_args["weight_decay"],
            "init_channels": defaults["init_channels"],
            "layers": wrapper_args["layers"],
            "architectures per round": 1000,
            "batches per architecture": 10,
            "top k re-scored on the whole split": 10,
            "rounds for B steps: max(1, B // 10000)": max(1, int(B / 10000)),
        }

    F.add_settings(
        table,
        METHOD,
        {
            "epochs": cfg.epochs,
            "batch_size": cfg.batch_size,
            "grad_clip": cfg.search.grad_clip,
            "learning_rate": cfg.optimizer.lr,
            "learning_rate_min": cfg.optimizer.lr_min,
            "momentum": cfg.optimizer.momentum,
            "weight_decay": cfg.optimizer.weight_decay,
            "init_channels": cfg.space.C,
            "layers": cfg.space.layers,
            "architectures per round": cfg.selection.archs,
            "batches per architecture": cfg.selection.batches_per_arch,
            "top k re-scored on the whole split": cfg.selection.top_k,
            "rounds for B steps: max(1, B // 10000)": max(1, B // cfg.selection.steps_per_round),
        },
        theirs,
        ref_label,
    )


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
