"""The FBNet family: the spaces ``fbnet`` and ``fbnet_cifar``, as ``Family`` hooks.

First stage of the pipeline (``search_spaces``). Wu, Dai, Zhang, Wang, Sun, Wu, Tian, Vajda, Jia
& Keutzer, "FBNet: Hardware-Aware Efficient ConvNet Design via Differentiable Neural
Architecture Search", CVPR 2019 (its search code was not released; the found networks are
facebookresearch/mobile-vision's ``mobile_cv/arch/fbnet_v2/fbnet_modeldef_cls_fbnet.py``).
Torch-free: the network (``search_spaces.fbnet``) loads on the first call of a hook that builds
or runs one. The space is a chain of 22 searchable blocks (``search_spaces.fbnet_space``), one
cell type ``fbnet_blocks`` whose edge ``i`` is block ``i``; the hooks below are those of every
chain space (``search_spaces.chain.ChainFamily``) but the network and its widths.

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

from typing import TYPE_CHECKING

from search_spaces.chain import ChainCell, ChainFamily, Widths
from search_spaces.fbnet_space import BASE_STEM, CONV_OPS, FBNetChain, parse_block_op
from search_spaces.genotype import AnyGenotype, FBNetGenotype

if TYPE_CHECKING:
    from torch import nn


class FBNetFamily(ChainFamily):
    name = "fbnet"
    title = "FBNet"
    genotype_type = FBNetGenotype
    networks = ("FBNetNetwork",)
    paper_size = (BASE_STEM, 22)
    imagenet_size = (BASE_STEM, 22)
    stem_block = "fbnet_stem"  # Conv3x3 (stride 2 / 1), BN, ReLU
    last_block = "fbnet_last"  # the last 1x1 conv (1984 wide at multiplier 1), BN, ReLU
    classifier_block = "fbnet_classifier"  # global average pool, Conv1x1(C_in -> classes)
    # and each candidate block, without its shortcut addition (``add``)
    blocks = (stem_block, last_block, classifier_block, *CONV_OPS)
    network_module = "search_spaces.fbnet"

    def op_kernel(self, op: str) -> tuple[str, int] | None:
        """The blocks of one expansion and group count are one kind (``k3eE`` / ``k5eE``, and
        ``k3e1g2`` / ``k5e1g2``): their depthwise kernel entangled, the 1x1s shared with it."""
        if op not in CONV_OPS:
            return None
        kernel, expand, groups = parse_block_op(op)
        return f"e{expand}g{groups}", kernel

    def build_network(
        self, genotype: AnyGenotype, *, C: int, num_classes: int, image_size: int, depth: int
    ) -> nn.Module:
        """``FBNetNetwork`` at width ``C`` (16: multiplier 1) keeping ``depth`` blocks per stage
        (the size word ``layers``: 22 searchable blocks: all; 17, 12, 7: 3, 2, 1 per stage;
        1..4: that many per stage)."""
        from search_spaces.fbnet import fbnet_network_of  # torch: on first use

        return fbnet_network_of(
            genotype, C=C, num_classes=num_classes, image_size=image_size, depth=depth
        )

    def layout_widths(self, chain: ChainCell, C: int) -> Widths:
        """The widths at ``C``, the last conv at the space's 1984 channels (scaled)."""
        assert isinstance(chain, FBNetChain)
        return chain.widths_at(C)
