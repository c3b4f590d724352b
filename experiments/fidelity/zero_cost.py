"""Fidelity of the zero-cost proxies against SamsungLabs/zero-cost-nas, NASWOT and Zen-NAS.

Abdelfattah, Mehrotra, Dudziak & Lane, "Zero-Cost Proxies for Lightweight NAS", ICLR 2021
(``foresight/pruners``: one batch, cross-entropy L, BN with batch statistics, every score a sum
over the ``Conv2d`` / ``Linear`` weights W of a layer metric):

- grad_norm = sum_l ||dL/dW_l||_2;
- snip = sum |dL/dm| at a mask m = 1 on every weight, i.e. sum |W * dL/dW|;
- grasp = sum -W * Hg, g = dL/dW (no graph), Hg = d(sum g * dL/dW)/dW;
- fisher = sum_l sum_k F_lk * fan_in_l, F_lk = 1/2 mean_n (sum_spatial a_nk * dL/da_nk)^2 over
  the output channel k of the layer's output a;
- jacob_cov = -sum_i (log(v_i + k) + 1 / (v_i + k)), k = 1e-5, v the eigenvalues of the
  correlation matrix of the rows of J = d(sum of logits)/dx;
- synflow = sum |W * dR/dW| with every tensor of the state dict replaced by its absolute
  value, BN removed, float64, R = the sum of the logits of one all-ones image.

Mellor, Turner, Storkey & Crowley, "Neural Architecture Search without Training", ICML 2021
(BayesWatch/nas-without-training, ``score_networks.py``): naswot = log |det K|,
K = sum over modules whose type name holds ``ReLU`` of c c^T + (1 - c)(1 - c)^T, c = [x > 0]
the binary code of the module's input per image (batch 128, no augmentation, train mode).

Lin, Wang, Sun, Chen, Sun, Qian, Li & Jin, "Zen-NAS", ICCV 2021 (idstcv/ZenNAS,
``ZeroShotProxy/compute_zen_score.py``): per repeat, Gaussian weights (BN gamma 1, beta 0),
x, e ~ N(0, 1) (batch 16), f the map before global pooling,
zen = log mean_n sum |f(x) - f(x + 0.01 e)| + sum_BN log sqrt(mean running_var), averaged over
32 repeats.

Known answers (no checkout): each proxy against its formula written out here on a 2-layer
conv network, a tiny NB201 network (our ``TinyNetwork``) and the NB201 supernet at softmax
weights: grad_norm from autograd per layer; snip from the gradient of a mask through
``functional_call``; grasp from ``torch.autograd.functional.hvp``; fisher from the retained
gradients of every conv / linear output; jacob_cov from ``np.linalg.eig`` of ``np.corrcoef``;
synflow on a copy with its BN modules replaced by ``nn.Identity``; naswot from the two
products of the codes of every ReLU input and ``slogdet``; zen from the repeats written out
from the same seed; and ``score_many``'s shared gradient pass equals each proxy alone.

With ``--reference-root zero_cost=PATH`` (github.com/SamsungLabs/zero-cost-nas):
``predictive.find_measures_arrays`` / ``find_measures`` on the very module we score (a copy of
it: two NB201 networks built by ``search_spaces.nb201.TinyNetwork``, our NB201 supernet at
softmax weights, the 2-layer conv network, and ZC's own NB201 network of cell A, whose cells
have conv biases, affine-free BN and unused ops; it is written out here (``ZCNasBench2``) and a
row checks its logits against ``foresight.models.nasbench2``'s network carrying its weights),
at float64, on the same batch: each score and each per-layer (per-weight, per-channel for
fisher) array. With ``naswot=PATH`` (github.com/BayesWatch/nas-without-training): the
reference's own hook functions (read out of ``score_networks.py``, which cannot be imported),
its ``get_batch_jacobian`` and ``scores.hooklogdet`` on the same networks and batch: K and the
score. With ``zen=PATH``
(github.com/idstcv/ZenNAS): ``compute_nas_score`` on the same networks from the same seed (the
same Gaussian weights, inputs and perturbations), averaged score and each repeat. And the
settings of our proxies and of our zero-cost selector against each reference's defaults.
Without a checkout, a reference's rows compare ours with its outputs recorded in
``tests/fidelity/golden/zero_cost.pt`` (``--record``, all three checkouts, rewrites it).

Deliberate differences, set to the reference's side in the comparison or left out of it:

- Zen's ``compute_nas_score`` draws its inputs in float32 (``dtype = torch.float32`` unless
  fp16); it is run with a ``torch`` whose ``float32`` is float64, so it draws at float64 as
  ours does at the input's dtype (in float32 both draw float32).
- ZC's ``synflow`` takes ``abs_`` of every state-dict entry, which fails on the supernet's
  bool buffer ``mask_cell``; the module handed to ZC leaves it out of its state dict (ours
  takes ``abs`` of the float entries only).
- Zen on a supernet: not compared (the reference reads ``running_var`` of every BN, and the
  supernet's cells keep none); the NASWOT and ZC rows of the supernet run its forward as our
  ``Scorable`` does (each op applies its own ReLU module, as the references' ops do).
- The selector (``selection=zc``, Zero-Cost-PT) draws ``batch_size`` = 256 images for every
  proxy (Xiang et al.'s NB201 setting) where the proxies' own references use 64 (ZC), 128
  (NASWOT) and 16 (Zen), and it scores naswot with BN in eval mode (``Scorers/scorer.py``)
  where NASWOT uses train mode; both come from Zero-Cost-PT, which is not one of these
  references. The rows compare the proxies' own defaults (``nas-proxy``) and what the selector
  shares with them (loss, no split, BN mode of the ZC proxies).

    python experiments/fidelity/zero_cost.py --reference-root zero_cost=~/src/zero-cost-nas \\
        --reference-root naswot=~/src/nas-without-training --reference-root zen=~/src/ZenNAS
"""

