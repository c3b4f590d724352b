"""The NAS-Bench-201 cell family: the space ``nb201``, as ``Family`` hooks.

First stage of the pipeline (``search_spaces``). Dong & Yang, "NAS-Bench-201: Extending the
Scope of Reproducible Neural Architecture Search", ICLR 2020. Torch-free: the network and the
benchmark's index map (``search_spaces.nb201``) load on the first call of a hook that needs
them.

* derivation (``derive``): every edge kept, the argmax over all ops, ``none`` included (as
  DrNAS and the benchmark's own DARTS code derive it). Masked-out ops never win.
* genotypes from kept edges (``genotype``): one op on every edge of the cell.
* published networks by number: the benchmark's index of its 15,625 cells.
* network: ``TinyNetwork`` (C=16, N=5 cells per stage in the paper), which returns
  ``(features, logits)`` and has neither an auxiliary head nor drop-path.
* latency layout: ``TinyNetwork`` layer for layer: the stem, the shared cell at each of the three
  stages (N times each), the residual reduction blocks between stages, the classifier; node sums
  count three additions per cell whatever the genotype (a node fed only by ``none`` edges sums
  fewer).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from search_spaces.family import Edges, Family, NetworkSpec
from search_spaces.genotype import AnyGenotype, NB201Genotype
from search_spaces.op_names import kind_and_kernel
from search_spaces.space import Space

if TYPE_CHECKING:
    from torch import Tensor, nn

    from search_spaces.layout import NetworkLayout, Part


class NB201Family(Family):
    name = "nb201"
    title = "NB201"
    genotype_type = NB201Genotype
    networks = ("TinyNetwork",)
    layers_word = "N"
    drop_path = False
    paper_size = (16, 5)
    imagenet_size = None
    blocks = (
        "resblock",  # the stride-2 ResNet basic block between stages
        "head_nb201",  # BN, ReLU, global average pool, Linear(C_in -> C_out classes)
    )
    num_indexed = 5**6  # the benchmark's cells: 5 ops on each of 6 edges

    def op_kernel(self, op: str) -> tuple[str, int] | None:
        """``nor_conv_1x1`` and ``nor_conv_3x3`` are one kind (ReLU, conv, BN): the 1x1 kernel
        is the centre of the 3x3, as confopt's ``ReLUConvBN`` marks its conv
        (``searchspace/nb201/core/operations.py``)."""
        return kind_and_kernel(op, ("nor_conv",))

    # ----------------------------------------------------------------------- genotypes

    def derive(
        self, space: Space, weights: Mapping[str, Tensor], masks: Mapping[str, Tensor]
    ) -> AnyGenotype:
        cell = space.cells["cell"]
        w = weights["cell"].detach().float().cpu().masked_fill(~masks["cell"].cpu(), float("-inf"))
        ops = [cell.edges[e].ops[int(k)] for e, k in enumerate(w.argmax(-1).tolist())]
        return NB201Genotype.from_ops(ops)

    def genotype(self, space: Space, edges: Edges, *, sparse: bool = False) -> AnyGenotype:
        """Every edge of the cell once (a cell keeps every edge: ``sparse`` has no meaning)."""
        cell = space.cells["cell"]
        kept = list(edges["cell"])
        by_edge = {(src, dst): op for op, src, dst in kept}
        missing = [f"{e.src}->{e.dst}" for e in cell.edges if (e.src, e.dst) not in by_edge]
        if sparse or missing or len(kept) != cell.num_edges:
            raise ValueError(
                f"an NB201 cell keeps one op on each of its {cell.num_edges} edges; got "
                f"{len(kept)} edges" + (f", none on {', '.join(missing)}" if missing else "")
            )
        genotype = NB201Genotype.from_ops([by_edge[e.src, e.dst] for e in cell.edges])
        genotype.validate(space)
        return genotype

    def random_genotypes(self, space: Space, n: int, rng: random.Random) -> list[AnyGenotype]:
        """Benchmark cells drawn without replacement."""
        return [self.indexed_genotype(i) for i in rng.sample(range(self.num_indexed), n)]

    # ------------------------------------------------------ published networks by number

    def indexed_genotype(self, index: int) -> AnyGenotype:
        """The cell of benchmark index ``index`` (the official order)."""
        from search_spaces.nb201 import nb201_genotype  # the index table: on first use

        return nb201_genotype(index)

    def index_of(self, genotype: AnyGenotype) -> int:
        from search_spaces.nb201 import arch_to_index

        assert isinstance(genotype, NB201Genotype)
        return arch_to_index(genotype)

    # ------------------------------------------------------------------------ networks

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
        from search_spaces.nb201 import TinyNetwork  # torch: on first use

        assert isinstance(genotype, NB201Genotype)
        net = TinyNetwork(C, layers, genotype, num_classes)
        spec = NetworkSpec(
            "TinyNetwork", C, layers, False, False, (3, image_size, image_size), self.layers_word
        )
        return net, spec

    def logits(self, output: Any) -> tuple[Tensor, Tensor | None]:
        return output[1], None  # TinyNetwork returns (features, logits)

    def network_types(self) -> tuple[type[nn.Module], ...]:
        from search_spaces.nb201 import TinyNetwork

        return (TinyNetwork,)

    def features(self, net: nn.Module, x: Tensor) -> Tensor:
        """The last cell's output through the final BN and ReLU (``lastact``)."""
        from search_spaces.nb201 import tiny_features

        return tiny_features(net, x)

    def reference_logits(self, net: nn.Module, x: Tensor) -> Tensor:
        logits: Tensor = net(x)[1]  # its forward calls every module
        return logits

    # ------------------------------------------------------------------ latency layout

    def build_block(self, part: Part) -> nn.Module:
        from search_spaces.nb201 import layout_block

        return layout_block(part)

    def layout(self, layout: NetworkLayout, space: Space) -> None:
        """``TinyNetwork(C, N=layers)``: stages at C, 2C, 4C channels and full, 1/2, 1/4
        resolution."""
        edges = space.cells["cell"].edges
        C, N, H = layout.C, layout.layers, layout.image_size
        layout.add_fixed("stem", 3, C, 1, H, H)
        for stage in range(3):
            c, h = C * 2**stage, H // 2**stage
            if stage > 0:
                layout.add_fixed("resblock", c // 2, c, 2, 2 * h, 2 * h)
            # node sums: nodes 2 and 3 add 1 and 2 terms in every cell
            layout.add_fixed("add", c, c, 1, h, h, 3 * N)
            for e in edges:
                for k, op in enumerate(e.ops):
                    if op != "none":  # InferCell builds no module for `none`
                        layout.add_choice("cell", e.index, k, op, c, c, 1, h, h, N)
        layout.add_fixed("head_nb201", 4 * C, layout.num_classes, 1, H // 4, H // 4)
