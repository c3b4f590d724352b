"""The ProxylessNAS family: the spaces ``proxyless`` and ``proxyless_cifar``, as ``Family`` hooks.

First stage of the pipeline (``search_spaces``). Cai, Zhu & Han, "ProxylessNAS: Direct Neural
Architecture Search on Target Task and Hardware", ICLR 2019 (mit-han-lab/proxylessnas,
``search/``). Torch-free: the network (``search_spaces.proxyless``) loads on the first call of a
hook that builds or runs one. The space is a chain of 21 searchable MobileNet blocks
(``search_spaces.proxyless_space``), one cell type ``blocks`` whose edge ``i`` is block ``i``;
the hooks below are those of every chain space (``search_spaces.chain.ChainFamily``) but the
network, its widths and the reference lookup table's keys.

* derivation (``derive``): each block's strongest op, ``none`` included where the block can be
  skipped (the reference's ``chosen_index``: the argmax of a block's architecture parameters,
  its ``Zero`` candidate among them). Masked-out ops, and ``none`` on a block that cannot be
  skipped, never win.
* genotypes from kept edges (``genotype``): one op on every block.
* published networks by name (``search_spaces.published``): the authors' released GPU, CPU,
  mobile and 1.4x mobile networks; none by number. FBNet-A/B/C (Wu et al., CVPR 2019), whose
  blocks this space cannot express (grouped convs with a shuffle, expansion 1, other stages),
  are the published networks of a family of their own (``search_spaces.fbnet_family``).
* network: ``ProxylessNetwork`` (``C``: the stem width at multiplier 1, 32; the size word
  ``blocks``: the searchable blocks kept, 21 in the reference, or 16, 11, 6 for 3, 2, 1 per
  stage), which returns the logits; no auxiliary head, no drop-path. ImageNet-sized data
  (over 64 pixels) gets the ImageNet layout, smaller data the 32x32 one.
* latency layout: the network layer for layer: the stem, the first block, per block and
  candidate the MBConv at its shape (and the shortcut's addition where the block has one),
  the feature mix and the classifier; ``none`` adds nothing.
* reference lookup table (``lookup_keys``): each part's key in the authors' released latency
  table (han-cai/files ``proxylessnas/mobile_trim.yaml``, read by mit-han-lab/proxylessnas
  ``search/utils/latency_estimator.py``): the stem is ``Conv``, the first block and every
  MBConv choice ``expanded_conv`` (with ``idskip:1`` where the block has its shortcut, whose
  addition that entry includes), the feature mix ``Conv_1``, pooling and classifier ``Logits``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from search_spaces.chain import ChainCell, ChainFamily, Widths
from search_spaces.genotype import AnyGenotype, ProxylessGenotype
from search_spaces.proxyless_space import (
    BASE_STEM,
    CELL_TYPE,
    MBCONV_OPS,
    BlockChain,
    chain_of,
    parse_mbconv,
    scaled_widths,
)
from search_spaces.proxyless_space import Widths as ProxylessWidths
from search_spaces.space import Space

if TYPE_CHECKING:
    from torch import nn

    from search_spaces.layout import NetworkLayout, Part


class ProxylessFamily(ChainFamily):
    name = "proxyless"
    title = "ProxylessNAS"
    genotype_type = ProxylessGenotype
    networks = ("ProxylessNetwork",)
    paper_size = (BASE_STEM, 21)
    imagenet_size = (BASE_STEM, 21)
    stem_block = "proxyless_stem"  # Conv3x3 (stride 2 / 1), BN, ReLU6
    first_block = "proxyless_first"  # the fixed first block: MBConv, kernel 3, expansion 1
    last_block = "proxyless_mix"  # the feature mix: Conv1x1, BN, ReLU6
    classifier_block = "proxyless_classifier"  # global average pool, Linear(C_in -> classes)
    # and each candidate MBConv, without its shortcut addition (``add``)
    blocks = (stem_block, first_block, last_block, classifier_block, *MBCONV_OPS)
    network_module = "search_spaces.proxyless"

    def op_kernel(self, op: str) -> tuple[str, int] | None:
        """The MBConvs of one expansion ratio are one kind (their depthwise kernel 3, 5 or 7
        entangled; the expansion and projection 1x1s shared with it)."""
        if op not in MBCONV_OPS:
            return None
        kernel, expand = parse_mbconv(op)
        return f"MBConv{expand}", kernel

    def build_network(
        self, genotype: AnyGenotype, *, C: int, num_classes: int, image_size: int, depth: int
    ) -> nn.Module:
        """``ProxylessNetwork`` at width ``C`` (32: multiplier 1) keeping ``depth`` blocks per
        stage (the size word ``layers``: 21 searchable blocks: all; 16, 11, 6: 3, 2, 1 per
        stage; 1..4: that many per stage)."""
        from search_spaces.proxyless import proxyless_network  # torch: on first use

        return proxyless_network(
            genotype, C=C, num_classes=num_classes, image_size=image_size, depth=depth
        )

    def layout_widths(self, chain: ChainCell, C: int) -> Widths:
        assert isinstance(chain, BlockChain)
        return scaled_widths(chain, C)

    def chain_input(self, widths: Widths) -> int:
        """The fixed first block's output."""
        assert isinstance(widths, ProxylessWidths)
        return widths.first

    def lookup_keys(self, layout: NetworkLayout, space: Space) -> dict[str, str | None]:
        """Each part's key in the reference's lookup table, as the reference's
        ``SuperProxylessNASNets.expected_latency`` (``search/models/super_nets/
        super_proxyless.py``) asks its ``LatencyEstimator.predict`` for them: ``Conv``,
        ``Conv_1`` and ``Logits`` for the stem, feature mix and classifier, ``expanded_conv``
        (input and output ``HxWxC``, expansion, kernel, stride, ``idskip``) for the first block
        and each MBConv choice. A shortcut's ``add`` part maps to None: the ``idskip:1`` entry
        of its block's MBConv includes it."""
        from search_spaces.proxyless_space import FIRST_BLOCK_OP

        chain = chain_of(space)
        keys: dict[str, str | None] = {}

        def put(part: Part, key: str | None) -> None:
            if keys.setdefault(part.key, key) != key:
                raise ValueError(
                    f"part {part.key} stands for two entries of the reference table "
                    f"({keys[part.key]}, {key}) at this width; import at the reference's width"
                )

        def hwc(h: int, c: int) -> str:
            return f"{h}x{h}x{c}"

        def mbconv(part: Part, op: str, idskip: bool) -> str:
            kernel, expand = parse_mbconv(op)
            h_out = -(-part.H // part.stride)
            return (
                f"expanded_conv-input:{hwc(part.H, part.C_in)}-output:{hwc(h_out, part.C_out)}"
                f"-expand:{expand}-kernel:{kernel}-stride:{part.stride}-idskip:{int(idskip)}"
            )

        for part, _ in layout.fixed:
            h_out = -(-part.H // part.stride)
            if part.name == self.stem_block:
                put(part, f"Conv-input:{hwc(part.H, part.C_in)}-output:{hwc(h_out, part.C_out)}")
            elif part.name == self.first_block:
                put(part, mbconv(part, FIRST_BLOCK_OP, False))
            elif part.name == self.last_block:
                put(part, f"Conv_1-input:{hwc(part.H, part.C_in)}-output:{hwc(h_out, part.C_out)}")
            elif part.name == self.classifier_block:
                put(part, f"Logits-input:{hwc(part.H, part.C_in)}-output:{part.C_out}")
            else:
                raise ValueError(f"no reference lookup-table entry for the fixed part {part.key}")
        for i, ops in enumerate(layout.choices[CELL_TYPE]):
            for k, counted in enumerate(ops):
                op = chain.edges[i].ops[k]
                for part, _ in counted:
                    if part.name == "add":
                        put(part, None)
                    elif part.name == op:
                        put(part, mbconv(part, op, chain.skippable[i]))
                    else:
                        raise ValueError(f"no reference lookup-table entry for {part.key}")
        return keys
