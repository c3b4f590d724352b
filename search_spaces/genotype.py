"""Genotypes: the discrete architecture that search hands to retraining.

First stage of the pipeline (``search_spaces``), and the contract between ``nas.strategies`` /
``nas.selection`` and ``nas.training``. Two kinds:

* ``DartsGenotype`` (Liu et al., ICLR 2019): per cell type, two ``(op, input)`` pairs per
  intermediate node and the nodes concatenated at the output. Its text form is exactly what
  the reference code prints (``Genotype(normal=[('sep_conv_3x3', 0), ...],
  normal_concat=range(2, 6), ...)``); ``Genotype`` is an alias so ported code reads the same.
  A *sparse* DARTS genotype (FairDARTS, Chu et al., ECCV 2020, ``threshold_sparse``) names the
  node each pair feeds, so a node keeps 0-2 inputs; its text is the FairDARTS reference's triples
  ``Genotype(normal=[('sep_conv_3x3', 2, 0), ...], ...)`` (op, node, input).
* ``NB201Genotype`` (Dong & Yang, ICLR 2020): every node ``j`` keeps one op on each edge from
  ``i < j``; its text form is the benchmark's arch string ``|op~0|+|op~0|op~1|+|...|``.
* ``ProxylessGenotype`` (Cai et al., ICLR 2019): one op per searchable block of the ProxylessNAS
  chain (an MBConv, or ``none``: skipped), and a released network's own widths if it has them;
  its text form is ``proxyless:3x3_MBConv3-none-...[@32-16-...]``.
* ``FBNetGenotype`` (Wu et al., CVPR 2019): one op per searchable block of FBNet's chain (a
  block ``kKeE[g2]``, or ``skip``), and the last conv's width where it is not the space's 1984
  (FBNet-A's 1504); its text form is ``fbnet:k3e1-skip-...[@1504]``.

The last two subclass ``ChainGenotype`` (one op per block of a chain space,
``search_spaces.chain``) and differ only in their names, their skip op and the optional field
after the ops.

Each class answers for its family: its structure (``cell_types``, ``edges``, ``output_nodes``,
``validate``), its drawing (``drawing``, ``node_label``, ``cell_title``, ``layout``), and its
text and JSON forms (``text``, ``text_start``, ``from_text``, ``to_json``, ``from_json``), which
``format_genotype``, ``parse_genotype`` and ``genotype_from_json`` ask of the classes registered
in ``GENOTYPE_TYPES``.

Parsing never evaluates user text: DARTS text is read through Python's AST, literals only.
Every error is a one-line ``ValueError`` naming the bad element and what was allowed.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeGuard, TypeVar, Union

from search_spaces.chain import ChainCell, chain_cell_of
from search_spaces.fbnet_space import BASE_HEAD as FBNET_HEAD
from search_spaces.fbnet_space import CELL_TYPE as FBNET_CELL_TYPE
from search_spaces.fbnet_space import FBNET_SPACES
from search_spaces.fbnet_space import SKIP_OP as FBNET_SKIP
from search_spaces.op_names import OP_NAMES as OPS
from search_spaces.proxyless_space import CELL_TYPE as PROXYLESS_CELL_TYPE
from search_spaces.proxyless_space import PROXYLESS_SPACES
from search_spaces.proxyless_space import SKIP_OP as PROXYLESS_SKIP
from search_spaces.space import Space, get_space

OpInput = tuple[str, int]


def _freeze_pairs(pairs: Iterable[Any], where: str) -> tuple[OpInput, ...]:
    out = []
    for pair in pairs:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"{where}: expected (op_name, input_index) pairs, got {pair!r}")
        op, idx = pair
        if not isinstance(op, str) or isinstance(idx, bool) or not isinstance(idx, int):
            raise ValueError(f"{where}: expected (str, int) pairs, got {pair!r}")
        out.append((op, idx))
    return tuple(out)


def _freeze_nodes(nodes: Iterable[Any], cell: str) -> tuple[int, ...]:
    values = tuple(nodes)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{cell}_nodes: expected node indices, got {values!r}")
    return values


def _freeze_concat(concat: Iterable[Any], where: str) -> tuple[int, ...]:
    values = tuple(concat)
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{where}: expected a non-empty list of node indices, got {values!r}")
    return values


@dataclass(frozen=True)
class DartsGenotype:
    """A DARTS-style genotype; accepts lists and ``range``s as the reference namedtuple does.

    ``concat_as_range`` only records how the concat lists were written, so that text round
    trips are lossless; it takes no part in equality.
    """

    normal: tuple[OpInput, ...]
    normal_concat: tuple[int, ...]
    reduce: tuple[OpInput, ...]
    reduce_concat: tuple[int, ...]
    concat_as_range: bool = field(default=False, compare=False)
    # sparse cells (FairDARTS): the node each pair feeds, non-decreasing, at most two pairs a
    # node; None for the dense cells of DARTS (two pairs per node, node 2 + k // 2 for pair k)
    normal_nodes: tuple[int, ...] | None = None
    reduce_nodes: tuple[int, ...] | None = None

    family: ClassVar[str] = "darts"
    space_name: ClassVar[str] = "darts"  # the family's reference space (a run naming none)
    cell_types: ClassVar[tuple[str, ...]] = ("normal", "reduce")
    input_nodes: ClassVar[tuple[int, ...]] = (0, 1)  # c_{k-2}, c_{k-1}
    keeps_every_edge: ClassVar[bool] = False  # two inputs per node; never a `none` op
    # how a cell is drawn (nas.analysis): figure inches, and where an op label sits along an
    # edge longer than 3 units (nearer the node it feeds: a node's two labels come from two sides)
    figure_size: ClassVar[tuple[float, float]] = (8.5, 3.6)
    long_edge_label_at: ClassVar[float] = 0.62

    @staticmethod
    def node_label(node: int) -> str:
        """The display name of cell node ``node`` (``Edge.src`` / ``Edge.dst`` indices), in
        matplotlib mathtext."""
        return "$c_{k-2}$" if node == 0 else "$c_{k-1}$" if node == 1 else str(node - 2)

    @staticmethod
    def cell_title(cell_type: str) -> str:
        return f"{cell_type} cell"

    @staticmethod
    def layout(nodes: Sequence[tuple[str, str]]) -> dict[str, tuple[float, float]]:
        """Positions of a drawn cell's ``(name, kind)`` nodes: the two inputs stacked on the
        left, the intermediate nodes zigzagging right, the output last."""
        inputs = [n for n, k in nodes if k == "input"]
        inner = [n for n, k in nodes if k == "node"]
        output = [n for n, k in nodes if k == "output"]
        pos = {inputs[0]: (0.0, 1.1), inputs[1]: (0.0, -1.1)}
        for i, n in enumerate(inner):
            pos[n] = (2.4 * (i + 1), 1.0 if i % 2 == 0 else -1.0)
        pos[output[0]] = (2.4 * (len(inner) + 1), 0.0)
        return pos

    def __post_init__(self) -> None:
        for cell in ("normal", "reduce"):
            object.__setattr__(self, cell, _freeze_pairs(getattr(self, cell), f"{cell} cell"))
            concat = getattr(self, f"{cell}_concat")
            object.__setattr__(self, f"{cell}_concat", _freeze_concat(concat, f"{cell}_concat"))
            nodes = getattr(self, f"{cell}_nodes")
            if nodes is not None:
                object.__setattr__(self, f"{cell}_nodes", _freeze_nodes(nodes, cell))
                if len(getattr(self, f"{cell}_nodes")) != len(getattr(self, cell)):
                    raise ValueError(
                        f"{cell} cell: {len(getattr(self, cell))} (op, input) pairs but "
                        f"{len(nodes)} destination nodes; expected one node per pair"
                    )
            elif len(getattr(self, cell)) % 2:
                raise ValueError(
                    f"{cell} cell: expected two (op, input) pairs per node, got an odd number "
                    f"({len(getattr(self, cell))})"
                )
        if (self.normal_nodes is None) != (self.reduce_nodes is None):
            raise ValueError(
                "a sparse genotype names the nodes of both cells (normal_nodes and "
                "reduce_nodes), or of neither"
            )
        self.validate()

    def cell(self, cell_type: str) -> tuple[OpInput, ...]:
        if cell_type not in ("normal", "reduce"):
            raise ValueError(f"unknown cell type {cell_type!r}; expected 'normal' or 'reduce'")
        return self.normal if cell_type == "normal" else self.reduce

    def concat(self, cell_type: str) -> tuple[int, ...]:
        self.cell(cell_type)
        return self.normal_concat if cell_type == "normal" else self.reduce_concat

    @property
    def sparse(self) -> bool:
        """Whether the cells name each pair's node (FairDARTS: nodes keep 0-2 inputs)."""
        return self.normal_nodes is not None

    def nodes(self, cell_type: str) -> tuple[int, ...]:
        """The node each pair of ``cell(cell_type)`` feeds."""
        given = self.normal_nodes if cell_type == "normal" else self.reduce_nodes
        if given is not None:
            return given
        return tuple(2 + k // 2 for k in range(len(self.cell(cell_type))))

    def steps(self, cell_type: str) -> int:
        """The number of intermediate nodes of the cell (a sparse cell's may have no input)."""
        if not self.sparse:
            return len(self.cell(cell_type)) // 2
        return max([*self.concat(cell_type), *self.nodes(cell_type), 1]) - 1

    def edges(self, cell_type: str) -> list[tuple[str, int, int]]:
        """The kept edges ``(op, src, dst)`` of a cell, node indices as in the space's edges
        (dense cells: two per intermediate node, node ``2 + k // 2`` for pair ``k``)."""
        return [
            (op, idx, node) for (op, idx), node in zip(self.cell(cell_type), self.nodes(cell_type))
        ]

    def output_nodes(self, cell_type: str) -> tuple[int, ...]:
        """The nodes the cell's output concatenates. A sparse cell concatenates the nodes that
        have inputs, whatever its concat says, as FairDARTS's ``DCOCell`` (``model.py:60-113``:
        its multiplier is the number of such nodes); an isolated node is left out."""
        if not self.sparse:
            return self.concat(cell_type)
        return tuple(sorted(set(self.nodes(cell_type))))

    def drawing(
        self, cell_type: str
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str, str | None]]]:
        """``(nodes, edges)`` of the cell as drawn: nodes ``(label, kind)`` with kind input /
        node / output, edges ``(src label, dst label, op)``; ``op`` None: the output concat."""
        steps = self.steps(cell_type)
        names = ["c_{k-2}", "c_{k-1}", *(str(i) for i in range(steps)), "c_{k}"]
        kinds = ["input", "input", *(["node"] * steps), "output"]
        edges: list[tuple[str, str, str | None]] = [
            (names[src], names[dst], op) for op, src, dst in self.edges(cell_type)
        ]
        edges += [(names[c], names[-1], None) for c in self.output_nodes(cell_type)]
        return list(zip(names, kinds)), edges

    def validate(self, space: Space | None = None) -> None:
        """Check structure (and, given a space, that every op is allowed on its edge)."""
        if space is not None and space.family != "darts":
            raise ValueError(
                f"a DARTS-style genotype cannot be used with space {space.name!r}; "
                "expected a DARTS-style space (darts, s1..s5)"
            )
        for cell_type in ("normal", "reduce"):
            pairs = self.cell(cell_type)
            steps = self.steps(cell_type)
            cell_space = space.cells[cell_type] if space is not None else None
            if self.sparse:
                self._validate_sparse(cell_type, cell_space, space)
            elif cell_space is not None and steps != len(cell_space.intermediate_nodes):
                raise ValueError(
                    f"{cell_type} cell: {len(pairs)} (op, input) pairs give {steps} nodes; "
                    f"space {space.name!r} expects {2 * len(cell_space.intermediate_nodes)} "  # type: ignore[union-attr]
                    f"pairs (2 inputs for each of {len(cell_space.intermediate_nodes)} nodes)"
                )
            for (op, idx), node in zip(pairs, self.nodes(cell_type)):
                where = f"{cell_type} cell, node {node}"
                if op not in OPS:
                    raise ValueError(
                        f"{where}: unknown operation {op!r}; expected one of {', '.join(OPS)}"
                    )
                if not 0 <= idx < node:
                    raise ValueError(
                        f"{where}: input index {idx} out of range; node {node} takes inputs "
                        f"0..{node - 1}"
                    )
                # a node's two pairs may share an input: GDAS derives such cells
                # (AutoDL search_model_gdas_nasnet.py:128-161) and NetworkCIFAR runs them
                if cell_space is not None:
                    allowed = cell_space.edge(idx, node).ops
                    if op not in allowed:
                        raise ValueError(
                            f"{where}: operation {op!r} is not allowed on edge {idx}->{node} "
                            f"of space {space.name!r}; allowed: {', '.join(allowed)}"  # type: ignore[union-attr]
                        )
            concat = self.concat(cell_type)
            bad = [c for c in concat if not 2 <= c < 2 + steps]
            if bad or len(set(concat)) != len(concat):
                raise ValueError(
                    f"{cell_type}_concat {list(concat)}: expected distinct intermediate nodes "
                    f"in 2..{1 + steps}"
                )

    def _validate_sparse(self, cell_type: str, cell_space: Any, space: Space | None) -> None:
        """A sparse cell: nodes in order, at most two pairs a node, each on its own input, and
        every input a cell input or a node that has inputs itself (FairDARTS's ``DCOCell``
        skips an edge from an isolated node and fails when a node has nothing else: such
        genotypes are refused here instead)."""
        nodes = self.nodes(cell_type)
        if not nodes:
            raise ValueError(
                f"{cell_type} cell: no node has an input, so the cell has no output; expected "
                "at least one (op, node, input) triple"
            )
        if list(nodes) != sorted(nodes):
            raise ValueError(
                f"{cell_type} cell: destination nodes {list(nodes)} out of order; expected "
                "the pairs of node 2 first, then node 3, ..."
            )
        if cell_space is not None and self.steps(cell_type) > len(cell_space.intermediate_nodes):
            raise ValueError(
                f"{cell_type} cell: node {1 + self.steps(cell_type)} is beyond the "
                f"{len(cell_space.intermediate_nodes)} intermediate nodes of space "
                f"{space.name!r}"  # type: ignore[union-attr]
            )
        seen: dict[int, list[int]] = {}
        for (_op, idx), node in zip(self.cell(cell_type), nodes):
            where = f"{cell_type} cell, node {node}"
            if node < 2:
                raise ValueError(f"{where}: not an intermediate node; expected nodes 2 and up")
            inputs = seen.setdefault(node, [])
            if idx in inputs:
                raise ValueError(f"{where}: input {idx} given twice; one op per edge")
            inputs.append(idx)
            if len(inputs) > 2:
                raise ValueError(f"{where}: {len(inputs)} inputs; a sparse node keeps 0-2")
            if 0 <= idx < node and idx >= 2 and idx not in seen:
                raise ValueError(
                    f"{where}: input {idx} is a node without inputs; expected a cell input "
                    "(0, 1) or a node that has inputs"
                )

    # ---- text and JSON forms (what ``format_genotype`` / ``parse_genotype`` /
    # ``genotype_from_json`` ask each class; ``text_start`` None: the reference's text has no
    # fixed start, so text that no other class claims is read as this class's)
    text_start: ClassVar[str | None] = None
    # (how the text form starts, an example): text that a shell splits at its spaces and strips
    # of its quotes unless the whole override is quoted (nas-train's quoting hint); None: the
    # text form passes a shell as typed
    shell_text: ClassVar[tuple[str, str] | None] = (
        "Genotype",
        "Genotype(normal=[('sep_conv_3x3', 0), ...], normal_concat=range(2, 6), ...)",
    )

    def text(self) -> str:
        """The reference text ``Genotype(normal=[...], normal_concat=..., ...)``."""

        def pairs(cell_type: str) -> str:
            if self.sparse:  # FairDARTS's triples (op, node, input)
                edges = self.edges(cell_type)
                return "[" + ", ".join(f"('{op}', {dst}, {src})" for op, src, dst in edges) + "]"
            return "[" + ", ".join(f"('{op}', {i})" for op, i in self.cell(cell_type)) + "]"

        r = self.concat_as_range
        return (
            f"Genotype(normal={pairs('normal')}, "
            f"normal_concat={_format_concat(self.normal_concat, r)}, "
            f"reduce={pairs('reduce')}, "
            f"reduce_concat={_format_concat(self.reduce_concat, r)})"
        )

    @classmethod
    def from_text(cls, text: str) -> DartsGenotype:
        return parse_darts_genotype(text)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DartsGenotype:
        """Inverse of ``to_json`` (``data["type"]`` already checked)."""
        fields = ("normal", "normal_concat", "reduce", "reduce_concat")
        missing = [f for f in fields if f not in data]
        if missing:
            raise ValueError(f"malformed genotype JSON: missing field(s) {', '.join(missing)}")
        return cls(
            **{f: data[f] for f in fields},
            concat_as_range=bool(data.get("concat_as_range", False)),
            normal_nodes=data.get("normal_nodes"),
            reduce_nodes=data.get("reduce_nodes"),
        )

    def __str__(self) -> str:
        return format_genotype(self)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": "darts",
            "normal": [list(p) for p in self.normal],
            "normal_concat": list(self.normal_concat),
            "reduce": [list(p) for p in self.reduce],
            "reduce_concat": list(self.reduce_concat),
            "concat_as_range": self.concat_as_range,
        }
        if self.sparse:
            data["normal_nodes"] = list(self.nodes("normal"))
            data["reduce_nodes"] = list(self.nodes("reduce"))
        return data


