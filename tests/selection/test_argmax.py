import torch

from nas.selection import argmax_genotype
from search_spaces import DARTS_OPS, get_space, published_genotype


def _masks(space):
    return {
        ct: torch.ones(c.num_edges, c.num_ops, dtype=torch.bool) for ct, c in space.cells.items()
    }


def _weights_for(genotype, space, strength=None):
    """Architecture weights whose argmax is ``genotype`` (strongest pair first, as DARTS prints)."""
    weights = {}
    for ct in ("normal", "reduce"):
        cell = space.cells[ct]
        w = torch.full((cell.num_edges, len(DARTS_OPS)), 0.01)
        w[:, 0] = 0.9  # `none` strongest everywhere: it must be ignored
        for i, (op, src) in enumerate(genotype.cell(ct)):
            node = 2 + i // 2
            e = cell.edge(src, node).index
            w[e, DARTS_OPS.index(op)] = 0.5 - 0.1 * (i % 2)
        weights[ct] = w
    return weights


def test_darts_argmax_recovers_published_genotypes():
    space = get_space("darts")
    for name in ("DARTS_V2", "PC_DARTS_cifar", "DrNAS_cifar10"):
        g = published_genotype(name)
        derived = argmax_genotype(space, _weights_for(g, space), _masks(space))
        assert derived == g, name


def test_darts_argmax_ties_keep_the_earlier_edge_and_op():
    space = get_space("darts")
    w = {ct: torch.zeros(14, 8) for ct in ("normal", "reduce")}
    g = argmax_genotype(space, w, _masks(space))
    # all equal: edges 0 and 1 for every node, the first non-none op (max_pool_3x3)
    assert g.normal == (("max_pool_3x3", 0), ("max_pool_3x3", 1)) * 4


def test_masked_ops_never_win():
    space = get_space("darts")
    g = published_genotype("DARTS_V2")
    weights = _weights_for(g, space)
    masks = _masks(space)
    masks["normal"][0, DARTS_OPS.index("sep_conv_3x3")] = False  # edge 0->2
    derived = argmax_genotype(space, weights, masks)
    assert derived.normal[0] != ("sep_conv_3x3", 0)


def test_nb201_argmax_includes_none():
    space = get_space("nb201")
    w = torch.zeros(6, 5)
    w[:, 0] = 1.0  # none
    w[2, 3] = 2.0  # edge 2<-1: nor_conv_3x3
    g = argmax_genotype(space, {"cell": w}, _masks(space))
    assert str(g) == "|none~0|+|none~0|nor_conv_3x3~1|+|none~0|none~1|none~2|"


def test_argmax_on_per_edge_op_lists():
    space = get_space("s1")
    weights = {ct: torch.zeros(14, 2) for ct in ("normal", "reduce")}
    weights["normal"][:, 1] = 1.0
    g = argmax_genotype(space, weights, _masks(space))
    g.validate(space)
    assert g.normal[0] == (space.cells["normal"].edges[0].ops[1], 0)
