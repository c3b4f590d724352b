"""Fidelity of beta-DARTS against Sunshine-Ye/Beta-DARTS (``optimizers/darts/architect.py``).

Ye et al., "beta-DARTS: Beta-Decay Regularization for Differentiable Architecture Search",
CVPR 2022. The first-order DARTS architecture loss gets the Beta-Decay term (``mlc_loss``, on
the raw alphas) with a weight ramped over the epochs (``_backward_step``):

    L_beta = (1 / E) sum_e logsumexp_k alpha_{e,k},   dL_beta / dalpha_e = softmax(alpha_e) / E
    L_arch = L_val(w, softmax(alpha)) + lambda_e L_beta,   lambda_e = 0 + 50 e / 100

(100 literal: ``ramp_epochs: 100``), then Adam(3e-4, (0.5, 0.999), wd 1e-3); the unrolled step
has no term. NAS-Bench-201 (``nasbench201/train_search.py``): 100 epochs, no perturbation. The
DARTS space (``sota/cnn/train_search.py``): s5 and SDARTS-RS (``--perturb_alpha random``) by
default; this script cannot run as released: ``train()`` calls ``architect.step`` without its
``epoch`` (a ``TypeError``), and ``mlc_loss`` would get the Python list of both cell types'
alphas (``torch.logsumexp`` of a list: a ``TypeError``); both are checked below. Ours reads the
term there as one mean over the edges of both cell types (``mlc_loss(torch.cat(alphas))``).

Known answers (no checkout): the Beta-Decay value equals ``mean_e log sum_k exp alpha_{e,k}``
written out (one cell type, and the mean over both of the DARTS space); its gradient as the
strategy adds it equals ``lambda_e softmax(alpha_e) / E``; lambda of epochs 0-99 equals
``50 e / 100`` (and ``50 e / 50`` with ``ramp_epochs: null`` over 50 epochs); a first-order
architecture step's gradient (the ``.grad`` Adam reads) equals autograd of ``L_val + lambda_e
L_beta`` on a copy, at epoch 60.

With ``--reference-root beta_darts=PATH`` (a checkout of github.com/Sunshine-Ye/Beta-DARTS):
NAS-Bench-201 (C=4, N=1, 8x8 images, batch 4): the reference's ``Network`` and ``Architect`` at
float64 with our weights, the forward, and its own ``train()`` (loaded without running the
script) for one step at each of the epochs 0, 1, 33, 66, 99 (lambda 0 to 49.5), the reference
starting every epoch from our state (weights, batch-norm statistics, alphas, momentum buffers,
Adam's moments), compared on the architecture gradient (``.grad`` before Adam) and the alphas
(a row per epoch), the weight gradient and the network after the step (a row each over the
compared epochs, which are long); the genotype (``Network.genotype``). The reference clips the
weight step's gradient together with the gradient of its alpha, which holds the softmax then
(``clip_grad_norm_(model.parameters(), 5)``, ``nasbench201/train_search.py:248``;
``softmax_arch_parameters``, ``model.py:221-223``): the gradient of the mixing weights; ours
does the same with ``search.clip_mixing_with_weights: true`` (as
``experiment=beta_darts_nb201``), and the NB201 rows run so, at the reference's clip of 5,
which that joint norm exceeds at most compared steps at these sizes (the script prints the
norms and the number of steps the clip acted at, and stops if none: the rows would not test the
joint norm). NB201's rows leave out the conv bias our ``nor_conv`` has and Beta-DARTS's lacks,
and the running statistics (before an affine-free BN in training mode that bias moves only the
running mean). The DARTS space (s5, C=2, 5 cells): its ``train()`` with SDARTS-RS, our noise
fed to its ``Random_alpha`` (as in ``sdarts.py``), at the epochs 0, 1, 25, 49, with the two
in-memory shims above (``epoch`` passed, ``mlc_loss`` of the concatenation); the same rows.
Then the settings of both scripts against ``experiment=beta_darts_nb201`` /
``beta_darts_darts_cifar10``, and lambda of every epoch from the reference's own expression
(``architect.py:81``).

    python experiments/fidelity/beta_darts.py --reference-root beta_darts=~/src/Beta-DARTS

Without a checkout, the same rows compare ours with the reference's values recorded in
``tests/fidelity/golden/beta_darts.pt`` (``--record`` with the checkout writes them); ours runs
the same either way (its noise, weights and optimiser state are what the reference is fed), and
the joint clip's norms are printed and checked only beside the checkout.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import logging
import sys
from types import SimpleNamespace
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch
from torch import nn

from experiments.fidelity.sdarts import _Batches, _Draws, record, sync
from nas.plugins import build_components, build_strategy
from nas.selection.base import derived_genotype
from nas.strategies.base import SearchContext
from nas.strategies.components.beta_darts import beta_decay
from nas.supernet import build_supernet

METHOD = "beta-DARTS"
REFERENCES = {"beta_darts": F.Reference("Sunshine-Ye/Beta-DARTS", "optimizers/darts/architect.py")}
CLASSES, HW, BATCH = 10, 8, 4
LR, MOMENTUM, WD, CLIP = 0.025, 0.9, 3e-4, 5.0
SPACES = {  # space -> (C, layers, cell types, epochs of the search, epochs compared)
    "nb201": (4, 1, ("cell",), 100, (0, 1, 33, 66, 99)),
    "s5": (2, 5, ("normal", "reduce"), 50, (0, 1, 25, 49)),
}


def ours(
    space: str, seed: int = 0, extra: tuple[str, ...] = (), clip: float = CLIP
) -> tuple[Any, nn.Module, Any]:
    """Our first-order DARTS with ``beta_darts`` (and SDARTS-RS on s5, as the experiment)."""
    C, layers, _, epochs, _ = SPACES[space]
    components = "[beta_darts]" if space == "nb201" else "[sdarts_rs,beta_darts]"
    cfg = F.compose(["search=darts", f"space={space}", f"components={components}", *extra])
    strategy = build_strategy(cfg)
    strategy.add_components(build_components(cfg))
    torch.manual_seed(seed)
    net = build_supernet(space, C=C, layers=layers, num_classes=CLASSES).double()
    F.randomise_affine(net, seed)
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD, foreach=True)
    strategy.attach(
        SearchContext(net, opt, grad_clip=clip, epochs=epochs, steps_per_epoch=1),
        generator=torch.Generator().manual_seed(seed),
    )
    with torch.no_grad():  # alphas away from uniform
        g = torch.Generator().manual_seed(seed + 1)
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=g, dtype=a.dtype))
    return strategy, net, opt


def _component(strategy: Any, name: str) -> Any:
    return next(c for c in strategy.component_list() if c.name == name)


# ------------------------------------------------------------------------------ known answers


def lse_written_out(alpha_list: list[torch.Tensor]) -> torch.Tensor:
    rows = torch.cat(alpha_list)
    return torch.log(torch.exp(rows).sum(-1)).mean()


def known_answers(table: F.Table) -> None:
    for space in ("nb201", "s5"):
        strategy, _, _ = ours(space)
        a = list(strategy.arch_params.values())
        table.add(METHOD, f"{space}: Beta-Decay = mean_e log sum_k exp(alpha)",
                  beta_decay(a), lse_written_out(a))  # fmt: skip
        strategy.begin_epoch(60)
        lam = 50 * 60 / 100
        edges = sum(t.shape[0] for t in a)
        table.add(METHOD, f"{space}: its gradient = lambda_60 softmax(alpha) / E",
                  strategy.regularizer_grads(),
                  [lam * torch.softmax(t, -1) / edges for t in a])  # fmt: skip

    strategy, _, _ = ours("nb201")
    beta = _component(strategy, "beta_darts")
    lams = []
    for e in range(100):
        beta.begin_epoch(e)
        lams.append(beta.weight)
    table.add(METHOD, "lambda of epochs 0-99 = 50 e / 100", lams,
              [0 + 50 * e / 100 for e in range(100)])  # fmt: skip
    strategy, _, _ = ours("s5", extra=("components.beta_darts.ramp_epochs=null",))
    beta = _component(strategy, "beta_darts")
    lams = []
    for e in range(50):
        beta.begin_epoch(e)
        lams.append(beta.weight)
    table.add(METHOD, "ramp_epochs null, 50 epochs: lambda = 50 e / 50", lams,
              [50 * e / 50 for e in range(50)])  # fmt: skip

    # a first-order architecture step at epoch 60: autograd of L_val + lambda L_beta on a copy
    strategy, net, _ = ours("nb201")
    tb, vb = F.batches(2, size=BATCH, hw=HW, seed=3)
    strategy.begin_epoch(60)
    copy_net = copy.deepcopy(net)
    leaves = [a.detach().clone().requires_grad_(True) for a in strategy.arch_params.values()]
    logits = copy_net(vb[0], {"cell": torch.softmax(leaves[0], -1)})
    loss = nn.functional.cross_entropy(logits, vb[1]) + 30.0 * lse_written_out(leaves)
    expected = torch.autograd.grad(loss, leaves)
    strategy.begin_step(0)
    strategy.arch_step(tb, vb)
    table.add(METHOD, "architecture gradient at epoch 60 = autograd of L_val + 30 L_beta",
              [a.grad for a in strategy.arch_params.values()], expected)  # fmt: skip


# ---------------------------------------------------------------------------- the reference


def _lambda_expression(path: str) -> Any:
    """The reference's ``weights = 0 + 50*epoch/100`` of ``_backward_step``, compiled."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "_backward_step":
            for stmt in node.body:
                if isinstance(stmt, ast.Assign):
                    return compile(ast.Expression(stmt.value), path, "eval")
    raise SystemExit(f"beta_darts: no _backward_step in {path}; expected Beta-DARTS's architect")