from __future__ import annotations

import ast
import copy
import inspect
import math
import sys
import types
import warnings
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as TF

from experiments.benchmarks import reference_shims
from nas.proxies import Scorable, get_proxy, proxy_inputs, score_many
from nas.proxies.gradients import gradient_pass
from nas.proxies.naswot import naswot_kernel
from nas.selection.zero_cost import ZeroCostSelection
from nas.supernet import build_supernet
from search_spaces.nb201 import TinyNetwork

METHOD = "zero-cost proxies"
REFERENCES = {
    "zero_cost": F.Reference("SamsungLabs/zero-cost-nas", "foresight/pruners/predictive.py"),
    "naswot": F.Reference("BayesWatch/nas-without-training", "score_networks.py"),
    "zen": F.Reference("idstcv/ZenNAS", "ZeroShotProxy/compute_zen_score.py"),
}
ZC = ("grad_norm", "snip", "grasp", "fisher", "jacob_cov", "synflow")
CELLS = {  # two NB201 cells: every op kind, and a sparser one with a `none` edge
    "NB201 cell A": "|nor_conv_3x3~0|+|nor_conv_1x1~0|skip_connect~1|"
    "+|avg_pool_3x3~0|nor_conv_3x3~1|nor_conv_1x1~2|",
    "NB201 cell B": "|skip_connect~0|+|nor_conv_3x3~0|none~1|"
    "+|nor_conv_1x1~0|avg_pool_3x3~1|nor_conv_3x3~2|",
}
C, N, CLASSES, HW, BATCH = 4, 1, 10, 16, 8
ZEN_REPEAT = 3


