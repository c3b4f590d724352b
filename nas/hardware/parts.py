"""The pieces of a discrete network that a latency table holds, and where each one occurs.

Hardware-aware search (``nas.hardware``); the additive latency model of ProxylessNAS (Cai et
al., ICLR 2019) and FBNet (Wu et al., CVPR 2019): a network's latency is the sum of its
pieces' latencies. A ``Part`` is one measurable module at one shape (name, channels in and out,
stride, input resolution); ``network_layout`` cuts the discrete network a space compiles to
into

* fixed parts, present whatever the genotype (stems, NB201's residual reduction blocks, DARTS's
  cell preprocessings, node sums and concatenations, the classifier), each with its count;
* per cell type, edge and candidate op: the parts that choosing that op adds to the network,
  over every cell of that type (NB201: the shared cell at each of the three stages, N times
  each; DARTS: each normal or reduction cell at its own channels and resolution).

The layouts follow ``search_spaces.nb201.TinyNetwork`` and ``search_spaces.darts.NetworkCIFAR``
layer for layer (``tests/hardware`` checks that the parts' parameters add up to the network's).
Two simplifications, both measured by the validation benchmark: NB201 node sums count three
additions per cell whatever the genotype (a node fed only by ``none`` edges sums fewer), and an
op of a DARTS cell is measured with its own leading ReLU, which the network shares between the
ops that read the same state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from search_spaces.families import family_of
from search_spaces.nb201 import ResNetBasicblock
from search_spaces.ops import OPS, FactorizedReduce, ReLUConvBN, build_op
from search_spaces.space import SPACE_NAMES, Space, get_space

# Fixed blocks that are not candidate operations (``OPS`` holds those).
FIXED_BLOCKS = (
    "stem",  # Conv3x3(3 -> C_out) + BN
    "resblock",  # NB201's stride-2 ResNet basic block between stages
    "relu_conv1x1_bn",  # DARTS cell preprocessing of a same-size input
    "factorized_reduce",  # DARTS preprocessing of s0 after a reduction cell
    "add",  # one node-sum addition at (C_in, H, W)
    "concat",  # DARTS cell output: C_out / C_in node states concatenated
    "head_nb201",  # BN, ReLU, global average pool, Linear(C_in -> C_out classes)
    "head_darts",  # global average pool, Linear(C_in -> C_out classes)
)


@dataclass(frozen=True, order=True)
class Part:
    """One module at one input shape: ``name`` is an op of ``search_spaces.ops.OPS`` or one
    of ``FIXED_BLOCKS``; the input is ``[batch, C_in, H, W]``."""

    name: str
    C_in: int
    C_out: int
    stride: int
    H: int
    W: int

    @property
    def key(self) -> str:
        return f"{self.name}:{self.C_in}>{self.C_out}:s{self.stride}:{self.H}x{self.W}"

    @staticmethod
    def from_key(key: str) -> Part:
        try:
            name, channels, stride, size = key.split(":")
            c_in, c_out = channels.split(">")
            h, w = size.split("x")
            return Part(name, int(c_in), int(c_out), int(stride.lstrip("s")), int(h), int(w))
        except ValueError:
            raise ValueError(
                f"latency-table key {key!r} is malformed; expected name:Cin>Cout:sS:HxW"
            ) from None

    def input_shape(self, batch: int) -> tuple[int, int, int, int]:
        return (batch, self.C_in, self.H, self.W)

    def build(self) -> nn.Module:
        """The module this part measures, as the discrete network builds it (affine BN)."""
        n, ci, co, s = self.name, self.C_in, self.C_out, self.stride
        if n in OPS:
            return build_op(n, ci, co, s, affine=True)
        if n == "stem":
            return nn.Sequential(nn.Conv2d(ci, co, 3, padding=1, bias=False), nn.BatchNorm2d(co))
        if n == "resblock":
            return ResNetBasicblock(ci, co, s, True)
        if n == "relu_conv1x1_bn":
            return ReLUConvBN(ci, co, 1, 1, 0)
        if n == "factorized_reduce":
            return FactorizedReduce(ci, co)
        if n == "add":
            return _Add()
        if n == "concat":
            if co % ci:
                raise ValueError(f"concat part {self.key}: C_out must be a multiple of C_in")
            return _Concat(co // ci)
        if n == "head_nb201":
            return nn.Sequential(
                nn.BatchNorm2d(ci),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(ci, co),
            )
        if n == "head_darts":
            return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(ci, co))
        raise ValueError(
            f"unknown part {n!r}; expected an operation ({', '.join(OPS)}) or a fixed block "
            f"({', '.join(FIXED_BLOCKS)})"
        )


class _Add(nn.Module):
    """``x + y`` for a second tensor ``y`` of x's shape (a node sum of two states)."""

    def __init__(self) -> None:
        super().__init__()
        self.other: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.other is None or self.other.shape != x.shape or self.other.dtype != x.dtype:
            self.other = torch.ones_like(x)
        return x + self.other


