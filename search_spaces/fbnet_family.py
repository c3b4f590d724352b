"""The FBNet family: the spaces ``fbnet`` and ``fbnet_cifar``, as ``Family`` hooks.

First stage of the pipeline (``search_spaces``). Wu, Dai, Zhang, Wang, Sun, Wu, Tian, Vajda, Jia
& Keutzer, "FBNet: Hardware-Aware Efficient ConvNet Design via Differentiable Neural
Architecture Search", CVPR 2019 (its search code was not released; the found networks are
facebookresearch/mobile-vision's ``mobile_cv/arch/fbnet_v2/fbnet_modeldef_cls_fbnet.py``).
Torch-free: the network (``search_spaces.fbnet``) loads on the first call of a hook that builds
or runs one. The space is a chain of 22 searchable blocks (``search_spaces.fbnet_space``), one
cell type ``fbnet_blocks`` whose edge ``i`` is block ``i``.

* derivation (``derive``): each block's strongest op, ``skip`` included where the block keeps
  its shape (the argmax of the paper's ``theta``); masked-out ops, and ``skip`` on a block that
  changes the shape, never win.
* genotypes from kept edges (``genotype``): one op on every block.
* published networks by name (``search_spaces.published``): FBNet-A, -B and -C
  (``fbnet_a``, ``fbnet_b``, ``fbnet_c``); none by number.
* network: ``FBNetNetwork`` (``C``: the stem width at multiplier 1, 16; the size word
  ``blocks``: the searchable blocks kept, 22 in the paper, or 17, 12, 7 for 3, 2, 1 per stage),
  which returns the logits; no auxiliary head, no drop-path. ImageNet-sized data (over 64
  pixels) gets the ImageNet layout, smaller data the 32x32 one.
* latency layout: the network layer for layer, as the paper's lookup table times it: the stem,
  per block and candidate the block at its shape (and the shortcut's addition where the block
  has one), the last 1x1 conv, and the pooling with the classifier; ``skip`` adds nothing. The
  paper's own lookup table was not released: no reference format to import.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from search_spaces.family import Edges, Family, NetworkSpec
from search_spaces.fbnet_space import BASE_STEM, CELL_TYPE, CONV_OPS, SKIP_OP, chain_of
from search_spaces.genotype import AnyGenotype, FBNetGenotype
from search_spaces.space import Space, get_space

if TYPE_CHECKING:
    from torch import Tensor, nn

    from search_spaces.layout import NetworkLayout, Part


class FBNetFamily(Family):
    name = "fbnet"
    title = "FBNet"
    genotype_type = FBNetGenotype
    networks = ("FBNetNetwork",)
    layers_word = "blocks"
    drop_path = False
    paper_size = (BASE_STEM, 22)
    imagenet_size = (BASE_STEM, 22)
    blocks = (
        "fbnet_stem",  # Conv3x3 (stride 2 / 1), BN, ReLU
        "fbnet_last",  # the last 1x1 conv (1984 wide at multiplier 1), BN, ReLU
        "fbnet_classifier",  # global average pool, Conv1x1(C_in -> classes)
        *CONV_OPS,  # each candidate block, without its shortcut addition (``add``)
    )

    # ----------------------------------------------------------------------- genotypes

    def derive(
        self, space: Space, weights: Mapping[str, Tensor], masks: Mapping[str, Tensor]
    ) -> AnyGenotype:
        chain = chain_of(space)
        w = weights[CELL_TYPE].detach().float().cpu()
        mask = masks[CELL_TYPE].cpu().clone()
        for i, e in enumerate(chain.edges):
            if not chain.skippable[i]:
                mask[i, e.ops.index(SKIP_OP)] = False
        w = w.masked_fill(~mask, float("-inf"))
        ops = [chain.edges[i].ops[int(k)] for i, k in enumerate(w.argmax(-1).tolist())]
        genotype = FBNetGenotype(tuple(ops))
        genotype.validate(space)
        return genotype

    def genotype(self, space: Space, edges: Edges, *, sparse: bool = False) -> AnyGenotype:
        """One op on each block of the chain (every block is kept: ``sparse`` has no meaning)."""
        chain = chain_of(space)
        kept = list(edges[CELL_TYPE])
        by_edge = {(src, dst): op for op, src, dst in kept}
        missing = [f"{e.src}->{e.dst}" for e in chain.edges if (e.src, e.dst) not in by_edge]
        if sparse or missing or len(kept) != chain.num_edges:
            raise ValueError(
                f"an FBNet network keeps one op on each of its {chain.num_edges} blocks; "
                f"got {len(kept)}" + (f", none on {', '.join(missing)}" if missing else "")
            )
        genotype = FBNetGenotype(tuple(by_edge[e.src, e.dst] for e in chain.edges))
        genotype.validate(space)
        return genotype

    def random_genotypes(self, space: Space, n: int, rng: random.Random) -> list[AnyGenotype]:
        """Each block's op drawn uniformly from those it allows (``skip`` where the block keeps
        its shape)."""
        allowed = self.allowed_ops(space)[CELL_TYPE]
        chain = chain_of(space)
        out: list[AnyGenotype] = []
        for _ in range(n):
            ops = [
                rng.choice([op for op, ok in zip(e.ops, allowed[e.index]) if ok])
                for e in chain.edges
            ]
            out.append(FBNetGenotype(tuple(ops)))
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
        """``FBNetNetwork`` at width ``C`` (16: multiplier 1) keeping ``layers`` searchable
        blocks (22: all; 17, 12, 7: 3, 2, 1 per stage; 1..4: that many per stage); no auxiliary
        head (``auxiliary`` is ignored)."""
        from search_spaces.fbnet import fbnet_network_of  # torch: on first use

        assert isinstance(genotype, FBNetGenotype)
        chain = chain_of(get_space(genotype.space_name))
        depth = chain.depth_of(layers)  # a one-line refusal of a size the chain has not
        net = fbnet_network_of(
            genotype, C=C, num_classes=num_classes, image_size=image_size, depth=depth
        )
        spec = NetworkSpec(
            "FBNetNetwork", C, layers, False, False, (3, image_size, image_size), self.layers_word
        )
        return net, spec

    def logits(self, output: Any) -> tuple[Tensor, Tensor | None]:
        return output, None  # FBNetNetwork returns the logits

    def network_types(self) -> tuple[type[nn.Module], ...]:
        from search_spaces.fbnet import FBNetNetwork

        return (FBNetNetwork,)

    def features(self, net: nn.Module, x: Tensor) -> Tensor:
        """The last 1x1 conv's output (Conv1x1, BN, ReLU), before the pooling."""
        from search_spaces.fbnet import network_features

        return network_features(net, x)

    def reference_logits(self, net: nn.Module, x: Tensor) -> Tensor:
        from search_spaces.fbnet import network_logits

        return network_logits(net, x)  # its forward calls every module

    # ------------------------------------------------------------------ latency layout

    def build_block(self, part: Part) -> nn.Module:
        from search_spaces.fbnet import layout_block

        return layout_block(part)

    def layout(self, layout: NetworkLayout, space: Space) -> None:
        """``FBNetNetwork`` at width ``layout.C`` keeping ``layout.layers`` blocks: the space's
        layout (its stem and stage strides) on ``layout.image_size`` inputs, the last conv at
        the space's 1984 channels (scaled)."""
        chain = chain_of(space)
        kept = chain.kept(chain.depth_of(layout.layers))
        widths = chain.widths_at(layout.C)
        h = layout.image_size
        layout.add_fixed("fbnet_stem", 3, widths.stem, chain.stem_stride, h, h)
        h = -(-h // chain.stem_stride)
        for i, (c_in, c_out, stride) in enumerate(chain.block_shapes(widths)):
            if not kept[i]:
                continue  # beyond the depth: the block is skipped, whatever is chosen
            h_out = -(-h // stride)
            for k, op in enumerate(chain.edges[i].ops):
                if op == SKIP_OP:
                    continue  # the input passes on: nothing to measure
                layout.add_choice(CELL_TYPE, i, k, op, c_in, c_out, stride, h, h)
                if chain.skippable[i]:  # the identity shortcut's addition
                    layout.add_choice(CELL_TYPE, i, k, "add", c_out, c_out, 1, h_out, h_out)
            h = h_out
        layout.add_fixed("fbnet_last", widths.stages[-1], widths.head, 1, h, h)
        layout.add_fixed("fbnet_classifier", widths.head, layout.num_classes, 1, h, h)

    def allowed_ops(self, space: Space) -> dict[str, list[list[bool]]]:
        """Every op of every block, but ``skip`` where the block changes the shape."""
        chain = chain_of(space)
        return {
            CELL_TYPE: [
                [op != SKIP_OP or chain.skippable[e.index] for op in e.ops] for e in chain.edges
            ]
        }
