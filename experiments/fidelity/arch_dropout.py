"""Fidelity of architecture dropout against confopt (automl/ConfigurableOptimizer).

confopt, the toolkit's closest peer, drops mixing weights in every forward of its supernet
(``src/confopt/oneshot/dropout.py``: ``Dropout.apply_mask``, called by
``searchspace/common/mixop.py``: ``OperationBlock.forward``): ``w * [u >= p] / (1 - p)`` with
``u = torch.rand_like(w)``, and anneals ``p`` per epoch (its default profile: linear to 0 over
the search's epochs, ``profile/base.py``: ``_initialize_dropout_config``). Ours is the
component ``components=[arch_dropout]`` (``nas/strategies/components/arch_dropout.py``).

Known answers (no checkout): the mask written out on the same uniform draws, its gradient, and
both annealing schedules' formulas.

With ``--reference-root confopt=PATH`` (a checkout of github.com/automl/ConfigurableOptimizer;
``dropout.py`` and the ``OneShotComponent`` it extends are loaded alone, without the package's
other imports): its ``apply_mask`` on our NB201 DARTS mixing weights with the global generator
seeded as our component's draw, beside ours: the masked weights and their gradient; its
``new_epoch`` loop's linear probabilities over 50 epochs beside ours. Not compared: its
cosine, which reads the current probability where the epoch belongs
(``cos(self.p * pi / max_iter)``); ours is the cosine of the epoch.

    python experiments/fidelity/arch_dropout.py --reference-root confopt=~/src/ConfigurableOptimizer

Without a checkout, the same rows compare ours with confopt's values recorded in
``tests/fidelity/golden/arch_dropout.pt`` (``--record`` with the checkout writes them).
"""

from __future__ import annotations

import math
import sys
import types
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch

from nas.plugins import build_components, build_strategy
from nas.strategies.base import SearchContext
from nas.strategies.components.arch_dropout import dropout_p
from nas.supernet import build_supernet

METHOD = "architecture dropout"
REFERENCES = {
    "confopt": F.Reference("automl/ConfigurableOptimizer", "src/confopt/oneshot/dropout.py")
}
P, EPOCHS, SEED = 0.3, 50, 11


def ours(p: float = P, anneal: str = "linear") -> Any:
    """DARTS on NB201 with the component (its settings as given)."""
    cfg = F.compose([
        "space=nb201", "components=[arch_dropout]", f"components.arch_dropout.p={p}",
        f"components.arch_dropout.anneal={anneal}",
    ])  # fmt: skip
    strategy = build_strategy(cfg)
    strategy.add_components(build_components(cfg))
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10).double()
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.025)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=EPOCHS),
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    with torch.no_grad():
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=torch.Generator().manual_seed(1), dtype=a.dtype))
    strategy.begin_epoch(0)
    return strategy


def _masked(strategy: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Our masked weights of one sampled forward, their gradient for a fixed upstream, and the
    seed the mask was drawn with."""
    strategy.begin_step(SEED)
    seed = int(strategy.draw_seed())  # DARTS draws nothing: the mask takes the first seed
    strategy.begin_step(SEED)
    alpha = strategy.arch_params["cell"]
    w = strategy.arch_weights(sample=True)["cell"]
    up = torch.linspace(-1, 1, w.numel(), dtype=w.dtype).reshape(w.shape)
    (grad,) = torch.autograd.grad((w * up).sum(), alpha)
    return w.detach(), grad, seed


def known_answers(table: F.Table) -> None:
    strategy = ours()
    w, grad, seed = _masked(strategy)
    soft = torch.softmax(strategy.arch_params["cell"].detach(), -1)
    u = torch.rand(soft.shape, generator=torch.Generator().manual_seed(seed), dtype=soft.dtype)
    mask = (u >= P).to(soft.dtype) / (1 - P)
    table.add(METHOD, "NB201: w' = softmax(alpha) [u >= p] / (1 - p)", w, soft * mask)
    up = torch.linspace(-1, 1, soft.numel(), dtype=soft.dtype).reshape(soft.shape)
    g = up * mask
    expected = soft * (g - (g * soft).sum(-1, keepdim=True))
    table.add(METHOD, "NB201: its gradient in alpha (dropped entries pass none)", grad, expected)
    linear = [dropout_p(e, EPOCHS, P, 0.0, "linear") for e in range(EPOCHS)]
    cosine = [dropout_p(e, EPOCHS, P, 0.0, "cosine") for e in range(EPOCHS)]
    table.add(METHOD, "p of 50 epochs, linear: p (1 - e / E)", linear,
              [P * (1 - e / EPOCHS) for e in range(EPOCHS)])  # fmt: skip
    table.add(METHOD, "p of 50 epochs, cosine: p (1 + cos(pi e / E)) / 2", cosine,
              [P * (1 + math.cos(math.pi * e / EPOCHS)) / 2 for e in range(EPOCHS)])  # fmt: skip


def _reference_dropout(root: str) -> Any:
    """confopt's ``Dropout`` class, its file and its base's loaded alone."""
    stubs = {name: types.ModuleType(name) for name in ("confopt", "confopt.oneshot")}
    files = [("confopt.oneshot.base", "src/confopt/oneshot/base.py"),
             ("confopt_dropout", "src/confopt/oneshot/dropout.py")]  # fmt: skip
    with F.files_alone(root, files, stubs) as loaded:
        return loaded["confopt_dropout"].Dropout


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("confopt")
    ref_label = refs.label("confopt")
    Dropout = _reference_dropout(refs.root("confopt")) if live else None
    strategy = ours()
    w, grad, seed = _masked(strategy)
    ref_w = ref_grad = None
    if Dropout is not None:
        alpha = strategy.arch_params["cell"].detach().clone().requires_grad_(True)
        dropout = Dropout(p=P, p_min=0.0, anneal_frequency="epoch", anneal_type="linear",
                          max_iter=EPOCHS)  # fmt: skip
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            masked = dropout.apply_mask(torch.softmax(alpha, -1))
        up = torch.linspace(-1, 1, masked.numel(), dtype=masked.dtype).reshape(masked.shape)
        (ref_grad,) = torch.autograd.grad((masked * up).sum(), alpha)
        ref_w = masked.detach()
    table.add(METHOD, "NB201: masked mixing weights (Dropout.apply_mask)", w, lambda: ref_w,
              ref_label)  # fmt: skip
    table.add(METHOD, "NB201: their gradient in alpha", grad, lambda: ref_grad, ref_label)

    mine = []
    for e in range(EPOCHS):
        strategy.begin_epoch(e)
        mine.append(strategy.component_list()[0].p)
    ref_ps: list[float] = []
    if Dropout is not None:
        dropout = Dropout(p=P, p_min=0.0, anneal_frequency="epoch", anneal_type="linear",
                          max_iter=EPOCHS)  # fmt: skip
        for _ in range(EPOCHS):
            ref_ps.append(dropout.p)
            dropout.new_epoch()
    table.add(METHOD, "p of every epoch of 50, linear to 0 (new_epoch)", mine, lambda: ref_ps,
              ref_label)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
