"""NAS-Bench-201: the discrete ``TinyNetwork`` and the arch string <-> benchmark index map.

First stage of the pipeline (``search_spaces``). Dong & Yang, "NAS-Bench-201: Extending the
Scope of Reproducible Neural Architecture Search", ICLR 2020; the network is layer for layer the
authors' ``TinyNetwork`` / ``InferCell`` / ``ResNetBasicblock``:

* stem Conv3x3(3 -> C) + BN; three stages of N cells at C, 2C, 4C channels, joined by ResNet
  basic blocks of stride 2 (residual: AvgPool 2x2 then Conv1x1); BN-ReLU, global pool, linear;
* a cell has nodes 0..3; node j sums one op on each edge from i < j; output = node 3.

Every one of the 15,625 cells has exactly the parameter count of the authors' model
(``nb201_params_official.csv``). The benchmark's index order is not an enumeration order, so
the map ships as a table (``data/nb201_archs.bin``: one little-endian uint16 per index, the six
ops' positions in ``NB201_OPS`` as base-5 digits, edge 1<-0 most significant).
"""

from __future__ import annotations

import csv
from array import array
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from torch import Tensor, nn

from search_spaces.genotype import AnyGenotype, NB201Genotype, parse_nb201_arch
from search_spaces.ops import NB201_OPS, ReLUConvBN, build_op
from search_spaces.space import DATA_DIR

if TYPE_CHECKING:
    from search_spaces.layout import Part

NUM_ARCHS = 5**6
INDEX_FILE = DATA_DIR / "nb201_archs.bin"


def _encode(genotype: NB201Genotype) -> int:
    code = 0
    for op in genotype.ops:
        code = code * 5 + NB201_OPS.index(op)
    return code


def _decode(code: int) -> NB201Genotype:
    ops = []
    for _ in range(6):
        code, digit = divmod(code, 5)
        ops.append(NB201_OPS[digit])
    return NB201Genotype.from_ops(ops[::-1])


@cache
def _index_table() -> tuple[array, dict[int, int]]:
    codes = array("H")
    with open(INDEX_FILE, "rb") as f:
        codes.frombytes(f.read())
    if len(codes) != NUM_ARCHS:
        raise ValueError(f"{INDEX_FILE} holds {len(codes)} cells; expected {NUM_ARCHS}")
    return codes, {code: i for i, code in enumerate(codes)}


def _as_nb201(arch: NB201Genotype | str) -> NB201Genotype:
    if isinstance(arch, NB201Genotype):
        return arch
    if isinstance(arch, str):
        return parse_nb201_arch(arch)
    raise ValueError(f"expected an NB201 arch string or genotype, got {type(arch).__name__}")


def arch_to_index(arch: NB201Genotype | str) -> int:
    """The official NAS-Bench-201 index (0..15624) of an arch string or genotype."""
    return _index_table()[1][_encode(_as_nb201(arch))]


