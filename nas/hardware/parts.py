"""The pieces of a discrete network that a latency table holds, and where each one occurs.

Hardware-aware search (``nas.hardware``); the additive latency model of ProxylessNAS (Cai et
al., ICLR 2019) and FBNet (Wu et al., CVPR 2019): a network's latency is the sum of its
pieces' latencies. ``network_layout`` cuts the discrete network a space compiles to into
``Part``\\ s (``search_spaces.layout``): fixed parts, present whatever the genotype, and per
cell type, edge and candidate op the parts that choosing that op adds. The space's family lays
its network out (``Family.layout``) and builds its fixed blocks (``Family.build_block``), layer
for layer as its discrete network (``tests/hardware`` checks that the parts' parameters add up
to the network's); the validation benchmark measures what the additive model leaves out.
"""

from __future__ import annotations

from search_spaces.families import family_of
from search_spaces.layout import FIXED_BLOCKS, Counted, NetworkLayout, Part
from search_spaces.space import SPACE_NAMES, get_space

__all__ = ["FIXED_BLOCKS", "Counted", "NetworkLayout", "Part", "network_layout"]


def network_layout(
    space: str, *, C: int, layers: int, image_size: int, num_classes: int
) -> NetworkLayout:
    """The layout of the discrete network of ``space`` (its family's network at ``C`` and
    ``layers``, the family's size word: NB201 cells per stage N, DARTS cells) on
    ``image_size`` inputs."""
    if space not in SPACE_NAMES:
        names = ", ".join(SPACE_NAMES)
        raise ValueError(f"unknown search space {space!r}; expected one of {names}")
    for name, v in (("C", C), ("layers", layers), ("image_size", image_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"network {name} must be a positive int, got {v!r}")
    if image_size % 4:
        raise ValueError(f"image_size must be a multiple of 4 (two halvings), got {image_size}")
    layout = NetworkLayout(space, C, layers, image_size, num_classes)
    sp = get_space(space)
    # every cell type, edge and op of the space, in its order, before the family fills them
    layout.choices = {ct: [[[] for _ in e.ops] for e in c.edges] for ct, c in sp.cells.items()}
    family_of(sp).layout(layout, sp)
    return layout
