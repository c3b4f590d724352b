"""Fidelity of SDARTS-RS and SDARTS-ADV against xiangning-chen/SmoothDARTS (``sota/cnn/``).

Chen & Hsieh, "Stabilizing Differentiable Architecture Search via Perturbation-based
Regularization", ICML 2020. The architecture step is first-order DARTS on unperturbed alphas;
the weight step trains the supernet under mixing weights ``A`` perturbed within an L-infinity
ball of radius eps_e around ``A0 = softmax(alpha)`` (``train_search.py``: a-step,
``softmax_arch_parameters``, ``perturb_alpha``, w-step, ``restore_arch_parameters``):

    clip(A):  per edge, clamp to [0, 1]; an all-zero row gets 1 at its former argmax; / row sum
    RS:       A = clip(A0 + U),  U ~ U(-eps_e, eps_e) i.i.d.          (``Random_alpha``)
    ADV:      A_0 = clip(A0 + U);  7 times  A_{t+1} = clip(A0 + clamp(A_t + (2 eps_e / 7)
              sign(dL_train/dA)(A_t) - A0, -eps_e, eps_e)),  the supernet in eval mode; A0 if
              L(A_7) < L(A0)                                           (``Linf_PGD_alpha``)
    eps_e = 0.03 + (0.3 - 0.03) * e / T  (epoch e of T = 50; ``train_search.py:170``)

The weight step is ``sum_k A_k op_k(x)`` over every op, those of weight exactly 0 included
(``MixedOp.forward``): their parameters get zero gradients that weight decay and momentum still
act on, and ADV's sign step sees the gradient of a zero entry (ours:
``Supernet.zero_weight_ops_run``, set by the components' ``prepare_supernet``).

Same random draws: RS's noise and ADV's random start are drawn once, by our component (its
``_noise``, seeded from the step's ``draw_seed``), recorded, and fed to the reference: in the
reference's ``attacker/perturb.py`` module (in memory, inside ``F.reference_imports``), the name
``torch`` is replaced by a proxy whose ``zeros_like(p).uniform_(lo, hi)`` returns the next
recorded tensor (and records ``(lo, hi)``, which must be ``(-eps_e, eps_e)``); every other
attribute is torch's. The reference's code runs unchanged otherwise: its own ``train()`` of
``sota/cnn/train_search.py`` (loaded without running the script), its ``Architect``, its
``Network`` on space s5, its ``Random_alpha`` / ``Linf_PGD_alpha``.

Known answers (no checkout): ``clip_to_simplex`` equals ``model_search.py: clip`` written out
row by row (an all-zero row included); an RS perturbation equals ``clip(A0 + (2u - 1) eps)`` with
``u`` the uniform draw of the step's first seed; an ADV perturbation equals the 7-step PGD
written out with autograd on a copy (random start, projection, clip, revert rule); epsilon of
epochs 0-49 equals the linear ramp; a weight step where a perturbed weight is exactly 0 gives
that op's parameters a zero gradient (not None), and SGD then moves them by weight decay and
momentum alone, ``p - lr (mu m + wd p)``.

With ``--reference-root sdarts=PATH`` (a checkout of github.com/xiangning-chen/SmoothDARTS):
the reference's network at float64 with our weights (C=2, 5 cells, s5, 8x8 images, batch 4),
the forward, and for RS and ADV a whole 50-epoch search of one step per epoch (our weight lr
schedule on both sides; the reference's epsilon from its own expression): at every epoch the
epsilon, the bounds its draw is asked for, the perturbed weights, the architecture gradient
(``.grad`` before Adam), the weight step's (clipped) weight gradient, the alphas and the network
(weights, biases, batch-norm running statistics) after the step, each row one comparison of the
50 epochs' values together (the long ones as their sketches, ``F.sketch``), and the genotype at
the end (``Network.genotype``); the number of exact zeros among the perturbed weights is
printed (about 17 % of them: the late epochs' clip). Every epoch the
reference starts from our state (``sync``: weights, running statistics, alphas, SGD's momentum
buffers, Adam's moments and step): run freely instead, the two drift apart smoothly by float64
rounding amplified through the training (batch norm over 4 images of 2x2 in the last cells):
measured, RS's gradients reach 1.6e-9 and ADV's 9e-7 by epoch 50, with no jump at any epoch
(a sign flip of ADV's step or a different revert would be a jump of 1e-2 or more), so the
per-epoch comparison from one state is the one held to 1e-10. Then the settings of
``train_search.py`` against ``experiment=sdarts_rs_darts_cifar10`` /
``sdarts_adv_darts_cifar10``: the script's ``--search_space`` defaults to ``s1`` (a
RobustDARTS space) and ``--perturb_alpha`` to ``none``; our experiments run the paper's
DARTS-space search, ``--search_space s5 --perturb_alpha random`` / ``pgd_linf``, which the
rows state.

    python experiments/fidelity/sdarts.py --reference-root sdarts=~/src/SmoothDARTS

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/sdarts.pt`` (``--record`` with the checkout writes them). Ours runs the
same either way (its own draws and batches; ``sync`` only writes into the reference), so the
recorded per-epoch values, each computed from our state of that epoch, are compared with our
run of 50 epochs as it goes.
"""

