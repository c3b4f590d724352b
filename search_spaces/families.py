"""Space families: what differs between DARTS-style cells and NAS-Bench-201 cells.

First stage of the pipeline (``search_spaces``). A family is the behaviour that the spaces of
one kind share and that the later stages ask for without naming the kind: the genotype a set of
architecture weights derives (``derive``), and the discrete network a genotype compiles to
(``network``, with the paper's evaluation size). Structure that is plain data (edges, nodes,
how many inputs a node keeps) is the ``Space``'s; drawing and counting a cell are the genotype
classes' (``search_spaces.genotype``). A third family (say a MobileNet space) is its ``Space``
data, a genotype class and one ``Family`` here, registered in ``FAMILIES``.

* ``darts`` (Liu et al., ICLR 2019): for each intermediate node, its incoming edges ranked by
  their strongest non-``none`` weight, the top 2 kept, each with its strongest non-``none`` op
  (reference ``model_search.py: genotype()``; ties go to the earlier edge / op, as Python's
  stable sort does there); ``NetworkCIFAR`` / ``NetworkImageNet``.
* ``nb201`` (Dong & Yang, ICLR 2020): every edge kept, the argmax over all ops, ``none``
  included (as DrNAS and the benchmark's own DARTS code derive it); ``TinyNetwork``.

Masked-out ops never win.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from search_spaces.darts import NetworkCIFAR, NetworkImageNet
from search_spaces.genotype import AnyGenotype, DartsGenotype, NB201Genotype
from search_spaces.nb201 import TinyNetwork
from search_spaces.space import CellSpace, Space


@dataclass(frozen=True)
class NetworkSpec:
    """What ``Family.network`` built: the network class, its size, and the input it expects."""

    family: str  # "NetworkCIFAR", "NetworkImageNet" or "TinyNetwork"
    C: int
    layers: int  # DARTS: cells; NB201: cells per stage N
    auxiliary: bool
    drop_path: bool  # whether the network supports drop-path
    input_size: tuple[int, int, int]

    def __str__(self) -> str:
        size = f"{FAMILY_OF_NETWORK[self.family].layers_word}={self.layers}"
        aux = ", auxiliary" if self.auxiliary else ""
        return f"{self.family}(C={self.C}, {size}{aux})"


class Family(abc.ABC):
    """The behaviour shared by the spaces of one kind (see the module docstring)."""

    name: str  # Space.family, and the section of nas-train's model config (model.<name>)
    genotype_type: type[Any]
    networks: tuple[str, ...]  # the class names of its discrete networks
    layers_word: str  # what its size calls the number of cells: "layers" or "N"
    drop_path: bool  # whether its discrete networks support drop-path (nas-train's ramp)
    paper_size: tuple[int, int]  # (C, layers) of the paper's evaluation network
    imagenet_size: tuple[int, int] | None  # (C, layers) on ImageNet; None: no such network

    @abc.abstractmethod
    def derive(
        self, space: Space, weights: Mapping[str, Tensor], masks: Mapping[str, Tensor]
    ) -> AnyGenotype:
        """The genotype that ``weights`` (cell type -> [edges, ops]) rank highest."""

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


def _darts_cell(cell: CellSpace, w_EO: Tensor, mask_EO: Tensor) -> list[tuple[str, int]]:
    w = w_EO.detach().float().cpu().masked_fill(~mask_EO.cpu(), float("-inf")).tolist()
    pairs: list[tuple[str, int]] = []
    for node in cell.intermediate_nodes:
        edges = cell.edges_into(node)

        def best(e_index: int, edge_ops: tuple[str, ...]) -> int:
            k_best = -1
            for k, op in enumerate(edge_ops):
                if op != "none" and (k_best < 0 or w[e_index][k] > w[e_index][k_best]):
                    k_best = k
            return k_best

        strength = {e.index: w[e.index][best(e.index, e.ops)] for e in edges}
        assert cell.inputs_per_node is not None
        kept = sorted(edges, key=lambda e: -strength[e.index])[: cell.inputs_per_node]
        pairs.extend((e.ops[best(e.index, e.ops)], e.src) for e in kept)
    return pairs


class DartsFamily(Family):
    name = "darts"
    genotype_type = DartsGenotype
    networks = ("NetworkCIFAR", "NetworkImageNet")
    layers_word = "layers"
    drop_path = True
    paper_size = (36, 20)
    imagenet_size = (48, 14)  # the mobile setting

    def derive(
        self, space: Space, weights: Mapping[str, Tensor], masks: Mapping[str, Tensor]
    ) -> AnyGenotype:
        normal = _darts_cell(space.cells["normal"], weights["normal"], masks["normal"])
        reduce = _darts_cell(space.cells["reduce"], weights["reduce"], masks["reduce"])
        steps = len(space.cells["normal"].intermediate_nodes)
        concat = tuple(range(2, 2 + steps))
        return DartsGenotype(tuple(normal), concat, tuple(reduce), concat, concat_as_range=True)

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
        """``NetworkImageNet`` for ImageNet-sized data (``image_size > 64``), else
        ``NetworkCIFAR`` (whose auxiliary head needs 32x32 images)."""
        assert isinstance(genotype, DartsGenotype)
        if image_size > 64:
            net: nn.Module = NetworkImageNet(C, num_classes, layers, auxiliary, genotype)
            kind, input_size = "NetworkImageNet", (3, 224, 224)
        else:
            if auxiliary and image_size != 32:
                raise ValueError(
                    f"model.auxiliary=true needs 32x32 images (NetworkCIFAR's auxiliary head "
                    f"pools an 8x8 map); this data has {image_size}x{image_size}: set "
                    "model.auxiliary=false"
                )
            net = NetworkCIFAR(C, num_classes, layers, auxiliary, genotype)
            kind, input_size = "NetworkCIFAR", (3, image_size, image_size)
        return net, NetworkSpec(kind, C, layers, auxiliary, True, input_size)


class NB201Family(Family):
    name = "nb201"
    genotype_type = NB201Genotype
    networks = ("TinyNetwork",)
    layers_word = "N"
    drop_path = False
    paper_size = (16, 5)
    imagenet_size = None

    def derive(
        self, space: Space, weights: Mapping[str, Tensor], masks: Mapping[str, Tensor]
    ) -> AnyGenotype:
        cell = space.cells["cell"]
        w = weights["cell"].detach().float().cpu().masked_fill(~masks["cell"].cpu(), float("-inf"))
        ops = [cell.edges[e].ops[int(k)] for e, k in enumerate(w.argmax(-1).tolist())]
        return NB201Genotype.from_ops(ops)

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
        """``TinyNetwork`` with ``layers`` cells per stage; it has no auxiliary head
        (``auxiliary`` is ignored)."""
        assert isinstance(genotype, NB201Genotype)
        net = TinyNetwork(C, layers, genotype, num_classes)
        return net, NetworkSpec("TinyNetwork", C, layers, False, False, (3, image_size, image_size))

    def logits(self, output: Any) -> tuple[Tensor, Tensor | None]:
        return output[1], None  # TinyNetwork returns (features, logits)


FAMILIES: dict[str, Family] = {f.name: f for f in (DartsFamily(), NB201Family())}
FAMILY_OF_NETWORK: dict[str, Family] = {n: f for f in FAMILIES.values() for n in f.networks}


def family_of(item: Space | AnyGenotype | str) -> Family:
    """The family of a space, a genotype, or a family name."""
    name = item if isinstance(item, str) else item.family
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(
            f"unknown space family {name!r}; expected one of {', '.join(FAMILIES)}"
        ) from None