def _run(table: F.Table, space: str, refs: F.Refs, ref_label: str) -> dict[str, Any]:
    """One space: the reference's ``train()`` (when ``refs`` runs it here) beside ours at the
    epochs of ``SPACES``. Ours runs the same either way; the reference is fed our weights, our
    alphas, our optimisers' state and our draws at the start of every compared epoch."""
    live = refs.live("beta_darts")
    C, layers, cells, epochs, compared = SPACES[space]
    script_dir = "nasbench201" if space == "nb201" else "sota/cnn"
    info: dict[str, Any] = {}
    label = "NB201" if space == "nb201" else "DARTS space"
    with refs.imports("beta_darts", script_dir, [script_dir, "."]), F.float64():
        # NB201: the reference clips the weights' gradient jointly with that of its alpha,
        # which holds the softmax then: ours with clip_mixing_with_weights, as the experiment
        clip = CLIP
        criterion = nn.CrossEntropyLoss()
        joint = ("search.clip_mixing_with_weights=true",) if space == "nb201" else ()
        strategy, net, opt = ours(space, extra=joint, clip=clip)
        model: Any = None
        norms: list[float] = []
        noises: list[torch.Tensor] = []
        arch_grads: list[list[torch.Tensor]] = []
        if space == "s5":
            record(_component(strategy, "sdarts_rs"), "_noise", noises)
        if live:
            import attacker.perturb as perturb  # type: ignore[import-not-found]
            import optimizers.darts.utils as utils  # type: ignore[import-not-found]
            from optimizers.darts.architect import Architect  # type: ignore[import-not-found]

            root = refs.root("beta_darts")
            script = f"{root}/{script_dir}/train_search.py"
            defaults = F.script_defaults(script)
            info["defaults"] = defaults
            info["lambda"] = _lambda_expression(f"{root}/optimizers/darts/architect.py")
            args = SimpleNamespace(**{**defaults, "save": "fidelity", "epochs": epochs,
                                      "grad_clip": clip})  # fmt: skip
            if space == "nb201":
                from nasbench201.model import Network  # type: ignore[import-not-found]

                model = Network(C=C, N=layers, max_nodes=4, num_classes=CLASSES,
                                criterion=criterion).double()  # fmt: skip
                weights = model.get_weights()
            else:
                from sota.cnn.model_search import Network  # type: ignore[import-not-found]
                from sota.cnn.spaces import spaces_dict  # type: ignore[import-not-found]

                model = Network(C, CLASSES, layers, criterion, spaces_dict["s5"]).double()
                weights = list(model.parameters())
            F.copy_weights(net, model)
            with torch.no_grad():
                for p, ct in zip(model.arch_parameters(), cells):
                    p.copy_(strategy.arch_params[ct])
            optimizer = torch.optim.SGD(weights, LR, momentum=args.momentum,
                                        weight_decay=args.weight_decay)  # fmt: skip
            architect = Architect(model, args)

            def clip_grad_norm_(params: Any, max_norm: float) -> torch.Tensor:
                total = nn.utils.clip_grad_norm_(params, max_norm)
                norms.append(float(total))  # before the clip
                return total

            nn_ = SimpleNamespace(utils=SimpleNamespace(clip_grad_norm_=clip_grad_norm_))
            train_ = F.load_function(script, "train", {"utils": utils, "args": args, "nn": nn_,
                                                       "torch": torch,
                                                       "logging": logging})  # fmt: skip

            def train(*a: Any) -> None:
                with contextlib.redirect_stdout(io.StringIO()):  # its prints of the alphas
                    train_(*a)

            draws = _Draws()
            perturb.torch = draws  # in memory: dropped on leaving reference_imports
            perturb_alpha = None
            current = {"epoch": 0}
            if space == "s5":
                perturb_alpha = perturb.Random_alpha
                # the released script as it is: architect.step without its epoch
                released = _error_of(lambda: train(F.batches(1, size=BATCH, hw=HW, seed=5),
                                                   _Batches(F.batches(1, size=BATCH, hw=HW,
                                                                      seed=6)),
                                                   copy.deepcopy(model), architect, criterion,
                                                   optimizer, LR, None, 0.03))  # fmt: skip
                listed = _error_of(lambda: architect.mlc_loss(model.arch_parameters()))
                # the shims: epoch passed (set per epoch below), mlc_loss of the concatenation
                step, mlc = architect.step, architect.mlc_loss

                def step_with_epoch(*a: Any, unrolled: bool = False) -> None:
                    step(*a, current["epoch"], unrolled=unrolled)

                architect.step = step_with_epoch
                architect.mlc_loss = lambda p: mlc(torch.cat(list(p)) if isinstance(p, list)
                                                   else p)  # fmt: skip
            inner = architect.step

            def architect_step(*a: Any, **kw: Any) -> None:
                inner(*a, **kw)
                arch_grads.append([p.grad.detach().clone() for p in model.arch_parameters()])

            architect.step = architect_step

        x = F.batches(1, size=BATCH, hw=HW, seed=9)[0][0]
        table.add(METHOD, f"{label}: forward (softmax mixing)",
                  net(x, strategy.arch_weights(sample=False)), lambda: model(x),
                  ref_label)  # fmt: skip
        if space == "s5":
            table.add_equal(METHOD, "DARTS space as released: train() -> architect.step "
                            "without epoch raises", "TypeError", lambda: released,
                            ref_label)  # fmt: skip
            table.add_equal(METHOD, "DARTS space as released: mlc_loss(list of alphas) raises",
                            "TypeError", lambda: listed, ref_label)  # fmt: skip

        names = ("weight", "bias") if space == "nb201" else ("weight", "bias", "running_mean",
                                                               "running_var")  # fmt: skip
        selected = _selected(net, ("weight", "bias"), space)
        selected_state = _selected(net, names, space)
        if live:
            _check_selection(net, model, selected)
            _check_selection(net, model, selected_state)
        # the weight rows are long (one sketch each): one row over the compared epochs
        ours_wgrads: list[list[torch.Tensor]] = []
        ours_state: list[list[torch.Tensor]] = []
        ref_wgrads: list[list[torch.Tensor]] = []
        ref_state: list[list[torch.Tensor]] = []
        for epoch in compared:
            tbs = F.batches(1, size=BATCH, hw=HW, seed=1000 + epoch)
            vbs = F.batches(1, size=BATCH, hw=HW, seed=2000 + epoch)
            if live:  # the reference starts the epoch from our state
                sync(strategy, net, opt, model, optimizer, architect, cells)
            strategy.begin_epoch(epoch)
            net.train()
            strategy.begin_step(epoch)
            strategy.arch_step(tbs[0], vbs[0])
            ours_grads = [strategy.arch_params[ct].grad.detach().clone() for ct in cells]
            strategy.weight_step(tbs[0])
            if live:
                epsilon = 0.03 + (args.epsilon_alpha - 0.03) * epoch / args.epochs
                draws.queue = list(noises)
                if space == "s5":
                    current["epoch"] = epoch
                    train(tbs, _Batches(vbs), model, architect, criterion, optimizer, LR,
                          perturb_alpha, epsilon)  # fmt: skip
                else:
                    train(tbs, _Batches(vbs), model, architect, criterion, optimizer, LR,
                          perturb_alpha, epsilon, epoch)  # fmt: skip
            noises.clear()
            at = f"{label}, epoch {epoch}"
            table.add(METHOD, f"{at}: architecture gradient", ours_grads,
                      lambda: arch_grads[-1], ref_label)  # fmt: skip
            table.add(METHOD, f"{at}: alphas", [strategy.arch_params[ct].detach() for ct in cells],
                      lambda: [p.detach() for p in model.arch_parameters()],
                      ref_label)  # fmt: skip
            ours_wgrads.append(_common(net, selected, grad=True))
            ours_state.append(_common(net, selected_state))
            if live:
                ref_wgrads.append(_common(model, selected, grad=True))
                ref_state.append(_common(model, selected_state))
        epochs_s = ", ".join(map(str, compared))
        table.add(METHOD, f"{label}: weight gradient (clipped), epochs {epochs_s}", ours_wgrads,
                  lambda: ref_wgrads, ref_label)  # fmt: skip
        state = "network (weights, running statistics)" if space == "s5" else "network weights"
        table.add(METHOD, f"{label}: {state} after the step, epochs {epochs_s}", ours_state,
                  lambda: ref_state, ref_label)  # fmt: skip
        if live:
            what = "weights and the softmax in alpha" if space == "nb201" else "weights"
            print(f"{METHOD} {label}: the reference's weight-step gradient norm before the clip "
                  f"({what}) {min(norms):.3g} to {max(norms):.3g} (clip {clip:g})")  # fmt: skip
            active = sum(n > clip for n in norms)
            print(f"{METHOD} {label}: the clip acted at {active} of {len(norms)} compared steps")
            if space == "nb201" and not active:
                raise SystemExit("beta_darts: NB201's joint clip never acted; the rows would not "
                                 "test it: choose other batches")  # fmt: skip
        ours_g = derived_genotype(strategy)
        if space == "nb201":
            table.add_equal(METHOD, f"{label}: genotype (Network.genotype)",
                            [list(n) for n in ours_g.nodes],
                            lambda: [list(n) for n in model.genotype().nodes],
                            ref_label)  # fmt: skip
        else:
            table.add_equal(METHOD, f"{label}: genotype (Network.genotype)",
                            [list(ours_g.normal), list(ours_g.reduce)],
                            lambda: [list(model.genotype().normal), list(model.genotype().reduce)],
                            ref_label)  # fmt: skip
    return info


