"""The space families: their registry, and how a later stage finds the family it needs.

First stage of the pipeline (``search_spaces``). A family is what differs between DARTS-style
cells and NAS-Bench-201 cells (``search_spaces.family``: the hooks); each is one ``Family``
subclass in a module of its own, registered here in ``FAMILIES``:

* ``darts`` (``search_spaces.darts_family``; Liu et al., ICLR 2019): the spaces ``darts`` and
  ``s1``..``s5``, whose discrete networks are ``NetworkCIFAR`` / ``NetworkImageNet``;
* ``nb201`` (``search_spaces.nb201_family``; Dong & Yang, ICLR 2020): the space ``nb201``,
  whose discrete network is ``TinyNetwork``;
* ``proxyless`` (``search_spaces.proxyless_family``; Cai et al., ICLR 2019): the spaces
  ``proxyless`` and ``proxyless_cifar``, whose discrete network is ``ProxylessNetwork``;
* ``fbnet`` (``search_spaces.fbnet_family``; Wu et al., CVPR 2019): the spaces ``fbnet`` and
  ``fbnet_cifar``, whose discrete network is ``FBNetNetwork``.

The later stages never name a family: they ask ``family_of`` (a space, a genotype or a family
name), ``family_of_network`` (a discrete network) or ``indexed_family`` (what a bare number
names) and call the hooks. Torch-free, like the family modules (``nas-train``'s config check
reads ``size_keys`` before torch loads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from search_spaces.darts_family import DartsFamily
from search_spaces.family import Family, NetworkSpec
from search_spaces.fbnet_family import FBNetFamily
from search_spaces.nb201_family import NB201Family
from search_spaces.proxyless_family import ProxylessFamily

if TYPE_CHECKING:
    from search_spaces.genotype import AnyGenotype
    from search_spaces.space import Space

__all__ = [
    "FAMILIES",
    "FAMILY_OF_NETWORK",
    "Family",
    "NetworkSpec",
    "family_of",
    "family_of_network",
    "first_family",
    "indexed_family",
]

# The registration of every family, in order: the first is what a caller that names none gets.
FAMILIES: dict[str, Family] = {
    f.name: f for f in (DartsFamily(), NB201Family(), ProxylessFamily(), FBNetFamily())
}
FAMILY_OF_NETWORK: dict[str, Family] = {n: f for f in FAMILIES.values() for n in f.networks}


def family_of(item: Space | AnyGenotype | str) -> Family:
    """The family of a space, a genotype, or a family name."""
    name = item if isinstance(item, str) else item.family
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(
            f"unknown space family {name!r}; expected one of {', '.join(FAMILIES)}"
        ) from None


def family_of_network(net: object) -> Family | None:
    """The family whose discrete network ``net`` is; None for any other module (imports the
    families' networks: torch)."""
    for family in FAMILIES.values():
        if isinstance(net, family.network_types()):
            return family
    return None


def first_family() -> Family:
    """The first registered family (DARTS): the default of a caller that names none."""
    return next(iter(FAMILIES.values()))


def indexed_family() -> Family:
    """The family whose published networks are numbered, so that a bare number names one of
    its cells (NB201: the benchmark's index)."""
    for family in FAMILIES.values():
        if family.num_indexed:
            return family
    raise ValueError("no space family numbers its genotypes")
