"""Search spaces as data: for each cell type, its edges, the nodes they join, their candidate ops.

First stage of the pipeline (``search_spaces``). A space answers every structural question the
supernet, the strategies, the selectors and the genotype validator ask, so none of them
hard-codes a cell:

* ``darts`` (Liu et al., ICLR 2019): normal and reduce cells, 2 input nodes, 4 intermediate
  nodes, 14 edges, the 8 DARTS operations on every edge.
* ``s1``..``s4`` (RobustDARTS, Zela et al., ICLR 2020) and ``s5`` (the DARTS space without
  ``none``), as DARTS-PT defines them: per-edge candidate lists, read from
  ``search_spaces/data/robust_darts_spaces.json``.
* ``nb201`` (NAS-Bench-201, Dong & Yang, ICLR 2020): one cell type, 1 input node, 3 further
  nodes, 6 edges, 5 operations.
* ``proxyless`` / ``proxyless_cifar`` (ProxylessNAS, Cai et al., ICLR 2019): one cell type
  ``blocks``, a chain of 21 searchable MobileNet blocks (edge i: node i -> i + 1), 6 MBConvs and
  ``none`` (skip the block) on each; their data is ``search_spaces.proxyless_space``'s.
* ``fbnet`` / ``fbnet_cifar`` (FBNet, Wu et al., CVPR 2019): one cell type ``fbnet_blocks``, a
  chain of 22 searchable blocks (edge i: node i -> i + 1), FBNet's 8 blocks and ``skip`` on
  each; their data is ``search_spaces.fbnet_space``'s.

Architecture tensors index edges in ``CellSpace.edges`` order and ops in ``Edge.ops`` order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from search_spaces.op_names import DARTS_OPS, NB201_OPS
from search_spaces.op_names import OP_NAMES as OPS

DATA_DIR = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Edge:
    """One edge of a cell: ``src`` node -> ``dst`` node, with its candidate operations."""

    index: int
    src: int
    dst: int
    ops: tuple[str, ...]


@dataclass(frozen=True)
class CellSpace:
    """The graph of one cell type.

    Nodes ``0 .. num_input_nodes-1`` are inputs; every later node sums its incoming edges.
    ``inputs_per_node`` is how many incoming edges a discrete cell keeps per node (2 in DARTS,
    all of them in NB201, where it is ``None``). ``reduction``: cells of this type halve the
    resolution (their edges from the cell inputs have stride 2) and double the channels, as
    DARTS's reduction cells.
    """

    num_input_nodes: int
    num_nodes: int
    edges: tuple[Edge, ...]
    inputs_per_node: int | None
    reduction: bool = False

    def __post_init__(self) -> None:
        counts = {len(e.ops) for e in self.edges}
        if len(counts) != 1:
            raise ValueError(f"every edge of a cell needs the same number of ops, got {counts}")
        for e in self.edges:
            unknown = [op for op in e.ops if op not in OPS]
            if unknown:
                raise ValueError(f"edge {e.src}->{e.dst}: unknown operations {unknown}")

    @property
    def num_edges(self) -> int:
        return len(self.edges)

    @property
    def num_ops(self) -> int:
        """Candidate operations per edge (the second dimension of an architecture tensor)."""
        return len(self.edges[0].ops)

    @property
    def intermediate_nodes(self) -> range:
        return range(self.num_input_nodes, self.num_nodes)

    def edges_into(self, node: int) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.dst == node)

    def edge(self, src: int, dst: int) -> Edge:
        for e in self.edges:
            if e.src == src and e.dst == dst:
                return e
        raise ValueError(f"the cell has no edge {src}->{dst}")


@dataclass(frozen=True)
class Space:
    """A named search space: cell types (``normal``/``reduce`` or ``cell``) -> their graphs."""

    name: str
    family: str  # "darts" (DARTS-style cells, discrete net = NetworkCIFAR) or "nb201"
    cells: dict[str, CellSpace]

    @property
    def cell_types(self) -> tuple[str, ...]:
        return tuple(self.cells)

    @property
    def selects_inputs(self) -> bool:
        """Whether a discrete cell keeps only some inputs per node (DARTS: 2), so that
        selection chooses a topology besides the ops, and ``none`` is never an op of a derived
        cell (an edge is dropped by the topology choice); otherwise (NB201) every edge stays
        and ``none`` is an op like the others."""
        return any(c.inputs_per_node is not None for c in self.cells.values())

    @property
    def ops(self) -> tuple[str, ...]:
        """Every operation that appears anywhere in the space, in first-seen order."""
        seen: dict[str, None] = {}
        for cell in self.cells.values():
            for e in cell.edges:
                seen.update(dict.fromkeys(e.ops))
        return tuple(seen)


def _darts_edges(ops_per_edge: list[tuple[str, ...]]) -> tuple[Edge, ...]:
    edges: list[Edge] = []
    for dst in range(2, 6):
        for src in range(dst):
            edges.append(Edge(len(edges), src, dst, ops_per_edge[len(edges)]))
    return tuple(edges)


def _darts_like(name: str, normal: list[tuple[str, ...]], reduce: list[tuple[str, ...]]) -> Space:
    def cell(ops: list[tuple[str, ...]], reduction: bool) -> CellSpace:
        edges = _darts_edges(ops)
        return CellSpace(2, num_nodes=6, edges=edges, inputs_per_node=2, reduction=reduction)

    cells = {"normal": cell(normal, False), "reduce": cell(reduce, True)}
    return Space(name=name, family="darts", cells=cells)


def _nb201() -> Space:
    edges: list[Edge] = []
    for dst in range(1, 4):
        for src in range(dst):
            edges.append(Edge(len(edges), src, dst, NB201_OPS))
    cell = CellSpace(num_input_nodes=1, num_nodes=4, edges=tuple(edges), inputs_per_node=None)
    return Space(name="nb201", family="nb201", cells={"cell": cell})


@cache
def _robust_darts_lists() -> dict[str, dict[str, list[list[str]]]]:
    with open(DATA_DIR / "robust_darts_spaces.json") as f:
        data: dict[str, dict[str, list[list[str]]]] = json.load(f)
    return data


SPACE_NAMES: tuple[str, ...] = (
    "darts",
    "s1",
    "s2",
    "s3",
    "s4",
    "s5",
    "nb201",
    "proxyless",  # ProxylessNAS's block chain (search_spaces.proxyless_space), ImageNet
    "proxyless_cifar",  # the same chain laid out for 32x32 inputs
    "fbnet",  # FBNet's block chain (search_spaces.fbnet_space), ImageNet
    "fbnet_cifar",  # the same chain laid out for 32x32 inputs
)

# The spaces whose data is a family's own module, which registers their builder here when it is
# imported (search_spaces.proxyless_space, search_spaces.fbnet_space; the package's __init__
# imports them through genotype)
SPACE_BUILDERS: dict[str, Callable[[str], Space]] = {}


@cache
def get_space(name: str) -> Space:
    """The search space called ``name`` (one of ``SPACE_NAMES``)."""
    if name == "darts":
        return _darts_like("darts", [DARTS_OPS] * 14, [DARTS_OPS] * 14)
    if name == "nb201":
        return _nb201()
    if name in SPACE_BUILDERS:
        return SPACE_BUILDERS[name](name)
    if name in SPACE_NAMES:
        lists = _robust_darts_lists()[name]
        return _darts_like(
            name,
            [tuple(ops) for ops in lists["normal"]],
            [tuple(ops) for ops in lists["reduce"]],
        )
    raise ValueError(f"unknown search space {name!r}; expected one of {', '.join(SPACE_NAMES)}")
