"""Fidelity of operation-level early stopping (OLES) against confopt.

OLES (Jiang et al., NeurIPS 2023) scores every parametric candidate op by the cosine of its
training and validation gradients and freezes its weights once the score's window mean falls
below a threshold. confopt (automl/ConfigurableOptimizer) has it as
``update_gradient_matching_scores``, ``preserve_gradients_in_module`` and ``freeze``
(``src/confopt/utils/__init__.py``), called in this order by ``ConfigurableTrainer._train_epoch``
(``src/confopt/train/configurable_trainer.py``: the architecture step, the scores, the weight
step with its clip to 5, then the kept gradients), with its profile's ``frequency: 20``,
``threshold: 0.4`` (``src/confopt/profile/base.py``: ``_set_oles_configs``). Ours is
``components=[oles]`` (``nas/strategies/components/oles.py``).

Known answers (no checkout): our op score against the cosine written out (per slice along the
first dimension, then the mean; the mean over an op's tensors), for ``val_grad`` accumulated and
separate, and the window rule ``sum of frequency + 1 scores / frequency < threshold``.

With ``--reference-root confopt=PATH`` (a checkout of github.com/automl/ConfigurableOptimizer;
``confopt.utils`` imported from its ``src``): a copy of our DARTS-space supernet (C=4, 3 cells,
float64, the same weights) is trained by the trainer's step order written out around confopt's
own functions, applied to each of our parametric candidate ops as ``model.apply`` reaches them
(the op's class as its ``OLES_OPS``; the stride-2 ``skip_connect`` of a reduction cell among
them, which confopt's DARTS list leaves out and ours scores), beside our DARTS strategy with
the component, on the same batches, for 12 steps, at two settings: which ops were scored at
each step, each op's score (confopt's ``running_sim.val``), the window counts, the frozen ops
after each step, and the weights after the last step. After ``preserve_gradients_in_module``
each kept gradient gets its own storage: on a GPU ``.detach().cpu()`` copies it, on a CPU it
returns the ``.grad`` tensor itself, which the next backward adds to in place (every cosine of
a non-zero gradient would then be 1). The supernet's forward is ours on both sides (its
fidelity to the references' cells is ``darts.py``'s); NB201's convolutions are not used because
their bias before an affine-free batch norm has a gradient of rounding noise, whose cosine is
noise too.

    python experiments/fidelity/oles.py --reference-root confopt=~/src/ConfigurableOptimizer

Without a checkout, the rows compare ours with confopt's values recorded in
``tests/fidelity/golden/oles.pt`` (``--record`` with the checkout writes them).
"""

from __future__ import annotations

import ast
import copy
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

from nas.plugins import build_plugin
from nas.strategies.base import SearchContext
from nas.strategies.components.oles import OLES, op_score
from nas.supernet import build_supernet

METHOD = "OLES"
REFERENCES = {
    "confopt": F.Reference("automl/ConfigurableOptimizer", "src/confopt/utils/__init__.py")
}
STEPS = 12
# (frequency, threshold): windows of 3 and of 4 scores, thresholds that freeze some ops and
# leave others (the window means of the tiny supernet lie between 0.28 and 1.03)
SETTINGS = [(2, 0.55), (3, 0.45)]
LR, MOMENTUM, WD, CLIP = 0.025, 0.9, 3e-4, 5.0


def _supernet() -> Any:
    torch.manual_seed(0)
    return build_supernet("darts", C=4, layers=3, num_classes=10).double()


def _ours(net: nn.Module, frequency: int, threshold: float, data: list) -> dict[str, Any]:
    """Our DARTS with the component on ``net``: per step the scores, counts and frozen ops."""
    oles = OLES(frequency=frequency, threshold=threshold)
    s = build_plugin("search", "darts")
    s.add_components([oles])
    s.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    s.attach(SearchContext(net, opt, grad_clip=CLIP), generator=torch.Generator().manual_seed(0))
    alpha0 = {ct: a.detach().clone() for ct, a in s.arch_params.items()}
    adam = (s.arch_lr, s.arch_betas, s.arch_weight_decay)
    keys = sorted(OLES.ops_of(net), key=_order)
    scores: dict[str, float] = {}
    real = oles.update
    oles.update = lambda key, score: scores.__setitem__(key, float(score)) or real(key, score)  # type: ignore[method-assign]
    out: dict[str, Any] = {"scores": [], "scored": [], "counts": [], "frozen": [], "alpha": None}
    for step in range(STEPS):
        scores.clear()
        train, val = data[2 * step], data[2 * step + 1]
        s.step(train, val)
        out["scores"].append(torch.tensor([scores.get(k, 0.0) for k in keys]))
        out["scored"].append([k in scores for k in keys])
        out["counts"].append([oles._count.get(k, 0) for k in keys])
        out["frozen"].append(sorted(oles.frozen, key=_order))
    out["weights"] = [p.detach().clone() for p in net.parameters()]
    out["alpha0"], out["adam"] = alpha0, adam
    return out


