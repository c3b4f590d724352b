"""Space families: what a later stage asks a space, a genotype or a family instead of its name."""

from __future__ import annotations

import pytest
import torch

from search_spaces import SPACE_NAMES, get_space, parse_genotype, published_genotype
from search_spaces.families import FAMILIES, FAMILY_OF_NETWORK, family_of
from search_spaces.genotype import DartsGenotype, NB201Genotype

NB201_ARCH = "|nor_conv_3x3~0|+|none~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|none~2|"


@pytest.mark.parametrize("name", SPACE_NAMES)
def test_every_space_has_a_family_and_says_whether_it_selects_inputs(name):
    space = get_space(name)
    family = family_of(space)
    assert family is FAMILIES[space.family]
    assert space.selects_inputs == (space.family == "darts")


def test_unknown_family_is_one_line():
    with pytest.raises(ValueError, match="unknown space family 'mobilenet'; expected one of"):
        family_of("mobilenet")


@pytest.mark.parametrize(
    ("genotype", "space"),
    [(published_genotype("DARTS_V2"), "darts"), (parse_genotype(NB201_ARCH), "nb201")],
)
def test_genotype_edges_are_edges_of_its_space(genotype, space):
    s = get_space(space)
    assert family_of(genotype) is family_of(s)
    assert genotype.cell_types == s.cell_types
    for ct in genotype.cell_types:
        cell = s.cells[ct]
        for op, src, dst in genotype.edges(ct):
            assert op in cell.edge(src, dst).ops
        for node in genotype.output_nodes(ct):
            assert node in cell.intermediate_nodes
        assert set(genotype.input_nodes) == set(range(cell.num_input_nodes))
        nodes, edges = genotype.drawing(ct)
        labels = [n for n, _ in nodes]
        kept = [(src, dst, op) for src, dst, op in edges if op is not None]
        assert len(kept) == len(genotype.edges(ct))
        assert all(src in labels and dst in labels for src, dst, _ in edges)


def test_nb201_keeps_every_edge_and_darts_two_inputs_per_node():
    nb = parse_genotype(NB201_ARCH)
    assert nb.keeps_every_edge and len(nb.edges()) == 6 and nb.output_nodes() == (3,)
    darts = published_genotype("DARTS_V2")
    assert isinstance(darts, DartsGenotype) and not darts.keeps_every_edge
    assert len(darts.edges("normal")) == 8 and darts.output_nodes("normal") == (2, 3, 4, 5)
    with pytest.raises(ValueError, match="one cell type 'cell', not 'normal'"):
        nb.edges("normal")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_derive_of_one_hot_weights_gives_those_ops(family):
    space = get_space(next(n for n in SPACE_NAMES if get_space(n).family == family))
    torch.manual_seed(0)
    weights = {ct: torch.randn(c.num_edges, c.num_ops) for ct, c in space.cells.items()}
    masks = {ct: torch.ones_like(w, dtype=torch.bool) for ct, w in weights.items()}
    genotype = family_of(space).derive(space, weights, masks)
    assert isinstance(genotype, family_of(space).genotype_type)
    genotype.validate(space)
    if isinstance(genotype, NB201Genotype):
        cell = space.cells["cell"]
        assert genotype.ops == tuple(
            cell.edges[e].ops[int(k)] for e, k in enumerate(weights["cell"].argmax(-1))
        )


@pytest.mark.parametrize(
    ("genotype", "image_size", "expected"),
    [
        (published_genotype("DARTS_V2"), 32, "NetworkCIFAR"),
        (published_genotype("DARTS_V2"), 224, "NetworkImageNet"),
        (parse_genotype(NB201_ARCH), 32, "TinyNetwork"),
    ],
)
def test_network_of_a_genotype(genotype, image_size, expected):
    family = family_of(genotype)
    net, spec = family.network(genotype, C=4, layers=3, num_classes=5, image_size=image_size)
    assert type(net).__name__ == spec.family == expected
    assert FAMILY_OF_NETWORK[expected] is family
    x = torch.randn(2, *spec.input_size)
    net.eval()
    with torch.no_grad():
        logits, _ = family.logits(net(x))
    assert logits.shape == (2, 5)
