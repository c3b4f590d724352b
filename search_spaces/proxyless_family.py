"""The ProxylessNAS family: the spaces ``proxyless`` and ``proxyless_cifar``, as ``Family`` hooks.

First stage of the pipeline (``search_spaces``). Cai, Zhu & Han, "ProxylessNAS: Direct Neural
Architecture Search on Target Task and Hardware", ICLR 2019 (mit-han-lab/proxylessnas,
``search/``). Torch-free: the network (``search_spaces.proxyless``) loads on the first call of a
hook that builds or runs one. The space is a chain of 21 searchable MobileNet blocks
(``search_spaces.proxyless_space``), one cell type ``blocks`` whose edge ``i`` is block ``i``.

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

import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from search_spaces.family import Edges, Family, NetworkSpec
from search_spaces.genotype import AnyGenotype, ProxylessGenotype
from search_spaces.proxyless_space import (
    BASE_STEM,
    CELL_TYPE,
    MBCONV_OPS,
    SKIP_OP,
    chain_of,
    parse_mbconv,
)
from search_spaces.space import Space, get_space

if TYPE_CHECKING:
    from torch import Tensor, nn

    from search_spaces.layout import NetworkLayout, Part


class ProxylessFamily(Family):
    name = "proxyless"
    title = "ProxylessNAS"
    genotype_type = ProxylessGenotype
    networks = ("ProxylessNetwork",)
    layers_word = "blocks"
    drop_path = False
    paper_size = (BASE_STEM, 21)
    imagenet_size = (BASE_STEM, 21)
    blocks = (
        "proxyless_stem",  # Conv3x3 (stride 2 / 1), BN, ReLU6
        "proxyless_first",  # the fixed first block: MBConv, kernel 3, expansion 1
        "proxyless_mix",  # the feature mix: Conv1x1, BN, ReLU6
        "proxyless_classifier",  # global average pool, Linear(C_in -> classes)
        *MBCONV_OPS,  # each candidate MBConv, without its shortcut addition (``add``)
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
        genotype = ProxylessGenotype(tuple(ops))
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
                f"a ProxylessNAS network keeps one op on each of its {chain.num_edges} blocks; "
                f"got {len(kept)}" + (f", none on {', '.join(missing)}" if missing else "")
            )
        genotype = ProxylessGenotype(tuple(by_edge[e.src, e.dst] for e in chain.edges))
        genotype.validate(space)
        return genotype

    def random_genotypes(self, space: Space, n: int, rng: random.Random) -> list[AnyGenotype]:
        """Each block's op drawn uniformly from those it allows (``none`` where it may be
        skipped)."""
        chain = chain_of(space)
        out: list[AnyGenotype] = []
        for _ in range(n):
            ops = [
                rng.choice([op for op in e.ops if op != SKIP_OP or chain.skippable[e.index]])
                for e in chain.edges
            ]
            out.append(ProxylessGenotype(tuple(ops)))
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
        """``ProxylessNetwork`` at width ``C`` (32: multiplier 1) keeping ``layers`` searchable
        blocks (21: all; 16, 11, 6: 3, 2, 1 per stage; 1..4: that many per stage); no
        auxiliary head (``auxiliary`` is ignored)."""
        from search_spaces.proxyless import proxyless_network  # torch: on first use

        assert isinstance(genotype, ProxylessGenotype)
        chain = chain_of(get_space(genotype.space_name))
        depth = chain.depth_of(layers)  # a one-line refusal of a size the chain has not
        net = proxyless_network(
            genotype, C=C, num_classes=num_classes, image_size=image_size, depth=depth
        )
        spec = NetworkSpec(
            "ProxylessNetwork",
            C,
            layers,
            False,
            False,
            (3, image_size, image_size),
            self.layers_word,
        )
        return net, spec

    def logits(self, output: Any) -> tuple[Tensor, Tensor | None]:
        return output, None  # ProxylessNetwork returns the logits

    def network_types(self) -> tuple[type[nn.Module], ...]:
        from search_spaces.proxyless import ProxylessNetwork

        return (ProxylessNetwork,)

    def features(self, net: nn.Module, x: Tensor) -> Tensor:
        """The feature-mix layer's output (Conv1x1, BN, ReLU6), before the pooling."""
        from search_spaces.proxyless import network_features

        return network_features(net, x)

    def reference_logits(self, net: nn.Module, x: Tensor) -> Tensor:
        from search_spaces.proxyless import network_logits

        return network_logits(net, x)  # its forward calls every module

    # ------------------------------------------------------------------ latency layout

    def build_block(self, part: Part) -> nn.Module:
        from search_spaces.proxyless import layout_block

        return layout_block(part)

    def layout(self, layout: NetworkLayout, space: Space) -> None:
        """``ProxylessNetwork`` at width ``layout.C`` keeping ``layout.layers`` blocks: the space's
        layout (its stem and stage strides) on ``layout.image_size`` inputs."""
        from search_spaces.proxyless_space import scaled_widths

        chain = chain_of(space)
        kept = chain.kept(chain.depth_of(layout.layers))
        widths = scaled_widths(chain, layout.C)
        h = layout.image_size
        layout.add_fixed("proxyless_stem", 3, widths.stem, chain.stem_stride, h, h)
        h = -(-h // chain.stem_stride)
        layout.add_fixed("proxyless_first", widths.stem, widths.first, 1, h, h)
        for i, (c_in, c_out, stride) in enumerate(chain.block_shapes(layout.C)):
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
        layout.add_fixed("proxyless_mix", widths.stages[-1], widths.head, 1, h, h)
        layout.add_fixed("proxyless_classifier", widths.head, layout.num_classes, 1, h, h)

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
            if part.name == "proxyless_stem":
                put(part, f"Conv-input:{hwc(part.H, part.C_in)}-output:{hwc(h_out, part.C_out)}")
            elif part.name == "proxyless_first":
                put(part, mbconv(part, FIRST_BLOCK_OP, False))
            elif part.name == "proxyless_mix":
                put(part, f"Conv_1-input:{hwc(part.H, part.C_in)}-output:{hwc(h_out, part.C_out)}")
            elif part.name == "proxyless_classifier":
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

    def allowed_ops(self, space: Space) -> dict[str, list[list[bool]]]:
        """Every op of every block, but ``none`` where the block cannot be skipped."""
        chain = chain_of(space)
        return {
            CELL_TYPE: [
                [op != SKIP_OP or chain.skippable[e.index] for op in e.ops] for e in chain.edges
            ]
        }
