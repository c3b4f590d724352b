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
``Network._get_categ_mask`` (``model_search.py``, compiled alone with the shims; its network
class hard-codes a CUDA device and is not built here) beside our sample, with THE SAME noise:
ours draws ``G = -log E`` from its step generator (``nas.search.snas.gumbel`` wrapped to record
``E``), and the reference's ``torch.zeros_like(alpha).uniform_()`` is patched in memory
(``Tensor.uniform_`` inside its call only) to return ``u = exp(-E)``, whose
``-log(-log u)`` is our ``G`` up to rounding; the sample and its gradient; ``Temp_Scheduler``
(``utils.py``) against our tau per epoch, with ``schedule_epochs: 150`` (its hard-coded S) as
the comparison sets it; every op's ``size`` / ``flops`` / ``mac`` of ``operations.py`` (read
after a forward, at stride 1 and 2) against ``op_cost``; the settings of ``train_search.py``
(``F.script_defaults``) and of the README's single-GPU command against
``experiment=snas_darts_cifar10``. Not compared: whole steps and the penalty through the
reference network (its ``Network`` needs CUDA and its drop-path, which ours does not have).

    python experiments/fidelity/snas.py --reference-root snas=~/src/SNAS-Series
"""

from __future__ import annotations

import ast
import contextlib
import math
import os
import re
import sys
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch

import nas.search.snas as snas_module
from experiments.benchmarks import reference_shims
from nas.plugins import build_strategy
from nas.search.base import SearchContext
from nas.search.snas import op_cost
from nas.supernet import build_supernet

METHOD = "SNAS"
REFERENCES = {"snas": F.Reference("SNAS-Series/SNAS-Series", "SNAS/model_search.py")}
C, LAYERS, CLASSES, EPOCHS = 4, 8, 10, 150


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


def compare(table: F.Table, roots: dict[str, str]) -> None:
    root = roots["snas"]
    ref_label = F.label(REFERENCES["snas"], root)
    snas_dir = os.path.join(root, "SNAS")
    get_categ_mask = _load_def(os.path.join(snas_dir, "model_search.py"), "Network",
                               "_get_categ_mask", {"torch": torch})  # fmt: skip
    temp_scheduler = _load_def(os.path.join(snas_dir, "utils.py"), None, "Temp_Scheduler", {})
    defaults = F.script_defaults(os.path.join(snas_dir, "train_search.py"))

    # the sample and its gradient, the same noise
    strategy, _ = ours()
    strategy.epoch = 20
    g = torch.Generator().manual_seed(3)
    upstream = {ct: torch.randn(a.shape, generator=g, dtype=torch.float64)
                for ct, a in strategy.arch_params.items()}  # fmt: skip
    strategy.begin_step(0)
    w, grads, draws = _sample_and_grad(strategy, upstream)
    stub = SimpleNamespace(_temp=strategy.tau)
    ref_w, ref_g = [], []
    with replaying(draws):
        for ct, a in strategy.arch_params.items():
            leaf = a.detach().clone().requires_grad_(True)
            s = get_categ_mask(stub, leaf)
            ref_w.append(s.detach())
            ref_g.append(torch.autograd.grad((s * upstream[ct]).sum(), leaf)[0])
    table.add(METHOD, f"sample (_get_categ_mask), tau={strategy.tau:.4g}", list(w.values()),
              ref_w, ref_label)  # fmt: skip
    table.add(METHOD, "sample gradient (_get_categ_mask)", list(grads), ref_g, ref_label)

    # tau per epoch: the reference steps Temp_Scheduler before each epoch (S = 150 hard-coded)
    epochs = defaults["epochs"]
    strategy, _ = ours(("search.schedule_epochs=150",), epochs=epochs)
    sched = temp_scheduler(epochs, defaults["temp"], defaults["temp"],
                           temp_min=defaults["temp_min"])  # fmt: skip
    ref_tau, our_tau = [], []
    for e in range(epochs):
        ref_tau.append(sched.step())
        strategy.epoch = e
        our_tau.append(strategy.tau)
    table.add(METHOD, f"tau of epochs 0-{epochs - 1} (Temp_Scheduler)", our_tau, ref_tau,
              ref_label)  # fmt: skip

    # the op costs of operations.py against op_cost
    with F.reference_imports(root, "SNAS", ["SNAS"]), F.float64():
        from genotypes import PRIMITIVES  # type: ignore[import-not-found]
        from operations import OPS  # type: ignore[import-not-found]

        ours_c, ref_c = [], []
        for stride in (1, 2):
            for prim in PRIMITIVES:
                op = OPS[prim](8, stride, False)
                op(torch.zeros(1, 8, 16, 16))
                ref_c.append([float(op.size), float(op.flops), float(op.mac)])
                ours_c.append(list(op_cost(prim, 8, 16, stride)))
        table.add(METHOD, f"op size/flops/mac, C=8, 16x16, stride 1, 2 ({len(PRIMITIVES)} ops)",
                  ours_c, ref_c, ref_label)  # fmt: skip

    # settings: train_search.py's defaults and the README's single-GPU command
    with open(os.path.join(snas_dir, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    # the first command of the README (its single-GPU 8-cell search), continuation lines joined
    command = readme.replace("\\\n", " ").split("python train_search.py", 1)[1].split("\n")[0]
    flags = dict(re.findall(r"--(\w+)\s+([^\s-][^\s]*)", command))
    cfg = F.compose(["experiment=snas_darts_cifar10"])
    theirs = {**defaults, **{k: float(v) for k, v in flags.items() if k == "resource_lambda"}}
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
        "resource_lambda (README's single-GPU command)": cfg.search.resource_lambda,
        "log_penalty (README: --log_penalty)": cfg.search.resource_penalty == "log",
    }
    theirs["resource_lambda (README's single-GPU command)"] = theirs["resource_lambda"]
    theirs["log_penalty (README: --log_penalty)"] = "--log_penalty" in command
    F.add_settings(table, METHOD, mine, theirs, ref_label)


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