Genotype = DartsGenotype  # the reference's name, so ported code reads the same


@dataclass(frozen=True)
class NB201Genotype:
    """A NAS-Bench-201 cell: ``nodes[j-1]`` lists ``(op, i)`` for each input ``i < j``."""

    nodes: tuple[tuple[OpInput, ...], ...]

    family: ClassVar[str] = "nb201"
    space_name: ClassVar[str] = "nb201"
    cell_types: ClassVar[tuple[str, ...]] = ("cell",)
    input_nodes: ClassVar[tuple[int, ...]] = (0,)
    keeps_every_edge: ClassVar[bool] = True  # every edge, `none` an op like the others
    figure_size: ClassVar[tuple[float, float]] = (6.5, 3.2)  # drawing: see DartsGenotype
    long_edge_label_at: ClassVar[float] = 0.5

    @staticmethod
    def node_label(node: int) -> str:
        return str(node)

    @staticmethod
    def cell_title(cell_type: str) -> str:
        return "NB201 cell"

    @staticmethod
    def layout(nodes: Sequence[tuple[str, str]]) -> dict[str, tuple[float, float]]:
        """Input left, the two intermediate nodes above, output right."""
        names = [n for n, _ in nodes]
        return dict(zip(names, [(0.0, 0.0), (2.2, 1.5), (4.4, 1.5), (6.6, 0.0)]))

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "nodes",
            tuple(_freeze_pairs(n, f"NB201 node {j + 1}") for j, n in enumerate(self.nodes)),
        )
        self.validate()

    def validate(self, space: Space | None = None) -> None:
        if space is not None and space.family != "nb201":
            raise ValueError(
                f"an NB201 arch string cannot be used with space {space.name!r}; "
                "expected space 'nb201'"
            )
        space = space or get_space("nb201")
        cell = space.cells["cell"]
        if len(self.nodes) != len(cell.intermediate_nodes):
            raise ValueError(
                f"NB201 arch has {len(self.nodes)} nodes; expected "
                f"{len(cell.intermediate_nodes)} ('|op~0|+|op~0|op~1|+|op~0|op~1|op~2|')"
            )
        for j, node in enumerate(self.nodes, start=1):
            inputs = [i for _, i in node]
            if inputs != list(range(j)):
                raise ValueError(
                    f"NB201 node {j}: inputs {inputs}; expected one op from each of "
                    f"{list(range(j))}, in that order"
                )
            for op, i in node:
                allowed = cell.edge(i, j).ops
                if op not in allowed:
                    raise ValueError(
                        f"NB201 node {j}, input {i}: unknown operation {op!r}; expected one of "
                        f"{', '.join(allowed)}"
                    )

    @property
    def ops(self) -> tuple[str, ...]:
        """The op of every edge in edge order (1<-0, 2<-0, 2<-1, 3<-0, 3<-1, 3<-2)."""
        return tuple(op for node in self.nodes for op, _ in node)

    def _check_cell_type(self, cell_type: str) -> None:
        if cell_type != "cell":
            raise ValueError(f"an NB201 genotype has one cell type 'cell', not {cell_type!r}")

    def edges(self, cell_type: str = "cell") -> list[tuple[str, int, int]]:
        """The edges ``(op, src, dst)`` of the cell (all six; ``none`` ones included)."""
        self._check_cell_type(cell_type)
        return [(op, i, j) for j, node in enumerate(self.nodes, 1) for op, i in node]

    def output_nodes(self, cell_type: str = "cell") -> tuple[int, ...]:
        """The node that is the cell's output (the last)."""
        self._check_cell_type(cell_type)
        return (len(self.nodes),)

    def drawing(
        self, cell_type: str = "cell"
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str, str | None]]]:
        """``(nodes, edges)`` of the cell as drawn (see ``DartsGenotype.drawing``)."""
        self._check_cell_type(cell_type)
        names = [str(i) for i in range(len(self.nodes) + 1)]
        kinds = ["input", *(["node"] * (len(self.nodes) - 1)), "output"]
        edges: list[tuple[str, str, str | None]] = [
            (names[i], names[j], op) for op, i, j in self.edges()
        ]
        return list(zip(names, kinds)), edges

    @classmethod
    def from_ops(cls, ops: Sequence[str]) -> NB201Genotype:
        if len(ops) != 6:
            raise ValueError(f"an NB201 cell has 6 edges; got {len(ops)} ops")
        it = iter(ops)
        return cls(tuple(tuple((next(it), i) for i in range(j)) for j in range(1, 4)))

    # ---- text and JSON forms (see DartsGenotype): the benchmark's arch string
    text_start: ClassVar[str | None] = "|"
    shell_text: ClassVar[tuple[str, str] | None] = None  # passed quoted, or from a file

    def text(self) -> str:
        """The arch string ``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|``."""
        return "|" + "|+|".join("|".join(f"{op}~{i}" for op, i in n) for n in self.nodes) + "|"

    @classmethod
    def from_text(cls, text: str) -> NB201Genotype:
        return parse_nb201_arch(text)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NB201Genotype:
        """Inverse of ``to_json`` (``data["type"]`` already checked)."""
        if not isinstance(data.get("arch"), str):
            raise ValueError('malformed genotype JSON: an nb201 genotype needs "arch": "|...|"')
        return parse_nb201_arch(data["arch"])

    def __str__(self) -> str:
        return format_genotype(self)

    def to_json(self) -> dict[str, Any]:
        return {"type": "nb201", "arch": format_genotype(self)}


