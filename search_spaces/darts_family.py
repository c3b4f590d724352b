"""The DARTS cell family: the spaces ``darts`` and ``s1``..``s5``, as ``Family`` hooks.

First stage of the pipeline (``search_spaces``). Liu et al., "DARTS: Differentiable
Architecture Search", ICLR 2019 (quark0/darts); RobustDARTS's spaces (Zela et al., ICLR 2020)
are its cells with other op lists. Torch-free: the networks (``search_spaces.darts``) load on
the first call of a hook that builds or runs one.

* derivation (``derive``): for each intermediate node, its incoming edges ranked by their
  strongest non-``none`` weight, the top 2 kept, each with its strongest non-``none`` op
  (reference ``model_search.py: genotype()``; ties go to the earlier edge / op, as Python's
  stable sort does there). Masked-out ops never win.
* genotypes from kept edges (``genotype``): two ``(op, input)`` pairs per intermediate node,
  every intermediate node in the output, the concat written ``range(2, 6)`` as the reference
  prints it; sparse cells (FairDARTS) name each pair's node.
* networks: ``NetworkCIFAR`` (32x32 data), ``NetworkImageNet`` (the mobile setting, ImageNet);
  papers' sizes C=36, 20 cells and C=48, 14 cells.
* latency layout: ``NetworkCIFAR`` layer for layer (stem, each cell's two preprocessings, its
  node sums and concatenation, the classifier); an op of a cell is measured with its own leading
  ReLU, which the network shares between the ops that read the same state.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING

from search_spaces.family import Edges, Family, NetworkSpec
from search_spaces.genotype import AnyGenotype, DartsGenotype
from search_spaces.op_names import kind_and_kernel
from search_spaces.space import CellSpace, Space

if TYPE_CHECKING:
    from torch import Tensor, nn

    from search_spaces.layout import NetworkLayout, Part


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
    title = "DARTS"
    genotype_type = DartsGenotype
    networks = ("NetworkCIFAR", "NetworkImageNet")
    layers_word = "layers"
    drop_path = True
    paper_size = (36, 20)
    smallest_layers = 3  # reduction cells at layers // 3 and 2 * layers // 3, a normal one
    imagenet_size = (48, 14)  # the mobile setting
    blocks = (
        "relu_conv1x1_bn",  # cell preprocessing of a same-size input
        "factorized_reduce",  # preprocessing of s0 after a reduction cell
        "concat",  # cell output: C_out / C_in node states concatenated
        "head_darts",  # global average pool, Linear(C_in -> C_out classes)
    )

    def op_kernel(self, op: str) -> tuple[str, int] | None:
        """``sep_conv_KxK`` and ``dil_conv_KxK``: their depthwise kernels are entangled (as
        confopt's ``SepConv`` / ``DilConv`` mark them, ``searchspace/darts/core/operations.py``)."""
        return kind_and_kernel(op, ("sep_conv", "dil_conv"))

    # ----------------------------------------------------------------------- genotypes

    def derive(
        self, space: Space, weights: Mapping[str, Tensor], masks: Mapping[str, Tensor]
    ) -> AnyGenotype:
        normal = _darts_cell(space.cells["normal"], weights["normal"], masks["normal"])
        reduce = _darts_cell(space.cells["reduce"], weights["reduce"], masks["reduce"])
        steps = len(space.cells["normal"].intermediate_nodes)
        concat = tuple(range(2, 2 + steps))
        return DartsGenotype(tuple(normal), concat, tuple(reduce), concat, concat_as_range=True)

    def genotype(self, space: Space, edges: Edges, *, sparse: bool = False) -> AnyGenotype:
        """Dense cells (``sparse`` false) keep ``inputs_per_node`` edges of every intermediate
        node, in node order; sparse ones 0-2 per node (``DartsGenotype``'s node lists)."""
        pairs: dict[str, tuple[tuple[str, int], ...]] = {}
        nodes: dict[str, tuple[int, ...]] = {}
        for ct in self.cell_types:
            cell = space.cells[ct]
            kept = list(edges[ct])
            pairs[ct] = tuple((op, src) for op, src, _ in kept)
            nodes[ct] = tuple(dst for _, _, dst in kept)
            dense = [n for n in cell.intermediate_nodes for _ in range(cell.inputs_per_node or 0)]
            if not sparse and list(nodes[ct]) != dense:
                raise ValueError(
                    f"{ct} cell: edges into nodes {list(nodes[ct])}; a dense DARTS cell keeps "
                    f"{cell.inputs_per_node} per node, node by node ({dense})"
                )
        concat = tuple(space.cells["normal"].intermediate_nodes)
        genotype = DartsGenotype(
            pairs["normal"],
            concat,
            pairs["reduce"],
            concat,
            concat_as_range=True,
            normal_nodes=nodes["normal"] if sparse else None,
            reduce_nodes=nodes["reduce"] if sparse else None,
        )
        genotype.validate(space)
        return genotype

    def random_genotypes(self, space: Space, n: int, rng: random.Random) -> list[AnyGenotype]:
        """Two distinct input edges per node, each with a non-``none`` op."""
        out: list[AnyGenotype] = []
        for _ in range(n):
            cells = {}
            for ct, cell in space.cells.items():
                assert cell.inputs_per_node is not None
                pairs = []
                for node in cell.intermediate_nodes:
                    for e in rng.sample(list(cell.edges_into(node)), cell.inputs_per_node):
                        pairs.append((rng.choice([o for o in e.ops if o != "none"]), e.src))
                cells[ct] = tuple(pairs)
            concat = tuple(range(2, 2 + len(space.cells["normal"].intermediate_nodes)))
            out.append(
                DartsGenotype(
                    cells["normal"], concat, cells["reduce"], concat, concat_as_range=True
                )
            )
        return out

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
        """``NetworkImageNet`` for ImageNet-sized data (``image_size > 64``), else
        ``NetworkCIFAR`` (whose auxiliary head needs 32x32 images)."""
        from search_spaces.darts import NetworkCIFAR, NetworkImageNet  # torch: on first use

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
        return net, NetworkSpec(kind, C, layers, auxiliary, True, input_size, self.layers_word)

    def network_types(self) -> tuple[type[nn.Module], ...]:
        from search_spaces.darts import NetworkCIFAR, NetworkImageNet

        return (NetworkCIFAR, NetworkImageNet)

    def features(self, net: nn.Module, x: Tensor) -> Tensor:
        """The last cell's output, every op applying its own ReLU module (the reference's
        cells; the network's forward shares one ReLU per state)."""
        from search_spaces.darts import module_features

        return module_features(net, x)

    def reference_logits(self, net: nn.Module, x: Tensor) -> Tensor:
        from search_spaces.darts import module_logits

        return module_logits(net, x)

    # ------------------------------------------------------------------ latency layout

    def build_block(self, part: Part) -> nn.Module:
        from search_spaces.darts import layout_block

        return layout_block(part)

    def layout(self, layout: NetworkLayout, space: Space) -> None:
        """``NetworkCIFAR(C, layers)``: reduction cells at ``layers // 3`` and
        ``2 * layers // 3`` (double C, stride 2 on the edges from the cell's inputs)."""
        C, layers, H = layout.C, layout.layers, layout.image_size
        if H > 64:
            raise ValueError(
                "latency layouts cover the CIFAR-style DARTS network (image_size <= 64); "
                f"got {H} (NetworkImageNet is not laid out yet)"
            )
        if layers < 3:
            raise ValueError(f"layers must be at least 3 (two reduction cells), got {layers}")
        C_stem = 3 * C
        layout.add_fixed("stem", 3, C_stem, 1, H, H)
        C_pp, C_p, C_curr = C_stem, C_stem, C
        h = H  # resolution of s1 (the previous cell's output)
        reduction_prev = False
        for i in range(layers):
            reduction = i in (layers // 3, 2 * layers // 3)
            if reduction:
                C_curr *= 2
            if reduction_prev:
                layout.add_fixed("factorized_reduce", C_pp, C_curr, 2, 2 * h, 2 * h)
            else:
                layout.add_fixed("relu_conv1x1_bn", C_pp, C_curr, 1, h, h)
            layout.add_fixed("relu_conv1x1_bn", C_p, C_curr, 1, h, h)
            h_out = h // 2 if reduction else h
            ct = "reduce" if reduction else "normal"
            cell = space.cells[ct]
            steps = len(cell.intermediate_nodes)
            for e in cell.edges:
                stride = 2 if reduction and e.src < 2 else 1
                h_in = h if e.src < 2 else h_out
                for k, op in enumerate(e.ops):
                    if op != "none":
                        layout.add_choice(ct, e.index, k, op, C_curr, C_curr, stride, h_in, h_in)
            layout.add_fixed("add", C_curr, C_curr, 1, h_out, h_out, steps)
            layout.add_fixed("concat", C_curr, steps * C_curr, 1, h_out, h_out)
            reduction_prev = reduction
            C_pp, C_p = C_p, steps * C_curr
            h = h_out
        layout.add_fixed("head_darts", C_p, layout.num_classes, 1, h, h)
