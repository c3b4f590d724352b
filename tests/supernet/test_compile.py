"""compile_supernet: the supernet's forward traced as one graph (fullgraph: no graph break),
and a compiled step equal to an eager one to float tolerance."""

import copy

import pytest
import torch

from nas.supernet import build_supernet, compile_supernet


@pytest.mark.slow  # dynamo + AOT autograd tracing of even a tiny supernet: minutes on 2 cores
def test_a_compiled_step_equals_an_eager_one():
    torch.manual_seed(0)
    eager = build_supernet("nb201", C=4, layers=1, num_classes=10)
    compiled = compile_supernet(copy.deepcopy(eager), backend="aot_eager", fullgraph=True)
    w0 = {ct: torch.softmax(torch.randn(s), -1) for ct, s in eager.arch_shapes().items()}
    w0["cell"][1, 2] = 0.0  # a zero weight: that op is skipped in both
    x = torch.randn(3, 3, 32, 32)
    results = []
    for net in (eager, compiled):
        w = {ct: t.clone().requires_grad_() for ct, t in w0.items()}
        out = net(x, w)
        out.square().sum().backward()
        results.append([out.detach(), w["cell"].grad, *(p.grad for p in net.parameters())])
        assert "_preset_active" not in net.__dict__ or net.__dict__["_preset_active"] is None
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_cuda_graphs_compile_in_reduce_overhead_mode_and_mark_a_step_per_call(monkeypatch):
    # torch.compile itself is replaced (no CUDA device here): what matters is what it is asked
    # for and that every forward starts a new graph step, so a replay never overwrites
    # outputs that are still to be read
    asked: list[dict] = []
    marks: list[int] = []

    def fake_compile(fn, **kwargs):
        asked.append(kwargs)
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    torch.manual_seed(0)
    eager = build_supernet("nb201", C=4, layers=1, num_classes=10)
    graphed = compile_supernet(copy.deepcopy(eager), cuda_graphs=True)
    assert asked == [{"mode": "reduce-overhead"}]
    w = {ct: torch.softmax(torch.randn(s), -1) for ct, s in eager.arch_shapes().items()}
    x = torch.randn(2, 3, 32, 32)
    for n in (1, 2):
        torch.testing.assert_close(graphed(x, w), eager(x, w), rtol=0, atol=0)
        assert len(marks) == n
    compile_supernet(copy.deepcopy(eager))  # plain compile: no graph steps
    eager(x, w)
    assert asked[-1] == {} and len(marks) == 2
    with pytest.raises(ValueError, match="cuda_graphs=True is mode='reduce-overhead'"):
        compile_supernet(copy.deepcopy(eager), cuda_graphs=True, mode="max-autotune")
