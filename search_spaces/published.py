"""Published genotypes by name, exactly as the reference repositories print them.

Sources: quark0/darts ``cnn/genotypes.py`` (DARTS_V1, DARTS_V2, Liu et al., ICLR 2019);
xiangning-chen/DrNAS ``DARTS-space/genotypes.py`` (PC_DARTS_cifar, PC_DARTS_image from Xu et
al., ICLR 2020; DrNAS_cifar10, DrNAS_imagenet from Chen et al., ICLR 2021); xiaomi-automl/FairDARTS
``fairdarts/genotypes.py`` (FairDARTS_a, FairDARTS_b, Chu et al., ECCV 2020: sparse cells whose
nodes keep 0-2 inputs, written as the reference's (op, node, input) triples). The texts are kept
verbatim and parsed on first use, so the parser is exercised on the real reference output.
ProxylessNAS's released networks (Cai et al., ICLR 2019; han-cai/files ``proxylessnas/*.config``:
``proxyless_gpu``, ``proxyless_cpu``, ``proxyless_mobile``, ``proxyless_mobile_14``) are their
block choices and widths (``search_spaces.proxyless_space.PUBLISHED_BLOCKS``) in this toolkit's
text form; so are FBNet-A, -B and -C (Wu et al., CVPR 2019; facebookresearch/mobile-vision
``mobile_cv/arch/fbnet_v2/fbnet_modeldef_cls_fbnet.py``: ``fbnet_a``, ``fbnet_b``, ``fbnet_c``),
their block ops and last-conv widths (``search_spaces.fbnet_space.FBNET_BLOCKS``).
"""

from __future__ import annotations

from functools import cache

from search_spaces.fbnet_space import FBNET_BLOCKS
from search_spaces.genotype import (
    AnyGenotype,
    DartsGenotype,
    FBNetGenotype,
    ProxylessGenotype,
    is_genotype,
    parse_darts_genotype,
    parse_genotype,
)
from search_spaces.proxyless_space import PUBLISHED_BLOCKS

PUBLISHED_TEXT: dict[str, str] = {
    "DARTS_V1": (
        "Genotype(normal=[('sep_conv_3x3', 1), ('sep_conv_3x3', 0), ('skip_connect', 0), "
        "('sep_conv_3x3', 1), ('skip_connect', 0), ('sep_conv_3x3', 1), ('sep_conv_3x3', 0), "
        "('skip_connect', 2)], normal_concat=[2, 3, 4, 5], reduce=[('max_pool_3x3', 0), "
        "('max_pool_3x3', 1), ('skip_connect', 2), ('max_pool_3x3', 0), ('max_pool_3x3', 0), "
        "('skip_connect', 2), ('skip_connect', 2), "
        "('avg_pool_3x3', 0)], reduce_concat=[2, 3, 4, 5])"
    ),
    "DARTS_V2": (
        "Genotype(normal=[('sep_conv_3x3', 0), ('sep_conv_3x3', 1), ('sep_conv_3x3', 0), "
        "('sep_conv_3x3', 1), ('sep_conv_3x3', 1), ('skip_connect', 0), ('skip_connect', 0), "
        "('dil_conv_3x3', 2)], normal_concat=[2, 3, 4, 5], reduce=[('max_pool_3x3', 0), "
        "('max_pool_3x3', 1), ('skip_connect', 2), ('max_pool_3x3', 1), ('max_pool_3x3', 0), "
        "('skip_connect', 2), ('skip_connect', 2), "
        "('max_pool_3x3', 1)], reduce_concat=[2, 3, 4, 5])"
    ),
    "PC_DARTS_cifar": (
        "Genotype(normal=[('sep_conv_3x3', 1), ('skip_connect', 0), ('sep_conv_3x3', 0), "
        "('dil_conv_3x3', 1), ('sep_conv_5x5', 0), ('sep_conv_3x3', 1), ('avg_pool_3x3', 0), "
        "('dil_conv_3x3', 1)], normal_concat=range(2, 6), reduce=[('sep_conv_5x5', 1), "
        "('max_pool_3x3', 0), ('sep_conv_5x5', 1), ('sep_conv_5x5', 2), ('sep_conv_3x3', 0), "
        "('sep_conv_3x3', 3), ('sep_conv_3x3', 1), "
        "('sep_conv_3x3', 2)], reduce_concat=range(2, 6))"
    ),
    "PC_DARTS_image": (
        "Genotype(normal=[('skip_connect', 1), ('sep_conv_3x3', 0), ('sep_conv_3x3', 0), "
        "('skip_connect', 1), ('sep_conv_3x3', 1), ('sep_conv_3x3', 3), ('sep_conv_3x3', 1), "
        "('dil_conv_5x5', 4)], normal_concat=range(2, 6), reduce=[('sep_conv_3x3', 0), "
        "('skip_connect', 1), ('dil_conv_5x5', 2), ('max_pool_3x3', 1), ('sep_conv_3x3', 2), "
        "('sep_conv_3x3', 1), ('sep_conv_5x5', 0), "
        "('sep_conv_3x3', 3)], reduce_concat=range(2, 6))"
    ),
    "DrNAS_cifar10": (
        "Genotype(normal=[('sep_conv_3x3', 0), ('sep_conv_5x5', 1), ('sep_conv_3x3', 1), "
        "('sep_conv_3x3', 2), ('skip_connect', 0), ('sep_conv_3x3', 1), ('sep_conv_3x3', 2), "
        "('dil_conv_5x5', 3)], normal_concat=range(2, 6), reduce=[('max_pool_3x3', 0), "
        "('sep_conv_5x5', 1), ('dil_conv_5x5', 2), ('sep_conv_5x5', 1), ('sep_conv_5x5', 1), "
        "('dil_conv_5x5', 3), ('skip_connect', 4), "
        "('sep_conv_5x5', 1)], reduce_concat=range(2, 6))"
    ),
    "DrNAS_imagenet": (
        "Genotype(normal=[('sep_conv_3x3', 1), ('sep_conv_3x3', 0), ('sep_conv_3x3', 0), "
        "('sep_conv_3x3', 1), ('sep_conv_3x3', 0), ('dil_conv_3x3', 3), ('skip_connect', 0), "
        "('sep_conv_3x3', 1)], normal_concat=range(2, 6), reduce=[('max_pool_3x3', 0), "
        "('sep_conv_3x3', 1), ('sep_conv_3x3', 0), ('skip_connect', 2), ('sep_conv_3x3', 0), "
        "('sep_conv_3x3', 2), ('sep_conv_3x3', 3), "
        "('sep_conv_3x3', 1)], reduce_concat=range(2, 6))"
    ),
    # 2,837,208 / 3,884,304 parameters at C=36, 20 cells with the auxiliary head, as the
    # reference's NetworkCIFAR(parse_method='threshold_sparse') (README: 2.83M / 3.88M)
    "FairDARTS_a": (
        "Genotype(normal=[('sep_conv_3x3', 2, 0), ('sep_conv_5x5', 2, 1), ('max_pool_3x3', 4, 0), "
        "('sep_conv_3x3', 5, 0)], normal_concat=range(2, 6), reduce=[('max_pool_3x3', 2, 0), "
        "('avg_pool_3x3', 2, 1), ('avg_pool_3x3', 3, 0), ('dil_conv_5x5', 3, 1), "
        "('avg_pool_3x3', 4, 0), ('sep_conv_5x5', 4, 1), ('skip_connect', 5, 0), "
        "('skip_connect', 5, 1)], reduce_concat=range(2, 6))"
    ),
    "FairDARTS_b": (
        "Genotype(normal=[('sep_conv_3x3', 2, 0), ('sep_conv_3x3', 2, 1), ('sep_conv_3x3', 3, 1), "
        "('dil_conv_3x3', 4, 0), ('sep_conv_5x5', 4, 1), ('dil_conv_5x5', 5, 1)], "
        "normal_concat=range(2, 6), reduce=[('skip_connect', 2, 0), ('dil_conv_3x3', 2, 1), "
        "('skip_connect', 3, 0), ('dil_conv_3x3', 3, 1), ('max_pool_3x3', 4, 0), "
        "('sep_conv_3x3', 4, 1), ('skip_connect', 5, 2), ('max_pool_3x3', 5, 0)], "
        "reduce_concat=range(2, 6))"
    ),
}

