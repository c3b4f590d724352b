"""The space-family interface: every hook a family implements, and what its networks report.

First stage of the pipeline (``search_spaces``). A *family* is the behaviour that the spaces of
one kind share (DARTS-style cells, NAS-Bench-201 cells) and that the later stages ask for
without naming the kind: they look the family up (``search_spaces.families.family_of`` a space,
a genotype or a name; ``family_of_network`` a discrete network) and call its hooks, so that
everything a family knows lives in ``search_spaces``. Structure that is plain data (edges,
nodes, how many inputs a node keeps) is the ``Space``'s; a genotype's own structure and its
drawing are its class's (``search_spaces.genotype``).

A family is a subclass of ``Family`` in a module of its own (``search_spaces.darts_family``,
``search_spaces.nb201_family``), registered in ``search_spaces.families.FAMILIES``. Those
modules import no torch (``nas-train``'s config check reads the registry before torch loads):
a hook that needs a network or a module imports its family's network module
(``search_spaces.darts``, ``search_spaces.nb201``) on first use. The hooks, by who asks:

* its name and sizes (``nas.training``, ``nas.hardware``, ``nas-summary``, the config checks):
  ``name``, ``title``, ``networks``, ``layers_word``, ``size_keys``, ``drop_path``,
  ``paper_size``, ``imagenet_size``, ``cell_types``;
* genotypes (``nas.strategies``, ``nas.selection``, ``nas.hardware``): ``derive`` (from
  architecture weights), ``genotype`` (from the edges a selector keeps), ``random_genotypes``;
* its published networks by number (``nas-train 1462``, run records, NB201 fronts):
  ``num_indexed``, ``indexed_genotype``, ``index_of`` (published networks by name are
  ``search_spaces.published``'s);
* its discrete networks (``nas.training``, ``nas.hardware``, ``nas.proxies``): ``network``,
  ``logits``, ``network_types``, ``features``, ``reference_logits``;
* its latency layout (``nas.hardware.parts``): ``blocks``, ``build_block``, ``layout``;
  ``lookup_keys`` (``nas-profile --import-lut``: a reference lookup table's keys per part);
  ``allowed_ops`` (``nas.hardware.cost``: the ops a discrete network may hold per edge);
* weight entanglement (``nas.strategies.components.weight_entangle``): ``op_kernel`` (an op's
  kind and kernel size), from which ``entangle_groups`` groups an edge's ops.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: this module imports no torch
    from torch import Tensor, nn

    from search_spaces.genotype import AnyGenotype
    from search_spaces.layout import NetworkLayout, Part
    from search_spaces.space import Space

# the kept edges of a discrete cell, per cell type: ``(op, src, dst)``, in node order
Edges = Mapping[str, Sequence[tuple[str, int, int]]]


@dataclass(frozen=True)
class NetworkSpec:
    """What ``Family.network`` built: the network class, its size, and the input it expects."""

    family: str  # the network class: "NetworkCIFAR", "NetworkImageNet" or "TinyNetwork"
    C: int
    layers: int  # DARTS: cells; NB201: cells per stage N
    auxiliary: bool
    drop_path: bool  # whether the network supports drop-path
    input_size: tuple[int, int, int]
    # what the family calls the number of cells ("layers", "N"): the size as printed
    layers_word: str = field(default="layers", compare=False, repr=False)

    def __str__(self) -> str:
        aux = ", auxiliary" if self.auxiliary else ""
        return f"{self.family}(C={self.C}, {self.layers_word}={self.layers}{aux})"


class Family(abc.ABC):
    """The behaviour shared by the spaces of one kind (see the module docstring)."""

    name: str  # Space.family, and the section of nas-train's model config (model.<name>)
    title: str  # its name in messages and figure titles ("DARTS", "NB201")
    genotype_type: type[Any]  # its genotype class (search_spaces.genotype)
    networks: tuple[str, ...]  # the class names of its discrete networks
    layers_word: str  # what its size calls the number of cells: "layers" or "N"
    drop_path: bool  # whether its discrete networks support drop-path (nas-train's ramp)
    paper_size: tuple[int, int]  # (C, layers) of the paper's evaluation network
    imagenet_size: tuple[int, int] | None  # (C, layers) on ImageNet; None: no such network
    # the fixed blocks of its latency layout, besides search_spaces.layout.SHARED_BLOCKS
    # (names unique across families: a table key names the block alone)
    blocks: tuple[str, ...] = ()
    # how many cells its published index numbers (0: its genotypes have no number)
    num_indexed: int = 0
    # the fewest layers (layers_word) of a supernet with every cell type in it: the smallest
    # search there is (tests, smoke runs)
    smallest_layers: int = 1

    # ------------------------------------------------------------------- name and sizes

    @property
    def size_keys(self) -> tuple[str, str]:
        """The keys of its section of ``nas-train``'s model config (``model.<name>``): the
        channels and the number of cells."""
        return ("C", self.layers_word)

    @property
    def cell_types(self) -> tuple[str, ...]:
        """Its cell types, the main one first (DARTS: normal, then reduce; NB201: its cell)."""
        types: tuple[str, ...] = self.genotype_type.cell_types
        return types

    # ----------------------------------------------------------------------- genotypes

    @abc.abstractmethod
    def derive(
        self, space: Space, weights: Mapping[str, Tensor], masks: Mapping[str, Tensor]
    ) -> AnyGenotype:
        """The genotype that ``weights`` (cell type -> [edges, ops]) rank highest."""

    @abc.abstractmethod
    def genotype(self, space: Space, edges: Edges, *, sparse: bool = False) -> AnyGenotype:
        """The genotype of the discrete cells that keep ``edges`` (cell type -> the kept
        ``(op, src, dst)``, node by node, as a selector picked them), checked against
        ``space``. ``sparse``: a node may keep fewer inputs than the space's discrete cells
        (FairDARTS's threshold), and the genotype names each edge's node."""

    @abc.abstractmethod
    def random_genotypes(self, space: Space, n: int, rng: random.Random) -> list[AnyGenotype]:
        """``n`` discrete cells of ``space`` drawn with ``rng`` (the calibration sample of a
        latency table): cells as the space's discrete networks have them."""

    # ------------------------------------------------------ published networks by number

    def indexed_genotype(self, index: int) -> AnyGenotype:
        """The genotype its published index numbers ``index`` (0 .. ``num_indexed`` - 1)."""
        raise ValueError(f"{self.title} genotypes have no index")

    def index_of(self, genotype: AnyGenotype) -> int:
        """The published index of ``genotype`` (inverse of ``indexed_genotype``)."""
        raise ValueError(f"{self.title} genotypes have no index")

    # ------------------------------------------------------------------------ networks

    @abc.abstractmethod
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
        """The discrete network of ``genotype`` for data of ``image_size`` and ``num_classes``."""

    def logits(self, output: Any) -> tuple[Tensor, Tensor | None]:
        """``(logits, auxiliary logits or None)`` of one of its networks' forward passes."""
        logits, logits_aux = output
        return logits, logits_aux

    @abc.abstractmethod
    def network_types(self) -> tuple[type[nn.Module], ...]:
        """The classes of its discrete networks (imports them: torch)."""

    @abc.abstractmethod
    def features(self, net: nn.Module, x: Tensor) -> Tensor:
        """The feature map before the global pooling of one of its networks (Zen-NAS's
        ``forward_pre_GAP``), every module called as its reference calls them, so that
        forward hooks see the modules the reference runs."""

    @abc.abstractmethod
    def reference_logits(self, net: nn.Module, x: Tensor) -> Tensor:
        """The logits of one of its networks, computed module by module as ``features``
        (zero-cost proxies hook the modules; the networks' own forwards may fuse them)."""

    # ------------------------------------------------------------------ latency layout

    @abc.abstractmethod
    def build_block(self, part: Part) -> nn.Module:
        """The module that one of its fixed ``blocks`` measures at ``part``'s shape."""

    @abc.abstractmethod
    def layout(self, layout: NetworkLayout, space: Space) -> None:
        """Fill ``layout`` (its size: ``layout.C``, ``layers``, ``image_size``,
        ``num_classes``) with the parts of the discrete network of ``space``: the fixed ones
        (``layout.add_fixed``) and, per cell type, edge and op, what choosing that op adds
        over every cell of the type (``layout.add_choice``); a size it does not lay out is a
        one-line ``ValueError``."""

    def lookup_keys(self, layout: NetworkLayout, space: Space) -> dict[str, str | None]:
        """The key of each part of ``layout`` (by ``Part.key``) in the family's reference
        latency lookup table (``nas-profile --import-lut``); None: a part the reference times
        inside another part's entry. A family without such a format refuses in one line."""
        raise ValueError(f"the {self.title} family has no reference latency lookup table to import")

    def allowed_ops(self, space: Space) -> dict[str, list[list[bool]]]:
        """Per cell type, edge and op, whether a discrete network of ``space`` may hold that op
        there (the cost model's cheapest network and budgets read it); every op by default."""
        return {ct: [[True] * len(e.ops) for e in c.edges] for ct, c in space.cells.items()}

    # ------------------------------------------------------------- weight entanglement

    def op_kernel(self, op: str) -> tuple[str, int] | None:
        """``(kind, kernel size)`` of an op whose convolutions differ from the other ops of its
        kind only in their (odd, square) kernel size, so that a smaller kernel is the centre
        crop of the largest (Sukthanker et al., AutoML-Conf 2024; confopt's
        ``WeightEntanglementModule``s); None for any other op. None for every op by default."""
        return None

    def entangle_groups(self, ops: Sequence[str]) -> list[tuple[int, ...]]:
        """The groups of indices of ``ops`` (one edge's candidates) that share one kind at two
        or more kernel sizes, the largest kernel first: the ops whose weights are entangled."""
        kinds: dict[str, list[tuple[int, int]]] = {}
        for i, op in enumerate(ops):
            kk = self.op_kernel(op)
            if kk is not None:
                kinds.setdefault(kk[0], []).append((kk[1], i))
        groups = []
        for members in kinds.values():
            sizes = [k for k, _ in members]
            if len(set(sizes)) != len(sizes):
                raise ValueError(
                    f"an edge lists two {self.title} ops of one kind and kernel size "
                    f"({', '.join(ops)}); weight entanglement expected one op per kernel size"
                )
            if len(members) > 1:
                groups.append(tuple(i for _, i in sorted(members, reverse=True)))
        return groups