def _selected(net: nn.Module, names: tuple[str, ...], space: str) -> list[tuple[int, str]]:
    """(module index, tensor name) of the tensors both sides have, read from ours alone: our
    NB201 ``nor_conv`` convolutions carry a bias (NAS-Bench-201's ``bias=not affine``) that
    Beta-DARTS's ReLUConvBN lacks; before an affine-free BN in training mode it changes
    nothing but that BN's running mean, which NB201's rows therefore leave out."""
    out = []
    for i, m in enumerate(F.modules_in_order(net)):
        for name in names:
            if not isinstance(getattr(m, name, None), torch.Tensor):
                continue
            if space == "nb201" and name == "bias" and isinstance(m, nn.Conv2d):
                continue
            out.append((i, name))
    return out


def _common(
    module: nn.Module, selected: list[tuple[int, str]], grad: bool = False
) -> list[torch.Tensor]:
    """The ``selected`` tensors of ``module`` (or their ``.grad``, 0 where none), copied."""
    mods = F.modules_in_order(module)
    out = []
    for i, name in selected:
        x = getattr(mods[i], name)
        if grad:
            x = torch.zeros_like(x) if x.grad is None else x.grad
        out.append(x.detach().clone())
    return out


def _check_selection(net: nn.Module, model: nn.Module, selected: list[tuple[int, str]]) -> None:
    """Live: ``selected`` is exactly the tensors both networks have, in module order."""
    both = [
        (i, name)
        for i, (m, r) in enumerate(zip(F.modules_in_order(net), F.modules_in_order(model)))
        for name in ("weight", "bias", "running_mean", "running_var")
        if isinstance(getattr(m, name, None), torch.Tensor)
        and isinstance(getattr(r, name, None), torch.Tensor)
    ]
    names = {name for _, name in selected}
    if [s for s in both if s[1] in names] != selected:
        raise SystemExit("beta_darts: the tensors both networks have are not those ours selects "
                         "(_selected); expected only NB201's conv biases left out")  # fmt: skip


