"""Fidelity of FBNet against its best public reproduction, AnnaAraslanova/FBNet.

Wu et al., "FBNet: Hardware-Aware Efficient ConvNet Design via Differentiable Neural
Architecture Search", CVPR 2019: each layer mixes its 9 candidates with a soft Gumbel-softmax
sample ``m = softmax((theta + G) / tau)`` (eq. 5-6), tau from 5.0 annealed by exp(-0.045) per
epoch, the latency-aware loss ``alpha * CE * log(LAT) ** beta`` (eq. 2), theta trained by Adam.
FBNet's search code was not released (facebookresearch/mobile-vision holds the found networks,
no supernet or search loop). Of the public re-implementations, AnnaAraslanova/FBNet is the one
to compare with: it reproduces the paper's supernet for CIFAR-10 with the paper's tables
(``supernet_functions/lookup_table_builder.py``: table 1's 22 layers and table 2's 9
candidates, built from the mobile-vision blocks), its values come from the paper's section 4.1
(``config_for_supernet.py``), its code runs on current PyTorch, and it is the most used
(its README's results; cited by later re-implementations).

Known answers (no checkout): eq. 5 written out with ``G = -log(-log u)``; the temperature of
every epoch.

With ``--reference-root fbnet=PATH`` (a checkout of github.com/AnnaAraslanova/FBNet): its own
``MixedOperation`` (``supernet_functions/model_supernet.py``) on deep copies of our
``space=fbnet_cifar`` candidates of a layer, the same theta, temperature and Gumbel noise (its
``gumbel_softmax`` draws from the global generator, seeded as our step's generator and
advanced past the rows of the layers before), at float64: the layer's output and accumulated
latency, and the gradients of theta and of the input; its ``SupernetLoss`` (``alpha * CE *
log(LAT ** beta)``) beside our ``cost.form=fbnet_logpow``, value and gradients in the logits
and the latency; the temperature of every epoch of its ``TrainerSupernet.train_loop`` (run with
its training steps recorded instead of taken) beside ours with its 10 weight-only epochs; its
settings beside ``search=fbnet``.

    python experiments/fidelity/fbnet.py --reference-root fbnet=~/src/FBNet

Without a checkout, the same rows compare ours with the reproduction's values recorded in
``tests/fidelity/golden/fbnet.pt`` (``--record`` with the checkout writes them).
"""

from __future__ import annotations

import copy
import importlib
import math
import sys
import types
from typing import Any, cast

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch
from torch import nn

from nas.hardware.cost import CostObjective
from nas.plugins import build_strategy
from nas.strategies.base import SearchContext
from nas.strategies.fbnet import relaxed_sample
from nas.supernet import build_supernet

METHOD = "FBNet"
REFERENCES = {"fbnet": F.Reference("AnnaAraslanova/FBNet", "supernet_functions/model_supernet.py")}
CLASSES, SEED = 10, 5
# layers of stride 1 and equal widths (24, 64 and 184 channels), where the candidates are the
# same on both sides (on the 6 layers that change shape the reproduction's skip is a 1x1
# projection, mobile-vision's Identity with a conv; ours masks skip there, as the published
# networks never use it)
LAYERS = (2, 10, 19)
EPOCHS, WARMUP = 180, 10  # config_for_supernet.py: cnt_epochs, train_thetas_from_the_epoch