def _two_rows(nodes: Sequence[tuple[str, str]]) -> dict[str, tuple[float, float]]:
    """Positions of a drawn chain's nodes: two rows, left to right, then right to left."""
    names = [n for n, _ in nodes]
    row = (len(names) + 1) // 2
    return {
        n: (2.0 * i, 1.0) if i < row else (2.0 * (2 * row - 1 - i), -1.0)
        for i, n in enumerate(names)
    }


class _ItsCellType(str):
    """The type of ``ITS_CELL_TYPE``."""


# the default ``cell_type`` of a chain genotype's methods: its one cell type (a string object of
# its own, so that whatever a caller passes, None included, is checked)
ITS_CELL_TYPE: str = _ItsCellType("its cell type")


@dataclass(frozen=True)
class ChainGenotype:
    """A network of a chain space (``search_spaces.chain``): the op of each searchable block of
    the chain, in order (a candidate of the block, or the skip op where the block can be
    skipped).

    A family's subclass adds one optional field after ``ops``, named by ``extra`` (None, a
    channel count or a tuple of them; ``_check_extra`` checks it), and sets the class variables
    below. Text form (see ``DartsGenotype``): ``text_start`` and the ops joined by ``-``, then,
    where ``extra`` is set, ``@`` and its channel counts joined by ``-``; no character a shell
    or a Hydra override treats specially. JSON form: the ops, and ``extra`` under its name."""

    ops: tuple[str, ...]

    family: ClassVar[str]
    space_name: ClassVar[str]
    space_names: ClassVar[tuple[str, ...]]  # the family's spaces (in messages)
    cell_types: ClassVar[tuple[str, ...]]
    input_nodes: ClassVar[tuple[int, ...]] = (0,)
    keeps_every_edge: ClassVar[bool] = True  # every block, the skip op an op like the others
    figure_size: ClassVar[tuple[float, float]] = (14.0, 3.6)  # drawing: see DartsGenotype
    long_edge_label_at: ClassVar[float] = 0.5
    title: ClassVar[str]  # the family in messages and figure titles
    article: ClassVar[str] = "a"  # the article of its title and its name in messages
    skip_op: ClassVar[str]
    skip_named: ClassVar[str]  # the skip op as a refusal names it
    extra: ClassVar[str]  # the name of the optional field after ``ops``
    text_start: ClassVar[str]
    text_example: ClassVar[str]  # the text form, as a refusal of a malformed one shows it
    shell_text: ClassVar[tuple[str, str] | None] = None  # passes a shell as typed

    @staticmethod
    def node_label(node: int) -> str:
        return str(node)

    @classmethod
    def cell_title(cls, cell_type: str) -> str:
        return f"{cls.title} blocks"

    @staticmethod
    def layout(nodes: Sequence[tuple[str, str]]) -> dict[str, tuple[float, float]]:
        """The chain in two rows, left to right, then right to left."""
        return _two_rows(nodes)

    def __post_init__(self) -> None:
        ops = tuple(self.ops) if isinstance(self.ops, (list, tuple)) else None
        if ops is None or not all(isinstance(op, str) for op in ops):
            raise ValueError(
                f"{self.article} {self.title} genotype needs a list of op names, got {self.ops!r}"
            )
        object.__setattr__(self, "ops", ops)
        self._check_extra()
        self.validate()

    def _check_extra(self) -> None:
        """Check (and normalise) the optional field after ``ops``."""

    def _validate_extra(self, chain: ChainCell) -> None:
        """Check the optional field after ``ops`` against the space's chain."""

    def validate(self, space: Space | None = None) -> None:
        """One op per block of the space's chain, each a candidate of its block; the skip op
        only where the block can be skipped (stride 1, equal widths)."""
        a_genotype = f"{self.article} {self.title} genotype"
        if space is not None and space.family != self.family:
            raise ValueError(
                f"{a_genotype} cannot be used with space {space.name!r}; expected "
                f"{self.article} {self.title} space ({', '.join(self.space_names)})"
            )
        space = space or get_space(self.space_name)
        chain = chain_cell_of(space, self.cell_types[0], ChainCell)
        if len(self.ops) != chain.num_edges:
            raise ValueError(
                f"{a_genotype} has one op per searchable block: expected "
                f"{chain.num_edges} ops, got {len(self.ops)}"
            )
        for i, op in enumerate(self.ops):
            allowed = chain.edges[i].ops
            if op not in allowed:
                raise ValueError(
                    f"{self.title} block {i}: unknown operation {op!r}; expected one of "
                    f"{', '.join(allowed)}"
                )
            if op == self.skip_op and not chain.skippable[i]:
                raise ValueError(
                    f"{self.title} block {i}: {self.skip_named} is not allowed there: only a "
                    "block of stride 1 with equal input and output widths can be skipped"
                )
        self._validate_extra(chain)

    def _check_cell_type(self, cell_type: str) -> None:
        if cell_type is not ITS_CELL_TYPE and cell_type != self.cell_types[0]:
            raise ValueError(
                f"{self.article} {self.title} genotype has one cell type "
                f"{self.cell_types[0]!r}, not {cell_type!r}"
            )

    def edges(self, cell_type: str = ITS_CELL_TYPE) -> list[tuple[str, int, int]]:
        """The chain's edges ``(op, i, i + 1)``, one per block (skipped ones included)."""
        self._check_cell_type(cell_type)
        return [(op, i, i + 1) for i, op in enumerate(self.ops)]

    def output_nodes(self, cell_type: str = ITS_CELL_TYPE) -> tuple[int, ...]:
        """The last block's output."""
        self._check_cell_type(cell_type)
        return (len(self.ops),)

    def drawing(
        self, cell_type: str = ITS_CELL_TYPE
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str, str | None]]]:
        """``(nodes, edges)`` of the chain as drawn (see ``DartsGenotype.drawing``)."""
        self._check_cell_type(cell_type)
        names = [str(i) for i in range(len(self.ops) + 1)]
        kinds = ["input", *(["node"] * (len(self.ops) - 1)), "output"]
        edges: list[tuple[str, str, str | None]] = [
            (names[i], names[j], op) for op, i, j in self.edges()
        ]
        return list(zip(names, kinds)), edges

    # ---- text and JSON forms

    def _extra_value(self) -> int | tuple[int, ...] | None:
        value: int | tuple[int, ...] | None = getattr(self, self.extra)
        return value

    def text(self) -> str:
        value = self._extra_value()
        counts = value if isinstance(value, tuple) else (value,)
        tail = "" if value is None else "@" + "-".join(str(c) for c in counts)
        return self.text_start + "-".join(self.ops) + tail

    @classmethod
    def _parse_extra(cls, text: str) -> Any:
        """The optional field after ``ops`` from its text (after ``@``); a one-line
        ValueError for a malformed one."""
        raise NotImplementedError

    @classmethod
    def from_text(cls: type[_Chain], text: str) -> _Chain:
        s = text.strip()
        malformed = f"malformed {cls.title} genotype {text!r}; expected {cls.text_example}"
        if not s.startswith(cls.text_start):
            raise ValueError(malformed)
        body, at, tail = s[len(cls.text_start) :].partition("@")
        if not body or any(not op for op in body.split("-")):
            raise ValueError(malformed)
        extra = cls._parse_extra(tail) if at else None
        return cls(tuple(body.split("-")), **{cls.extra: extra})

    @classmethod
    def from_json(cls: type[_Chain], data: dict[str, Any]) -> _Chain:
        """Inverse of ``to_json`` (``data["type"]`` already checked)."""
        if not isinstance(data.get("ops"), list):
            raise ValueError(
                f"malformed genotype JSON: {cls.article} {cls.family} genotype needs "
                '"ops": [op, ...]'
            )
        return cls(tuple(data["ops"]), **{cls.extra: data.get(cls.extra)})

    def __str__(self) -> str:
        return self.text()  # as format_genotype

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": self.family, "ops": list(self.ops)}
        value = self._extra_value()
        if value is not None:
            data[self.extra] = list(value) if isinstance(value, tuple) else value
        return data