from __future__ import annotations

import ast
import copy
import inspect
import sys
from types import SimpleNamespace
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import numpy as np
import torch
from torch import nn

from nas.plugins import build_components, build_strategy
from nas.run.schedules import search_lr_factor
from nas.strategies.base import SearchContext, Shards
from nas.strategies.components.sdarts import clip_to_simplex
from nas.supernet import build_supernet

METHOD = "SDARTS"
REFERENCES = {"sdarts": F.Reference("xiangning-chen/SmoothDARTS", "attacker/perturb.py")}
C, LAYERS, CLASSES, HW, BATCH = 2, 5, 10, 8, 4  # two reduction cells (at 1 and 3)
EPOCHS, STEPS = 50, 1
LR, LR_MIN, MOMENTUM, WD, CLIP = 0.025, 0.001, 0.9, 3e-4, 5.0
CELLS = ("normal", "reduce")
KINDS = {"rs": "RS", "adv": "ADV"}


def ours(kind: str, seed: int = 0) -> tuple[Any, Any, nn.Module, torch.optim.SGD]:
    """Our first-order DARTS with ``sdarts_<kind>`` (its YAML) on a float64 s5 supernet, as a
    run builds it: ``prepare_supernet`` before the optimiser, then ``attach``."""
    cfg = F.compose(["search=darts", "space=s5", f"components=[sdarts_{kind}]"])
    strategy = build_strategy(cfg)
    strategy.add_components(build_components(cfg))
    torch.manual_seed(seed)
    net = build_supernet("s5", C=C, layers=LAYERS, num_classes=CLASSES).double()
    F.randomise_affine(net, seed)
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD, foreach=True)
    strategy.attach(
        SearchContext(net, opt, grad_clip=CLIP, epochs=EPOCHS, steps_per_epoch=STEPS),
        generator=torch.Generator().manual_seed(seed),
    )
    with torch.no_grad():  # alphas away from uniform, so that the softmax varies per op
        g = torch.Generator().manual_seed(seed + 1)
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=g, dtype=a.dtype))
    return strategy, strategy.component_list()[0], net, opt


def alphas(strategy: Any) -> list[torch.Tensor]:
    return [strategy.arch_params[ct].detach().clone() for ct in CELLS]


def state(module: nn.Module) -> list[torch.Tensor]:
    """Weights, biases and batch-norm running statistics, in module order."""
    out = []
    for m in F.modules_in_order(module):
        for name in ("weight", "bias", "running_mean", "running_var"):
            t = getattr(m, name, None)
            if isinstance(t, torch.Tensor):
                out.append(t.detach().clone())
    return out