def _order(key: str) -> tuple[int, int]:
    i, k = key.split(".")
    return int(i), int(k)


def _reference(
    net: nn.Module, ours: dict[str, Any], frequency: int, threshold: float, data: list, U: Any
) -> dict[str, Any]:
    """confopt's ``_train_epoch`` step order around its own functions, on ``net`` (a copy of our
    supernet at the same weights), its architecture parameters and their Adam as ours start."""
    ops = {f"{i}.{k}": op for i, m in enumerate(net.mixed_ops()) for k, op in enumerate(m.ops)
           if list(op.parameters())}  # fmt: skip
    keys = sorted(ops, key=_order)
    alphas = {ct: nn.Parameter(a.clone()) for ct, a in ours["alpha0"].items()}
    lr, betas, wd = ours["adam"]
    arch_optimizer = torch.optim.Adam(list(alphas.values()), lr=lr, betas=betas, weight_decay=wd)
    w_optimizer = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    criterion = nn.CrossEntropyLoss()

    def logits(x: torch.Tensor) -> torch.Tensor:
        return net(x, {ct: torch.softmax(a, dim=-1) for ct, a in alphas.items()})

    out: dict[str, Any] = {"scores": [], "scored": [], "counts": [], "frozen": []}
    for step in range(STEPS):
        (base_inputs, base_targets), (arch_inputs, arch_targets) = (
            data[2 * step],
            data[2 * step + 1],
        )
        # configurable_trainer.py, _train_epoch: the architecture step
        arch_optimizer.zero_grad()
        arch_loss = criterion(logits(arch_inputs), arch_targets)
        arch_loss.backward()
        arch_optimizer.step()
        # calculate gm_score (update_gradient_matching_scores through model.apply)
        counts_before = {k: op.running_sim.count if hasattr(op, "running_sim") else 0
                         for k, op in ops.items()}  # fmt: skip
        for op in ops.values():
            U.update_gradient_matching_scores(op, oles_ops=[type(op)], early_stop=True,
                                              early_stop_frequency=frequency,
                                              early_stop_threshold=threshold)  # fmt: skip
        scored = {k: hasattr(op, "running_sim") and op.running_sim.count > counts_before[k]
                  for k, op in ops.items()}  # fmt: skip
        # update the model weights
        w_optimizer.zero_grad()
        base_loss = criterion(logits(base_inputs), base_targets)
        base_loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
        w_optimizer.step()
        for op in ops.values():  # save grads of operations for gm_score (preserve_grads)
            U.preserve_gradients_in_module(op, (), [type(op)])
            for p in op.parameters():  # the copy ``.cpu()`` makes of a GPU's gradient
                if p.grad is not None:
                    p.grad = p.grad.clone()
        out["scores"].append(torch.tensor(
            [float(ops[k].running_sim.val) if scored[k] else 0.0 for k in keys]))  # fmt: skip
        out["scored"].append([scored[k] for k in keys])
        out["counts"].append([getattr(ops[k], "count", 0) for k in keys])
        frozen = [k for k in keys if not any(p.requires_grad for p in ops[k].parameters())]
        out["frozen"].append(frozen)
    out["weights"] = [p.detach().clone() for p in net.parameters()]
    return out


def _confopt_profile(root: str) -> dict[str, Any]:
    """``frequency`` and ``threshold`` of confopt's ``oles_config`` (``profile/base.py``), read
    from its syntax tree."""
    path = os.path.join(root, "src/confopt/profile/base.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Attribute) and t.attr == "oles_config"
                        for t in node.targets)):  # fmt: skip
            d = {ast.literal_eval(k): v for k, v in zip(node.value.keys, node.value.values)
                 if k is not None}  # fmt: skip
            return {"frequency": ast.literal_eval(d["frequency"]),
                    "threshold": ast.literal_eval(d["threshold"])}  # fmt: skip
    raise SystemExit(f"{path}: no oles_config dict found")


