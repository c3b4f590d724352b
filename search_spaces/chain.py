"""A chain of blocks, one op per block: the space and the family hooks that chain spaces share.

First stage of the pipeline (``search_spaces``). The MobileNetV2-style networks (Sandler et al.,
CVPR 2018) whose blocks Cai, Zhu & Han (ICLR 2019) and Wu et al. (CVPR 2019) search one by one:
a stem, stages of searchable blocks (per stage a width, a depth and the stride of its first
block), a last 1x1 conv, pooling and a classifier. In the toolkit's terms the searchable blocks
form one cell type whose edges are a chain: edge ``i`` joins node ``i`` to node ``i + 1``
(block ``i``'s input and output). Every edge lists the same ops (architecture tensors are
rectangular), a skip op among them, which only a block of stride 1 with equal input and output
widths allows (its identity shortcut carries the input on): elsewhere the supernet masks it from
the start, the derivation never picks it and a genotype that names it there is refused. A
network of depth ``d`` keeps each stage's first ``d`` blocks; those it drops could all be
skipped, so such a network is the full chain with them skipped.

A chain family subclasses ``ChainCell`` (its ops, its names in messages, its widths),
``search_spaces.genotype.ChainGenotype`` (its text form) and ``ChainFamily`` (its network and its
latency parts); its supernet subclasses ``nas.supernet.chain.ChainSupernet``. Torch-free.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from search_spaces.family import Edges, Family, NetworkSpec
from search_spaces.space import CellSpace, Edge, Space, get_space

if TYPE_CHECKING:
    from types import ModuleType

    from torch import Tensor, nn

    from search_spaces.genotype import AnyGenotype
    from search_spaces.layout import NetworkLayout, Part

Shape = tuple[int, int, int]  # a searchable block's (C_in, C_out, stride)


def stage_shapes(
    c_in: int, widths: Sequence[int], depths: Sequence[int], strides: Sequence[int]
) -> list[Shape]:
    """``(C_in, C_out, stride)`` of every block of stages ``widths`` wide, ``depths`` deep, with
    ``strides`` on their first blocks, the chain entered at ``c_in`` channels."""
    out = []
    for width, depth, stride in zip(widths, depths, strides):
        for i in range(depth):
            out.append((c_in, width, stride if i == 0 else 1))
            c_in = width
    return out


@dataclass(frozen=True)
class ChainCell(CellSpace):
    """The searchable blocks as a chain cell, with the layout of the network they sit in.

    ``widths`` / ``depths`` / ``strides``: per stage; ``skippable``: per block (stride 1 and
    equal widths); ``stem_stride``: 2 on ImageNet, 1 on CIFAR. Widths are at multiplier 1. A
    family's subclass names its ops (``chain_ops``, ``skip_op`` among them) and itself in
    messages, and sets the defaults of ``stem_width`` and ``head_width``."""

    stem_width: int = 0
    widths: tuple[int, ...] = ()
    depths: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    head_width: int = 0
    stem_stride: int = 2
    image_size: int = 224  # the input the layout is made for
    skippable: tuple[bool, ...] = ()

    chain_ops: ClassVar[tuple[str, ...]]  # every block's candidates, in order
    skip_op: ClassVar[str]  # the op that passes a block's input on (its shortcut alone)
    a_chain: ClassVar[str] = "a block chain"  # the chain in messages
    a_network: ClassVar[str]  # a network of the family in messages

    def __post_init__(self) -> None:
        # the chain's own check (CellSpace's checks ops against the cell spaces' op names)
        for e in self.edges:
            if e.ops != self.chain_ops:
                raise ValueError(f"block {e.index}: ops {e.ops}; expected {self.chain_ops}")
        if not (len(self.widths) == len(self.depths) == len(self.strides)):
            raise ValueError(f"{self.a_chain} needs one width, depth and stride per stage")
        if len(self.skippable) != len(self.edges) or sum(self.depths) != len(self.edges):
            raise ValueError(f"{self.a_chain} needs one edge and one skippable flag per block")

    @property
    def max_depth(self) -> int:
        """The most blocks a stage has (4): the depth of the full chain."""
        return max(self.depths)

    def kept(self, depth: int) -> tuple[bool, ...]:
        """Per block, whether a network of ``depth`` (at most that many blocks per stage) has
        it: each stage keeps its first ``depth`` blocks. The blocks it drops are each stage's
        last ones, all of which could be skipped (stride 1, equal widths): a network of a
        smaller depth is the chain with those blocks skipped."""
        if (
            isinstance(depth, bool)
            or not isinstance(depth, int)
            or not 1 <= depth <= self.max_depth
        ):
            raise ValueError(
                f"{self.a_network} keeps 1 to {self.max_depth} blocks per stage (depth); "
                f"got depth={depth!r}"
            )
        return tuple(i < depth for d in self.depths for i in range(d))

    def depth_of(self, blocks: int) -> int:
        """The depth (blocks kept per stage) of a network that keeps ``blocks`` searchable
        blocks (the full chain's at the depth of its longest stages); a number up to that depth
        is read as the depth itself. A one-line ValueError for any other number."""
        totals = {sum(min(d, n) for n in self.depths): d for d in range(1, self.max_depth + 1)}
        if isinstance(blocks, int) and not isinstance(blocks, bool):
            if 1 <= blocks <= self.max_depth:
                return blocks
            if blocks in totals:
                return totals[blocks]
        raise ValueError(
            f"{self.a_network} keeps {', '.join(map(str, totals))} searchable blocks "
            f"(1 to {self.max_depth} per stage; 1 to {self.max_depth} also reads as that "
            f"depth); got blocks={blocks!r}"
        )

    def shapes_from(self, c_in: int, stages: Sequence[int]) -> list[Shape]:
        """``(C_in, C_out, stride)`` of every searchable block, the chain entered at ``c_in``
        channels and its stages ``stages`` wide."""
        return stage_shapes(c_in, stages, self.depths, self.strides)

    def allows(self, block: int, op: str) -> bool:
        """Whether a discrete network may hold ``op`` on ``block``: every op, the skip op only
        where the block can be skipped."""
        return op != self.skip_op or self.skippable[block]


ChainT = TypeVar("ChainT", bound=ChainCell)


def build_chain(
    cls: type[ChainT],
    *,
    c_in: int,
    widths: tuple[int, ...],
    depths: tuple[int, ...],
    strides: tuple[int, ...],
    cifar: bool,
) -> ChainT:
    """The chain ``cls`` of these stages entered at ``c_in`` channels, its blocks skippable
    where they have stride 1 and equal widths; ``cifar``: laid out for 32x32 inputs (stem at
    stride 1), else for ImageNet's 224x224."""
    shapes = stage_shapes(c_in, widths, depths, strides)
    skippable = tuple(stride == 1 and c_in == c_out for c_in, c_out, stride in shapes)
    edges = tuple(Edge(i, i, i + 1, cls.chain_ops) for i in range(len(skippable)))
    return cls(
        num_input_nodes=1,
        num_nodes=len(edges) + 1,
        edges=edges,
        inputs_per_node=None,
        widths=widths,
        depths=depths,
        strides=strides,
        stem_stride=1 if cifar else 2,
        image_size=32 if cifar else 224,
        skippable=skippable,
    )


def chain_cell_of(space: Space, cell_type: str, kind: type[ChainT]) -> ChainT:
    """The block chain (of class ``kind``) of a chain space, its cell type ``cell_type``."""
    chain = space.cells[cell_type]
    assert isinstance(chain, kind)
    return chain


def chain_space(
    name: str,
    names: tuple[str, ...],
    title: str,
    family: str,
    cell_type: str,
    build: Callable[..., ChainCell],
) -> Space:
    """The space ``name``, one of the family's ``names`` (else a one-line ValueError naming its
    ``title``): the one cell type ``cell_type``, the chain ``build(cifar=...)``, laid out for
    32x32 inputs where the name ends in ``_cifar``, else for ImageNet."""
    if name not in names:
        raise ValueError(f"unknown {title} space {name!r}")
    return Space(name=name, family=family, cells={cell_type: build(cifar=name.endswith("_cifar"))})


class Widths(Protocol):
    """The widths of one network that a chain family's hooks read: the stem's, each stage's,
    the last conv's (a family's own ``Widths`` may have more)."""

    @property
    def stem(self) -> int: ...

    @property
    def stages(self) -> tuple[int, ...]: ...

    @property
    def head(self) -> int: ...


class ChainFamily(Family):
    """The hooks of a family of chain spaces (see the module docstring).

    A subclass sets, besides ``Family``'s attributes: ``network_module``, its discrete
    network's module (torch: imported on first use), which defines the class ``networks[0]``
    and ``network_features``, ``network_logits`` and ``layout_block``; the names of the fixed
    parts of its latency layout (``stem_block``, ``first_block`` where a fixed block sits
    between the stem and the chain, ``last_block``, ``classifier_block``); and the hooks
    ``build_network`` and ``layout_widths`` (and ``chain_input`` with a ``first_block``)."""

    layers_word = "blocks"
    drop_path = False
    network_module: str
    stem_block: str
    first_block: str | None = None
    last_block: str
    classifier_block: str

    def chain(self, space: Space) -> ChainCell:
        """The block chain of a space of the family."""
        return chain_cell_of(space, self.cell_types[0], ChainCell)

    # ----------------------------------------------------------------------- genotypes

    def derive(
        self, space: Space, weights: Mapping[str, Tensor], masks: Mapping[str, Tensor]
    ) -> AnyGenotype:
        """Each block's strongest op, the skip op included where the block can be skipped;
        masked-out ops, and the skip op on a block that cannot be skipped, never win."""
        chain = self.chain(space)
        cell_type = self.cell_types[0]
        w = weights[cell_type].detach().float().cpu()
        mask = masks[cell_type].cpu().clone()
        for i, e in enumerate(chain.edges):
            if not chain.skippable[i]:
                mask[i, e.ops.index(chain.skip_op)] = False
        w = w.masked_fill(~mask, float("-inf"))
        ops = [chain.edges[i].ops[int(k)] for i, k in enumerate(w.argmax(-1).tolist())]
        genotype: AnyGenotype = self.genotype_type(tuple(ops))
        genotype.validate(space)
        return genotype

    def genotype(self, space: Space, edges: Edges, *, sparse: bool = False) -> AnyGenotype:
        """One op on each block of the chain (every block is kept: ``sparse`` has no meaning)."""
        chain = self.chain(space)
        kept = list(edges[self.cell_types[0]])
        by_edge = {(src, dst): op for op, src, dst in kept}
        missing = [f"{e.src}->{e.dst}" for e in chain.edges if (e.src, e.dst) not in by_edge]
        if sparse or missing or len(kept) != chain.num_edges:
            raise ValueError(
                f"{chain.a_network} keeps one op on each of its {chain.num_edges} blocks; "
                f"got {len(kept)}" + (f", none on {', '.join(missing)}" if missing else "")
            )
        genotype: AnyGenotype = self.genotype_type(
            tuple(by_edge[e.src, e.dst] for e in chain.edges)
        )
        genotype.validate(space)
        return genotype

    def random_genotypes(self, space: Space, n: int, rng: random.Random) -> list[AnyGenotype]:
        """Each block's op drawn uniformly from those it allows (the skip op where the block
        can be skipped)."""
        chain = self.chain(space)
        out: list[AnyGenotype] = []
        for _ in range(n):
            ops = [
                rng.choice([op for op in e.ops if chain.allows(e.index, op)]) for e in chain.edges
            ]
            out.append(self.genotype_type(tuple(ops)))
        return out

    # ------------------------------------------------------------------------ networks

    def _networks(self) -> ModuleType:
        return importlib.import_module(self.network_module)  # torch: on first use

    def build_network(
        self, genotype: AnyGenotype, *, C: int, num_classes: int, image_size: int, depth: int
    ) -> nn.Module:
        """The discrete network of ``genotype`` at width ``C`` keeping ``depth`` blocks per
        stage, laid out for ``image_size`` inputs."""
        raise NotImplementedError

    def network(
        self,
        genotype: AnyGenotype,
        *,
        C: int,
        layers: int,
        num_classes: int,
        image_size: int = 32,
        auxiliary: bool = False,
    ) -> tuple[nn.Module, NetworkSpec]:
        """``build_network`` keeping ``layers`` searchable blocks (``ChainCell.depth_of``); no
        auxiliary head (``auxiliary`` is ignored)."""
        assert isinstance(genotype, self.genotype_type)
        chain = self.chain(get_space(genotype.space_name))
        depth = chain.depth_of(layers)  # a one-line refusal of a size the chain has not
        net = self.build_network(
            genotype, C=C, num_classes=num_classes, image_size=image_size, depth=depth
        )
        spec = NetworkSpec(
            self.networks[0],
            C,
            layers,
            False,
            False,
            (3, image_size, image_size),
            self.layers_word,
        )
        return net, spec

    def logits(self, output: Any) -> tuple[Tensor, Tensor | None]:
        return output, None  # the network returns the logits

    def network_types(self) -> tuple[type[nn.Module], ...]:
        return (getattr(self._networks(), self.networks[0]),)

    def features(self, net: nn.Module, x: Tensor) -> Tensor:
        """The last 1x1 conv's output, before the pooling."""
        out: Tensor = self._networks().network_features(net, x)
        return out

    def reference_logits(self, net: nn.Module, x: Tensor) -> Tensor:
        out: Tensor = self._networks().network_logits(net, x)  # its forward calls every module
        return out

    # ------------------------------------------------------------------ latency layout

    def build_block(self, part: Part) -> nn.Module:
        block: nn.Module = self._networks().layout_block(part)
        return block

    def layout_widths(self, chain: ChainCell, C: int) -> Widths:
        """The widths of the family's network of ``chain`` at width ``C``."""
        raise NotImplementedError

    def chain_input(self, widths: Widths) -> int:
        """The width the chain is entered at: the stem's, or ``first_block``'s output."""
        return widths.stem

    def layout(self, layout: NetworkLayout, space: Space) -> None:
        """The family's network at width ``layout.C`` keeping ``layout.layers`` blocks: the
        space's layout (its stem and stage strides) on ``layout.image_size`` inputs: the stem,
        the first block (if any), per block and candidate the block at its shape (and the
        shortcut's addition where the block has one; the skip op adds nothing), the last conv
        and the classifier (with the pooling)."""
        chain = self.chain(space)
        kept = chain.kept(chain.depth_of(layout.layers))
        widths = self.layout_widths(chain, layout.C)
        h = layout.image_size
        layout.add_fixed(self.stem_block, 3, widths.stem, chain.stem_stride, h, h)
        h = -(-h // chain.stem_stride)
        c_first = self.chain_input(widths)
        if self.first_block is not None:
            layout.add_fixed(self.first_block, widths.stem, c_first, 1, h, h)
        cell_type = self.cell_types[0]
        for i, (c_in, c_out, stride) in enumerate(chain.shapes_from(c_first, widths.stages)):
            if not kept[i]:
                continue  # beyond the depth: the block is skipped, whatever is chosen
            h_out = -(-h // stride)
            for k, op in enumerate(chain.edges[i].ops):
                if op == chain.skip_op:
                    continue  # the input passes on: nothing to measure
                layout.add_choice(cell_type, i, k, op, c_in, c_out, stride, h, h)
                if chain.skippable[i]:  # the identity shortcut's addition
                    layout.add_choice(cell_type, i, k, "add", c_out, c_out, 1, h_out, h_out)
            h = h_out
        layout.add_fixed(self.last_block, widths.stages[-1], widths.head, 1, h, h)
        layout.add_fixed(self.classifier_block, widths.head, layout.num_classes, 1, h, h)

    def allowed_ops(self, space: Space) -> dict[str, list[list[bool]]]:
        """Every op of every block, but the skip op where the block cannot be skipped."""
        chain = self.chain(space)
        return {
            self.cell_types[0]: [[chain.allows(e.index, op) for op in e.ops] for e in chain.edges]
        }
