"""DARTS-PT as ruocwang/darts-pt computes it (found by experiments/fidelity/darts_pt.py):

- a topology projection scores each input edge's removal once, on the node with all its edges
  (the reference's rounds all see ``get_projected_weights``; it zeroes the dropped edges only
  after its loop), and keeps the two whose removal hurts most;
- the validation loss of a float64 supernet is computed in float64 (no float32 round trip)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from nas.plugins import build_plugin
from nas.selection import PerturbationSelection, evaluate_variants
from nas.strategies import SearchContext
from nas.supernet import build_supernet


class Context:
    def __init__(self, batches):
        self.batches = batches
        self.search_lr = 0.025

    def val_batches(self, *, key, limit):
        yield from self.batches

    def all_reduce_sum(self, tensor):
        return tensor

    def broadcast(self, obj):
        return obj


def _strategy(dtype=torch.float32):
    torch.manual_seed(0)
    net = build_supernet("s5", C=4, layers=3, num_classes=10).to(dtype)
    strategy = build_plugin("search", "darts")
    strategy.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0))
    with torch.no_grad():
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, dtype=a.dtype))
    return strategy, net


def test_topology_scores_every_removal_on_the_whole_node():
    strategy, net = _strategy()
    torch.manual_seed(1)
    batches = [(torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,)))]
    sel = PerturbationSelection(proj_intv=0, criterion="loss")
    sel.attach(strategy)
    with torch.no_grad():
        base = {k: v.clone() for k, v in strategy.arch_weights(sample=False).items()}
    seen = []
    evaluate = sel._eval

    def recording(ctx, strategy, cell_type, variants):
        seen.append([{k: v.clone() for k, v in w.items()} for w in variants])
        return evaluate(ctx, strategy, cell_type, variants)

    sel._eval = recording
    # node 5 has 5 inputs: 3 rounds in the decision, one evaluation of 5 variants
    while True:
        d = sel.project_topology(Context(batches), strategy, "normal")
        sel.decisions.append(d)
        if d["node"] == 5:
            break
        seen.clear()
        with torch.no_grad():
            base = {k: v.clone() for k, v in strategy.arch_weights(sample=False).items()}
    assert len(seen) == 1 and len(d["rounds"]) == 3
    eids = [e.index for e in net.space.cells["normal"].edges_into(5)]
    for e, w in zip(eids, seen[0]):  # each variant: the node as it was, edge e removed alone
        expected = {k: v.clone() for k, v in base.items()}
        expected["normal"][e] = 0.0
        assert all(torch.equal(w[k], expected[k]) for k in w)
    first = dict(zip(d["rounds"][0]["edges"], d["rounds"][0]["loss"]))
    for r in d["rounds"]:  # later rounds reuse the first round's scores
        assert r["loss"] == [first[e] for e in r["edges"]]
    # the two kept are the two whose removal raises the loss most
    assert sorted(d["kept"]) == sorted(sorted(eids, key=lambda e: -first[e])[:2])


def test_the_loss_of_a_float64_supernet_is_float64():
    strategy, net = _strategy(torch.float64)
    torch.manual_seed(1)
    batches = [(torch.randn(8, 3, 8, 8, dtype=torch.float64), torch.randint(0, 10, (8,)))]
    with torch.no_grad():
        weights = {k: v.clone() for k, v in strategy.arch_weights(sample=False).items()}
    ((acc, loss),) = evaluate_variants(net, [weights], "normal", batches)
    copy_net = copy.deepcopy(net).train()
    with torch.no_grad():
        logits = copy_net(batches[0][0], weights)
    expected = float(nn.functional.cross_entropy(logits, batches[0][1]))
    assert abs(loss - expected) <= 1e-13 * abs(expected)