_Chain = TypeVar("_Chain", bound=ChainGenotype)


@dataclass(frozen=True)
class ProxylessGenotype(ChainGenotype):
    """A ProxylessNAS network: the op of each searchable block of the chain, in order
    (``search_spaces.proxyless_space``: an MBConv ``KxK_MBConvE``, or ``none`` where the block
    may be skipped), and optionally the nine widths of a released network (stem, first block,
    six stages, feature mix; None: the space's widths). Text form:
    ``proxyless:3x3_MBConv3-none-...[@32-16-...]``."""

    widths: tuple[int, ...] | None = None

    family = "proxyless"
    space_name = "proxyless"
    space_names = PROXYLESS_SPACES
    cell_types = (PROXYLESS_CELL_TYPE,)
    title = "ProxylessNAS"
    skip_op = PROXYLESS_SKIP
    skip_named = f"{PROXYLESS_SKIP!r} (skip the block)"
    extra = "widths"
    text_start = "proxyless:"
    text_example = "'proxyless:3x3_MBConv3-none-...' (one op per block), optionally '@32-16-...'"

    def _check_extra(self) -> None:
        if self.widths is not None:
            widths = tuple(self.widths) if isinstance(self.widths, (list, tuple)) else ()
            if not widths or not all(
                isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths
            ):
                raise ValueError(
                    f"ProxylessNAS widths {self.widths!r}: expected positive channel counts"
                )
            object.__setattr__(self, "widths", widths)

    def _validate_extra(self, chain: ChainCell) -> None:
        if self.widths is not None and len(self.widths) != len(chain.widths) + 3:
            raise ValueError(
                f"ProxylessNAS widths: expected {len(chain.widths) + 3} (stem, first block, "
                f"{len(chain.widths)} stages, feature mix), got {len(self.widths)}"
            )

    @classmethod
    def _parse_extra(cls, text: str) -> tuple[int, ...]:
        if not re.fullmatch(r"\d+(-\d+)*", text):
            raise ValueError(
                f"malformed ProxylessNAS widths {text!r}; expected channel counts joined "
                "by '-', e.g. '@32-16-32-40-80-96-192-320-1280'"
            )
        return tuple(int(w) for w in text.split("-"))


