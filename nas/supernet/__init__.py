"""nas.supernet: mixed operations and supernets built from a search space."""

from nas.supernet.compiled import compile_supernet
from nas.supernet.mixed_op import MixedOp, channel_shuffle
from nas.supernet.network import (
    ArchWeights,
    DartsSupernet,
    NB201Supernet,
    Supernet,
    build_supernet,
)

__all__ = [
    "ArchWeights",
    "DartsSupernet",
    "MixedOp",
    "NB201Supernet",
    "Supernet",
    "build_supernet",
    "channel_shuffle",
    "compile_supernet",
]
