"""search_spaces: WHAT is searched, the first stage of the pipeline.

Operations (``ops``), spaces as data (``space``), genotypes (``genotype``), published genotypes
(``published``), the discrete networks genotypes compile to (``darts``, ``nb201``,
``proxyless``, ``fbnet``), and the space families that the later stages ask instead of naming one
(``family``: the hooks; ``darts_family``, ``nb201_family``, ``proxyless_family``,
``fbnet_family``; the registry ``families``), with the latency layout of their
networks (``layout``).
This package imports only torch, so a published genotype retrains without any search code;
genotypes, spaces and published names do not even import torch (``OPS`` and ``build_op`` load
``search_spaces.ops`` when first used), so parsing a genotype is instant.
"""

from typing import TYPE_CHECKING, Any

from search_spaces.genotype import (
    AnyGenotype,
    DartsGenotype,
    FBNetGenotype,
    Genotype,
    NB201Genotype,
    ProxylessGenotype,
    format_genotype,
    genotype_from_json,
    parse_genotype,
)
from search_spaces.op_names import DARTS_OPS, NB201_OPS
from search_spaces.published import published_genotype, published_names, resolve_genotype
from search_spaces.space import SPACE_NAMES, CellSpace, Edge, Space, get_space

if TYPE_CHECKING:
    from search_spaces.ops import OPS, build_op


def __getattr__(name: str) -> Any:
    if name in ("OPS", "build_op"):
        from search_spaces import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'search_spaces' has no attribute {name!r}")


__all__ = [
    "DARTS_OPS",
    "NB201_OPS",
    "OPS",
    "SPACE_NAMES",
    "AnyGenotype",
    "CellSpace",
    "DartsGenotype",
    "Edge",
    "FBNetGenotype",
    "Genotype",
    "NB201Genotype",
    "ProxylessGenotype",
    "Space",
    "build_op",
    "format_genotype",
    "genotype_from_json",
    "get_space",
    "parse_genotype",
    "published_genotype",
    "published_names",
    "resolve_genotype",
]