def known_answers(table: F.Table) -> None:
    g = torch.Generator().manual_seed(3)
    train = [torch.randn(4, 3, 3, 3, generator=g), torch.randn(4, 1, 1, 1, generator=g)]
    val = [torch.randn(4, 3, 3, 3, generator=g), torch.randn(4, 1, 1, 1, generator=g)]

    def cos(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a2, b2 = a.reshape(len(a), -1), b.reshape(len(b), -1)
        return ((a2 * b2).sum(0) / (a2.norm(dim=0) * b2.norm(dim=0))).mean()

    table.add(METHOD, "score, val_grad=accumulated = mean_t cos(g_tr + g_val, g_tr)",
              op_score(val, train, accumulated=True),
              sum(cos(v + t, t) for v, t in zip(val, train)) / 2)  # fmt: skip
    table.add(METHOD, "score, val_grad=separate = mean_t cos(g_val, g_tr)",
              op_score(val, train, accumulated=False),
              sum(cos(v, t) for v, t in zip(val, train)) / 2)  # fmt: skip
    decisions, expected = [], []
    for frequency in (1, 2, 5):
        for threshold in (0.3, 0.6):
            c = OLES(frequency=frequency, threshold=threshold)
            # falling scores: the later windows freeze, at an end of a window of f + 1
            scores = torch.linspace(1.0, 0.0, 3 * (frequency + 1), dtype=torch.float64)
            frozen = False
            for i, sc in enumerate(scores):
                decisions.append(None if c.frozen else c.update("0.0", sc))
                if frozen:
                    expected.append(None)
                    continue
                end = (i + 1) % (frequency + 1) == 0
                frozen = end and bool(scores[i - frequency : i + 1].sum() / frequency < threshold)
                expected.append(frozen)
    assert any(expected), "some setting must freeze"
    table.add_equal(METHOD, "window: frozen at a window's end when the sum of its frequency + 1 "
                    "scores / frequency < threshold", decisions, expected)  # fmt: skip


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("confopt")
    label = refs.label("confopt")
    ours_cfg = F.compose(["components=[oles]"]).components.oles
    F.add_settings(table, METHOD,
                   {"frequency (oles_frequency)": int(ours_cfg.frequency),
                    "threshold (oles_threshold)": float(ours_cfg.threshold)},
                   lambda: {"frequency (oles_frequency)": _confopt_profile(refs.root("confopt"))[
                       "frequency"], "threshold (oles_threshold)": _confopt_profile(
                       refs.root("confopt"))["threshold"]}, label)  # fmt: skip
    data = F.batches(2 * STEPS, size=4, hw=8, seed=11)
    for frequency, threshold in SETTINGS:
        net = _supernet()
        ref_net = copy.deepcopy(net)
        ours = _ours(net, frequency, threshold, data)
        theirs: dict[str, Any] = {}
        if live:
            with refs.imports("confopt", ".", ["src"]):
                import confopt.utils as U  # type: ignore[import-not-found]

                theirs = _reference(ref_net, ours, frequency, threshold, data, U)
            n_ops = len(theirs["scored"][0])
            assert 0 < len(theirs["frozen"][-1]) < n_ops, "the steps must freeze some ops only"
        tag = f"frequency {frequency}, threshold {threshold}"
        table.add_equal(METHOD, f"{tag}: ops scored at each step", ours["scored"],
                        lambda: theirs["scored"], label)  # fmt: skip
        table.add(METHOD, f"{tag}: each op's score at each step (running_sim.val)",
                  torch.stack(ours["scores"]), lambda: torch.stack(theirs["scores"]),
                  label)  # fmt: skip
        table.add_equal(METHOD, f"{tag}: window counts after each step (m.count)",
                        ours["counts"], lambda: theirs["counts"], label)  # fmt: skip
        table.add_equal(METHOD, f"{tag}: frozen ops after each step (freeze)", ours["frozen"],
                        lambda: theirs["frozen"], label)  # fmt: skip
        table.add(METHOD, f"{tag}: weights after {STEPS} steps", ours["weights"],
                  lambda: theirs["weights"], label)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