class TwoConv(nn.Module):
    """A 2-layer conv network (conv-BN-ReLU twice, pooling, linear): logits from ``forward``,
    Zen's ``forward_pre_GAP``."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
            nn.Conv2d(4, 6, 3, stride=2, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
        )  # fmt: skip
        self.classifier = nn.Linear(6, CLASSES)

    def forward_pre_GAP(self, x: Tensor) -> Tensor:  # noqa: N802  (Zen-NAS's name)
        return self.features(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.classifier(self.features(x).mean(dim=(2, 3)))


class Logits(nn.Module):
    """What the ZC reference calls: ``forward(x)`` = logits of ``scorable`` (a TinyNetwork's
    second output; a supernet at its fixed weights)."""

    def __init__(self, scorable: Scorable) -> None:
        super().__init__()
        self.net = scorable.net
        self.weights = scorable.weights

    def forward(self, x: Tensor) -> Tensor:
        if self.weights is not None:
            return Scorable(self.net, self.weights).logits(x)
        out = self.net(x)
        return out[1] if isinstance(out, tuple) else out

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """Without the supernet's bool buffer (``mask_cell``): ZC's synflow takes ``abs_`` of
        every entry, undefined for bool (ours leaves non-float tensors as they are)."""
        out = super().state_dict(*args, **kwargs)
        for k in [k for k, v in out.items() if v.dtype == torch.bool]:
            del out[k]
        return out


class PairOut(Logits):
    """What NASWOT calls: ``y, out = net(x)`` (a TinyNetwork's own two outputs)."""

    def forward(self, x: Tensor) -> Any:
        if isinstance(self.net, TinyNetwork):
            return self.net(x)
        out = super().forward(x)
        return out, out


class PreGap(nn.Module):
    """What Zen calls: ``forward_pre_GAP`` of a TinyNetwork (stem, cells, BN-ReLU), written
    from its modules."""

    def __init__(self, net: TinyNetwork) -> None:
        super().__init__()
        self.net = net

    def forward_pre_GAP(self, x: Tensor) -> Tensor:  # noqa: N802
        f = self.net.stem(x)
        for cell in self.net.cells:
            f = cell(f)
        return self.net.lastact(f)


class _ZCReLUConvBN(nn.Module):
    """ZC's ``nasbench2_ops.ReLUConvBN``: ReLU, conv (a bias when the BN is affine-free), BN."""

    def __init__(self, c_in: int, c_out: int, k: int, stride: int, padding: int, affine: bool,
                 track: bool) -> None:  # fmt: skip
        super().__init__()
        self.op = nn.Sequential(
            nn.ReLU(inplace=False),
            nn.Conv2d(c_in, c_out, k, stride=stride, padding=padding, bias=not affine),
            nn.BatchNorm2d(c_out, affine=affine, track_running_stats=track),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.op(x)


class _ZCZero(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.mul(0.0)


class _ZCIdentity(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


ZC_OPS = ("none", "avg_pool_3x3", "nor_conv_3x3", "nor_conv_1x1", "skip_connect")


class _ZCCell(nn.Module):
    """ZC's ``SearchCell``: every op of every edge built (cell BN affine-free, no running
    statistics), only the arch's ones applied; a node sums its edges."""

    def __init__(self, c: int, keep: list[bool]) -> None:
        super().__init__()
        self.keep = keep
        self.options = nn.ModuleList()
        for j in range(3):
            for _ in range(j + 1):
                for op in ZC_OPS:
                    self.options.append(
                        _ZCZero() if op == "none"
                        else nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
                        if op == "avg_pool_3x3"
                        else _ZCReLUConvBN(c, c, 3, 1, 1, False, False) if op == "nor_conv_3x3"
                        else _ZCReLUConvBN(c, c, 1, 1, 0, False, False) if op == "nor_conv_1x1"
                        else _ZCIdentity()
                    )  # fmt: skip

    def forward(self, x: Tensor) -> Tensor:
        outs, idx = [x], 0
        for j in range(3):
            edges = []
            for i in range(j + 1):
                for _ in ZC_OPS:
                    if self.keep[idx]:
                        edges.append(self.options[idx](outs[i]))
                    idx += 1
            outs.append(sum(edges))
        return outs[-1]


class _ZCReduction(nn.Module):
    """ZC's ``reduction``: residual (2x2 average pool, 1x1 conv) plus two ReLU-conv-BN."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.residual = nn.Sequential(
            nn.AvgPool2d(kernel_size=2, stride=2, padding=0),
            nn.Conv2d(c_in, c_out, kernel_size=1, stride=1, padding=0, bias=False),
        )
        self.conv_a = _ZCReLUConvBN(c_in, c_out, 3, 2, 1, True, True)
        self.conv_b = _ZCReLUConvBN(c_out, c_out, 3, 1, 1, True, True)

    def forward(self, x: Tensor) -> Tensor:
        return self.residual(x) + self.conv_b(self.conv_a(x))


class ZCNasBench2(nn.Module):
    """ZC's own NB201 network (``foresight.models.nasbench2.NAS201Model``, 5 cells a stage),
    written out here module for module (the same layers in the same order): cells whose convs
    have biases and whose BN is affine-free without running statistics, and whose unused ops
    are built (layers without gradient). With the checkout, a row checks it against ZC's own
    network carrying its weights."""

    def __init__(self, arch: str, c: int, num_classes: int) -> None:
        super().__init__()
        nodes = [[e.split("~") for e in node[1:-1].split("|")] for node in arch.split("+")]
        keep = [
            [op for op, src in nodes[j] if int(src) == i] == [name]
            for j in range(3)
            for i in range(j + 1)
            for name in ZC_OPS
        ]
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))
        self.stack_cell1 = nn.Sequential(*[_ZCCell(c, keep) for _ in range(5)])
        self.reduction1 = _ZCReduction(c, 2 * c)
        self.stack_cell2 = nn.Sequential(*[_ZCCell(2 * c, keep) for _ in range(5)])
        self.reduction2 = _ZCReduction(2 * c, 4 * c)
        self.stack_cell3 = nn.Sequential(*[_ZCCell(4 * c, keep) for _ in range(5)])
        self.lastact = nn.Sequential(nn.BatchNorm2d(4 * c), nn.ReLU(inplace=True))
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(4 * c, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stack_cell1(self.stem(x))
        x = self.stack_cell3(self.reduction2(self.stack_cell2(self.reduction1(x))))
        return self.classifier(self.global_pooling(self.lastact(x)).flatten(1))


def zc_network(seed: int = 30) -> Scorable:
    """``ZCNasBench2`` of cell A, float64, affine BN parameters away from 1 / 0."""
    torch.manual_seed(seed)
    net = ZCNasBench2(CELLS["NB201 cell A"], C, CLASSES).double()
    F.randomise_affine(net, seed)
    return Scorable(net)


def networks(seed: int = 0) -> dict[str, Scorable]:
    """The scored networks, float64, affine BN parameters away from 1 / 0."""
    out: dict[str, Scorable] = {}
    for i, (name, arch) in enumerate(CELLS.items()):
        torch.manual_seed(seed + i)
        net = TinyNetwork(C, N, arch, CLASSES).double()
        F.randomise_affine(net, seed + i)
        out[name] = Scorable(net)
    torch.manual_seed(seed + 10)
    supernet = build_supernet("nb201", C=C, layers=N, num_classes=CLASSES).double()
    F.randomise_affine(supernet, seed + 10)
    g = torch.Generator().manual_seed(seed + 11)
    weights = {
        ct: torch.softmax(torch.randn(shape, generator=g, dtype=torch.float64), -1)
        for ct, shape in supernet.arch_shapes().items()
    }
    out["NB201 supernet"] = Scorable(supernet, weights)
    torch.manual_seed(seed + 20)
    two = TwoConv().double()
    F.randomise_affine(two, seed + 20)
    out["2-layer conv"] = Scorable(two)
    return out


def batch(seed: int = 0, size: int = BATCH) -> tuple[Tensor, Tensor]:
    return F.batches(1, size=size, hw=HW, classes=CLASSES, seed=seed)[0]


def score(name: str, net: Scorable, x: Tensor, y: Tensor | None, **options: Any) -> float:
    torch.manual_seed(0)
    return get_proxy(name, **options).score(net, x, y)


# ------------------------------------------------------------------------------ known answers


def _scored(module: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in module.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


def _logits(net: Scorable, module: nn.Module, x: Tensor, params: dict[str, Tensor] | None = None):
    """Logits of ``module`` (``net.net`` or a copy of it) with ``params`` substituted."""
    view = Logits(Scorable(module, net.weights) if net.weights is not None else Scorable(module))
    if params is None:
        return view(x)
    return torch.func.functional_call(view, {f"net.{k}": v for k, v in params.items()}, (x,))


def known_grad_norm(net: Scorable, x: Tensor, y: Tensor) -> float:
    ws = [m.weight for _, m in _scored(net.net)]
    g = torch.autograd.grad(TF.cross_entropy(_logits(net, net.net, x), y), ws, allow_unused=True)
    return sum(float(t.norm()) for t in g if t is not None)


def known_snip(net: Scorable, x: Tensor, y: Tensor) -> float:
    """The reference's definition: masks m = 1 multiply the frozen weights, sum |dL/dm|."""
    named = _scored(net.net)
    masks = {n: torch.ones_like(m.weight, requires_grad=True) for n, m in named}
    params = {f"{n}.weight": m.weight.detach() * masks[n] for n, m in named}
    loss = TF.cross_entropy(_logits(net, net.net, x, params), y)
    g = torch.autograd.grad(loss, list(masks.values()), allow_unused=True)
    return sum(float(t.abs().sum()) for t in g if t is not None)


def known_grasp(net: Scorable, x: Tensor, y: Tensor) -> float:
    """-W * Hg with the Hessian-vector product of ``torch.autograd.functional.hvp``."""
    named = _scored(net.net)
    names = [f"{n}.weight" for n, _ in named]
    w0 = tuple(m.weight.detach() for _, m in named)

    def loss(*ws: Tensor) -> Tensor:
        return TF.cross_entropy(_logits(net, net.net, x, dict(zip(names, ws))), y)

    leaves = [w.clone().requires_grad_(True) for w in w0]
    g = torch.autograd.grad(loss(*leaves), leaves)
    _, hg = torch.autograd.functional.hvp(loss, w0, g)
    return sum(float((-w * h).sum()) for w, h in zip(w0, hg))


def known_fisher(net: Scorable, x: Tensor, y: Tensor) -> float:
    """Every conv / linear output retains its gradient; per channel 1/2 mean (sum a d)^2."""
    outs: dict[str, list[Tensor]] = {}
    named = _scored(net.net)

    def keep(name: str) -> Any:
        def hook(m: nn.Module, inp: tuple[Tensor, ...], out: Tensor) -> None:
            out.retain_grad()
            outs.setdefault(name, []).append(out)

        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in named]
    try:
        TF.cross_entropy(_logits(net, net.net, x), y).backward()
    finally:
        for h in handles:
            h.remove()
    net.net.zero_grad(set_to_none=True)
    total = 0.0
    for n, m in named:
        for a in outs.get(n, []):
            ad = a.detach() * a.grad
            per_image = ad.sum(dim=tuple(range(2, ad.dim()))) if ad.dim() > 2 else ad
            total += float((0.5 * per_image.pow(2).mean(0)).sum()) * math.prod(m.weight.shape[1:])
    return total


def known_jacob_cov(net: Scorable, x: Tensor) -> float:
    xi = x.clone().requires_grad_(True)
    (j,) = torch.autograd.grad(_logits(net, net.net, xi).sum(), xi)
    v = np.linalg.eig(np.corrcoef(j.reshape(len(j), -1).numpy()))[0].real
    return float(-np.sum(np.log(v + 1e-5) + 1.0 / (v + 1e-5)))


def known_synflow(net: Scorable, x: Tensor) -> float:
    """On a copy: BN modules replaced by ``nn.Identity``, |state|, R = sum of the logits."""
    model = copy.deepcopy(net.net)
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, nn.BatchNorm2d):
                setattr(parent, child_name, nn.Identity())
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.abs_()
    ws = [m.weight for _, m in _scored(model)]
    ones = torch.ones(1, *x.shape[1:], dtype=torch.float64)
    g = torch.autograd.grad(_logits(net, model, ones).sum(), ws, allow_unused=True)
    return sum(float((w.detach() * t).sum()) for w, t in zip(ws, g) if t is not None)


def known_naswot(net: Scorable, x: Tensor) -> float:
    """K from the two products of the codes of every ReLU-named module's input; slogdet."""
    kernel = torch.zeros(len(x), len(x), dtype=torch.float64)

    def hook(m: nn.Module, inp: tuple[Tensor, ...]) -> None:
        nonlocal kernel
        c = (inp[0].reshape(len(x), -1) > 0).double()
        kernel = kernel + c @ c.t() + (1 - c) @ (1 - c).t()

    relus = [m for m in net.net.modules() if "ReLU" in type(m).__name__]
    handles = [m.register_forward_pre_hook(hook) for m in relus]
    try:
        with torch.no_grad():
            net.logits(x)  # each supernet op applies its own ReLU module, as the references
    finally:
        for h in handles:
            h.remove()
    return float(np.linalg.slogdet(kernel.numpy())[1])


def known_zen(net: Scorable, x: Tensor, repeat: int) -> float:
    """The repeats written out on a copy, from the same seed (draw order: the weights in
    module order, then x, then e)."""
    model = copy.deepcopy(net.net)
    model.train()
    torch.manual_seed(0)
    scores = []
    with torch.no_grad():
        for _ in range(repeat):
            for m in model.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    m.weight.normal_()
                    if m.bias is not None:
                        m.bias.zero_()
                elif isinstance(m, nn.BatchNorm2d) and m.affine:
                    m.weight.fill_(1.0)
                    m.bias.zero_()
            x1, x2 = torch.randn(x.shape), torch.randn(x.shape)
            f1 = PreGap(model).forward_pre_GAP(x1)
            f2 = PreGap(model).forward_pre_GAP(x1 + 0.01 * x2)
            delta = (f1 - f2).abs().sum(dim=(1, 2, 3)).mean()
            log_bn = sum(
                math.log(math.sqrt(float(m.running_var.mean())))
                for m in model.modules()
                if isinstance(m, nn.BatchNorm2d)
            )
            scores.append(math.log(float(delta)) + log_bn)
    return float(np.mean(scores))


def known_answers(table: F.Table) -> None:
    x, y = batch(seed=1)
    formulas = {
        "grad_norm": lambda n: known_grad_norm(n, x, y),
        "snip": lambda n: known_snip(n, x, y),
        "grasp": lambda n: known_grasp(n, x, y),
        "fisher": lambda n: known_fisher(n, x, y),
        "jacob_cov": lambda n: known_jacob_cov(n, x),
        "synflow": lambda n: known_synflow(n, x),
        "naswot": lambda n: known_naswot(n, x),
    }
    nets = networks()
    for net_name in ("2-layer conv", "NB201 cell A", "NB201 supernet"):
        net = nets[net_name]
        for name, formula in formulas.items():
            ours = score(name, net, x, y)
            table.add(METHOD, f"{name} = formula ({net_name})", ours, formula(net))
    net = nets["NB201 cell A"]
    ours = score("zen", net, x, None, repeat=ZEN_REPEAT)
    table.add(METHOD, f"zen = formula, {ZEN_REPEAT} repeats (NB201 cell A)", ours,
              known_zen(net, x, ZEN_REPEAT))  # fmt: skip

    # score_many's shared gradient pass (grad_norm, snip, fisher, jacob_cov) = each alone
    shared = ["grad_norm", "snip", "fisher", "jacob_cov"]
    inputs = proxy_inputs(shared)
    inputs.batches.update(dict.fromkeys(shared, (x, y)))
    many = score_many(net, shared, inputs)
    table.add(METHOD, "score_many shared pass = each proxy alone (NB201 cell A)",
              [many[n] for n in shared], [score(n, net, x, y) for n in shared])  # fmt: skip


# ---------------------------------------------------------------------------- the reference


def nested_functions(path: str, names: tuple[str, ...], namespace: dict[str, Any]) -> list[Any]:
    """Functions defined anywhere in a reference script (NASWOT's hooks live inside its main
    loop), compiled with the shims; their globals are ``namespace``."""
    with open(path, encoding="utf-8") as f:
        tree, _ = reference_shims.shim_tree(f.read(), path)
    found = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"reference: no function {', '.join(missing)} in {path}")
    module = ast.Module(body=[found[n] for n in names], type_ignores=[])
    exec(compile(module, path, "exec", dont_inherit=True), namespace)
    return [namespace[n] for n in names]


def _per_layer_ours(net: Scorable, x: Tensor, y: Tensor) -> dict[str, list[Tensor]]:
    p = gradient_pass(net, x, y, proxy="fidelity", fisher=True)
    zeros = [torch.zeros(()) for _ in p.layers]
    return {
        "grad_norm": [z if g is None else g.norm() for z, g in zip(zeros, p.weight_grads)],
        "snip": [
            torch.zeros_like(m.weight) if g is None else (m.weight.detach() * g).abs()
            for m, g in zip(p.layers, p.weight_grads)
        ],
        "fisher": [
            torch.zeros(m.weight.shape[0]) if f is None else f.abs()
            for m, f in zip(p.layers, p.fisher)
        ],
        "grasp": [
            torch.zeros_like(m.weight) if t is None else t
            for m, t in zip(p.layers, get_proxy("grasp").per_weight(net, x, y))  # type: ignore[attr-defined]
        ],
        "synflow": [
            torch.zeros_like(m.weight) if t is None else t
            for m, t in zip(p.layers, get_proxy("synflow").per_weight(net, x))  # type: ignore[attr-defined]
        ],
    }


def compare_zero_cost(table: F.Table, refs: F.Refs, nets: dict[str, Scorable], x, y) -> None:
    live = refs.live("zero_cost")  # else the reference's values come from its recording
    ref_label = refs.label("zero_cost")
    zc_name = "ZC's nasbench2 network, cell A"
    with refs.imports("zero_cost", ".", ["."]), F.float64():
        if live:
            from foresight.models import nasbench2  # type: ignore[import-not-found]
            from foresight.pruners import measures as ref_measures  # type: ignore[import-not-found]
            from foresight.pruners import predictive  # type: ignore[import-not-found]

        zc_net = zc_network()  # ZC's own network (conv biases, affine-free cell BN), written out

        def zc_logits() -> Tensor:  # ZC's network with our weights, on the same batch
            with torch.random.fork_rng():
                ref = nasbench2.get_model_from_arch_str(CELLS["NB201 cell A"], CLASSES,
                                                        init_channels=C).double()  # fmt: skip
            F.copy_weights(zc_net.net, ref)
            return ref(x)

        table.add(METHOD, f"{zc_name}: logits, written out here = ZC's",
                  Logits(Scorable(copy.deepcopy(zc_net.net)))(x), zc_logits,
                  ref_label)  # fmt: skip

        nets = {**nets, zc_name: zc_net}
        for net_name, net in nets.items():
            arrays: dict[str, Any] = {}
            totals: dict[str, Any] = {}
            if live:
                ref_net = Logits(Scorable(copy.deepcopy(net.net), net.weights))
                with torch.random.fork_rng():
                    torch.manual_seed(0)
                    with warnings.catch_warnings():  # fisher's non-full backward hooks
                        warnings.simplefilter("ignore", FutureWarning)
                        arrays = predictive.find_measures_arrays(
                            ref_net, [(x, y)], ("random", 1, CLASSES), torch.device("cpu"),
                            measure_names=list(ZC),
                        )  # fmt: skip
                totals = predictive.find_measures(
                    ref_net, None, None, torch.device("cpu"), measures_arr=arrays
                )
            per_layer = _per_layer_ours(net, x, y)
            for name in ZC:
                table.add(METHOD, f"{name} ({net_name})", score(name, net, x, y),
                          lambda: float(totals[name]), ref_label)  # fmt: skip
                if name in per_layer:
                    what = {"fisher": "per channel", "grad_norm": "per layer"}.get(
                        name, "per weight"
                    )
                    table.add(METHOD, f"{name} {what} ({net_name})", _joined(name, per_layer[name]),
                              lambda: _joined(name, _zc_array(name, arrays[name])),
                              ref_label)  # fmt: skip

        ours_spec = get_proxy("grad_norm").data
        selector = ZeroCostSelection(proxy="snip")
        ours_settings: dict[str, Any] = {
            "batch_size (nas-proxy, per ZC proxy)": [get_proxy(n).data.batch_size for n in ZC[:5]],
            "dataload (one random training batch, augmented)": ("random", 1, ours_spec.augment),
            "loss_fn (find_measures)": _our_loss_name(),
            "split_data": 1,
            "BN kept (bn=) per proxy": [True] * 5 + [False],
            "synflow input: one all-ones image": (get_proxy("synflow").data.kind, 1),
            # the selector passes no options to the ZC proxies: BN as nas-proxy (batch stats)
            "selector: BN kept, ZC proxies (supernet, post-validation)": [
                selector._make_proxy(supernet=s).__class__.selection_options(supernet=s) == {}
                for s in (True, False)
            ],
        }

        def theirs_settings() -> dict[str, Any]:
            defaults = F.script_defaults("nasbench2_pred.py")
            impls = ref_measures._measure_impls

            def bn_of(name: str) -> bool:  # the ``bn`` of ``@measure(name, bn=...)``
                impl = impls[name]
                return impl.__closure__[impl.__code__.co_freevars.index("bn")].cell_contents

            find = inspect.signature(predictive.find_measures).parameters
            split = inspect.signature(ref_measures.grad_norm.get_grad_norm_arr).parameters
            return {
                "batch_size (nas-proxy, per ZC proxy)": [defaults["batch_size"]] * 5,
                "dataload (one random training batch, augmented)": (
                    defaults["dataload"],
                    defaults["dataload_info"],
                    True,
                ),  # fmt: skip
                "loss_fn (find_measures)": find["loss_fn"].default.__name__,
                "split_data": split["split_data"].default,
                "BN kept (bn=) per proxy": [bn_of(n) for n in ZC],
                "synflow input: one all-ones image": ("ones", 1),
                "selector: BN kept, ZC proxies (supernet, post-validation)": [True, True],
            }

        F.add_settings(table, METHOD, ours_settings, theirs_settings, ref_label)


def _zc_array(name: str, ref: list[Tensor]) -> list[Tensor]:
    """ZC's per-layer array of ``name`` as ours lists it."""
    if name == "fisher":  # broadcast over weight.shape[1:]: one per channel
        return [t.reshape(t.shape[0], -1)[:, 0] for t in ref]
    if name == "grad_norm":  # a layer without gradient: zeros of its shape
        return [t if t.dim() == 0 else t.sum() for t in ref]
    return ref


def _joined(name: str, arrays: list[Tensor]) -> Any:
    """One tensor for the per-layer and per-channel rows (one number, or a few, per layer: as a
    list of small tensors a recording would spend most of its bytes on their headers)."""
    if name == "grad_norm":
        return torch.stack(arrays)
    if name == "fisher":
        return torch.cat(arrays)
    return arrays


def _our_loss_name() -> str:
    """The loss of our gradient pass, named by what it computes."""
    from nas.proxies.base import cross_entropy

    g = torch.Generator().manual_seed(0)
    logits, y = torch.randn(4, 3, generator=g), torch.tensor([0, 2, 1, 0])
    return (
        "cross_entropy"
        if torch.equal(cross_entropy(logits, y), TF.cross_entropy(logits, y))
        else "other"
    )


def compare_naswot(table: F.Table, refs: F.Refs, nets: dict[str, Scorable], x, y) -> None:
    live = refs.live("naswot")  # else the reference's values come from its recording
    ref_label = refs.label("naswot")
    with refs.imports("naswot", ".", ["."]), F.float64():
        if live:
            import scores  # type: ignore[import-not-found]

            get_batch_jacobian = F.load_function("score_networks.py", "get_batch_jacobian",
                                                 {"torch": torch})  # fmt: skip

        def reference(net: Scorable) -> tuple[Any, Any]:
            """score_networks.py's loop body on a copy of ``net``: K = 0, the hooks on every
            module whose type name holds "ReLU", a forward and backward (arms the hooks), a
            forward of the same batch; then K and its score."""
            if not live:
                return None, None
            network = PairOut(Scorable(copy.deepcopy(net.net), net.weights))
            namespace: dict[str, Any] = {"network": network, "np": np}
            forward_hook, backward_hook = nested_functions(
                "score_networks.py", ("counting_forward_hook", "counting_backward_hook"), namespace
            )
            network.K = np.zeros((len(x), len(x)))
            for _, module in network.named_modules():
                if "ReLU" in str(type(module)):
                    module.register_forward_hook(forward_hook)
                    module.register_backward_hook(backward_hook)
            x2 = torch.clone(x)
            with warnings.catch_warnings():  # its non-full backward hooks: deprecated
                warnings.simplefilter("ignore", FutureWarning)
                get_batch_jacobian(network, x.clone(), y, torch.device("cpu"), None)
                network(x2)
            return network.K, scores.get_score_func("hook_logdet")(network.K, y)

        for net_name, net in nets.items():
            kernel, ref_score = reference(net)
            table.add(METHOD, f"naswot K ({net_name})", torch.from_numpy(naswot_kernel(net, x)),
                      lambda: torch.from_numpy(kernel), ref_label)  # fmt: skip
            table.add(METHOD, f"naswot ({net_name})", score("naswot", net, x, None),
                      lambda: float(ref_score), ref_label)  # fmt: skip

        spec = get_proxy("naswot").data
        ours_settings = {
            "batch_size (naswot)": spec.batch_size,
            "augtype (naswot)": "none" if not spec.augment else "standard",
            "score": "hook_logdet",
            "repeat / maxofn (one batch, one evaluation)": (1, 1),
            "BN mode (naswot, nas-proxy)": get_proxy("naswot").bn,  # type: ignore[attr-defined]
        }

        def theirs_settings() -> dict[str, Any]:
            defaults = F.script_defaults("score_networks.py")
            return {
                "batch_size (naswot)": defaults["batch_size"],
                "augtype (naswot)": defaults["augtype"],
                "score": defaults["score"],
                "repeat / maxofn (one batch, one evaluation)": (
                    defaults["repeat"],
                    defaults["maxofn"],
                ),
                "BN mode (naswot, nas-proxy)": "train",  # the network is never put in eval()
            }

        F.add_settings(table, METHOD, ours_settings, theirs_settings, ref_label)


class _Float64Torch(types.ModuleType):
    """``torch`` for Zen's ``compute_nas_score``: its ``float32`` reads as the default dtype
    (float64 here), so it draws its inputs at the network's precision."""

    def __init__(self) -> None:
        super().__init__("torch")

    def __getattr__(self, name: str) -> Any:
        if name == "float32":
            return torch.get_default_dtype()
        return getattr(torch, name)


def compare_zen(table: F.Table, refs: F.Refs, nets: dict[str, Scorable], x) -> None:
    live = refs.live("zen")  # else the reference's values come from its recording
    ref_label = refs.label("zen")
    path = "ZeroShotProxy/compute_zen_score.py"
    with refs.imports("zen", ".", ["."]), F.float64():
        if live:
            namespace: dict[str, Any] = {"torch": _Float64Torch(), "nn": nn, "np": np}
            F.load_function(path, "network_weight_gaussian_init", namespace)
            compute_nas_score = F.load_function(path, "compute_nas_score", namespace)

        def reference(net: Scorable, repeat: int) -> float:
            with torch.random.fork_rng():
                torch.manual_seed(0)
                info = compute_nas_score(None, PreGap(copy.deepcopy(net.net)), 1e-2, HW, len(x),
                                         repeat)  # fmt: skip
            return float(info["avg_nas_score"])

        for net_name, net in nets.items():
            if not isinstance(net.net, TinyNetwork):
                continue  # supernet: the reference reads every BN's running_var (the cells
                # keep none); the 2-layer conv net: ours scores the networks of our spaces
            for repeat in (1, ZEN_REPEAT):
                table.add(METHOD, f"zen, {repeat} repeat(s) ({net_name})",
                          score("zen", net, x, None, repeat=repeat),
                          lambda: reference(net, repeat), ref_label)  # fmt: skip

        zen = get_proxy("zen")
        ours = {
            "batch_size (zen)": zen.data.batch_size,
            "repeat_times": zen.repeat,  # type: ignore[attr-defined]
            "mixup_gamma": zen.mixup_gamma,  # type: ignore[attr-defined]
        }

        def theirs() -> dict[str, Any]:
            defaults = F.script_defaults(path)
            return {k: defaults[k.split(" ")[0]] for k in ours}

        F.add_settings(table, METHOD, ours, theirs, ref_label)


def compare(table: F.Table, refs: F.Refs) -> None:
    """Each reference that runs here (a checkout) or has a recording: ours beside it."""
    nets = networks()
    x, y = batch(seed=2)
    here = [n for n in REFERENCES if refs.live(n) or refs.recorded is not None]
    if "zero_cost" in here:
        compare_zero_cost(table, refs, nets, x, y)
    if "naswot" in here:
        compare_naswot(table, refs, nets, x, y)
    if "zen" in here:
        compare_zen(table, refs, nets, x)


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
