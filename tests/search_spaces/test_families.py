"""Space families: what a later stage asks a space, a genotype or a family instead of its name."""

from __future__ import annotations

import random

import pytest
import torch

from search_spaces import SPACE_NAMES, get_space, parse_genotype, published_genotype
from search_spaces.families import (
    FAMILIES,
    FAMILY_OF_NETWORK,
    family_of,
    family_of_network,
    indexed_family,
)
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


# --------------------------------------------------------------------- the hooks of a family


@pytest.mark.parametrize("space_name", ["darts", "s3", "nb201"])
def test_genotype_of_kept_edges_is_the_derived_one(space_name):
    space = get_space(space_name)
    family = family_of(space)
    torch.manual_seed(1)
    weights = {ct: torch.randn(c.num_edges, c.num_ops) for ct, c in space.cells.items()}
    masks = {ct: torch.ones_like(w, dtype=torch.bool) for ct, w in weights.items()}
    derived = family.derive(space, weights, masks)
    edges = {ct: derived.edges(ct) for ct in family.cell_types}
    again = family.genotype(space, edges)
    assert again == derived and str(again) == str(derived)


def test_genotype_of_kept_edges_sparse_and_refused():
    space = get_space("darts")
    family = family_of(space)
    fair = published_genotype("FairDARTS_b")  # nodes keep 0-2 inputs
    sparse = family.genotype(space, {ct: fair.edges(ct) for ct in fair.cell_types}, sparse=True)
    assert sparse == fair and sparse.sparse and str(sparse) == str(fair)
    with pytest.raises(ValueError, match="a dense DARTS cell keeps 2 per node"):
        family.genotype(space, {ct: fair.edges(ct) for ct in fair.cell_types})
    nb = get_space("nb201")
    edges = parse_genotype(NB201_ARCH).edges()
    with pytest.raises(
        ValueError, match="one op on each of its 6 edges; got 5 edges, none on 0->3"
    ):
        family_of(nb).genotype(nb, {"cell": [e for e in edges if e[1:] != (0, 3)]})


@pytest.mark.parametrize("space_name", ["darts", "nb201"])
def test_random_genotypes_are_cells_of_the_space(space_name):
    space = get_space(space_name)
    family = family_of(space)
    a = family.random_genotypes(space, 4, random.Random(3))
    assert a == family.random_genotypes(space, 4, random.Random(3))  # seeded
    assert len(a) == 4 and len({str(g) for g in a}) == 4
    for g in a:
        g.validate(space)
        # a discrete cell that chooses its inputs has no `none` op
        kept_ops = [op for ct in g.cell_types for op, _, _ in g.edges(ct)]
        assert g.keeps_every_edge or "none" not in kept_ops


def test_published_networks_by_number():
    from search_spaces.nb201 import arch_to_index, index_to_arch

    family = indexed_family()
    assert family is FAMILIES["nb201"] and family.num_indexed == 15625
    g = family.indexed_genotype(1462)
    assert str(g) == index_to_arch(1462) and family.index_of(g) == arch_to_index(g) == 1462
    with pytest.raises(ValueError, match="DARTS genotypes have no index"):
        FAMILIES["darts"].indexed_genotype(3)


def test_sizes_and_specs_name_the_family_word():
    assert FAMILIES["darts"].size_keys == ("C", "layers")
    assert FAMILIES["nb201"].size_keys == ("C", "N")
    assert FAMILIES["nb201"].cell_types == ("cell",)
    assert FAMILIES["darts"].cell_types == ("normal", "reduce")
    g = parse_genotype(NB201_ARCH)
    _, spec = family_of(g).network(g, C=4, layers=2, num_classes=10)
    assert str(spec) == "TinyNetwork(C=4, N=2)"


@pytest.mark.parametrize(
    "genotype", [published_genotype("DARTS_V2"), parse_genotype(NB201_ARCH)], ids=["darts", "nb201"]
)
def test_a_network_finds_its_family_and_its_features(genotype):
    family = family_of(genotype)
    net, spec = family.network(genotype, C=4, layers=3, num_classes=5)
    assert family_of_network(net) is family and family_of_network(torch.nn.Linear(2, 2)) is None
    net.eval()
    x = torch.randn(2, *spec.input_size)
    with torch.no_grad():
        features = family.features(net, x)
        logits = family.reference_logits(net, x)
        expected, _ = family.logits(net(x))
    assert features.dim() == 4 and features.shape[0] == 2
    assert torch.allclose(logits, expected, atol=1e-5)
