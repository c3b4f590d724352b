"""Architecture dropout (``components=[arch_dropout]``): the mask, the schedules, the refusals.

Known answers: a sampled forward's mixing weights are the strategy's times ``[u >= p] / (1 -
p)`` on the component's draws, evaluation and derivation are not masked, the gradient of a
dropped entry is 0; ``p`` follows its annealing per epoch and is logged. Beside confopt's
``Dropout``: ``experiments/fidelity/arch_dropout.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from nas.plugins import build_plugin
from nas.strategies import SearchContext
from nas.strategies.components.arch_dropout import ArchDropout, dropout_p
from nas.supernet import build_supernet


def _darts(p=0.5, anneal="linear", epochs=4, **kwargs):
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    strategy = build_plugin("search", "darts", **kwargs)
    strategy.add_components([ArchDropout(p=p, anneal=anneal)])
    strategy.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.025)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=epochs),
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    strategy.begin_epoch(0)
    return strategy


def test_sampled_forwards_are_masked_and_evaluation_is_not():
    s = _darts(p=0.5)
    s.begin_step(3)
    w = s.arch_weights(sample=True)["cell"]
    soft = torch.softmax(s.arch_params["cell"].detach(), -1)
    kept = w.detach() != 0
    assert 0 < int(kept.sum()) < w.numel()
    torch.testing.assert_close(w.detach()[kept], 2.0 * soft[kept])  # 1 / (1 - p)
    (grad,) = torch.autograd.grad((w * torch.arange(w.numel()).reshape(w.shape)).sum(),
                                  s.arch_params["cell"])  # fmt: skip
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(s.arch_weights(sample=False)["cell"].detach(), soft)
    s.begin_step(3)  # the same step seed: the same mask (resumable, every rank alike)
    torch.testing.assert_close(s.arch_weights(sample=True)["cell"].detach(), w.detach())


def test_the_probability_anneals_per_epoch():
    s = _darts(p=0.4, anneal="cosine", epochs=10)
    component = s.component_list()[0]
    seen = []
    for e in range(10):
        s.begin_epoch(e)
        seen.append(component.p)
    assert seen == pytest.approx([0.2 * (1 + math.cos(math.pi * e / 10)) for e in range(10)])
    assert dropout_p(5, 10, 0.4, 0.1, "linear") == pytest.approx(0.25)
    assert dropout_p(5, 10, 0.4, 0.0, None) == 0.4
    assert component.log_state() == {"arch_dropout_p": seen[-1]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"p": 1.0}, "arch_dropout.p must be a number in [0, 1), got 1.0"),
        ({"p": 0.0}, "drops nothing"),
        ({"p": 0.2, "p_min": 0.3}, "expected p_min < p"),
        ({"p": 0.2, "p_min": 0.1, "anneal": None}, "anneal=null anneals nothing"),
        ({"anneal": "step"}, "must be linear, cosine or null"),
    ],
)
def test_bad_settings_are_one_line(kwargs, message):
    with pytest.raises(ValueError, match=".*") as e:
        ArchDropout(**kwargs)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_refused_where_it_cannot_act():
    with pytest.raises(ValueError, match="unrolled step's finite differences"):
        _darts(order=2)
    for strategy in ("proxylessnas", "rsws"):
        s = build_plugin("search", strategy)
        with pytest.raises(ValueError, match="needs a strategy whose training steps mix"):
            s.add_components([ArchDropout()])