def weight_grads(module: nn.Module) -> list[torch.Tensor]:
    """The ``.grad`` of the trained tensors, in module order (zeros where there is none)."""
    out = []
    for m in F.modules_in_order(module):
        for name in ("weight", "bias"):
            t = getattr(m, name, None)
            if isinstance(t, torch.Tensor):
                out.append(torch.zeros_like(t) if t.grad is None else t.grad.detach().clone())
    return out


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors flattened into one (a long per-epoch row: one shape to record, not one per
    tensor)."""
    return torch.cat([t.reshape(-1) for t in tensors])


def record(obj: Any, name: str, into: list[Any]) -> None:
    """Wrap the instance's method ``name`` so that each result is appended to ``into``."""
    method = getattr(obj, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = method(*args, **kwargs)
        into.append(out)
        return out

    obj.__dict__[name] = wrapped


# ------------------------------------------------------------------------------ known answers


def clip_written_out(a: torch.Tensor) -> torch.Tensor:
    """``model_search.py: clip``, row by row."""
    out = a.clone()
    for line in out:
        top = int(line.argmax())
        line.clamp_(0, 1)
        if float(line.sum()) == 0.0:
            line[top] = 1.0
        line.div_(line.sum())
    return out


def _uniform_of(step_seed: int, draw: int, like: torch.Tensor) -> torch.Tensor:
    """The k-th draw of a step: ``torch.rand`` from ``SeedSequence([step seed, k])``."""
    seed = np.random.SeedSequence([step_seed, draw]).generate_state(1, np.uint64)
    gen = torch.Generator().manual_seed(int(seed[0] >> np.uint64(1)))
    return torch.rand(like.shape, generator=gen, dtype=like.dtype)


def pgd_written_out(net: nn.Module, batch, a0: dict, noise: list, eps: float, steps: int = 7):
    """``Linf_PGD_alpha`` restated: eval mode, random start, sign steps, projection, revert."""
    net.eval()
    x, y = batch

    def loss(a: dict) -> torch.Tensor:
        return nn.functional.cross_entropy(net(x, a), y)

    with torch.no_grad():
        before = float(loss(a0))
    a = {ct: clip_written_out(a0[ct] + n) for ct, n in zip(CELLS, noise)}
    for _ in range(steps):
        leaves = {ct: a[ct].clone().requires_grad_(True) for ct in CELLS}
        grads = torch.autograd.grad(loss(leaves), [leaves[ct] for ct in CELLS])
        a = {
            ct: clip_written_out(
                a0[ct] + (a[ct] + 2 * eps / steps * g.sign() - a0[ct]).clamp(-eps, eps)
            )
            for ct, g in zip(CELLS, grads)
        }
    with torch.no_grad():
        after = float(loss(a))
    net.train()
    return dict(a0) if before > after else a


def known_answers(table: F.Table) -> None:
    # the projection, with an all-zero row, rows above 1 and a row already on the simplex
    g = torch.Generator().manual_seed(3)
    a = torch.rand(6, 7, generator=g, dtype=torch.float64) * 1.6 - 0.4
    a[0] = -torch.rand(7, generator=g, dtype=torch.float64)
    a[1] = torch.softmax(a[1], -1)
    table.add(METHOD, "clip = model_search.py: clip written out", clip_to_simplex(a),
              clip_written_out(a))  # fmt: skip

    # epsilon per epoch
    _, rs, _, _ = ours("rs")
    eps = []
    for e in range(EPOCHS):
        rs.begin_epoch(e)
        eps.append(rs.epsilon)
    table.add(METHOD, "epsilon of epochs 0-49 = 0.03 + 0.27 e / 50", eps,
              [0.03 + (0.3 - 0.03) * e / EPOCHS for e in range(EPOCHS)])  # fmt: skip

    # RS: clip(A0 + (2u - 1) eps) for the step's draws (late epoch: exact zeros)
    (tb,) = F.batches(1, size=BATCH, hw=HW, seed=4)
    strategy, rs, net, _ = ours("rs")
    strategy.begin_epoch(45)
    strategy.begin_step(7)
    with torch.no_grad():
        a0 = strategy.arch_weights(sample=True)
        perturbed = rs.perturb(strategy, a0, Shards.of(tb))
    noise = [(2 * _uniform_of(7, k, a0[ct]) - 1) * rs.epsilon for k, ct in enumerate(CELLS)]
    expected = [clip_written_out(a0[ct] + n) for ct, n in zip(CELLS, noise)]
    table.add(METHOD, "RS: perturbation = clip(A0 + U(-eps, eps))",
              [perturbed[ct] for ct in CELLS], expected)  # fmt: skip

    # ADV: the 7-step PGD written out on a copy, with the same random start
    strategy, adv, net, _ = ours("adv")
    strategy.weight_step(tb)  # running statistics away from their initial values
    strategy.begin_epoch(30)
    strategy.begin_step(11)
    with torch.no_grad():
        a0 = strategy.arch_weights(sample=True)
    starts: list[torch.Tensor] = []
    record(adv, "_noise", starts)
    net_copy = copy.deepcopy(net)
    perturbed = adv.perturb(strategy, a0, Shards.of(tb))
    expected_adv = pgd_written_out(net_copy, tb, a0, starts, adv.epsilon, adv.steps)
    table.add(METHOD, "ADV: perturbation = 7-step PGD written out",
              [perturbed[ct] for ct in CELLS], [expected_adv[ct] for ct in CELLS])  # fmt: skip

    # a perturbed weight exactly 0: the op still runs, its parameters get a zero gradient,
    # and SGD moves them by weight decay and momentum alone
    strategy, rs, net, opt = ours("rs")
    cell = next(c for c in net.cells if c.cell_type == "normal")
    edge, k = 0, list(cell.ops[0].op_names).index("sep_conv_3x3")
    op_params = list(cell.ops[edge].ops[k].parameters())
    strategy.weight_step(tb)  # a momentum buffer for every parameter
    buffers = [opt.state[p]["momentum_buffer"].clone() for p in op_params]
    before = [p.detach().clone() for p in op_params]
    draw = rs._noise
    calls: list[int] = []

    def noise_zeroing(strat: Any, like: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        n = draw(strat, like, mask)
        calls.append(1)
        if len(calls) == 1:  # the first draw of the step: the normal cell's
            n = n.clone()
            n[edge, k] = -2.0  # A0 + noise < 0: clamps to exactly 0
        return n

    rs.__dict__["_noise"] = noise_zeroing
    got: list[dict] = []
    record(rs, "perturb", got)
    strategy.begin_step(1)
    strategy.weight_step(tb)
    lr = opt.param_groups[0]["lr"]
    table.add_equal(METHOD, "zero weight: the perturbed weight is exactly 0",
                    float(got[0]["normal"][edge, k]), 0.0)  # fmt: skip
    table.add_equal(METHOD, "zero weight: its op's parameters get a gradient of 0",
                    [p.grad is not None and not bool(p.grad.any()) for p in op_params],
                    [True] * len(op_params))  # fmt: skip
    table.add(METHOD, "zero weight: SGD step = p - lr (mu m + wd p)",
              [p.detach() for p in op_params],
              [w - lr * (MOMENTUM * m + WD * w) for w, m in zip(before, buffers)])  # fmt: skip


# ---------------------------------------------------------------------------- the reference


class _Draws:
    """Stands in for ``torch`` in the reference's ``attacker/perturb.py``: ``zeros_like(p)
    .uniform_(lo, hi)`` returns the next of ``queue`` (our component's draws) and records
    ``(lo, hi)``; every other name is torch's."""

    def __init__(self) -> None:
        self.queue: list[torch.Tensor] = []
        self.bounds: list[tuple[float, float]] = []

    def zeros_like(self, like: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        owner = self

        class _Draw:
            def uniform_(self, lo: float, hi: float) -> torch.Tensor:
                noise = owner.queue.pop(0)
                if noise.shape != like.shape:
                    raise SystemExit(f"sdarts: draw of shape {tuple(noise.shape)} for "
                                     f"{tuple(like.shape)}; expected the same order")  # fmt: skip
                owner.bounds.append((lo, hi))
                return noise.to(like.dtype)

        return _Draw()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


class _Batches:
    """``next(iter(valid_queue))`` gives the next of ``items`` (the reference draws a random
    batch there; ours is given the same one)."""

    def __init__(self, items: list) -> None:
        self.items = list(items)

    def __iter__(self):
        return iter([self.items.pop(0)])


def sync(
    strategy: Any,
    net: nn.Module,
    opt: Any,
    model: Any,
    optimizer: Any,
    architect: Any,
    cells: tuple[str, ...] = CELLS,
) -> None:
    """Our state into the reference's: weights, batch-norm statistics, alphas, SGD's momentum
    buffers and Adam's moments (so that an epoch's comparison starts from the same state and
    float64 rounding does not accumulate over the 50 epochs)."""
    F.copy_weights(net, model)
    with torch.no_grad():
        for p, ct in zip(model.arch_parameters(), cells):
            p.copy_(strategy.arch_params[ct])
            theirs = strategy.arch_optimizer.state.get(strategy.arch_params[ct])
            if theirs:
                architect.optimizer.state[p] = {k: v.clone() for k, v in theirs.items()}
        for a, b in zip(F.modules_in_order(net), F.modules_in_order(model)):
            for name in ("weight", "bias"):
                x, y = getattr(a, name, None), getattr(b, name, None)
                if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
                    buf = opt.state.get(x, {}).get("momentum_buffer")
                    if buf is not None:
                        optimizer.state[y] = {"momentum_buffer": buf.clone()}


def _epsilon_expression(path: str) -> Any:
    """The reference's own ``epsilon_alpha = ...`` of ``main()`` (``train_search.py:170``),
    compiled, to evaluate with ``args`` and ``epoch``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "epsilon_alpha" for t in node.targets
        ):
            return compile(ast.Expression(node.value), path, "eval")
    raise SystemExit(f"sdarts: no epsilon_alpha = ... in {path}; expected SmoothDARTS's script")


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("sdarts")  # else the reference's values come from its recording
    ref_label = refs.label("sdarts")
    factor = search_lr_factor(epochs=EPOCHS, lr=LR, lr_min=LR_MIN, warmup_epochs=0,
                              stage_lr="cosine", stage_starts=[0])  # fmt: skip

    with refs.imports("sdarts", "sota/cnn", ["."]), F.float64():
        if live:
            import logging

            import attacker.perturb as perturb  # type: ignore[import-not-found]
            import optimizers.darts.utils as utils  # type: ignore[import-not-found]
            from optimizers.darts.architect import Architect  # type: ignore[import-not-found]
            from sota.cnn.model_search import Network  # type: ignore[import-not-found]
            from sota.cnn.spaces import spaces_dict  # type: ignore[import-not-found]

            script = f"{refs.root('sdarts')}/sota/cnn/train_search.py"
            defaults = F.script_defaults(script)
            draws = _Draws()
            perturb.torch = draws  # in memory: the module is dropped on leaving the imports
            args = SimpleNamespace(**{**defaults, "save": "fidelity", "epochs": EPOCHS})
            namespace = {"utils": utils, "args": args, "nn": nn, "torch": torch,
                         "logging": logging}  # fmt: skip
            train = F.load_function(script, "train", namespace)
            epsilon_of = _epsilon_expression(script)
            pgd_defaults = inspect.signature(perturb.Linf_PGD_alpha).parameters
        criterion = nn.CrossEntropyLoss()

        def run(kind: str, name: str) -> None:
            strategy, comp, net, opt = ours(kind)
            if live:
                model = Network(C, CLASSES, LAYERS, criterion, spaces_dict["s5"]).double()
                F.copy_weights(net, model)
                with torch.no_grad():
                    for p, ct in zip(model.arch_parameters(), CELLS):
                        p.copy_(strategy.arch_params[ct])
                optimizer = torch.optim.SGD(model.parameters(), LR, momentum=args.momentum,
                                            weight_decay=args.weight_decay)  # fmt: skip
                architect = Architect(model, args)
            if kind == "rs":
                x = F.batches(1, size=BATCH, hw=HW, seed=9)[0][0]
                table.add(METHOD, "forward (softmax mixing)",
                          net(x, strategy.arch_weights(sample=False)), lambda: model(x),
                          ref_label)  # fmt: skip

            # our draws and perturbed weights, the reference's perturbed weights and gradients
            noises: list[torch.Tensor] = []
            ours_perturbed: list[dict] = []
            record(comp, "_noise", noises)
            record(comp, "perturb", ours_perturbed)
            ref_perturbed: list[list[torch.Tensor]] = []
            ref_arch_grads: list[list[torch.Tensor]] = []
            if live:
                attack = perturb.Random_alpha if kind == "rs" else perturb.Linf_PGD_alpha

                def perturb_alpha(model_: Any, X: Any, y: Any, epsilon: float) -> None:
                    attack(model_, X, y, epsilon)
                    ref_perturbed.append([p.detach().clone() for p in model_.arch_parameters()])

                step = architect.step

                def architect_step(*a: Any, **kw: Any) -> None:
                    step(*a, **kw)
                    ref_arch_grads.append(
                        [p.grad.detach().clone() for p in model.arch_parameters()]
                    )

                architect.step = architect_step

            # per quantity, ours and the reference's value at every epoch: one row each
            mine: dict[str, list[Any]] = {}
            theirs: dict[str, list[Any]] = {}

            def note(quantity: str, a: Any, b: Any) -> None:
                """``b``: a function giving the reference's value, called only when live."""
                mine.setdefault(quantity, []).append(a)
                if live:
                    theirs.setdefault(quantity, []).append(b())

            zeros = 0
            for epoch in range(EPOCHS):
                train_batches = F.batches(STEPS, size=BATCH, hw=HW, seed=1000 + epoch)
                val_batches = F.batches(STEPS, size=BATCH, hw=HW, seed=2000 + epoch)
                lr = LR * factor(epoch)
                if live:
                    sync(strategy, net, opt, model, optimizer, architect)  # the same start
                # ours, as a run's epoch does it
                opt.param_groups[0]["lr"] = lr
                strategy.begin_epoch(epoch)
                net.train()
                our_arch_grads = []
                for i, (tb, vb) in enumerate(zip(train_batches, val_batches)):
                    strategy.begin_step(epoch * STEPS + i)
                    strategy.arch_step(tb, vb)
                    our_arch_grads.append(
                        [strategy.arch_params[ct].grad.detach().clone() for ct in CELLS]
                    )
                    strategy.weight_step(tb)
                # the reference: its train() on the same batches, our draws, from our state
                if live:
                    for param_group in optimizer.param_groups:
                        param_group["lr"] = lr
                    epsilon = eval(epsilon_of, {"args": args, "epoch": epoch})  # noqa: S307
                    draws.queue = list(noises)
                    train(train_batches, _Batches(val_batches), model, architect, criterion,
                          optimizer, lr, perturb_alpha, epsilon)  # fmt: skip
                noises.clear()
                note("epsilon (train_search.py:170)", comp.epsilon, lambda: epsilon)
                note("the draws' bounds (-eps, eps)", [-comp.epsilon, comp.epsilon],
                     lambda: list(draws.bounds[-1]))  # fmt: skip
                perturbed = [[p[ct] for ct in CELLS] for p in ours_perturbed]
                zeros += sum(int((t == 0).sum()) for pair in perturbed for t in pair)
                note("perturbed weights", perturbed, lambda: list(ref_perturbed))
                note("architecture gradient", our_arch_grads, lambda: list(ref_arch_grads))
                note("weight gradient (clipped, of the weight step)", _flat(weight_grads(net)),
                     lambda: _flat(weight_grads(model)))  # fmt: skip
                note("alphas", alphas(strategy),
                     lambda: [p.detach().clone() for p in model.arch_parameters()])  # fmt: skip
                note("network (weights, running statistics)", _flat(state(net)),
                     lambda: _flat(state(model)))  # fmt: skip
                ours_perturbed.clear()
                ref_perturbed.clear()
                ref_arch_grads.clear()
            for quantity, values in mine.items():
                table.add(METHOD, f"{name}: {quantity}, epochs 0-{EPOCHS - 1}", values,
                          lambda quantity=quantity: theirs[quantity], ref_label)  # fmt: skip
            print(f"{METHOD} {name}: {zeros} exact zeros among the perturbed weights of "
                  f"{EPOCHS} epochs ({EPOCHS * STEPS * 2 * 14 * 7} entries)")  # fmt: skip
            table.add_equal(METHOD, f"{name}: genotype after {EPOCHS} epochs (Network.genotype)",
                            F.our_genotype(strategy), lambda: F.reference_genotype(model),
                            ref_label)  # fmt: skip

        for kind, name in KINDS.items():
            run(kind, name)
    for kind, name in KINDS.items():
        cfg = F.compose([f"experiment=sdarts_{kind}_darts_cifar10"])
        comp_cfg = cfg.components[f"sdarts_{kind}"]
        method = "random" if kind == "rs" else "pgd_linf"
        ours_settings = {
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
            "unrolled": cfg.search.order == 2,
            "epsilon_alpha (eps at the end of the ramp)": comp_cfg.epsilon_max,
            "search_space (the paper's DARTS space: --search_space s5)": cfg.space.name,
            "perturb_alpha (the method: --perturb_alpha)": method,
        }
        if kind == "adv":
            ours_settings["PGD steps (Linf_PGD_alpha steps=)"] = comp_cfg.steps
            ours_settings["random start (Linf_PGD_alpha random_start=)"] = comp_cfg.random_start

        def their_settings(kind: str = kind, method: str = method) -> dict[str, Any]:
            out = {
                **defaults,
                "epsilon_alpha (eps at the end of the ramp)": defaults["epsilon_alpha"],
                "search_space (the paper's DARTS space: --search_space s5)": "s5",
                "perturb_alpha (the method: --perturb_alpha)": method,
            }
            if kind == "adv":
                out["PGD steps (Linf_PGD_alpha steps=)"] = pgd_defaults["steps"].default
                out["random start (Linf_PGD_alpha random_start=)"] = pgd_defaults[
                    "random_start"
                ].default
            return out

        def prefixed(d: dict[str, Any], name: str = name) -> dict[str, Any]:
            return {f"{name}: {k}": v for k, v in d.items()}  # one quantity per setting and kind

        F.add_settings(table, f"{METHOD}-{name}", prefixed(ours_settings),
                       lambda: prefixed(their_settings()), ref_label)  # fmt: skip
    if live:
        print(
            f"{METHOD}: train_search.py defaults --search_space {defaults['search_space']} "
            f"--perturb_alpha {defaults['perturb_alpha']}; the experiments run s5 with the method"
        )


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