def _error_of(fn: Any) -> str:
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
    return "no error"


def compare(table: F.Table, refs: F.Refs) -> None:
    ref_label = refs.label("beta_darts")  # without a checkout, the values of its recording
    infos = {space: _run(table, space, refs, ref_label) for space in SPACES}
    for name, space in (("beta_darts_nb201", "nb201"), ("beta_darts_darts_cifar10", "s5")):
        cfg = F.compose([f"experiment={name}"])
        strategy = build_strategy(cfg)
        strategy.add_components(build_components(cfg))
        beta = _component(strategy, "beta_darts")
        beta._search_epochs = int(cfg.epochs)
        ours_l = []
        for e in range(int(cfg.epochs)):
            beta.begin_epoch(e)
            ours_l.append(beta.weight)

        def ref_lambdas(n: int = int(cfg.epochs)) -> list[float]:
            lam = infos["nb201"]["lambda"]
            return [eval(lam, {"epoch": e}) for e in range(n)]  # noqa: S307

        table.add(METHOD, f"{name}: lambda of epochs 0-{int(cfg.epochs) - 1} (architect.py:81)",
                  ours_l, ref_lambdas, ref_label)  # fmt: skip
        names = [c for c in cfg.components]
        ours_settings = {
            "epochs": cfg.epochs,
            "batch_size": cfg.batch_size,
            "learning_rate": cfg.optimizer.lr,
            "learning_rate_min": cfg.optimizer.lr_min,
            "momentum": cfg.optimizer.momentum,
            "weight_decay": cfg.optimizer.weight_decay,
            "grad_clip": cfg.optimizer.grad_clip,
            "init_channels": cfg.space.C,
            "arch_learning_rate": cfg.search.arch_lr,
            "arch_weight_decay": cfg.search.arch_weight_decay,
            "unrolled": cfg.search.order == 2,
            "perturb_alpha": "random" if "sdarts_rs" in names else "none",
        }
        # one clip norm with the mixing weights' gradient: NB201's alpha is an nn.Parameter
        # holding the softmax at the clip of model.parameters() (model.py:158, 221-223;
        # train_search.py:248); the DARTS space's alphas are Variables (model_search.py:147)
        key = "clip_mixing_with_weights (clip_grad_norm_(model.parameters()))"
        ours_settings[key] = cfg.search.clip_mixing_with_weights
        cells_key = "N (cells per stage: Network(N=5), train_search.py:115)"
        if space == "s5":
            ours_settings["layers"] = cfg.space.layers
            ours_settings["search_space"] = cfg.space.name
            ours_settings["epsilon_alpha"] = cfg.components.sdarts_rs.epsilon_max
        else:
            ours_settings[cells_key] = cfg.space.layers

        def theirs(space: str = space, key: str = key) -> dict[str, Any]:
            out = {**infos[space]["defaults"], key: space == "nb201"}
            if space == "nb201":
                out[cells_key] = 5
            return {f"{k} [{space}]": v for k, v in out.items()}

        # the script's two settings tables name their rows apart (one quantity, one row)
        F.add_settings(table, f"{METHOD} ({name})",
                       {f"{k} [{space}]": v for k, v in ours_settings.items()}, theirs,
                       ref_label)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
