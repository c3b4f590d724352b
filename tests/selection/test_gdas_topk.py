"""GDAS's DARTS-space genotype rule: top-2 (op, input) pairs per node, sharing an input allowed."""

import torch

from nas.selection.argmax import Argmax
from nas.selection.gdas_topk import GDASTopK
from nas.strategies import SearchContext
from nas.strategies.gdas import GDAS
from nas.supernet import build_supernet
from search_spaces import get_space


def _strategy(space):
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    s = GDAS()
    s.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), grad_clip=5.0))
    return s


def test_two_pairs_may_share_an_input_and_none_never_wins():
    s = _strategy("darts")
    cell = get_space("darts").cells["normal"]
    ops = cell.edges[0].ops
    with torch.no_grad():
        for a in s.arch_parameters():
            a.zero_()
        a = s.arch_params["normal"]
        e02 = cell.edge(0, 2).index
        a[e02, ops.index("sep_conv_3x3")] = 3.0
        a[e02, ops.index("dil_conv_5x5")] = 2.0
        a[cell.edge(0, 3).index, ops.index("none")] = 9.0  # never kept
        a[cell.edge(1, 2).index, ops.index("max_pool_3x3")] = 0.5
    g = GDASTopK().select(s)
    assert g.normal[:2] == (("sep_conv_3x3", 0), ("dil_conv_5x5", 0))
    # DARTS's rule on the same weights keeps two distinct inputs
    assert Argmax().select(s).normal[:2] == (("sep_conv_3x3", 0), ("max_pool_3x3", 1))
    # ties: the earlier input, then the earlier op (the reference's stable sort)
    # (edge 0->3 is all 'none' but for uniform small weights: its ops lose to the others)
    first_op = next(op for op in ops if op != "none")
    assert g.normal[2:4] == ((first_op, 1), (ops[ops.index(first_op) + 1], 1))


def test_nb201_is_the_argmax_per_edge():
    s = _strategy("nb201")
    assert GDASTopK().select(s) == Argmax().select(s)