@dataclass(frozen=True)
class FBNetGenotype(ChainGenotype):
    """An FBNet network: the op of each searchable block of FBNet's chain, in order
    (``search_spaces.fbnet_space``: a block ``kKeE`` / ``kKe1g2``, or ``skip`` where the block
    keeps its shape), and the width of the last 1x1 conv where it is not the space's 1984
    (FBNet-A's 1504; None: the space's, which is also what a given 1984 is kept as). Text form:
    ``fbnet:k3e1-skip-...[@1504]``."""

    head: int | None = None

    family = "fbnet"
    space_name = "fbnet"
    space_names = FBNET_SPACES
    cell_types = (FBNET_CELL_TYPE,)
    title = "FBNet"
    article = "an"
    skip_op = FBNET_SKIP
    skip_named = repr(FBNET_SKIP)
    extra = "head"
    text_start = "fbnet:"
    text_example = "'fbnet:k3e1-skip-...' (one op per block), optionally '@1504' (last conv)"

    def _check_extra(self) -> None:
        if self.head is not None:
            if isinstance(self.head, bool) or not isinstance(self.head, int) or self.head < 1:
                raise ValueError(
                    f"FBNet last-conv width {self.head!r}: expected a positive channel count"
                )
            if self.head == FBNET_HEAD:  # the space's own: the genotype carries none
                object.__setattr__(self, "head", None)

    @classmethod
    def _parse_extra(cls, text: str) -> int:
        if not re.fullmatch(r"[1-9]\d*", text):
            raise ValueError(
                f"malformed FBNet last-conv width {text!r}; expected a channel count, e.g. '@1504'"
            )
        return int(text)


