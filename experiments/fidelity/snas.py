"""Fidelity of SNAS against SNAS-Series/SNAS-Series (``SNAS/``).

Xie, Zheng, Liu, Lin, "SNAS: Stochastic Neural Architecture Search", ICLR 2019: the relaxed
sample (eq. 3) ``w = softmax((alpha + G) / tau)`` with Gumbel noise ``G``, mixing every op;
its gradient ``dL/dalpha = J_softmax(w)^T (dL/dw) / tau``; tau annealed per epoch,
``tau_t = (1 - t / S)(tau0 - tau_min) + tau_min`` with ``t = e + 1`` (``utils.py:128-148``);
the resource penalty (``--resource_efficient --method reparametrization --log_penalty``):
per edge ``(log|E size| + log|E flops| + log|E mac|) / 3`` over the sample's weights, sums
below 1 in magnitude counted as 1, ``normal / 6 + ratio * reduce / 2``
(``train_search.py:423-427``), op costs from ``operations.py``.

Known answers (no checkout): the sample equals ``softmax((alpha + G) / tau)`` for the noise our
generator drew and its gradient equals the softmax Jacobian over tau written out; tau of every
epoch equals the formula (S = the run's epochs, and S = 150 with ``schedule_epochs: 150``); the
log and linear resource penalties equal the formulas written out over our per-edge costs.

With ``--reference-root snas=PATH`` (a checkout of github.com/SNAS-Series/SNAS-Series):
``Network._get_categ_mask`` (``model_search.py``, compiled alone with the shims) beside our
sample, with THE SAME noise: ours draws ``G = -log E`` from its step generator
(``nas.strategies.snas.gumbel`` wrapped to record ``E``), and the reference's
``torch.zeros_like(alpha).uniform_()`` is patched in memory (``Tensor.uniform_`` inside its call
only) to return ``u = exp(-E)``, whose ``-log(-log u)`` is our ``G`` up to rounding; the sample
and its gradient; ``Temp_Scheduler`` (``utils.py``) against our tau per epoch, with
``schedule_epochs: 150`` (its hard-coded S) as the comparison sets it; ``genotypes.PRIMITIVES``
against our op list (the alphas are copied column by column) and every op's ``size`` /
``flops`` / ``mac`` of ``operations.py`` (read after a forward, at stride 1 and 2) against
``op_cost``; the settings of ``train_search.py`` (``F.script_defaults``) and of the README's
single-GPU command against ``experiment=snas_darts_cifar10``.

Then the reference's search network and its own train loop, at C=4, 5 cells (reductions at 1
and 3), 16x16 images, batch 4, float64, our weights copied in (``F.copy_weights``: the module
orders agree) and our alphas: ``model_search.Network`` built by ``train_search.py``'s
``init_model`` with its ``init_optimizer`` (SGD 0.025 / 0.9 / 3e-4 on the weights; the arch
optimiser of the single-GPU mode is SGD(3e-4), no momentum, no weight decay), tau set as its
``main`` does at epoch 0 (``Temp_Scheduler`` stepped once), and ``train()`` itself (the
methods compiled alone from ``train_search.py``, which parses the command line at import) run
for 3 steps on a list of batches. Its arguments are ``train_search.py``'s defaults under the
README's single-GPU command (``--snas --temp_annealing --resource_efficient --method
reparametrization --log_penalty --loss --resource_lambda 1.5e-3``), with the size above and
``--drop_path_prob 0`` (its 0.3 drops whole edge outputs at random; our supernet has no
drop-path, documented as not reproduced; with 0 the reference skips it). CPU shims, in memory:
``model_search.py`` is compiled with the shims plus ``torch.device("cuda")`` -> ``"cpu"``
(``Cell`` and ``Network`` put their cost tables, edge rewards and ``logp`` tensors on
``self.device``); ``init_model``'s ``.to(self.device)`` gets a CPU device, the tensorboard
writer is a no-op, the data loader a list. Rows: the sample drawn inside ``Network.forward``
(the replayed noise) and the forward's logits; ``lambda * R`` of that sample, the reference's
``penalty[37] / 6 + ratio * penalty[38] / 2`` (``train_search.py:427``); the architecture
gradient (CE + lambda R, what ``.grad`` holds as each ``arch_optimizer.step`` is taken, after
the clip at 10) of step 1 and of steps 1-3; its lambda R part alone (the mean over the steps
that ``train()`` logs at the epoch's end, before clipping), since at this size it is 0.5% of
the gradient's norm; the alpha change of step 1 and after 3 steps; the weights and batch-norm
statistics after 3 steps (the weight gradient is clipped at 5 in every step: its norm is above
5 here; the arch clip at 10 is not reached, |grad| ~ 0.5); the genotype of the final alphas.

Differences that are the reference's and are set up, not fixed, for the comparison:

- its penalty divides by 6 normal and 2 reduction cells whatever ``--layers``
  (``train_search.py:426-427``), ours by the network's counts (equal at its 8 cells); at 5 cells
  (3 normal) ours is run with ``lambda * 3 / 6`` and ``reduce_ratio = 2``, the same loss;
- it records op costs at its first forward, at the batch's side (16 here); ours counts them at
  the side of the first training batch too (``SNAS.step`` sets ``_image_side``; this suite
  found that ours counted at 32 whatever the data); the penalty row, asked for before any
  step, sets the side by hand;
- ``Network.genotype`` ranks ``none`` with the other ops (the line leaving it out is commented
  out, ``model_search.py:704``) and its train loop logs only ``genotype_edge_all`` (every
  edge's argmax, ``none`` included: not a DARTS-space genotype); ours derives with DARTS's rule
  (``none`` excluded), so the genotype row lowers ``none``'s logit below all others on both
  sides first.

Not compared: the drop-path (0.3 in the README's command; ours has none) and the reference's
``--distributed`` mode (Adam on alpha, gradients all-reduced), which needs a process group and
GPUs.

    python experiments/fidelity/snas.py --reference-root snas=~/src/SNAS-Series

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/snas.pt`` (``--record`` with the checkout writes them); ours runs the
same either way: our side takes nothing from the reference (lambda and the reduction ratio are
our experiment's, compared as settings; the reference replays our noise and copies our
weights and alphas).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import math
import os
import re
import shlex
import sys
import types
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

import nas.strategies.snas as snas_module
from experiments.benchmarks import reference_shims
from nas.plugins import build_strategy
from nas.selection.base import derived_genotype
from nas.strategies.base import SearchContext
from nas.strategies.snas import op_cost
from nas.supernet import build_supernet

METHOD = "SNAS"
REFERENCES = {"snas": F.Reference("SNAS-Series/SNAS-Series", "SNAS/model_search.py")}
C, LAYERS, CLASSES, EPOCHS = 4, 8, 10, 150
# the network comparison: 5 cells (reductions at 1 and 3: 3 normal, 2 reduction), 16x16, batch 4
NET_LAYERS, NET_BATCH, NET_SIDE, NET_STEPS = 5, 4, 16, 3


def ours(overrides: tuple[str, ...] = (), seed: int = 0, epochs: int = EPOCHS) -> Any:
    cfg = F.compose(["experiment=snas_darts_cifar10", *overrides])
    strategy = build_strategy(cfg)
    torch.manual_seed(seed)
    net = build_supernet("darts", C=C, layers=LAYERS, num_classes=CLASSES).double()
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=epochs),
                    generator=torch.Generator().manual_seed(seed))  # fmt: skip
    return strategy, net


@contextlib.contextmanager
def recording(draws: list[torch.Tensor]) -> Iterator[None]:
    """Our noise as before (``-log E``), each ``E`` appended to ``draws``."""
    original = snas_module.gumbel

    def gumbel(shape, generator, device):
        e = torch.empty(shape, device=device).exponential_(generator=generator)
        draws.append(e.detach().clone())
        return -e.log()

    snas_module.gumbel = gumbel
    try:
        yield
    finally:
        snas_module.gumbel = original


@contextlib.contextmanager
def replaying(draws: list[torch.Tensor]) -> Iterator[None]:
    """``Tensor.uniform_`` fills in ``exp(-E)`` of the recorded draws, in turn."""
    original = torch.Tensor.uniform_

    def uniform_(self, *args, **kwargs):
        e = draws.pop(0)
        with torch.no_grad():
            return self.copy_(torch.exp(-e))

    torch.Tensor.uniform_ = uniform_  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.uniform_ = original  # type: ignore[method-assign]


def _sample_and_grad(strategy: Any, upstream: dict[str, torch.Tensor]):
    draws: list[torch.Tensor] = []
    with recording(draws):
        w = strategy.arch_weights(sample=True)
    loss = sum((w[ct] * upstream[ct]).sum() for ct in w)
    grads = torch.autograd.grad(loss, [strategy.arch_params[ct] for ct in w])
    return w, grads, draws


def known_answers(table: F.Table) -> None:
    strategy, _ = ours()
    strategy.epoch = 20
    g = torch.Generator().manual_seed(3)
    upstream = {ct: torch.randn(a.shape, generator=g, dtype=torch.float64)
                for ct, a in strategy.arch_params.items()}  # fmt: skip
    strategy.begin_step(0)
    w, grads, draws = _sample_and_grad(strategy, upstream)
    tau = strategy.tau
    expected_w, expected_g = [], []
    for (ct, a), e in zip(strategy.arch_params.items(), draws):
        s = torch.softmax((a.detach() - e.log()) / tau, -1)
        expected_w.append(s)
        u = upstream[ct]
        expected_g.append((s * u - s * (s * u).sum(-1, keepdim=True)) / tau)
    table.add(METHOD, f"sample = softmax((alpha + G) / tau), tau={tau:.4g}", list(w.values()),
              expected_w)  # fmt: skip
    table.add(METHOD, "sample gradient = J_softmax / tau", list(grads), expected_g)

    for overrides, span in (((), 100), (("search.schedule_epochs=150",), 150)):
        strategy, _ = ours(overrides, epochs=100)
        taus = []
        for e in range(100):
            strategy.epoch = e
            taus.append(strategy.tau)
        expected = [(1 - (e + 1) / span) * (1 - 0.03) + 0.03 for e in range(100)]
        table.add(METHOD, f"tau of epochs 0-99 of 100, S={span}", taus, expected)

    for kind in ("log", "linear"):
        strategy, net = ours((f"search.resource_penalty={kind}",))
        strategy.begin_step(1)
        with torch.no_grad():
            w = strategy.arch_weights(sample=True)
        costs = strategy._cell_costs()
        total = 0.0
        for ct in ("normal", "reduce"):
            per_type = 0.0
            for cost in costs[ct]:
                for e in range(cost.shape[0]):
                    size, flops, mac = (float((w[ct][e] * cost[e, :, i]).sum()) for i in range(3))
                    if kind == "log":
                        per_type += sum(math.log(abs(v)) if abs(v) >= 1 else 0.0
                                        for v in (size, flops, mac)) / 3  # fmt: skip
                    else:
                        per_type += 0.43 * (2 * size + flops / 4000 + mac / 100)
            total += per_type / len(costs[ct])
        table.add(METHOD, f"{kind} resource penalty = formula over the per-edge costs",
                  strategy.penalty(w), total)  # fmt: skip


# ---------------------------------------------------------------------------- the reference


def _load_def(path: str, cls: str | None, name: str, namespace: dict[str, Any]) -> Any:
    """A top-level class (``cls`` None) or one method of a class, compiled alone with the
    shims, its globals ``namespace``."""
    with open(path, encoding="utf-8") as f:
        tree, _ = reference_shims.shim_tree(f.read(), path)
    body = tree.body
    if cls is not None:
        body = next(n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), namespace)
            return namespace[name]
    raise SystemExit(f"snas fidelity: no {name} in {path}; expected the reference's file")


class _CpuDevice(ast.NodeTransformer):
    """``torch.device("cuda")`` -> ``torch.device("cpu")`` (``model_search.py``'s ``Cell`` and
    ``Network`` put every tensor they build there with ``.to(self.device)``)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if (
            isinstance(f, ast.Attribute)
            and f.attr == "device"
            and isinstance(f.value, ast.Name)
            and f.value.id == "torch"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "cuda"
        ):
            node.args[0] = ast.Constant("cpu")
        return node