def index_to_arch(index: int) -> str:
    """The official arch string of benchmark index ``index``."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < NUM_ARCHS:
        raise ValueError(
            f"NB201 index {index!r} out of range; expected an int in 0..{NUM_ARCHS - 1}"
        )
    return str(_decode(_index_table()[0][index]))


def write_index_table(csv_path: str | Path, out_path: str | Path = INDEX_FILE) -> None:
    """Regenerate the shipped index table from a CSV with columns ``index, arch_str``."""
    rows: dict[int, str] = {}
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            rows[int(row["index"])] = row["arch_str"]
    if sorted(rows) != list(range(NUM_ARCHS)):
        raise ValueError(f"{csv_path}: expected indices 0..{NUM_ARCHS - 1}")
    codes = array("H", (_encode(parse_nb201_arch(rows[i])) for i in range(NUM_ARCHS)))
    if codes.itemsize != 2:
        raise RuntimeError("array('H') is not 16 bits on this platform")
    Path(out_path).write_bytes(codes.tobytes())


class ResNetBasicblock(nn.Module):
    """The stride-2 reduction block between NB201 stages (and its stride-1 form)."""

    def __init__(self, inplanes: int, planes: int, stride: int, affine: bool = True) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"ResNetBasicblock stride must be 1 or 2, got {stride}")
        self.conv_a = ReLUConvBN(inplanes, planes, 3, stride, 1, affine=affine, bias=not affine)
        self.conv_b = ReLUConvBN(planes, planes, 3, 1, 1, affine=affine, bias=not affine)
        self.downsample: nn.Module | None
        if stride == 2:
            self.downsample = nn.Sequential(
                nn.AvgPool2d(kernel_size=2, stride=2, padding=0),
                nn.Conv2d(inplanes, planes, kernel_size=1, stride=1, padding=0, bias=False),
            )
        elif inplanes != planes:
            self.downsample = ReLUConvBN(inplanes, planes, 1, 1, 0, affine=affine, bias=not affine)
        else:
            self.downsample = None
        self.out_dim = planes

    def forward(self, x: Tensor) -> Tensor:
        residual = x if self.downsample is None else self.downsample(x)
        return residual + self.conv_b(self.conv_a(x))


class InferCell(nn.Module):
    """A discrete NB201 cell. ``none`` edges are not built: they would only add zeros."""

    def __init__(self, genotype: NB201Genotype, C_in: int, C_out: int, stride: int = 1) -> None:
        super().__init__()
        self.layers = nn.ModuleDict()
        self.node_inputs: list[list[tuple[str, int]]] = []
        for j, node in enumerate(genotype.nodes, start=1):
            inputs = []
            for op, i in node:
                if op == "none":
                    continue
                key = f"{j}<-{i}"
                c_in, s = (C_in, stride) if i == 0 else (C_out, 1)
                self.layers[key] = build_op(op, c_in, C_out, s, affine=True)
                inputs.append((key, i))
            self.node_inputs.append(inputs)
        self.stride = stride
        self.out_dim = C_out

    def forward(self, x: Tensor) -> Tensor:
        nodes = [x]
        for inputs in self.node_inputs:
            if inputs:
                out = self.layers[inputs[0][0]](nodes[inputs[0][1]])
                for key, i in inputs[1:]:
                    out = out + self.layers[key](nodes[i])
            else:  # every incoming edge is `none`: the node is zero
                n, _, h, w = x.shape
                s = self.stride
                out = x.new_zeros(n, self.out_dim, (h + s - 1) // s, (w + s - 1) // s)
            nodes.append(out)
        return nodes[-1]


class TinyNetwork(nn.Module):
    """The NAS-Bench-201 network. ``forward`` returns ``(features, logits)`` like the reference.

    ``arch`` is an arch string, a benchmark index, or an ``NB201Genotype``.
    """

    def __init__(self, C: int, N: int, arch: NB201Genotype | str | int, num_classes: int) -> None:
        super().__init__()
        genotype = nb201_genotype(arch)
        self.genotype = genotype
        self.stem = nn.Sequential(
            nn.Conv2d(3, C, kernel_size=3, padding=1, bias=False), nn.BatchNorm2d(C)
        )
        channels = [C] * N + [2 * C] + [2 * C] * N + [4 * C] + [4 * C] * N
        reductions = [False] * N + [True] + [False] * N + [True] + [False] * N
        self.cells = nn.ModuleList()
        C_prev = C
        for C_curr, reduction in zip(channels, reductions):
            cell: nn.Module
            if reduction:
                cell = ResNetBasicblock(C_prev, C_curr, 2, True)
            else:
                cell = InferCell(genotype, C_prev, C_curr, 1)
            self.cells.append(cell)
            C_prev = C_curr
        self.lastact = nn.Sequential(nn.BatchNorm2d(C_prev), nn.ReLU(inplace=True))
        self.global_pooling = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(C_prev, num_classes)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        feature = self.stem(x)
        for cell in self.cells:
            feature = cell(feature)
        out = self.global_pooling(self.lastact(feature)).flatten(1)
        return out, self.classifier(out)


def nb201_genotype(arch: AnyGenotype | str | int) -> NB201Genotype:
    """An ``NB201Genotype`` from a genotype, an arch string or a benchmark index."""
    if isinstance(arch, int) and not isinstance(arch, bool):
        arch = index_to_arch(arch)
    if isinstance(arch, NB201Genotype):
        return arch
    if isinstance(arch, str):
        return parse_nb201_arch(arch)
    raise ValueError(f"expected an NB201 arch string, index or genotype, got {arch}")


def tiny_features(net: nn.Module, x: Tensor) -> Tensor:
    """The map ``TinyNetwork``'s global pooling reads: the last cell's output through the final
    BN and ReLU (``NB201Family.features``: the zero-cost proxies)."""
    assert isinstance(net, TinyNetwork)
    f = net.stem(x)
    for cell in net.cells:
        f = cell(f)
    out: Tensor = net.lastact(f)
    return out


def layout_block(part: Part) -> nn.Module:
    """The module one of the family's fixed latency-table blocks (``NB201Family.blocks``)
    measures at ``part``'s shape, as ``TinyNetwork`` builds it."""
    n, ci, co = part.name, part.C_in, part.C_out
    if n == "resblock":
        return ResNetBasicblock(ci, co, part.stride, True)
    if n == "head_nb201":
        return nn.Sequential(
            nn.BatchNorm2d(ci),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(ci, co),
        )
    raise ValueError(f"{n!r} is not a fixed block of the NB201 network")


__all__ = [
    "NUM_ARCHS",
    "InferCell",
    "ResNetBasicblock",
    "TinyNetwork",
    "arch_to_index",
    "index_to_arch",
    "layout_block",
    "nb201_genotype",
    "tiny_features",
    "write_index_table",
]