AnyGenotype = Union[  # noqa: UP007 (a runtime alias)
    DartsGenotype, NB201Genotype, ProxylessGenotype, FBNetGenotype
]
GenotypeType = Union[  # noqa: UP007
    type[DartsGenotype], type[NB201Genotype], type[ProxylessGenotype], type[FBNetGenotype]
]
GENOTYPE_TYPES: dict[str, GenotypeType] = {
    g.family: g for g in (DartsGenotype, NB201Genotype, ProxylessGenotype, FBNetGenotype)
}  # space family -> its genotype class


def genotype_type(family: str) -> GenotypeType:
    """The genotype class of a space family (``Space.family``)."""
    try:
        return GENOTYPE_TYPES[family]
    except KeyError:
        raise ValueError(
            f"unknown space family {family!r}; expected one of {', '.join(GENOTYPE_TYPES)}"
        ) from None


def is_genotype(obj: object) -> TypeGuard[AnyGenotype]:
    """Whether ``obj`` is a genotype of any family."""
    return isinstance(obj, tuple(GENOTYPE_TYPES.values()))


def family_of_cell_types(cell_types: Iterable[str]) -> str:
    """The family whose genotypes have all these cell types (e.g. the keys of a run's logged
    architecture weights, where the run folder names no known space); the first family
    (DARTS) when none has them all."""
    names = set(cell_types)
    for family, g in GENOTYPE_TYPES.items():
        if names <= set(g.cell_types):
            return family
    return next(iter(GENOTYPE_TYPES))


