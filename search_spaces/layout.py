"""The parts of a discrete network that a latency table holds, and where each one occurs.

First stage of the pipeline (``search_spaces``), for hardware-aware search (``nas.hardware``);
the additive latency model of ProxylessNAS (Cai et al., ICLR 2019) and FBNet (Wu et al., CVPR
2019): a network's latency is the sum of its pieces' latencies. A ``Part`` is one measurable
module at one shape (name, channels in and out, stride, input resolution); a ``NetworkLayout``
cuts the discrete network a space compiles to into

* fixed parts, present whatever the genotype (stems, NB201's residual reduction blocks, DARTS's
  cell preprocessings, node sums and concatenations, the classifier), each with its count;
* per cell type, edge and candidate op: the parts that choosing that op adds to the network,
  over every cell of that type.

Each family lays out its own network (``Family.layout``) and builds its own fixed blocks
(``Family.blocks``, ``Family.build_block``); the blocks every family uses are ``SHARED_BLOCKS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from search_spaces.families import FAMILIES
from search_spaces.ops import OPS, build_op

# Fixed blocks of every family (``Family.blocks`` adds each family's own).
SHARED_BLOCKS = (
    "stem",  # Conv3x3(3 -> C_out) + BN
    "add",  # one node-sum addition at (C_in, H, W)
)
# Every fixed block: the parts that are not candidate operations (``OPS`` holds those).
FIXED_BLOCKS = (*SHARED_BLOCKS, *(b for f in FAMILIES.values() for b in f.blocks))


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
        if n == "add":
            return _Add()
        for family in FAMILIES.values():
            if n in family.blocks:
                return family.build_block(self)
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


Counted = list[tuple[Part, int]]


def add_part(counted: Counted, part: Part, count: int = 1) -> None:
    """Count ``part`` ``count`` more times in ``counted`` (a new entry the first time)."""
    for i, (p, c) in enumerate(counted):
        if p == part:
            counted[i] = (p, c + count)
            return
    counted.append((part, count))


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

    # what a family's ``layout`` hook calls

    def add_fixed(
        self, name: str, C_in: int, C_out: int, stride: int, H: int, W: int, count: int = 1
    ) -> None:
        """A fixed part, ``count`` times more."""
        add_part(self.fixed, Part(name, C_in, C_out, stride, H, W), count)

    def add_choice(
        self,
        cell_type: str,
        edge: int,
        op: int,
        name: str,
        C_in: int,
        C_out: int,
        stride: int,
        H: int,
        W: int,
        count: int = 1,
    ) -> None:
        """A part that choosing op ``op`` (its index) on edge ``edge`` of ``cell_type`` adds,
        ``count`` times more (``choices`` holds every cell type of the space already)."""
        add_part(self.choices[cell_type][edge][op], Part(name, C_in, C_out, stride, H, W), count)
