"""nas.supernet: mixed operations and supernets built from a search space.

``network`` holds what every supernet shares and the registry ``build_supernet`` reads; each
space family's supernet is a module of its own (``darts``, ``nb201``, ``proxyless``,
``fbnet``) that registers itself when imported here.
"""

from nas.supernet.compiled import compile_supernet
from nas.supernet.darts import DartsSupernet
from nas.supernet.fbnet import FBNetSupernet
from nas.supernet.mixed_op import MixedOp, channel_shuffle
from nas.supernet.nb201 import NB201Supernet
from nas.supernet.network import ArchWeights, Supernet, build_supernet
from nas.supernet.proxyless import ProxylessSupernet

__all__ = [
    "ArchWeights",
    "DartsSupernet",
    "FBNetSupernet",
    "MixedOp",
    "NB201Supernet",
    "ProxylessSupernet",
    "Supernet",
    "build_supernet",
    "channel_shuffle",
    "compile_supernet",
]
