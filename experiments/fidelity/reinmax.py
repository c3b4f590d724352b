"""Fidelity of ReinMax as an architecture sampler against the ``reinmax`` package (0.1.0).

Liu, Zhao, Chen, Gao, Han, "Bridging Discrete and Backpropagation: Straight-Through and
Beyond", NeurIPS 2023 (Algorithm 2): forward ``pi0 = softmax(theta)``, ``D ~ Cat(pi0)``
one-hot; backward, with ``g = dL/dD``, ``g_p = dL/dpi0``, ``J(pi) v = pi * v - pi (pi . v)``
and ``pi1 = (softmax(theta / tau) + D) / 2``: ``grad theta = J(pi1)(2 g) + J(pi0)(g_p - g / 2)``
minus its mean over the categories. The NAS use is GDAS's loop (weight step, then
architecture step, each on a fresh sample; tau linear per epoch from 10 to 0.1; Adam(3e-4,
(0.5, 0.999), wd 1e-3)) with this sampler, the unselected ops as zero-valued scalars.

Known answers (no checkout): the sample is the one-hot of the multinomial draw and ``pi0`` the
softmax; the gradient equals the formula above written out, on a few categories and taus (the
upstream gradients at D and at pi0 both given); tau of every epoch equals GDAS's linear
schedule.

With ``--reference-root reinmax=PATH`` (the unpacked wheel or sdist of ``reinmax==0.1.0``
from PyPI, the folder holding ``reinmax/reinmax.py``; the code of github.com/LiyuanLucasLiu/
ReinMax): the package's ``ReinMax_Auto`` / ``reinmax()`` beside ours with THE SAME draws: ours
draws with ``torch.multinomial(..., generator=)`` from its step generator (``draw_seed()``),
recorded by a wrapper of ``torch.multinomial``; inside the package's calls ``torch.multinomial``
is patched in memory to return the recorded indices in order. Compared: sample, probabilities
and gradient of the estimator; on the NB201 supernet (float64, ``experiment=reinmax_nb201``)
the architecture gradient (``.grad`` before Adam) and three whole steps of our strategy against
GDAS's loop (``GDAS.py:40-76``) written out on a copy of the network with the package's
``reinmax()`` as the sampler; the settings (package default ``hard=True``; tau passed as given).

    python experiments/fidelity/reinmax.py --reference-root reinmax=~/src/reinmax-0.1.0

Without a checkout, the same rows compare ours with the package's values recorded in
``tests/fidelity/golden/reinmax.pt`` (``--record`` with the unpacked package writes them); ours
runs the same either way.
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Iterator
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch
from torch import nn

from nas.plugins import build_strategy
from nas.strategies.base import SearchContext
from nas.strategies.reinmax import reinmax_sample
from nas.supernet import build_supernet

METHOD = "ReinMax"
REFERENCES = {"reinmax": F.Reference("LiyuanLucasLiu/ReinMax", "reinmax/reinmax.py")}
C, CLASSES, EPOCHS = 4, 10, 250
LR, MOMENTUM, WD, CLIP = 0.025, 0.9, 5e-4, 5.0


def ours(seed: int = 0, epoch: int = 150) -> tuple[Any, nn.Module, torch.optim.SGD]:
    cfg = F.compose(["experiment=reinmax_nb201"])
    strategy = build_strategy(cfg)
    torch.manual_seed(seed)
    net = build_supernet("nb201", C=C, layers=1, num_classes=CLASSES).double()
    F.randomise_affine(net, seed)
    with torch.no_grad():  # larger logits: the clip at 5 binds
        net.classifier.weight.mul_(30.0)
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    strategy.attach(SearchContext(net, opt, grad_clip=CLIP, epochs=EPOCHS),
                    generator=torch.Generator().manual_seed(seed))  # fmt: skip
    strategy.epoch = epoch
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=g, dtype=a.dtype))
    return strategy, net, opt


@contextlib.contextmanager
def recording(draws: list[torch.Tensor]) -> Iterator[None]:
    """``torch.multinomial`` as before, each result appended to ``draws``."""
    original = torch.multinomial

    def multinomial(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = original(*args, **kwargs)
        draws.append(out.clone())
        return out

    torch.multinomial = multinomial  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.multinomial = original  # type: ignore[assignment]


@contextlib.contextmanager
def replaying(draws: list[torch.Tensor]) -> Iterator[None]:
    """``torch.multinomial`` returns the recorded draws in turn."""
    original = torch.multinomial

    def multinomial(probs: torch.Tensor, num_samples: int, *args: Any, **kwargs: Any):
        out = draws.pop(0)
        if out.shape != (probs.shape[0], num_samples):
            raise SystemExit("reinmax fidelity: a draw of another shape was recorded")
        return out

    torch.multinomial = multinomial  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.multinomial = original  # type: ignore[assignment]


def _jvp(pi: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return pi * v - pi * (pi * v).sum(-1, keepdim=True)


def known_answers(table: F.Table) -> None:
    g = torch.Generator().manual_seed(0)
    for k, tau in ((2, 1.0), (5, 0.5), (8, 4.0)):
        theta = torch.randn(6, k, generator=g, dtype=torch.float64).requires_grad_(True)
        up_d = torch.randn(6, k, generator=g, dtype=torch.float64)
        up_p = torch.randn(6, k, generator=g, dtype=torch.float64)
        draws: list[torch.Tensor] = []
        with recording(draws):
            d, pi0 = reinmax_sample(theta, tau, torch.Generator().manual_seed(k))
        (grad,) = torch.autograd.grad((d * up_d).sum() + (pi0 * up_p).sum(), theta)
        t = theta.detach()
        p0 = torch.softmax(t, -1)
        onehot = nn.functional.one_hot(draws[0].squeeze(-1), k).double()
        table.add(METHOD, f"K={k}: D = onehot(multinomial draw), pi0 = softmax", [d, pi0],
                  [onehot, p0])  # fmt: skip
        p1 = 0.5 * (torch.softmax(t / tau, -1) + onehot)
        expected = _jvp(p1, 2 * up_d) + _jvp(p0, up_p - 0.5 * up_d)
        expected = expected - expected.mean(-1, keepdim=True)
        table.add(METHOD, f"K={k}, tau={tau:g}: gradient = J(pi1) 2g + J(pi0)(g_p - g/2)",
                  grad, expected)  # fmt: skip
    strategy, _, _ = ours()
    taus = []
    for e in range(EPOCHS):
        strategy.epoch = e
        taus.append(strategy.tau)
    table.add(METHOD, "tau of epochs 0-249 = 10 - 9.9 e / 249 (GDAS's)", taus,
              [10 - 9.9 * e / (EPOCHS - 1) for e in range(EPOCHS)])  # fmt: skip


# ---------------------------------------------------------------------------- the reference


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("reinmax")  # else the reference's values come from its recording
    ref_label = refs.label("reinmax")
    with refs.imports("reinmax", ".", ["."]), F.float64():
        if live:
            from reinmax.reinmax import reinmax  # type: ignore[import-not-found]

        g = torch.Generator().manual_seed(1)
        for k, tau in ((2, 1.0), (5, 0.5), (8, 4.0)):
            theta = torch.randn(6, k, generator=g, dtype=torch.float64)
            up_d = torch.randn(6, k, generator=g, dtype=torch.float64)
            up_p = torch.randn(6, k, generator=g, dtype=torch.float64)
            outs = []
            draws: list[torch.Tensor] = []
            for side in ("ours", "ref") if live else ("ours",):
                leaf = theta.clone().requires_grad_(True)
                if side == "ours":
                    with recording(draws):
                        d, p = reinmax_sample(leaf, tau, torch.Generator().manual_seed(k))
                else:
                    with replaying(draws):
                        d, p = reinmax(leaf, tau)
                (grad,) = torch.autograd.grad((d * up_d).sum() + (p * up_p).sum(), leaf)
                outs.append((d.detach(), p.detach(), grad))
            table.add(METHOD, f"K={k}: sample and pi0 (ReinMax_Auto.forward)",
                      outs[0][:2], lambda: outs[1][:2], ref_label)  # fmt: skip
            table.add(METHOD, f"K={k}, tau={tau:g}: gradient (ReinMax_Auto.backward)",
                      outs[0][2], lambda: outs[1][2], ref_label)  # fmt: skip

        # the NB201 search: our strategy vs GDAS's loop with the package's sampler, on a copy
        # of our network made before our steps, from our alphas
        strategy, net, _ = ours()
        model = copy.deepcopy(net) if live else None
        alpha = strategy.arch_params["cell"].detach().clone().requires_grad_(True)
        train, val = F.batches(3, seed=1), F.batches(3, seed=2)
        ours_grads, ref_grads = [], []
        draws = []
        with recording(draws):
            for i, (tb, vb) in enumerate(zip(train, val)):
                strategy.begin_step(i)
                strategy.step(tb, vb)
                ours_grads.append(strategy.arch_params["cell"].grad.detach().clone())
        if live:
            w_opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
            a_opt = torch.optim.Adam([alpha], lr=3e-4, betas=(0.5, 0.999), weight_decay=1e-3)
            crit = nn.CrossEntropyLoss()
            tau = 10.0 - (10.0 - 0.1) * 150 / (EPOCHS - 1)  # GDAS.py:237-239 at ours()'s epoch
            with replaying(draws):
                for tb, vb in zip(train, val):
                    w_opt.zero_grad()
                    d, _ = reinmax(alpha.detach(), tau)  # the weight step: no architecture grad
                    crit(model(tb[0], {"cell": d}), tb[1]).backward()
                    nn.utils.clip_grad_norm_(model.parameters(), CLIP)
                    w_opt.step()
                    a_opt.zero_grad()
                    d, _ = reinmax(alpha, tau)
                    crit(model(vb[0], {"cell": d}), vb[1]).backward()
                    ref_grads.append(alpha.grad.detach().clone())
                    a_opt.step()
        table.add(METHOD, "NB201: architecture gradient, step 1", ours_grads[0],
                  lambda: ref_grads[0], ref_label)  # fmt: skip
        table.add(METHOD, "NB201: architecture gradients, steps 2-3", ours_grads[1:],
                  lambda: ref_grads[1:], ref_label)  # fmt: skip
        table.add(METHOD, "NB201: alphas after 3 steps", strategy.arch_params["cell"],
                  lambda: alpha, ref_label)  # fmt: skip
        table.add(METHOD, "NB201: weights after 3 steps", list(net.parameters()),
                  lambda: list(model.parameters()), ref_label)  # fmt: skip

    cfg = F.compose(["experiment=reinmax_nb201"])
    scalars = cfg.search.unselected_scalars is not False
    F.add_settings(
        table,
        METHOD,
        {
            "hard (reinmax(hard=True), the package's default)": True,
            "unselected ops as zero-valued scalars (GDAS's NB201 cell)": scalars,
        },
        lambda: {
            "hard (reinmax(hard=True), the package's default)": _default_hard(refs.root("reinmax")),
            "unselected ops as zero-valued scalars (GDAS's NB201 cell)": True,
        },
        ref_label,
    )


def _default_hard(root: str) -> Any:
    """The default of ``reinmax()``'s ``hard`` argument, read from the package's source."""
    import ast

    with open(os.path.join(root, REFERENCES["reinmax"].marker), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "reinmax":
            names = [a.arg for a in node.args.args]
            defaults = dict(zip(names[-len(node.args.defaults) :], node.args.defaults))
            return ast.literal_eval(defaults["hard"])
    return None


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
