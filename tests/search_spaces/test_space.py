import json

import pytest

from search_spaces import SPACE_NAMES, get_space
from search_spaces.ops import DARTS_OPS, NB201_OPS


@pytest.mark.parametrize("name", SPACE_NAMES)
def test_every_space_is_consistent(name):
    space = get_space(name)
    assert space.name == name
    for cell in space.cells.values():
        assert [e.index for e in cell.edges] == list(range(cell.num_edges))
        for node in cell.intermediate_nodes:
            # a dense cell feeds a node from every earlier node; a chain from the one before
            assert [e.src for e in cell.edges_into(node)] in (list(range(node)), [node - 1])


def test_darts_space_shape():
    space = get_space("darts")
    assert space.cell_types == ("normal", "reduce")
    for cell in space.cells.values():
        assert cell.num_edges == 14 and cell.num_ops == 8
        assert [(e.src, e.dst) for e in cell.edges[:5]] == [(0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]
        assert all(e.ops == DARTS_OPS for e in cell.edges)


def test_nb201_space_shape():
    space = get_space("nb201")
    cell = space.cells["cell"]
    assert space.cell_types == ("cell",)
    assert cell.num_edges == 6 and cell.num_ops == 5
    assert [(e.src, e.dst) for e in cell.edges] == [(0, 1), (0, 2), (1, 2), (0, 3), (1, 3), (2, 3)]
    assert cell.edges[0].ops == NB201_OPS


def test_robust_darts_spaces_match_the_shared_file(shared_data):
    ref = json.loads((shared_data / "genotypes" / "robust_darts_spaces.json").read_text())
    for name in ("s1", "s2", "s3", "s4", "s5"):
        space = get_space(name)
        for cell_type in ("normal", "reduce"):
            got = [list(e.ops) for e in space.cells[cell_type].edges]
            assert got == ref[name][cell_type]
    assert get_space("s2").cells["normal"].num_ops == 2
    assert get_space("s3").cells["normal"].edges[0].ops == ("none", "skip_connect", "sep_conv_3x3")
    assert get_space("s4").cells["reduce"].edges[3].ops == ("noise", "sep_conv_3x3")
    assert get_space("s5").cells["normal"].edges[0].ops == DARTS_OPS[1:]
    # S1 differs per edge and per cell type
    s1 = get_space("s1")
    assert len({e.ops for e in s1.cells["normal"].edges}) > 1
    assert s1.cells["normal"].edges[0].ops != s1.cells["reduce"].edges[0].ops


def test_unknown_space():
    with pytest.raises(
        ValueError, match=r"unknown search space 'darts2'; expected one of darts, s1"
    ):
        get_space("darts2")
