"""Fidelity of weight entanglement against confopt (automl/ConfigurableOptimizer).

confopt, the toolkit's closest peer, entangles the ops of one kind at several kernel sizes
(``src/confopt/oneshot/weightentangler.py``: ``WeightEntangler.forward``, called by
``searchspace/common/mixop.py``: ``OperationBlock.forward_method``): the ops that are
``WeightEntanglementModule``s are grouped by class, each group runs as its largest-kernel op
whose marked convolutions (``can_entangle_weight``) take ``sum_k alpha_k pad(crop_k(W))``
(``_slice_kernel_weight``), and its output joins ``sum alpha_j op_j(x)`` of the other ops with
weight 1. Ours is the component ``components=[weight_entangle]``
(``nas/strategies/components/weight_entangle.py``, ``nas/supernet/entangle.py``).

Known answers (no checkout): the centre crop written out, and a one-hot weight on a smaller
kernel equal to that op alone with the crops of the largest's weights.

With ``--reference-root confopt=PATH`` (a checkout of github.com/automl/ConfigurableOptimizer;
``weightentangler.py`` and the ``OneShotComponent`` it extends are loaded alone, its LoRA
convolution class stubbed, as our ops use plain convolutions): its ``WeightEntangler.forward``
on one edge of each family beside our ``MixedOp`` on the same weights (copies of our
unentangled edge's ops, each wrapped as one of its ``ConvolutionalWEModule``s with the
convolutions marked that its own spaces mark: DARTS ``SepConv`` ``op[1]``, ``op[5]``,
``DilConv`` ``op[1]``, NB201 ``ReLUConvBN`` ``op[1]``; the block chains, which confopt has
not, flattened with their depthwise convolution marked, one wrapper class per kind as confopt
groups by class), the mixing weights a softmax, float64: the edge's output, the gradient of
the mixing weights and of the shared kernels. The smaller ops' own parameters, which confopt
keeps and never reads, are not compared (ours removes them).

    python experiments/fidelity/weight_entangle.py \
        --reference-root confopt=~/src/ConfigurableOptimizer

Without a checkout, the same rows compare ours with confopt's values recorded in
``tests/fidelity/golden/weight_entangle.pt`` (``--record`` with the checkout writes them).
"""

from __future__ import annotations

import copy
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch
from torch import nn

from nas.plugins import build_components
from nas.supernet import build_supernet
from nas.supernet.entangle import centre_kernel
from nas.supernet.mixed_op import MixedOp
from search_spaces.families import family_of
from search_spaces.space import get_space

METHOD = "weight entanglement"
REFERENCES = {
    "confopt": F.Reference("automl/ConfigurableOptimizer", "src/confopt/oneshot/weightentangler.py")
}
# (space, layers, which edge: the first of this stride with a group), as the families mark them
EDGES = [("darts", 3, 1), ("darts", 3, 2), ("nb201", 1, 1), ("proxyless_cifar", 1, 1),
         ("fbnet_cifar", 1, 1)]  # fmt: skip


def _edge(space: str, layers: int, stride: int) -> tuple[Any, MixedOp, int]:
    """A double supernet (seeded) and its first mixed op of ``stride`` with a group."""
    torch.manual_seed(0)
    net = build_supernet(space, C=8, layers=layers, num_classes=10).double()
    family = family_of(net.space)
    for i, m in enumerate(net.mixed_ops()):
        groups = [g for g in family.entangle_groups(m.op_names) if all(m._runnable[k] for k in g)]
        if groups and m.stride == stride:
            return net, m, i
    raise AssertionError(f"{space}: no edge of stride {stride} to entangle")


def _inputs(mixed: MixedOp) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The edge's input, mixing weights (a softmax) and an upstream gradient (seeded)."""
    gen = torch.Generator().manual_seed(3)
    c_in = getattr(mixed, "C_in", mixed.C)
    x = torch.randn(4, c_in, 8, 8, generator=gen, dtype=torch.float64)
    alpha = torch.randn(len(mixed.op_names), generator=gen, dtype=torch.float64)
    w = torch.softmax(alpha, -1)
    return x, w, alpha


def ours(space: str, layers: int, stride: int) -> tuple[MixedOp, dict[int, nn.Module], Any]:
    """Our edge entangled by the component (its unentangled ops copied first for the
    reference) and the supernet."""
    net, mixed, _ = _edge(space, layers, stride)
    plain = {k: copy.deepcopy(op) for k, op in enumerate(mixed.ops) if mixed._runnable[k]}
    (component,) = build_components(F.compose([f"space={space}", "components=[weight_entangle]"]))
    component.prepare_supernet(net)
    return mixed, plain, net


def _ours_outputs(mixed: MixedOp) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    x, w, alpha = _inputs(mixed)
    alpha = alpha.clone().requires_grad_(True)
    w = torch.softmax(alpha, -1)
    y = mixed(x, w, [mixed._runnable[k] for k in range(len(w))])
    assert y is not None
    up = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    shared = [mixed.ops[g.members[0]].get_parameter(n) for g in mixed.entangled for n in g.weights]
    grads = torch.autograd.grad((y * up).sum(), [alpha, *shared])
    return y.detach(), grads[0], list(grads[1:])


