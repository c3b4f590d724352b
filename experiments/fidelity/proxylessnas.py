"""Fidelity of ProxylessNAS at the whole-network level against mit-han-lab/proxylessnas.

Cai, Zhu & Han, "ProxylessNAS: Direct Neural Architecture Search on Target Task and Hardware",
ICLR 2019: binary gates drawn from ``p = softmax(alpha)``, one path per block runs; the gates'
gradient carried to alpha by eq. 4; the latency loss ``mul#log`` / ``add#linear``. The
reference's search code (``search/``): ``models/super_nets/super_proxyless.py``
(``SuperProxylessNASNets``), ``modules/mix_op.py`` (``MixedEdge``), ``nas_manager.py``
(``train``, ``warm_up``, ``gradient_step``, ``GradientArchSearchConfig``), ``run_manager.py``
(``RunConfig``), ``imagenet_arch_search.py`` (the paper's settings).

Known answers (no checkout): ``EdgeAdam`` equals torch's Adam on one parameter per edge, an
edge without gradient taking no step; a draw over an edge whose ``none`` is masked equals
``torch.multinomial`` over its six candidates alone; the weight loss with label smoothing 0.1
equals the reference's ``cross_entropy_with_label_smoothing`` written out; the per-step
schedule with its cosine warm-up equals ``warm_up``'s and ``_calc_learning_rate``'s formulas.

With ``--reference-root proxylessnas=PATH`` (a checkout of github.com/mit-han-lab/proxylessnas):
the reference's ``SuperProxylessNASNets`` (ImageNet widths, 21 blocks, 10 classes) and our
``space=proxyless`` supernet at float64 with the same weights (copied in module order) and
alphas (several blocks leaning to ``none``), the same batches (8 images of 32x32) and the same
draws (ours from its step generator; the reference's global generator seeded with the same
seed before each ``reset_binary_gates``). Per mode (``full_v2``, ``two``), three whole steps
of ``nas_manager.train``'s inner loop: the weight step (``reset_binary_gates`` with mode None,
Nesterov SGD, label smoothing 0.1) then ``gradient_step`` (no latency term, the script's
default), the reference's Adam over one ``AP_path_alpha`` per block. Compared: the forward of
a sampled network, the paths drawn (both draws of every step), the architecture gradient of
step 1, each edge's Adam step count, the alphas, weights and batch-norm statistics after three
steps; the latency loss forms (``add_regularization_loss``) and their gradients in CE and E;
the rates of ``RunConfig._calc_learning_rate``; the script's settings
(``imagenet_arch_search.py``'s arguments and ``warm_up``'s rate) beside
``experiment=proxylessnas_imagenet``.

    python experiments/fidelity/proxylessnas.py --reference-root proxylessnas=~/src/proxylessnas

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/proxylessnas.pt`` (``--record`` with the checkout writes them).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib
import io
import math
import os
import sys
import types
from collections.abc import Callable
from typing import Any, cast

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import numpy as np
import torch
from torch import nn

from nas.hardware.cost import CostObjective
from nas.plugins import build_strategy
from nas.run.schedules import search_lr_factor
from nas.strategies.base import SearchContext
from nas.strategies.proxylessnas import EdgeAdam, draw
from nas.supernet import build_supernet
from search_spaces.proxyless_space import MBCONV_OPS

METHOD = "ProxylessNAS"
REFERENCES = {
    "proxylessnas": F.Reference(
        "mit-han-lab/proxylessnas", "search/models/super_nets/super_proxyless.py"
    )
}
CLASSES, HW, BATCH, STEPS = 10, 32, 8, 3
LR, MOMENTUM, WD, SMOOTHING = 0.025, 0.9, 4e-5, 0.1
NONE_FAVOURED = (1, 2, 6, 9)  # skippable blocks whose alpha leans to `none` (drawn often)
# The gates' gradient <dL/d out, o_k(x)> sums products that nearly cancel, and the last blocks
# normalise batch norm over 8 values of 1x1 maps: rounding grows through the steps. Measured
# (the same code at one and at two threads): 2e-12 on step 1's architecture gradient, 5e-11
# on alphas and statistics after 3 steps, 1.2e-8 on the gradients of steps 2-3. Ours and the
# reference at the same thread count agree within 2e-15; the rows run on one thread, with
# tolerances above that rounding and far below what a wrong step moves (1e-4 and more).
STEP_TOL, LATER_TOL = 1e-8, 1e-6


# ------------------------------------------------------------------------------------ ours


def ours(mode: str, seed: int = 0) -> tuple[Any, nn.Module]:
    """Our strategy (``experiment=proxylessnas_imagenet``'s settings) on our supernet, with
    the weight optimiser of that experiment and random alphas."""
    cfg = F.compose(["experiment=proxylessnas_imagenet", f"search.mode={mode}"])
    strategy = build_strategy(cfg)
    torch.manual_seed(seed)
    net = build_supernet("proxyless", C=32, layers=21, num_classes=CLASSES).double()
    F.randomise_affine(net, seed)
    strategy.prepare_supernet(net)
    opt = cfg.optimizer
    w_opt = torch.optim.SGD(
        net.parameters(),
        lr=float(opt.lr),
        momentum=float(opt.momentum),
        nesterov=bool(opt.nesterov),
        weight_decay=float(opt.weight_decay),
    )
    ctx = SearchContext(net, w_opt, grad_clip=None, label_smoothing=float(cfg.label_smoothing))
    strategy.attach(ctx, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        alpha = strategy.arch_params["blocks"]
        alpha.copy_(0.5 * torch.randn(alpha.shape, generator=g, dtype=alpha.dtype))
        alpha[list(NONE_FAVOURED), -1] = 2.0
    return strategy, net


def step_seeds(step_seed: int, draws: int = 2) -> list[int]:
    """The seeds of a step's draws (``SearchStrategy.draw_seed``): the weight step's, then the
    architecture step's."""
    out = []
    for k in range(draws):
        state = np.random.SeedSequence([step_seed, k]).generate_state(1, np.uint64)
        out.append(int(state[0] >> np.uint64(1)))
    return out


def recorded_draws(strategy: Any) -> list[list[int]]:
    """Wrap the strategy's two draws (weight step's one-hot, architecture step's gates) so that
    each appends its paths to the list returned."""
    log: list[list[int]] = []
    weights, gates = strategy.strategy_weights, strategy.sample_gates

    def strategy_weights(*, sample: bool) -> Any:
        out = weights(sample=sample)
        if sample:
            log.append(out["blocks"].argmax(-1).tolist())
        return out

    def sample_gates(generator: torch.Generator) -> Any:
        out = gates(generator)
        log.append(list(out["blocks"][0]))
        return out

    strategy.strategy_weights = strategy_weights
    strategy.sample_gates = sample_gates
    return log


def _choices(net: Any) -> list[int]:
    """The candidates each block offers (6, or 7 where it can be skipped)."""
    mask = net.op_mask("blocks")
    return [int(row.sum()) for row in mask]


def weights_in_order(net: nn.Module) -> list[torch.Tensor]:
    return [p for m in F.modules_in_order(net) for p in m.parameters(recurse=False)]


def bn_stats(net: nn.Module) -> list[Any]:
    return [
        b
        for m in F.modules_in_order(net)
        if isinstance(m, nn.BatchNorm2d)
        for b in (m.running_mean, m.running_var)
    ]


def smoothed_ce(logits: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """``cross_entropy_with_label_smoothing`` (``search/utils/pytorch_utils.py``) restated."""
    soft = torch.zeros_like(logits).scatter_(1, y[:, None], 1.0)
    soft = soft * (1 - eps) + eps / logits.shape[1]
    return torch.mean(torch.sum(-soft * torch.log_softmax(logits, 1), 1))


def known_answers(table: F.Table) -> None:
    g = torch.Generator().manual_seed(0)
    # EdgeAdam: torch's Adam per edge, a None gradient skipping the edge
    alpha = nn.Parameter(torch.randn(5, 7, generator=g, dtype=torch.float64))
    rows = [nn.Parameter(alpha.detach()[i].clone()) for i in range(5)]
    ours_opt = EdgeAdam([alpha], lr=1e-3, betas=(0.0, 0.999))
    ref_opt = torch.optim.Adam(rows, lr=1e-3, betas=(0.0, 0.999), foreach=False)
    for _ in range(6):
        grad = torch.randn(5, 7, generator=g, dtype=torch.float64)
        skip = torch.rand(5, generator=g) < 0.4
        alpha.grad = grad.masked_fill(skip[:, None], 0.0)
        ours_opt.skip_rows(alpha, skip)
        ours_opt.step()
        for i, row in enumerate(rows):
            row.grad = None if skip[i] else grad[i].clone()
        ref_opt.step()
    table.add(METHOD, "EdgeAdam: 6 steps, edges without gradient skipped = one Adam per edge",
              alpha, torch.stack([r.detach() for r in rows]))  # fmt: skip
    # draws over the allowed candidates
    p = torch.softmax(torch.randn(7, generator=g, dtype=torch.float64), 0)
    allowed = torch.tensor([True] * 6 + [False])
    a, b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    ours_draws = [draw(p, allowed, 1, a).tolist() for _ in range(50)]
    alone = [torch.multinomial(p[:6], 1, generator=b).tolist() for _ in range(50)]
    table.add_equal(METHOD, "draws of a block without none = multinomial over its 6 candidates",
                    ours_draws, alone)  # fmt: skip
    # the weight loss: label smoothing
    logits = torch.randn(8, CLASSES, generator=g, dtype=torch.float64)
    y = torch.randint(0, CLASSES, (8,), generator=g)
    loss = nn.functional.cross_entropy(logits, y, label_smoothing=SMOOTHING)
    table.add(METHOD, "weight loss with label smoothing 0.1 = cross_entropy_with_label_smoothing",
              loss, smoothed_ce(logits, y, SMOOTHING))  # fmt: skip
    # the schedule: warm_up's cosine from 0.05 over 4 epochs, then the search's over 8
    factor = search_lr_factor(epochs=12, lr=LR, lr_min=0.0, warmup_epochs=4, warmup_lr=0.05,
                              steps_per_epoch=5)  # fmt: skip
    expected = [0.5 * 0.05 * (1 + math.cos(math.pi * t / 20)) for t in range(20)]
    expected += [0.5 * LR * (1 + math.cos(math.pi * t / 40)) for t in range(40)]
    table.add(METHOD, "weight rate per step: warm_up's cosine from 0.05, then the search's",
              [LR * factor(s) for s in range(60)], expected)  # fmt: skip


# ---------------------------------------------------------------------------- the reference


def reference_net(sp: Any, net: nn.Module, alpha: torch.Tensor) -> Any:
    ref = sp.SuperProxylessNASNets(
        width_stages=[24, 40, 80, 96, 192, 320],
        n_cell_stages=[4, 4, 4, 4, 4, 1],
        conv_candidates=list(MBCONV_OPS),
        stride_stages=[2, 2, 2, 1, 2, 1],
        n_classes=CLASSES,
        width_mult=1.0,
        bn_param=(0.1, 1e-3),
        dropout_rate=0,
    )
    F.copy_weights(net, ref)
    with torch.no_grad():
        for e, m in enumerate(ref.redundant_modules):
            m.AP_path_alpha.copy_(alpha[e, : m.n_choices])
            m.AP_path_wb.zero_()
    return ref


def reference_step(
    mix_op: Any,
    ref: Any,
    opts: tuple[torch.optim.Optimizer, torch.optim.Optimizer],
    seeds: list[int],
    batches: tuple[Any, Any],
    mode: str,
    smoothing: Callable[..., torch.Tensor],
) -> list[list[int]]:
    """One step of ``nas_manager.train``'s loop: the weight step, then ``gradient_step`` (no
    latency term); returns the paths of its two draws."""
    w_opt, a_opt = opts
    (x, y), (xv, yv) = batches
    ref.train()
    paths = []
    torch.manual_seed(seeds[0])
    ref.reset_binary_gates()  # MODE None: one path per block
    paths.append([m.active_index[0] for m in ref.redundant_modules])
    ref.unused_modules_off()
    loss = smoothing(ref(x), y, SMOOTHING)
    ref.zero_grad()
    loss.backward()
    w_opt.step()
    ref.unused_modules_back()
    mix_op.MixedEdge.MODE = mode
    try:
        torch.manual_seed(seeds[1])
        ref.reset_binary_gates()
        paths.append([m.active_index[0] for m in ref.redundant_modules])
        ref.unused_modules_off()
        ce = nn.CrossEntropyLoss()(ref(xv), yv)
        ref.zero_grad()
        ce.backward()
        for m in ref.redundant_modules:  # nas_manager's set_arch_param_grad, its try included:
            # a block whose active path is the zero layer has no gate gradient at all
            with contextlib.suppress(AttributeError):
                m.set_arch_param_grad()
        a_opt.step()
        if mode == "two":
            ref.rescale_updated_arch_param()
        ref.unused_modules_back()
    finally:
        mix_op.MixedEdge.MODE = None
    return paths


def compare(table: F.Table, refs: F.Refs) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the recording's: see STEP_TOL
    try:
        _compare(table, refs)
    finally:
        torch.set_num_threads(threads)


def _compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("proxylessnas")
    ref_label = refs.label("proxylessnas")
    train, val = (
        F.batches(STEPS, BATCH, HW, CLASSES, seed=1),
        F.batches(STEPS, BATCH, HW, CLASSES, seed=2),
    )
    with refs.imports("proxylessnas", "search", ["search"]):
        if live:
            sp = importlib.import_module("models.super_nets.super_proxyless")
            mix_op = importlib.import_module("modules.mix_op")
            utils = importlib.import_module("utils")
            nas_manager = importlib.import_module("nas_manager")
            run_manager = importlib.import_module("run_manager")
        for mode in ("full_v2", "two"):
            strategy, net = ours(mode)
            alpha0 = strategy.arch_params["blocks"].detach().clone()
            n_choices = _choices(net)
            ref: Any = reference_net(sp, net, alpha0) if live else None
            if mode == "full_v2":  # the forward of one sampled network, on copies
                _forward_rows(table, strategy, net, ref, train[0][0], ref_label)
            w_ref: Any = None
            a_ref: Any = None
            if live:
                w_ref = torch.optim.SGD(ref.weight_parameters(), lr=LR, momentum=MOMENTUM,
                                        nesterov=True, weight_decay=WD)  # fmt: skip
                a_ref = torch.optim.Adam(ref.architecture_parameters(), lr=1e-3,
                                         betas=(0.0, 0.999), eps=1e-8, weight_decay=0)  # fmt: skip
            draws = recorded_draws(strategy)
            ref_draws: list[list[int]] = []
            grads, ref_grads = [], []
            for i in range(STEPS):
                strategy.begin_step(1000 + i)
                strategy.steps_in_epoch = 0  # an architecture step after every weight step
                strategy.step(train[i], val[i])
                grads.append(_per_edge(strategy.arch_params["blocks"].grad, n_choices))
                if live:
                    ref_draws += reference_step(
                        mix_op, ref, (w_ref, a_ref), step_seeds(1000 + i), (train[i], val[i]),
                        mode, utils.cross_entropy_with_label_smoothing,
                    )  # fmt: skip
                    ref_grads.append([
                        torch.zeros(m.n_choices) if m.AP_path_alpha.grad is None
                        else m.AP_path_alpha.grad.detach().clone()
                        for m in ref.redundant_modules
                    ])  # fmt: skip
            table.add_equal(METHOD, f"{mode}: paths drawn, both draws of {STEPS} steps",
                            draws, lambda: ref_draws, ref_label)  # fmt: skip
            table.add(METHOD, f"{mode}: architecture gradient of step 1 (set_arch_param_grad)",
                      grads[0], lambda: ref_grads[0], ref_label, STEP_TOL)  # fmt: skip
            table.add(METHOD, f"{mode}: architecture gradients of steps 2-{STEPS}", grads[1:],
                      lambda: ref_grads[1:], ref_label, LATER_TOL)  # fmt: skip
            counts = strategy.arch_optimizer.state_dict()["state"][0]["step"]
            table.add_equal(METHOD, f"{mode}: Adam's step count of each edge after {STEPS} steps",
                            [int(c) for c in counts.tolist()],
                            lambda: [int(a_ref.state[m.AP_path_alpha].get("step", 0))
                                     for m in ref.redundant_modules], ref_label)  # fmt: skip
            table.add(METHOD, f"{mode}: alphas after {STEPS} steps",
                      _per_edge(strategy.arch_params["blocks"], n_choices),
                      lambda: [m.AP_path_alpha.detach() for m in ref.redundant_modules],
                      ref_label, STEP_TOL)  # fmt: skip
            table.add(METHOD, f"{mode}: weights after {STEPS} steps (Nesterov, label smoothing)",
                      weights_in_order(net), lambda: weights_in_order(ref), ref_label,
                      STEP_TOL)  # fmt: skip
            table.add(METHOD, f"{mode}: batch-norm statistics after {STEPS} steps", bn_stats(net),
                      lambda: bn_stats(ref), ref_label, STEP_TOL)  # fmt: skip

        _latency_rows(table, live and nas_manager, ref_label)
        _schedule_rows(table, live and run_manager, ref_label)
    _settings_rows(table, refs, ref_label)


def _per_edge(matrix: torch.Tensor, n_choices: list[int]) -> list[torch.Tensor]:
    return [matrix.detach()[e, :n].clone() for e, n in enumerate(n_choices)]


def _forward_rows(
    table: F.Table, strategy: Any, net: nn.Module, ref: Any, x: torch.Tensor, ref_label: str
) -> None:
    """Logits of the network of one draw (train mode, on copies: the statistics move)."""
    ours_net = copy.deepcopy(net)
    strategy.begin_step(7)
    weights = strategy.strategy_weights(sample=True)
    paths = weights["blocks"].argmax(-1).tolist()
    logits = ours_net(x, weights)
    ref_logits = None
    if ref is not None:
        twin = copy.deepcopy(ref)
        for m, k in zip(twin.redundant_modules, paths):
            m.active_index = [k]
            m.inactive_index = [i for i in range(m.n_choices) if i != k]
        twin.unused_modules_off()
        ref_logits = twin(x)
    table.add(METHOD, "forward of a sampled network (21 blocks, ImageNet widths)", logits,
              lambda: ref_logits, ref_label)  # fmt: skip


def _latency_rows(table: F.Table, nas_manager: Any, ref_label: str) -> None:
    """Both loss forms at the script's parameters, values and gradients in CE and E."""
    for form, ref_form, params in (
        ("mul_log", "mul#log", {"alpha": 0.2, "beta": 0.3}),
        ("add_linear", "add#linear", {"lambda": 0.1}),
    ):
        model = cast(Any, types.SimpleNamespace(metric="latency"))  # E is given: no table
        cost = CostObjective(model, form=form, target=80.0, alpha=0.2, beta=0.3, reg_lambda=0.1)
        values, ref_values = [], []
        for e in (45.0, 80.0, 120.0):
            ce = torch.tensor(2.3, dtype=torch.float64, requires_grad=True)
            E = torch.tensor(e, dtype=torch.float64, requires_grad=True)
            a, c = cost.factor_and_penalty(E)
            loss = a * ce + c
            values.append([loss.detach(), *torch.autograd.grad(loss, [ce, E])])
            if nas_manager:
                with contextlib.redirect_stdout(io.StringIO()):  # it prints its kwargs
                    config = nas_manager.GradientArchSearchConfig(
                        target_hardware="mobile", ref_value=80, grad_reg_loss_type=ref_form,
                        grad_reg_loss_params=params,
                    )  # fmt: skip
                ce2 = torch.tensor(2.3, dtype=torch.float64, requires_grad=True)
                E2 = torch.tensor(e, dtype=torch.float64, requires_grad=True)
                ref_loss = config.add_regularization_loss(ce2, E2)
                ref_values.append([ref_loss.detach(), *torch.autograd.grad(ref_loss, [ce2, E2])])
        table.add(METHOD, f"latency loss {ref_form}: value, d/dCE, d/dE at E = 45, 80, 120 ms",
                  values, lambda: ref_values, ref_label)  # fmt: skip


def _schedule_rows(table: F.Table, run_manager: Any, ref_label: str) -> None:
    """The search epochs' rate per batch (``RunConfig._calc_learning_rate``), after a warm-up."""
    warmup, epochs, n = 4, 12, 5
    factor = search_lr_factor(epochs=epochs, lr=LR, lr_min=0.0, warmup_epochs=warmup,
                              warmup_lr=0.05, steps_per_epoch=n)  # fmt: skip
    ours_rates = [LR * factor(warmup * n + s) for s in range((epochs - warmup) * n)]
    ref_rates: list[float] = []
    if run_manager:
        config = run_manager.RunConfig(
            n_epochs=epochs - warmup, init_lr=LR, lr_schedule_type="cosine",
            lr_schedule_param=None, dataset="imagenet", train_batch_size=256,
            test_batch_size=1000, valid_size=50000, opt_type="sgd", opt_param=None,
            weight_decay=WD, label_smoothing=SMOOTHING, no_decay_keys=None,
            model_init="he_fout", init_div_groups=False, validation_frequency=1,
            print_frequency=10,
        )  # fmt: skip
        for epoch in range(epochs - warmup):
            for i in range(n):
                ref_rates.append(config._calc_learning_rate(epoch, batch=i, nBatch=n))
    table.add(METHOD, "search epochs' rate per batch after a 4-epoch warm-up "
              "(RunConfig._calc_learning_rate)", ours_rates, lambda: ref_rates,
              ref_label)  # fmt: skip


def _settings_rows(table: F.Table, refs: F.Refs, ref_label: str) -> None:
    cfg = F.compose(["experiment=proxylessnas_imagenet"])
    opt, search = cfg.optimizer, cfg.search
    ours_values = {
        "epochs (warm-up + search)": int(cfg.epochs),
        "weight lr, momentum, Nesterov, weight decay": [
            float(opt.lr), float(opt.momentum), bool(opt.nesterov), float(opt.weight_decay)],
        "label smoothing": float(cfg.label_smoothing),
        "warm-up epochs and their peak rate (warm_up: lr_max)": [int(opt.warmup_epochs),
                                                                 float(opt.warmup_lr)],
        "batch size": int(cfg.batch_size),
        "architecture Adam: lr, beta1, beta2": [
            float(search.arch_lr), *map(float, search.arch_betas)],
        "architecture init ratio": float(search.init_scale),
        "binary mode": str(search.mode),
        "architecture step every n weight steps": int(search.update_every),
        "first architecture step after epoch (warm-up + 1)": int(search.warmup_epochs),
    }  # fmt: skip

    def reference_values() -> dict[str, Any]:
        root = refs.root("proxylessnas")
        d = F.script_defaults(os.path.join(root, "search", "imagenet_arch_search.py"))
        return {
            "epochs (warm-up + search)": d["n_epochs"] + d["warmup_epochs"],
            "weight lr, momentum, Nesterov, weight decay": [
                d["init_lr"], d["momentum"], not d["no_nesterov"], d["weight_decay"]],
            "label smoothing": d["label_smoothing"],
            "warm-up epochs and their peak rate (warm_up: lr_max)": [
                d["warmup_epochs"], _warm_up_lr_max(os.path.join(root, "search", "nas_manager.py"))
            ],
            "batch size": d["train_batch_size"],
            "architecture Adam: lr, beta1, beta2": [d["arch_lr"], d["arch_adam_beta1"],
                                                    d["arch_adam_beta2"]],
            "architecture init ratio": d["arch_init_ratio"],
            "binary mode": d["grad_binary_mode"],
            "architecture step every n weight steps": d["grad_update_arch_param_every"],
            "first architecture step after epoch (warm-up + 1)": d["warmup_epochs"] + 1,
        }  # fmt: skip

    F.add_settings(table, METHOD, ours_values, reference_values, ref_label)


def _warm_up_lr_max(path: str) -> float:
    """``lr_max`` of ``ArchSearchRunManager.warm_up``, read from the source."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "warm_up":
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == "lr_max"
                ):
                    return float(ast.literal_eval(stmt.value))
    raise SystemExit(f"{path}: no lr_max in warm_up")


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