def ours(epochs: int = EPOCHS, warmup: int = 0, epoch: int = 0) -> tuple[Any, nn.Module]:
    cfg = F.compose(["search=fbnet", "space=fbnet_cifar", f"search.warmup_epochs={warmup}"])
    strategy = build_strategy(cfg)
    torch.manual_seed(0)
    net = build_supernet("fbnet_cifar", C=16, layers=22, num_classes=CLASSES).double()
    F.randomise_affine(net, 0)
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    strategy.attach(SearchContext(net, opt, grad_clip=None, epochs=epochs),
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    strategy.epoch = epoch
    with torch.no_grad():
        theta = strategy.arch_params["fbnet_blocks"]
        theta.copy_(torch.randn(theta.shape, generator=torch.Generator().manual_seed(1),
                                dtype=theta.dtype))  # fmt: skip
    return strategy, net


def known_answers(table: F.Table) -> None:
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(22, 9, generator=g, dtype=torch.float64)
    u = torch.rand(22, 9, generator=g, dtype=torch.float64)
    noise = -torch.log(-torch.log(u))
    for tau in (5.0, 0.3):
        table.add(METHOD, f"eq. 5 at tau {tau:g}: softmax((theta + G) / tau)",
                  relaxed_sample(theta, noise, tau),
                  torch.softmax((theta + noise) / tau, -1))  # fmt: skip
    strategy, _ = ours(warmup=WARMUP)
    taus = []
    for e in range(EPOCHS):
        strategy.epoch = e
        taus.append(strategy.tau)
    expected = [5.0 * math.exp(-0.045 * max(e - WARMUP, 0)) for e in range(EPOCHS)]
    table.add(METHOD, "tau of 180 epochs after 10 of weights only: 5 exp(-0.045 (e - 10))",
              taus, expected)  # fmt: skip


# ---------------------------------------------------------------------------- the reference


class _Op(nn.Module):
    """One of our candidates as the reproduction's block: mobile-vision's ``IRFBlock`` adds
    its input where the layer keeps its shape (``use_res_connect``), and ``skip`` is the
    identity; ours keep the shortcut out of the candidates (the chain adds it once)."""

    def __init__(self, op: nn.Module, skip: bool) -> None:
        super().__init__()
        self.op, self.skip = op, skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.skip:
            return x
        out: torch.Tensor = self.op(x)
        return out + x


def _layer_input(net: Any, layer: int, x: torch.Tensor, weights: Any) -> torch.Tensor:
    with torch.no_grad():
        return cast(torch.Tensor, net.run_prefix(x, weights, layer)).detach()


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("fbnet")
    ref_label = refs.label("fbnet")
    with refs.imports("fbnet", ".", ["."]):
        if live:
            model_supernet = importlib.import_module("supernet_functions.model_supernet")
            trainer = importlib.import_module("supernet_functions.training_functions_supernet")
            config = importlib.import_module("supernet_functions.config_for_supernet")
        strategy, net = ours(epoch=7)
        tau = strategy.tau
        names = net.space.cells["fbnet_blocks"].edges[0].ops
        latency = torch.linspace(0.5, 4.5, 22 * 9, dtype=torch.float64).reshape(22, 9)
        x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(2),
                        dtype=torch.float64)  # fmt: skip
        strategy.begin_step(SEED)
        draw_seed = int(strategy.draw_seed())  # the seed of the sample drawn below
        strategy.begin_step(SEED)
        theta = strategy.arch_params["fbnet_blocks"]
        sample = strategy.arch_weights(sample=True)["fbnet_blocks"]
        for layer in LAYERS:
            h = _layer_input(net, layer, x, {"fbnet_blocks": sample.detach()})
            h_ours = h.clone().requires_grad_(True)
            edge = net.cells[layer]
            active = [True] * len(names)
            assert net.shortcut[layer]
            out = edge(h_ours, sample[layer], active, None) + h_ours  # the chain's shortcut
            lat = (sample[layer] * latency[layer]).sum()
            up = torch.randn(out.shape, generator=torch.Generator().manual_seed(layer),
                             dtype=out.dtype)  # fmt: skip
            g_theta, g_x = torch.autograd.grad((out * up).sum() + lat, [theta, h_ours],
                                               retain_graph=True)  # fmt: skip
            mine = [out.detach(), lat.detach(), g_theta[layer], g_x]
            theirs: list[torch.Tensor] = []
            if live:
                ops = {
                    n: (lambda op=op, n=n: _Op(copy.deepcopy(op), n == "skip"))
                    for n, op in zip(names, edge.ops)
                }
                lats = dict(zip(names, latency[layer].tolist()))
                mixed = model_supernet.MixedOperation((), ops, lats)
                with torch.no_grad():
                    mixed.thetas.data = theta.detach()[layer].clone()
                h_ref = h.clone().requires_grad_(True)
                torch.manual_seed(draw_seed)
                torch.empty(layer * 9, dtype=torch.float64).exponential_()  # the rows before
                zero = torch.zeros(1, 1, dtype=torch.float64)
                ref_out, ref_lat = mixed(h_ref, tau, zero)
                gt, gx = torch.autograd.grad((ref_out * up).sum() + ref_lat.sum(),
                                             [mixed.thetas, h_ref])  # fmt: skip
                theirs = [ref_out.detach(), ref_lat.detach().reshape(()), gt, gx]
            table.add(METHOD, f"layer {layer}: output, latency sum m LAT, gradients of theta "
                      f"and input (MixedOperation of IRFBlocks)", mine, lambda t=theirs: t,
                      ref_label)  # fmt: skip

        # the loss: alpha * CE * log(LAT ** beta) (SupernetLoss) = our fbnet_logpow
        logits = torch.randn(8, CLASSES, generator=torch.Generator().manual_seed(3),
                             dtype=torch.float64)  # fmt: skip
        y = torch.randint(0, CLASSES, (8,), generator=torch.Generator().manual_seed(4))
        model = cast(Any, types.SimpleNamespace(metric="latency"))  # LAT is given: no table
        cost = CostObjective(model, form="fbnet_logpow", target=1.0, alpha=0.2, beta=0.6)
        mine_loss, ref_loss = [], []
        for lat_value in (3.0, 25.0):
            leaf, lat_leaf = logits.clone().requires_grad_(True), torch.tensor(
                lat_value, dtype=torch.float64, requires_grad=True)  # fmt: skip
            a, c = cost.factor_and_penalty(lat_leaf)
            loss = a * nn.functional.cross_entropy(leaf, y) + c
            mine_loss.append([loss.detach(), *torch.autograd.grad(loss, [leaf, lat_leaf])])
            if live:
                criterion = model_supernet.SupernetLoss()
                meter = types.SimpleNamespace(update=lambda *a, **k: None)
                leaf2 = logits.clone().requires_grad_(True)
                lat2 = torch.tensor(lat_value, dtype=torch.float64, requires_grad=True)
                r = criterion(leaf2, y, lat2, meter, meter, 8)
                ref_loss.append([r.detach(), *torch.autograd.grad(r, [leaf2, lat2])])
        table.add(METHOD, "loss alpha CE log(LAT ** beta) (SupernetLoss) = cost.form="
                  "fbnet_logpow: value, gradients in logits and LAT", mine_loss,
                  lambda: ref_loss, ref_label)  # fmt: skip

        # the temperature of every epoch of its training loop
        strategy, _ = ours(warmup=WARMUP)
        taus = []
        for e in range(EPOCHS):
            strategy.epoch = e
            taus.append(strategy.tau)
        ref_taus: list[float] = []
        if live:
            ref_taus = _reference_temperatures(trainer)
        table.add(METHOD, "tau of every epoch of train_loop (10 epochs of weights only)",
                  taus, lambda: ref_taus, ref_label)  # fmt: skip

        cfg = F.compose(["search=fbnet"])
        mine_settings = {
            "theta Adam lr (thetas_lr)": float(cfg.search.arch_lr),
            "theta weight decay (thetas_weight_decay)": float(cfg.search.arch_weight_decay),
            "initial temperature (init_temperature)": float(cfg.search.tau0),
        }
        F.add_settings(
            table,
            METHOD,
            mine_settings,
            lambda: {
                "theta Adam lr (thetas_lr)": config.CONFIG_SUPERNET["optimizer"]["thetas_lr"],
                "theta weight decay (thetas_weight_decay)":
                    config.CONFIG_SUPERNET["optimizer"]["thetas_weight_decay"],
                "initial temperature (init_temperature)":
                    config.CONFIG_SUPERNET["train_settings"]["init_temperature"],
            },
            ref_label,
        )  # fmt: skip
        table.add(METHOD, "setting: temperature decay per epoch (exp_anneal_rate)",
                  float(cfg.search.tau_decay),
                  lambda: float(config.CONFIG_SUPERNET["train_settings"]["exp_anneal_rate"]),
                  ref_label)  # fmt: skip


def _reference_temperatures(trainer: Any) -> list[float]:
    """``TrainerSupernet.train_loop`` with its steps recorded, not taken: the temperature of the
    steps of every epoch (weight-only epochs included)."""
    logger = types.SimpleNamespace(info=lambda *a, **k: None)
    writer = types.SimpleNamespace(add_scalar=lambda *a, **k: None)
    group = [{"lr": 0.1}]
    opt = types.SimpleNamespace(param_groups=group)
    sched = types.SimpleNamespace(step=lambda: None)
    t = trainer.TrainerSupernet(None, opt, opt, sched, logger, writer)
    seen: dict[int, float] = {}

    def training_step(model: Any, loader: Any, optimizer: Any, epoch: int, info_for_logger=""):
        seen[epoch] = t.temperature

    t._training_step = training_step
    t._validate = lambda model, loader, epoch: 0.0
    t.train_loop(None, None, None, None)
    return [seen[e] for e in range(len(seen))]


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