def known_answers(table: F.Table) -> None:
    W = torch.arange(2 * 3 * 5 * 5, dtype=torch.float64).reshape(2, 3, 5, 5)
    crop = torch.zeros_like(W)
    crop[..., 1:4, 1:4] = W[..., 1:4, 1:4]
    table.add(METHOD, "centre 3x3 of a 5x5 kernel, zeros around it", centre_kernel(W, 3), crop)
    for space, layers, stride in EDGES[:1] + EDGES[2:3]:
        mixed, plain, _ = ours(space, layers, stride)
        x, _, _ = _inputs(mixed)
        g = mixed.entangled[0]
        small = g.members[-1]
        ref = copy.deepcopy(plain[small])
        big = dict(plain[g.members[0]].named_parameters())
        with torch.no_grad():
            for name, p in ref.named_parameters():
                src = big[name]
                if src.shape != p.shape:  # a kernel: the centre of the largest
                    q = (src.shape[-1] - p.shape[-1]) // 2
                    src = src[..., q : q + p.shape[-1], q : q + p.shape[-1]]
                p.copy_(src)
        w = torch.zeros(len(mixed.op_names), dtype=torch.float64)
        w[small] = 1
        y = mixed(x, w, [bool(v) for v in w])
        table.add(METHOD, f"{space}: one-hot {mixed.op_names[small]} = that op on the crops",
                  y, ref(x))  # fmt: skip


@contextmanager
def _reference_module(root: str) -> Iterator[Any]:
    """Within: confopt's ``weightentangler`` module, loaded alone (its base file, a LoRA stub,
    which its forward imports on every call)."""
    names = ("confopt", "confopt.oneshot", "confopt.searchspace", "confopt.searchspace.common")
    stubs = {name: types.ModuleType(name) for name in names}
    lora = types.ModuleType("confopt.searchspace.common.lora_layers")

    class Conv2DLoRA(nn.Module):  # never instantiated: our ops use nn.Conv2d
        pass

    lora.Conv2DLoRA = Conv2DLoRA  # type: ignore[attr-defined]
    stubs[lora.__name__] = lora
    files = [("confopt.oneshot.base", "src/confopt/oneshot/base.py"),
             ("confopt_we", "src/confopt/oneshot/weightentangler.py")]  # fmt: skip
    with F.files_alone(root, files, stubs) as loaded:
        yield loaded["confopt_we"]


def _leaves(op: nn.Module) -> list[nn.Module]:
    """The layers of ``op`` in forward order (our ops are chains of layers)."""
    if not any(True for _ in op.children()):
        return [op]
    return [leaf for child in op.children() for leaf in _leaves(child)]


class _Zero(nn.Module):
    """confopt's ``Zero`` (``none``): zeros of the strided input's shape."""

    def __init__(self, stride: int) -> None:
        super().__init__()
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :, :: self.stride, :: self.stride].mul(0.0)


def _reference_ops(
    we: Any, mixed: MixedOp, plain: dict[int, nn.Module], space: str
) -> list[nn.Module]:
    """The edge's ops as confopt's ``WeightEntangler`` sees them: each op of a group wrapped as
    a ``ConvolutionalWEModule`` of its kind's class, its kernel convolutions marked."""
    family = family_of(get_space(space))
    classes: dict[str, type] = {}
    members = {k for g in family.entangle_groups(mixed.op_names) for k in g}
    out: list[nn.Module] = []
    for k, name in enumerate(mixed.op_names):
        if k not in plain:
            out.append(_Zero(mixed.stride))
            continue
        if k not in members:
            out.append(plain[k])
            continue
        kind, kernel = family.op_kernel(name)  # type: ignore[misc]
        if kind not in classes:

            def mark(self: Any) -> None:
                for layer in self.op:
                    if isinstance(layer, nn.Conv2d) and layer.kernel_size[0] == self.kernel_size:
                        layer.can_entangle_weight = True

            def forward(self: Any, x: torch.Tensor) -> torch.Tensor:
                return self.op(x)  # as confopt's ops (SepConv, DilConv, ReLUConvBN)

            classes[kind] = type(f"WE_{kind}", (we.ConvolutionalWEModule,),
                                 {"mark_entanglement_weights": mark,
                                  "forward": forward})  # fmt: skip
        module = classes[kind]()
        module.kernel_size, module.stride = kernel, mixed.stride
        module.op = we.WeightEntanglementSequential(*_leaves(plain[k]))
        module.__post__init__()
        out.append(module)
    return out


def _reference_outputs(
    we: Any, mixed: MixedOp, plain: dict[int, nn.Module], space: str
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    ops = _reference_ops(we, mixed, plain, space)
    x, _, alpha = _inputs(mixed)
    alpha = alpha.clone().requires_grad_(True)
    w = torch.softmax(alpha, -1)
    y = we.WeightEntangler().forward(x, ops, list(w))
    up = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    shared = [
        dict(plain[g.members[0]].named_parameters())[n] for g in mixed.entangled for n in g.weights
    ]
    grads = torch.autograd.grad((y * up).sum(), [alpha, *shared])
    return y.detach(), grads[0], list(grads[1:])


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("confopt")
    ref_label = refs.label("confopt")
    with _reference_module(refs.root("confopt")) if live else nullcontext() as we:
        _compare(table, we, ref_label)


def _compare(table: F.Table, we: Any, ref_label: str) -> None:
    for space, layers, stride in EDGES:
        mixed, plain, _ = ours(space, layers, stride)
        y, g_alpha, g_shared = _ours_outputs(mixed)
        ref: dict[str, Any] = {}
        if we is not None:
            ref["y"], ref["alpha"], ref["shared"] = _reference_outputs(we, mixed, plain, space)
        largest = ", ".join(mixed.op_names[g.members[0]] for g in mixed.entangled)
        where = f"{space}, stride {stride} (groups of {largest})"
        table.add(METHOD, f"{where}: edge output (WeightEntangler.forward)", y,
                  lambda: ref["y"], ref_label)  # fmt: skip
        table.add(METHOD, f"{where}: gradient of the architecture logits", g_alpha,
                  lambda: ref["alpha"], ref_label)  # fmt: skip
        table.add(METHOD, f"{where}: gradient of the shared kernels", g_shared,
                  lambda: ref["shared"], ref_label)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