# The published networks of the other families by name (``published_names`` lists the DARTS
# cells above): ProxylessNAS's released networks (han-cai/files ``proxylessnas/*.config``) in
# this toolkit's text form, read off the configs in search_spaces.proxyless_space; FBNet-A, -B
# and -C, read off mobile-vision's definitions in search_spaces.fbnet_space (their blocks' ops,
# and the last conv's width: FBNet-A's 1504 as ``@1504``)
NETWORK_TEXT: dict[str, str] = {
    **{
        name: ProxylessGenotype(ops, widths).text()
        for name, (ops, widths) in PUBLISHED_BLOCKS.items()
    },
    **{
        name: FBNetGenotype(tuple(op for op, _, _ in blocks), head).text()
        for name, (blocks, head) in FBNET_BLOCKS.items()
    },
}


def published_names() -> list[str]:
    """The published DARTS cells' names."""
    return list(PUBLISHED_TEXT)


def published_networks() -> list[str]:
    """The names of the other families' published networks (``proxyless_mobile``, ``fbnet_a``,
    ...)."""
    return list(NETWORK_TEXT)


def _all_names() -> str:
    return ", ".join([*PUBLISHED_TEXT, *NETWORK_TEXT])


@cache
def published_genotype(name: str) -> DartsGenotype:
    """The published DARTS cell called ``name`` (e.g. ``DARTS_V2``)."""
    if name not in PUBLISHED_TEXT:
        raise ValueError(f"unknown published genotype {name!r}; expected one of {_all_names()}")
    return parse_darts_genotype(PUBLISHED_TEXT[name])


@cache
def published_network(name: str) -> AnyGenotype:
    """The published network of another family called ``name`` (e.g. ``proxyless_mobile``)."""
    if name not in NETWORK_TEXT:
        raise ValueError(f"unknown published genotype {name!r}; expected one of {_all_names()}")
    return parse_genotype(NETWORK_TEXT[name])


def resolve_genotype(spec: AnyGenotype | str) -> AnyGenotype:
    """A genotype from a genotype object, a published name, or any text ``parse_genotype`` reads."""
    if is_genotype(spec):
        return spec
    if not isinstance(spec, str):
        raise ValueError(
            f"expected a genotype, its text or a published name, got {type(spec).__name__}"
        )
    if spec.strip() in PUBLISHED_TEXT:
        return published_genotype(spec.strip())
    if spec.strip() in NETWORK_TEXT:
        return published_network(spec.strip())
    if spec.strip().isidentifier():
        raise ValueError(
            f"unknown published genotype {spec.strip()!r}; expected one of "
            f"{_all_names()}, or genotype text"
        )
    return parse_genotype(spec)
