"""Operation-level early stopping (``components=[oles]``, as confopt's ``oles``): the
gradient-matching score by hand, the window, frozen ops that stop training, the refusals, and a
preempted search that resumes as the uninterrupted one."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import Preempted, SearchRun
from nas.plugins import build_plugin
from nas.strategies.base import SearchContext, SearchStrategy
from nas.strategies.components.oles import OLES, op_score
from nas.supernet import build_supernet


def _by_hand_cosine(g, h):
    """cos along the first dimension, per position of the others, then their mean."""
    g2, h2 = g.reshape(g.shape[0], -1), h.reshape(h.shape[0], -1)
    cos = (g2 * h2).sum(0) / (g2.norm(dim=0) * h2.norm(dim=0))
    return cos.mean()


def test_the_score_by_hand():
    g = torch.Generator().manual_seed(0)
    train = [torch.randn(3, 2, 2, 2, generator=g, dtype=torch.float64),
             torch.randn(3, generator=g, dtype=torch.float64)]  # fmt: skip
    val = [torch.randn(3, 2, 2, 2, generator=g, dtype=torch.float64),
           torch.randn(3, generator=g, dtype=torch.float64)]  # fmt: skip
    separate = (_by_hand_cosine(val[0], train[0]) + _by_hand_cosine(val[1], train[1])) / 2
    assert torch.allclose(op_score(val, train, accumulated=False), separate, atol=1e-14)
    acc = (_by_hand_cosine(val[0] + train[0], train[0])
           + _by_hand_cosine(val[1] + train[1], train[1])) / 2  # fmt: skip
    assert torch.allclose(op_score(val, train, accumulated=True), acc, atol=1e-14)
    # a 1-D tensor: its plain cosine; a tensor with no validation gradient: cos(g_train, g_train)
    # = 1 when accumulated (the references' .grad holds g_train alone), left out when separate
    one = torch.dot(val[1], train[1]) / (val[1].norm() * train[1].norm())
    assert torch.allclose(_by_hand_cosine(val[1], train[1]), one, atol=1e-14)
    assert torch.allclose(op_score([None, val[1]], train, accumulated=False), one, atol=1e-14)
    both = torch.tensor(1.0, dtype=torch.float64) + _by_hand_cosine(val[1] + train[1], train[1])
    assert torch.allclose(op_score([None, val[1]], train, accumulated=True), both / 2, atol=1e-14)
    assert op_score([None, None], [None, None], accumulated=True) is None


def test_the_window_sums_frequency_plus_one_scores_over_frequency():
    c = OLES(frequency=2, threshold=0.5)
    s = torch.tensor
    assert not c.update("0.1", s(0.2)) and not c.update("0.1", s(0.2))
    assert c.update("0.1", s(0.2)) and c.frozen == ["0.1"]  # (0.2 * 3) / 2 = 0.3 < 0.5
    # 0.4 three times: 1.2 / 2 = 0.6, not below 0.5 (the mean of 0.4 would be)
    assert not any(c.update("0.2", s(0.4)) for _ in range(3)) and c.frozen == ["0.1"]
    # the window restarts after each check
    assert not c.update("0.2", s(0.0)) and not c.update("0.2", s(0.0))
    assert c.update("0.2", s(0.0)) and c.frozen == ["0.1", "0.2"]


def _strategy(oles: OLES, strategy: str = "darts"):
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    s = build_plugin("search", strategy)
    s.add_components([oles])
    s.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=3e-4)
    s.attach(SearchContext(net, opt, grad_clip=5.0), generator=torch.Generator().manual_seed(0))
    return s


def _batch(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)


def test_frozen_ops_stop_training_and_the_others_do_not():
    oles = OLES(frequency=1, threshold=0.9)
    s = _strategy(oles)
    ops = OLES.ops_of(s.supernet)
    assert ops and all(len(k.split(".")) == 2 for k in ops)
    scores = []
    real = oles.update
    oles.update = lambda key, score: scores.append((key, float(score))) or real(key, score)
    for step in range(2):  # step 0: nothing kept yet; step 1: first scores
        s.step(_batch(step), _batch(100 + step))
    assert not oles.frozen and {k for k, _ in scores} == set(ops)
    s.step(_batch(2), _batch(102))  # step 2: each window's check, (s1 + s2) / 1 < 0.9
    sums = {}
    for k, v in scores:
        sums[k] = sums.get(k, 0.0) + v
    expected = {k for k, v in sums.items() if v < 0.9}
    assert set(oles.frozen) == expected and 0 < len(expected) < len(ops), sums
    frozen = oles.frozen_weights(s)
    before = [p.detach().clone() for p in frozen]
    live = [p for k, ps in ops.items() if k not in expected for p in ps]
    live_before = [p.detach().clone() for p in live]
    n = len(scores)
    s.step(_batch(3), _batch(103))
    assert all(torch.equal(p, b) for p, b in zip(frozen, before))  # no decay, no momentum
    assert all(p.grad is None for p in frozen)
    assert any(not torch.equal(p, b) for p, b in zip(live, live_before))
    assert {k for k, _ in scores[n:]} == set(ops) - expected  # frozen ops are scored no more
    assert oles.log_state()["oles_frozen_ops"] == len(expected)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"frequency": 0}, "oles.frequency must be an int >= 1, got 0"),
     ({"threshold": "high"}, "oles.threshold must be a finite number, got 'high'"),
     ({"val_grad": "train"}, "oles.val_grad must be accumulated or separate, got 'train'")],
)  # fmt: skip
def test_bad_settings_are_one_line(kwargs, message):
    with pytest.raises(ValueError) as e:
        OLES(**kwargs)
    assert str(e.value) == message


@pytest.mark.parametrize(("strategy", "extra"), [("snas", {}), ("darts", {"order": 2})])
def test_refused_without_a_validation_gradient_of_the_weights(strategy, extra):
    s = build_plugin("search", strategy, **extra) if extra else build_plugin("search", strategy)
    with pytest.raises(ValueError) as e:
        s.add_components([OLES()])
    message = str(e.value)
    assert "\n" not in message and "oles" in message and "needs" in message


def _cfg(overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=overrides)


# NB201 at C=4, one cell per stage, 4 steps of 16 per epoch; windows of 3 scores: checks at
# steps 3 and 6 (0-based), on either side of the preemption after step 5
TINY = ["space.C=4", "space.layers=1", "batch_size=16", "data.max_items=128", "epochs=2",
        "eval=false", "figures=false", "components=[oles]", "components.oles.frequency=2",
        "components.oles.threshold=1.0"]  # fmt: skip


def _final(run_dir):
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    return state["strategy"], state["supernet"]


@pytest.mark.slow
def test_a_preempted_search_resumes_as_the_uninterrupted_one(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    SearchRun(_cfg(TINY), tmp_path / "one").run()
    one_strategy, one_net = _final(tmp_path / "one")
    frozen = one_strategy["components"]["0"]["frozen"]
    assert 0 < len(frozen) < 36, "the tiny search (fixed seed) freezes some of its 36 ops"

    run_dir = tmp_path / "resumed"
    run = SearchRun(_cfg(TINY), run_dir)
    real_step = SearchStrategy.step
    calls = {"n": 0}

    def step_then_request_stop(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 6:  # epoch 2, second step
            run.stop.request()
        return out

    monkeypatch.setattr(SearchStrategy, "step", step_then_request_stop)
    with pytest.raises(Preempted):
        run.run()
    monkeypatch.undo()
    mid = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert mid["strategy"]["components"]["0"]["kept"]  # g_train kept
    SearchRun(_cfg([*TINY, "resume=true"]), run_dir).run()
    strategy, net = _final(run_dir)
    assert strategy["components"]["0"]["frozen"] == frozen
    for k, v in one_net.items():
        assert torch.equal(v, net[k]), k
    for k, v in one_strategy["module"].items():
        if k.startswith("arch"):
            assert torch.equal(v, strategy["module"][k]), k