def _load_module(name: str, path: str) -> types.ModuleType:
    """A reference module with the shims and ``_CpuDevice``, registered as ``name`` (inside
    ``F.reference_imports``, which removes it on exit)."""
    with open(path, encoding="utf-8") as f:
        tree, _ = reference_shims.shim_tree(f.read(), path)
    tree = ast.fix_missing_locations(_CpuDevice().visit(tree))
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    sys.modules[name] = module
    exec(compile(tree, path, "exec"), module.__dict__)
    return module


def _readme_command(snas_dir: str) -> str:
    """The README's first command (its single-GPU 8-cell search), continuation lines joined."""
    with open(os.path.join(snas_dir, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return readme.replace("\\\n", " ").split("python train_search.py", 1)[1].split("\n")[0]


def _command_args(command: str, defaults: dict[str, Any]) -> dict[str, Any]:
    """``train_search.py``'s arguments under ``command``: ``defaults`` with its flags (argparse's
    unique-prefix rule: ``--layer`` is ``--layers``) and values (of the default's type; a number
    where the default is not a literal: ``--resource_lambda``)."""
    out = dict(defaults)
    tokens = shlex.split(command.split("&")[0])
    i = 0
    while i < len(tokens):
        key = tokens[i][2:]
        if key not in out:
            matches = [k for k in out if k.startswith(key)]
            key = matches[0] if len(matches) == 1 else key
        if i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            value = tokens[i + 1]
            kind = type(out.get(key, 0.0))
            out[key] = kind(float(value)) if kind in (int, float) else value
            i += 2
        else:
            out[key] = True
            i += 1
    return out


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("snas")  # else the reference's values come from its recording
    ref_label = refs.label("snas")
    snas_dir = get_categ_mask = temp_scheduler = None
    defaults: dict[str, Any] = {}
    if live:
        snas_dir = os.path.join(refs.root("snas"), "SNAS")
        get_categ_mask = _load_def(os.path.join(snas_dir, "model_search.py"), "Network",
                                   "_get_categ_mask", {"torch": torch})  # fmt: skip
        temp_scheduler = _load_def(os.path.join(snas_dir, "utils.py"), None, "Temp_Scheduler", {})
        defaults = F.script_defaults(os.path.join(snas_dir, "train_search.py"))

    # the sample and its gradient, the same noise (ours draws it; the reference replays it)
    strategy, net = ours()
    strategy.epoch = 20
    g = torch.Generator().manual_seed(3)
    upstream = {ct: torch.randn(a.shape, generator=g, dtype=torch.float64)
                for ct, a in strategy.arch_params.items()}  # fmt: skip
    strategy.begin_step(0)
    w, grads, draws = _sample_and_grad(strategy, upstream)
    ref_w: list[torch.Tensor] = []
    ref_g: list[torch.Tensor] = []
    if live:
        stub = SimpleNamespace(_temp=strategy.tau)
        with replaying(draws):
            for ct, a in strategy.arch_params.items():
                leaf = a.detach().clone().requires_grad_(True)
                s = get_categ_mask(stub, leaf)
                ref_w.append(s.detach())
                ref_g.append(torch.autograd.grad((s * upstream[ct]).sum(), leaf)[0])
    table.add(METHOD, "sample (_get_categ_mask), tau of epoch 20", list(w.values()),
              lambda: ref_w, ref_label)  # fmt: skip
    table.add(METHOD, "sample gradient (_get_categ_mask)", list(grads), lambda: ref_g,
              ref_label)  # fmt: skip
    ops = list(net.space.cells["normal"].edges[0].ops)  # our DARTS op list, in order

    # tau per epoch: the reference steps Temp_Scheduler before each epoch (S = 150 hard-coded);
    # ours over its experiment's 150 epochs with schedule_epochs: 150
    strategy, _ = ours(("search.schedule_epochs=150",), epochs=EPOCHS)
    our_tau = []
    for e in range(EPOCHS):
        strategy.epoch = e
        our_tau.append(strategy.tau)

    def ref_taus() -> list[float]:
        sched = temp_scheduler(defaults["epochs"], defaults["temp"], defaults["temp"],
                               temp_min=defaults["temp_min"])  # fmt: skip
        return [sched.step() for _ in range(defaults["epochs"])]

    table.add(METHOD, f"tau of epochs 0-{EPOCHS - 1} (Temp_Scheduler)", our_tau, ref_taus,
              ref_label)  # fmt: skip

    # the op costs of operations.py against op_cost (the reference's ops looked up by our names)
    ours_c = [list(op_cost(prim, 8, 16, stride)) for stride in (1, 2) for prim in ops]
    with refs.imports("snas", "SNAS", ["SNAS"]), F.float64():
        primitives: list[str] = []
        ref_c: list[list[float]] = []
        if live:
            from genotypes import PRIMITIVES  # type: ignore[import-not-found]
            from operations import OPS  # type: ignore[import-not-found]

            primitives = list(PRIMITIVES)
            for stride in (1, 2):
                for prim in ops:
                    op = OPS[prim](8, stride, False)
                    op(torch.zeros(1, 8, 16, 16))
                    ref_c.append([float(op.size), float(op.flops), float(op.mac)])
        # the alphas are copied column by column below: the op orders must agree
        table.add_equal(METHOD, "op list (genotypes.PRIMITIVES)", ops, lambda: primitives,
                        ref_label)  # fmt: skip
        table.add(METHOD, f"op size/flops/mac, C=8, 16x16, stride 1, 2 ({len(ops)} ops)",
                  ours_c, lambda: ref_c, ref_label)  # fmt: skip

    # settings: train_search.py's defaults and the README's single-GPU command
    command = _readme_command(snas_dir) if live else ""
    cfg = F.compose(["experiment=snas_darts_cifar10"])
    mine = {
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
        "temp": cfg.search.tau_max,
        "temp_min": cfg.search.tau_min,
        "loc_mean": cfg.search.init_mean,
        "loc_std": cfg.search.init_std,
        "ratio (reduce_ratio)": cfg.search.reduce_ratio,
        "resource_lambda (README's single-GPU command)": cfg.search.resource_lambda,
        "log_penalty (README: --log_penalty)": cfg.search.resource_penalty == "log",
    }

    def theirs() -> dict[str, Any]:
        flags = dict(re.findall(r"--(\w+)\s+([^\s-][^\s]*)", command))
        out = {**defaults, **{k: float(v) for k, v in flags.items() if k == "resource_lambda"}}
        out["ratio (reduce_ratio)"] = out["ratio"]
        out["resource_lambda (README's single-GPU command)"] = out["resource_lambda"]
        out["log_penalty (README: --log_penalty)"] = "--log_penalty" in command
        return out

    F.add_settings(table, METHOD, mine, theirs, ref_label)

    _compare_network(table, refs, ref_label, _command_args(command, defaults) if live else {})


def _ours_net(lam: float, ratio: float, seed: int = 0) -> tuple[Any, nn.Module]:
    """Ours at the network comparison's size, tau's schedule the reference's (S = 150), the
    penalty ``lam * (normal / 3 + ratio * reduce / 2)`` (set by the caller to the reference's
    ``lambda * (normal / 6 + ratio * reduce / 2)``), costs counted at the batch's side."""
    cfg = F.compose(["experiment=snas_darts_cifar10", "search.schedule_epochs=150"])
    strategy = build_strategy(cfg)
    strategy.resource_lambda, strategy.reduce_ratio = lam, ratio
    strategy._image_side = NET_SIDE
    torch.manual_seed(seed)
    net = build_supernet("darts", C=C, layers=NET_LAYERS, num_classes=CLASSES).double()
    F.randomise_affine(net, seed)
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=cfg.optimizer.lr, momentum=cfg.optimizer.momentum,
                          weight_decay=cfg.optimizer.weight_decay)  # fmt: skip
    strategy.attach(SearchContext(net, opt, grad_clip=cfg.optimizer.grad_clip, epochs=cfg.epochs),
                    generator=torch.Generator().manual_seed(seed))  # fmt: skip
    net.train()
    return strategy, net


class _Queue(list):
    """The batches as ``train()`` reads its ``DataLoader``: iterated, and ``.dataset`` sized
    (for the logs' step numbers)."""

    @property
    def dataset(self) -> range:
        return range(sum(len(y) for _, y in self))


def _state(module: nn.Module) -> list[torch.Tensor]:
    """Weights, biases and batch-norm running statistics, in module order."""
    out = []
    for m in F.modules_in_order(module):
        for name in ("weight", "bias", "running_mean", "running_var"):
            t = getattr(m, name, None)
            if isinstance(t, torch.Tensor):
                out.append(t.detach().clone())
    return out


def _compare_network(table: F.Table, refs: F.Refs, ref_label: str, cli: dict[str, Any]) -> None:
    """The reference's search network and its own train loop beside ours (see the docstring).
    Ours runs whether or not the reference does; the reference (live) is fed our weights, our
    alphas and our recorded draws."""
    live = refs.live("snas")
    batches = F.batches(NET_STEPS, size=NET_BATCH, hw=NET_SIDE, classes=CLASSES, seed=7)
    # ours: lambda and the reduction ratio of our experiment, rescaled to the reference's
    # division by 6 normal and 2 reduction cells (compared as settings)
    cfg = F.compose(["experiment=snas_darts_cifar10"])
    lam, ratio = float(cfg.search.resource_lambda), float(cfg.search.reduce_ratio)
    n_normal, n_reduce = NET_LAYERS - 2, 2
    our_lam = lam * n_normal / 6
    our_ratio = ratio * (n_reduce / 2) * (6 / n_normal)
    args: Any = None
    if live:
        # the README's single-GPU search, at the tiny size and without drop-path
        args = types.SimpleNamespace(**{**cli, "init_channels": C, "layers": NET_LAYERS,
                                        "drop_path_prob": 0.0})  # fmt: skip
        if not (args.snas and args.resource_efficient and args.loss and args.log_penalty
                and args.method == "reparametrization" and not args.distributed):  # fmt: skip
            raise SystemExit(
                "snas fidelity: the README's command is no longer the single-GPU "
                "reparametrised log-penalty search this comparison assumes"
            )
    with refs.imports("snas", "SNAS", ["SNAS"]), F.float64():
        utils = ms = train = init_model = init_optimizer = None
        if live:
            import utils  # type: ignore[import-not-found]

            snas_dir = os.path.join(refs.root("snas"), "SNAS")
            ms = _load_module("model_search", os.path.join(snas_dir, "model_search.py"))
            train_search = os.path.join(snas_dir, "train_search.py")
            namespace: dict[str, Any] = {"torch": torch, "nn": nn, "sys": sys, "utils": utils,
                                         "Network": ms.Network, "args": args,
                                         "CIFAR_CLASSES": CLASSES}  # fmt: skip
            nas_class = "neural_architecture_search"
            init_model = _load_def(train_search, nas_class, "init_model", namespace)
            init_optimizer = _load_def(train_search, nas_class, "init_optimizer", namespace)
            train = _load_def(train_search, nas_class, "train", namespace)

        def reference(strategy: Any, net: nn.Module) -> Any:
            """``neural_architecture_search`` without its data and logs: the model, its two
            optimisers (``init_model``, ``init_optimizer``), our weights and alphas copied in,
            tau the first epoch's (``Temp_Scheduler`` stepped once, as ``main``); None when
            the reference is replayed."""
            if not live:
                return None
            me = types.SimpleNamespace(
                args=args, criterion=nn.CrossEntropyLoss(), rank=0, world_size=1,
                device=torch.device("cpu"), update_theta=True, update_alpha=True,
                logger=types.SimpleNamespace(add_scalar=lambda *a, **k: None),
            )  # fmt: skip
            init_model(me)
            init_optimizer(me)
            F.copy_weights(net, me.model)
            with torch.no_grad():
                me.model.normal_log_alpha.copy_(strategy.arch_params["normal"])
                me.model.reduce_log_alpha.copy_(strategy.arch_params["reduce"])
            sched = utils.Temp_Scheduler(args.epochs, me.model._temp, args.temp,
                                         temp_min=args.temp_min)  # fmt: skip
            me.model._temp = sched.step()
            me.model.train()
            return me

        # the forward, the same relaxed sample; the log resource penalty of that sample
        strategy, net = _ours_net(our_lam, our_ratio)
        me = reference(strategy, net)
        x, _ = batches[0]
        draws: list[torch.Tensor] = []
        strategy.begin_step(0)
        with recording(draws), torch.no_grad():
            w = strategy.arch_weights(sample=True)
            logits = net(x, w)
            ours_r = strategy.resource_lambda * strategy.penalty(w)
        assert list(strategy.arch_params) == ["normal", "reduce"]  # the reference's draw order
        ref_logits = ref_r = None
        ref_w: list[torch.Tensor] = []
        if live:
            with replaying(list(draws)), torch.no_grad():
                ref_logits, _, penalty, _, _ = me.model(x)
            ref_w = [me.model.normal_weights, me.model.reduce_weights]
            # train_search.py:424-427 (reparametrization, --log_penalty): its 6 and 2 cells
            ref_r = me.model._resource_lambda * (penalty[37] / 6 + args.ratio * penalty[38] / 2)
        table.add(METHOD, "sample in Network.forward, tau of epoch 0", list(w.values()),
                  lambda: ref_w, ref_label)  # fmt: skip
        table.add(METHOD, f"forward (C={C}, {NET_LAYERS} cells, {NET_SIDE}x{NET_SIDE}, "
                  f"batch {NET_BATCH}), the same sample", logits, lambda: ref_logits,
                  ref_label)  # fmt: skip
        table.add(METHOD, "lambda * log resource penalty of the sample",
                  ours_r, lambda: ref_r, ref_label)  # fmt: skip

        # NET_STEPS whole steps: ours, then the reference's own train() on the same batches
        # and draws; the architecture gradient read as each arch_optimizer.step is taken, the
        # penalty's share of it (before clipping) from what train() logs at the epoch's end
        strategy, net = _ours_net(our_lam, our_ratio)
        me = reference(strategy, net)
        alphas = [strategy.arch_params[ct] for ct in ("normal", "reduce")]
        a0 = [a.detach().clone() for a in alphas]
        draws, our_g, our_a, our_rg = [], [], [], []
        for i, batch in enumerate(batches):
            strategy.begin_step(i)  # the step's sample, drawn again: lambda dR/dalpha alone
            r = strategy.resource_lambda * strategy.penalty(strategy.arch_weights(sample=True))
            our_rg.append(torch.autograd.grad(r, alphas))
            strategy.begin_step(i)
            with recording(draws):
                strategy.step(batch, batch)
            our_g.append([a.grad.detach().clone() for a in alphas])
            our_a.append([a.detach() - b for a, b in zip(alphas, a0)])
        mean_rg = [sum(g[k] for g in our_rg) / len(our_rg) for k in range(2)]
        ref_g: list[Any] = []
        ref_a: list[Any] = []
        ref_rg: list[Any] = []
        if live:
            arch_step = me.arch_optimizer.step

            def recorded_step(*a: Any, **k: Any) -> Any:
                ref_g.append([p.grad.detach().clone() for p in me.model.arch_parameters()])
                out = arch_step(*a, **k)
                ref_a.append([p.detach() - b for p, b in zip(me.model.arch_parameters(), a0)])
                return out

            me.arch_optimizer.step = recorded_step
            me.train_queue = _Queue(batches)
            log: list[Any] = []
            with replaying(draws):
                train(me, 0, types.SimpleNamespace(info=lambda *a: log.append(a[0] if a else None)))
            at = next(i for i, m in enumerate(log) if isinstance(m, str) and "resource grad" in m)
            ref_rg = log[at + 1 : at + 3]  # normal, reduce: the mean over the epoch's steps
        table.add(METHOD, "architecture gradient of step 1 (CE + lambda R, clip 10)", our_g[0],
                  lambda: ref_g[0], ref_label)  # fmt: skip
        table.add(METHOD, f"architecture gradients of steps 1-{NET_STEPS}", our_g,
                  lambda: ref_g, ref_label)  # fmt: skip
        table.add(METHOD, f"its lambda R part, mean of steps 1-{NET_STEPS} (train()'s log)",
                  mean_rg, lambda: ref_rg, ref_label)  # fmt: skip
        table.add(METHOD, "alpha change of step 1 (SGD 3e-4)", our_a[0], lambda: ref_a[0],
                  ref_label)  # fmt: skip
        table.add(METHOD, f"alpha change after {NET_STEPS} steps", our_a[-1], lambda: ref_a[-1],
                  ref_label)  # fmt: skip
        table.add(METHOD, f"weights and BN statistics after {NET_STEPS} steps", _state(net),
                  lambda: _state(me.model), ref_label)  # fmt: skip

        # derivation: Network.genotype (top-2 edges, then the op, by softmax(alpha)) ranks
        # 'none' with the others, ours (DARTS's rule) leaves it out: 'none' lowered on both
        none = net.space.cells["normal"].edges[0].ops.index("none")
        with torch.no_grad():
            for ct in ("normal", "reduce"):
                a = strategy.arch_params[ct]
                a[:, none] = a.min() - 1
                if live:
                    getattr(me.model, f"{ct}_log_alpha").copy_(a)
        g = derived_genotype(strategy)

        def ref_genotype() -> list[list[Any]]:
            ref_gene = me.model.genotype()
            return [list(ref_gene.normal), list(ref_gene.reduce)]

        table.add_equal(METHOD, f"genotype after {NET_STEPS} steps (Network.genotype, 'none' "
                        "lowered)", [list(g.normal), list(g.reduce)], ref_genotype,
                        ref_label)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