class _Concat(nn.Module):
    """``k`` feature maps of x's shape concatenated along channels (a DARTS cell's output)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x] * self.k, dim=1)


Counted = list[tuple[Part, int]]


@dataclass
class NetworkLayout:
    """Where every part occurs in the discrete network of ``space`` at this size.

    ``choices[cell_type][edge][op]`` lists the parts (with counts) that choosing ``op`` on
    ``edge`` adds, over all cells of ``cell_type``; edges and ops in ``search_spaces.space``
    order, so ``choices[ct]`` lines up with an ``[edges, ops]`` architecture tensor."""

    space: str
    C: int
    layers: int  # NB201: cells per stage N; DARTS: cells
    image_size: int
    num_classes: int
    fixed: Counted = field(default_factory=list)
    choices: dict[str, list[list[Counted]]] = field(default_factory=dict)

    def spec(self) -> dict[str, int | str]:
        return {
            "space": self.space,
            "C": self.C,
            "layers": self.layers,
            "image_size": self.image_size,
            "num_classes": self.num_classes,
        }

    def parts(self) -> list[Part]:
        """Every distinct part, fixed ones first, in a stable order."""
        seen: dict[Part, None] = {}
        for p, _ in self.fixed:
            seen[p] = None
        for edges in self.choices.values():
            for ops in edges:
                for counted in ops:
                    for p, _ in counted:
                        seen[p] = None
        return list(seen)


def _add(counted: Counted, part: Part, count: int = 1) -> None:
    for i, (p, c) in enumerate(counted):
        if p == part:
            counted[i] = (p, c + count)
            return
    counted.append((part, count))


def network_layout(
    space: str, *, C: int, layers: int, image_size: int, num_classes: int
) -> NetworkLayout:
    """The layout of the discrete network of ``space`` (NB201: ``TinyNetwork(C, N=layers)``;
    DARTS family: ``NetworkCIFAR(C, layers)``) on ``image_size`` inputs."""
    if space not in SPACE_NAMES:
        names = ", ".join(SPACE_NAMES)
        raise ValueError(f"unknown search space {space!r}; expected one of {names}")
    for name, v in (("C", C), ("layers", layers), ("image_size", image_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"network {name} must be a positive int, got {v!r}")
    if image_size % 4:
        raise ValueError(f"image_size must be a multiple of 4 (two halvings), got {image_size}")
    layout = NetworkLayout(space, C, layers, image_size, num_classes)
    sp = get_space(space)
    if space_family(sp) == "darts" and image_size > 64:
        raise ValueError(
            "latency layouts cover the CIFAR-style DARTS network (image_size <= 64); "
            f"got {image_size} (NetworkImageNet is not laid out yet)"
        )
    LAYOUTS[space_family(sp)](layout, sp)
    return layout


def space_family(sp: Space) -> str:
    """The name of ``sp``'s family (``search_spaces.families``), which picks its layout."""
    return family_of(sp).name


def _nb201_layout(layout: NetworkLayout, sp: Space) -> None:
    edges = sp.cells["cell"].edges
    C, N, H = layout.C, layout.layers, layout.image_size
    layout.fixed.append((Part("stem", 3, C, 1, H, H), 1))
    per_edge: list[list[Counted]] = [[[] for _ in e.ops] for e in edges]
    for stage in range(3):
        c, h = C * 2**stage, H // 2**stage
        if stage > 0:
            layout.fixed.append((Part("resblock", c // 2, c, 2, 2 * h, 2 * h), 1))
        # node sums: nodes 2 and 3 add 1 and 2 terms in every cell
        layout.fixed.append((Part("add", c, c, 1, h, h), 3 * N))
        for e in edges:
            for k, op in enumerate(e.ops):
                if op != "none":  # InferCell builds no module for `none`
                    _add(per_edge[e.index][k], Part(op, c, c, 1, h, h), N)
    layout.fixed.append((Part("head_nb201", 4 * C, layout.num_classes, 1, H // 4, H // 4), 1))
    layout.choices["cell"] = per_edge


def _darts_layout(layout: NetworkLayout, sp: Space) -> None:
    C, layers, H = layout.C, layout.layers, layout.image_size
    if layers < 3:
        raise ValueError(f"layers must be at least 3 (two reduction cells), got {layers}")
    C_stem = 3 * C
    layout.fixed.append((Part("stem", 3, C_stem, 1, H, H), 1))
    choices: dict[str, list[list[Counted]]] = {
        ct: [[[] for _ in e.ops] for e in sp.cells[ct].edges] for ct in ("normal", "reduce")
    }
    C_pp, C_p, C_curr = C_stem, C_stem, C
    h = H  # resolution of s1 (the previous cell's output)
    reduction_prev = False
    for i in range(layers):
        reduction = i in (layers // 3, 2 * layers // 3)
        if reduction:
            C_curr *= 2
        if reduction_prev:
            pre0 = Part("factorized_reduce", C_pp, C_curr, 2, 2 * h, 2 * h)
        else:
            pre0 = Part("relu_conv1x1_bn", C_pp, C_curr, 1, h, h)
        _add(layout.fixed, pre0)
        _add(layout.fixed, Part("relu_conv1x1_bn", C_p, C_curr, 1, h, h))
        h_out = h // 2 if reduction else h
        ct = "reduce" if reduction else "normal"
        cell = sp.cells[ct]
        steps = len(cell.intermediate_nodes)
        for e in cell.edges:
            stride = 2 if reduction and e.src < 2 else 1
            h_in = h if e.src < 2 else h_out
            for k, op in enumerate(e.ops):
                if op != "none":
                    _add(choices[ct][e.index][k], Part(op, C_curr, C_curr, stride, h_in, h_in))
        _add(layout.fixed, Part("add", C_curr, C_curr, 1, h_out, h_out), steps)
        _add(layout.fixed, Part("concat", C_curr, steps * C_curr, 1, h_out, h_out))
        reduction_prev = reduction
        C_pp, C_p = C_p, steps * C_curr
        h = h_out
    layout.fixed.append((Part("head_darts", C_p, layout.num_classes, 1, h, h), 1))
    layout.choices.update(choices)


# The layout of each space family's discrete network (``search_spaces.families``), by name.
LAYOUTS = {"nb201": _nb201_layout, "darts": _darts_layout}