# ---------------------------------------------------------------------------------- formatting


def _format_concat(concat: tuple[int, ...], as_range: bool) -> str:
    contiguous = list(concat) == list(range(concat[0], concat[0] + len(concat)))
    if as_range and contiguous:
        return f"range({concat[0]}, {concat[0] + len(concat)})"
    return "[" + ", ".join(str(c) for c in concat) + "]"


def format_genotype(genotype: AnyGenotype) -> str:
    """The reference text: ``Genotype(normal=[...], ...)`` or an NB201 arch string (the
    genotype class's ``text``)."""
    return genotype.text()


# ------------------------------------------------------------------------------------- parsing

_NB201_NODE = re.compile(r"^([A-Za-z0-9_]+)~(\d+)$")
_ASSIGNMENT = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*=(?!=)")
_DARTS_EXAMPLE = "Genotype(normal=[('sep_conv_3x3', 0), ...], normal_concat=range(2, 6), ...)"


def parse_nb201_arch(text: str) -> NB201Genotype:
    """Parse an NB201 arch string ``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|``."""
    s = text.strip()
    if not (s.startswith("|") and s.endswith("|")) or len(s) < 2:
        raise ValueError(
            f"malformed NB201 arch string {text!r}; expected '|op~0|+|op~0|op~1|+|op~0|op~1|op~2|'"
        )
    nodes = []
    for j, chunk in enumerate(s[1:-1].split("|+|"), start=1):
        pairs = []
        for token in chunk.split("|"):
            m = _NB201_NODE.match(token)
            if m is None:
                raise ValueError(
                    f"malformed NB201 arch string {text!r}: node {j} entry {token!r}; "
                    "expected 'op~input'"
                )
            pairs.append((m.group(1), int(m.group(2))))
        nodes.append(tuple(pairs))
    return NB201Genotype(tuple(nodes))


