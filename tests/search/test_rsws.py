"""RS-WS: uniform architectures (the reference's sampler per space), one-hot weights that run
only the sampled ops, no architecture parameters; the selector keeps the best of every round."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from scipy import stats

from nas.selection.rsws import RandomWeightSharingSelection
from nas.strategies import SearchContext
from nas.strategies.rsws import RSWS, arch_weights_of, genotype_of, sample_arch
from nas.supernet import build_supernet


def _attach(space="nb201", **kwargs):
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9)
    s = RSWS(**kwargs)
    s.attach(SearchContext(net, opt, grad_clip=5.0, epochs=2, steps_per_epoch=12000))
    return net, s


def _batch(n=8):
    return torch.randn(n, 3, 16, 16), torch.randint(0, 10, (n,))


def test_darts_space_draws_two_distinct_inputs_and_uniform_ops_including_none():
    net, _ = _attach("darts")
    cell = net.space.cells["normal"]
    gen = torch.Generator().manual_seed(0)
    ops, inputs = Counter(), Counter()
    for _ in range(400):
        arch = sample_arch(net, gen)
        for ct in ("normal", "reduce"):
            picks = arch[ct]
            assert len(picks) == 8
            for n in range(4):
                (e1, k1), (e2, k2) = picks[2 * n : 2 * n + 2]
                srcs = {cell.edges[e1].src, cell.edges[e2].src}
                assert len(srcs) == 2 and {cell.edges[e1].dst, cell.edges[e2].dst} == {2 + n}
                inputs[(n, cell.edges[e1].src)] += 1
                inputs[(n, cell.edges[e2].src)] += 1
            ops.update(k for _, k in picks)
    assert len(ops) == 8 and cell.edges[0].ops.index("none") in ops
    n = sum(ops.values())
    chi2 = sum((c - n / 8) ** 2 / (n / 8) for c in ops.values())
    assert chi2 < stats.chi2.ppf(0.999, df=7)
    # node 3 (index 1) picks 2 of its 3 inputs: each about 2/3 of the time
    for src in range(3):
        assert abs(inputs[(1, src)] / 800 - 2 / 3) < 0.08
    g = genotype_of(net.space, arch)
    g.validate(net.space)


def test_nb201_draws_one_op_per_edge_and_runs_only_it():
    net, s = _attach("nb201")
    calls: Counter = Counter()
    for m_i, mixed in enumerate(net.mixed_ops()):
        for k, op in enumerate(mixed.ops):
            # the op's layers, not the op: an op that starts with a ReLU runs its layers after
            # the cell's shared ReLU (``after_relu``), not its own forward
            for layer in [m for m in op.modules() if not list(m.children())] or [op]:
                layer.register_forward_hook(lambda *_, key=(m_i, k): calls.update([key]))
    s.begin_step(3)
    with torch.no_grad():
        w = s.arch_weights(sample=True)["cell"]
        net(_batch()[0], {"cell": w})
    assert torch.equal(w.sum(-1), torch.ones(6)) and set(w.flatten().tolist()) == {0.0, 1.0}
    names = net.space.cells["cell"].edges[0].ops
    chosen = w.argmax(-1).tolist()
    for m_i in range(len(net.mixed_ops())):
        ran = sorted(k for (m, k) in calls if m == m_i)
        assert ran == ([] if names[chosen[m_i % 6]] == "none" else [chosen[m_i % 6]])
    s.begin_step(3)
    assert torch.equal(s.arch_weights(sample=True)["cell"], w)  # the step's seed decides


def test_no_architecture_parameters_and_the_reference_clip():
    net, s = _attach("darts")
    assert s.arch_parameters() == [] and not s.updates_arch(0)
    assert s.ctx.grad_clip == 0.25
    before = [p.detach().clone() for p in net.parameters()]
    s.begin_step(0)
    metrics = s.step(_batch(), _batch())
    assert set(metrics) == {"train_loss", "train_acc"}
    assert any(not torch.equal(p, b) for p, b in zip(net.parameters(), before))
    state = s.checkpoint_state()
    s.on_epoch_end(0)
    s.load_checkpoint_state(state)
    assert s.epoch == 0
    _, s2 = _attach("darts", grad_clip=None)
    assert s2.ctx.grad_clip == 5.0
    with pytest.raises(ValueError, match="grad_clip"):
        RSWS(grad_clip=0)


def test_rounds_follow_the_reference_budget():
    _, s = _attach("nb201")  # 2 epochs x 12000 steps
    assert RandomWeightSharingSelection().num_rounds(s) == 2
    assert RandomWeightSharingSelection(rounds=5).num_rounds(s) == 5
    with pytest.raises(ValueError, match="archs"):
        RandomWeightSharingSelection(archs=0)


def test_selection_keeps_the_best_of_every_round(monkeypatch):
    net, s = _attach("nb201")
    batches = [_batch() for _ in range(3)]
    # a known score: the number of conv_3x3 edges of the architecture
    conv = net.space.cells["cell"].edges[0].ops.index("nor_conv_3x3")

    def score(self, strategy, weights, batches, reduce):
        return float((weights["cell"].argmax(-1) == conv).sum())

    monkeypatch.setattr(RandomWeightSharingSelection, "_score", score)
    sel = RandomWeightSharingSelection(rounds=6, archs=3, batches_per_arch=2, top_k=3)
    g = sel.select(s, batches)
    per_round = [h["accuracy"] for h in sel.history]
    assert len(per_round) == 6 and max(per_round) > per_round[0]  # round 0 is not the best
    assert str(g).count("nor_conv_3x3") == max(per_round)
    # the quick scores alone (AutoDL's NB201 variant) also give a genotype of the space
    monkeypatch.undo()
    g2 = RandomWeightSharingSelection(rounds=1, archs=5, batches_per_arch=1, top_k=0).select(
        s, batches
    )
    g2.validate(net.space)


def test_one_hot_weights_of_an_arch():
    net, _ = _attach("darts")
    arch = sample_arch(net, torch.Generator().manual_seed(1))
    w = arch_weights_of(arch, net.arch_shapes(), "cpu")
    assert int(w["normal"].sum()) == 8 and int(w["reduce"].sum()) == 8