def _literal(node: ast.expr, where: str) -> Any:
    """A Python literal from the AST: strings, ints, lists/tuples of them, ``range(a, b)``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e, where) for e in node.elts]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "range"
        and not node.keywords
        and 1 <= len(node.args) <= 2
    ):
        bounds = [_literal(a, where) for a in node.args]
        if all(isinstance(b, int) for b in bounds):
            return range(*bounds)
    raise ValueError(
        f"malformed genotype text: {where} holds {ast.unparse(node)!r}; expected literals"
    )


def parse_darts_genotype(text: str) -> DartsGenotype:
    """Parse the reference's printed genotype (an optional ``NAME = `` prefix is allowed)."""
    body = _ASSIGNMENT.sub("", text, count=1).strip()
    try:
        tree = ast.parse(body, mode="eval").body
    except SyntaxError:
        raise ValueError(
            f"malformed genotype text {text.strip()[:80]!r}; expected {_DARTS_EXAMPLE}"
        ) from None
    if not (isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name)):
        raise ValueError(
            f"malformed genotype text {text.strip()[:80]!r}; expected {_DARTS_EXAMPLE}"
        )
    if tree.func.id != "Genotype":
        raise ValueError(
            f"malformed genotype text: found {tree.func.id}(...); expected Genotype(...)"
        )
    fields = ("normal", "normal_concat", "reduce", "reduce_concat")
    if len(tree.args) > len(fields):
        raise ValueError(f"malformed genotype text: Genotype takes at most 4 fields: {fields}")
    values: dict[str, Any] = {f: _literal(a, f) for f, a in zip(fields, tree.args)}
    for kw in tree.keywords:
        if kw.arg not in fields:
            raise ValueError(
                f"malformed genotype text: unknown field {kw.arg!r}; expected {', '.join(fields)}"
            )
        if kw.arg in values:
            raise ValueError(f"malformed genotype text: field {kw.arg!r} given twice")
        values[kw.arg] = _literal(kw.value, kw.arg)
    missing = [f for f in fields if f not in values]
    if missing:
        raise ValueError(f"malformed genotype text: missing field(s) {', '.join(missing)}")
    as_range = isinstance(values["normal_concat"], range) and isinstance(
        values["reduce_concat"], range
    )
    cells = [values["normal"], values["reduce"]]
    if all(isinstance(cell, list) for cell in cells) and any(
        isinstance(t, list) and len(t) == 3 for cell in cells for t in cell
    ):  # FairDARTS's sparse triples (op, node, input)
        for name in ("normal", "reduce"):
            triples = values[name]
            if not all(isinstance(t, list) and len(t) == 3 for t in triples):
                raise ValueError(
                    f"malformed genotype text: {name} mixes (op, input) pairs and (op, node, "
                    "input) triples; expected one form for both cells"
                )
            values[name] = [(t[0], t[2]) for t in triples]
            values[f"{name}_nodes"] = [t[1] for t in triples]
    return DartsGenotype(concat_as_range=as_range, **values)


def genotype_from_json(data: dict[str, Any] | str) -> AnyGenotype:
    """Inverse of ``genotype.to_json()`` (a dict, or its JSON text)."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise ValueError(f"malformed genotype JSON: {e.msg} at position {e.pos}") from None
    if not isinstance(data, dict) or data.get("type") not in GENOTYPE_TYPES:
        kinds = " or ".join(f'"{family}"' for family in GENOTYPE_TYPES)
        raise ValueError(f'malformed genotype JSON: expected an object with "type": {kinds}')
    return GENOTYPE_TYPES[data["type"]].from_json(data)


def parse_genotype(text: str, space: str | Space | None = None) -> AnyGenotype:
    """Parse any genotype text: reference ``Genotype(...)`` text, an NB201 arch string, or JSON.

    With ``space`` (a name or a ``Space``), the genotype is also validated against it: every
    operation must be a candidate on its edge and every node must have the space's inputs.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected genotype text, got {type(text).__name__}")
    s = text.strip()
    if not s:
        raise ValueError(f"empty genotype text; expected {_DARTS_EXAMPLE} or an NB201 arch string")
    genotype: AnyGenotype
    if s.startswith("{"):
        genotype = genotype_from_json(s)
    else:  # the class whose text starts so; else the one whose text has no fixed start
        types = GENOTYPE_TYPES.values()
        claimed = [g for g in types if g.text_start is not None and s.startswith(g.text_start)]
        kind = (claimed or [g for g in types if g.text_start is None])[0]
        genotype = kind.from_text(s)
    if space is not None:
        genotype.validate(get_space(space) if isinstance(space, str) else space)
    return genotype
