"""Device placement proven without a GPU: every tensor a search creates is on its input's device.

Two checks. The source check reads ``nas/`` and ``search_spaces/``: every tensor factory
(``torch.zeros``, ``randn``, ``Generator``, ...) takes ``device=`` (or is moved with ``.to``
in the same expression), or is in ``CPU_BY_DESIGN`` with the reason it belongs on the CPU.
The run check takes real steps on a virtual CUDA device (``tests/virtual_cuda.py``): every
family x every strategy, every component, the hardware cost, DARTS-PT's candidate evaluation
and the zero-cost proxies, built as the search run builds them (supernet moved, strategy
attached, then moved) and stepped (forward, draws, backward, optimiser). An op that would mix
devices on a GPU fails, naming itself. ``torch._subclasses.fake_tensor.FakeTensorMode`` was
tried first: it stops at the first ``.item()`` (the op masks, the samplers' index draws) and at
``torch.Generator("cuda")``, which asks the CUDA driver, so it cannot run a strategy's step.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from nas.plugins import available, build_plugin
from nas.strategies import SearchContext
from nas.strategies.base import Shards
from nas.supernet import build_supernet
from search_spaces import SPACE_NAMES
from search_spaces.families import FAMILIES, family_of
from search_spaces.space import get_space
from tests.virtual_cuda import DeviceMismatch, virtual_cuda

REPO = Path(__file__).resolve().parents[1]
FACTORIES = {
    "zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "randperm",
    "tensor", "as_tensor", "eye", "linspace", "logspace", "Generator", "normal",
}  # fmt: skip
# the *_like factories follow their input's device and pass unchecked

# (file, enclosing function, factory): why the tensor belongs on the CPU. A new factory call
# without ``device=`` fails the source check until it takes one or is listed here.
CPU_BY_DESIGN: dict[tuple[str, str, str], str] = {
    # data: indices, orders and augmentation draws of the loaders run on the CPU workers
    ("nas/data/loaders.py", "*", "Generator"): "loader order (CPU)",
    ("nas/data/transforms.py", "__call__", "randint"): "augmentation on the CPU worker",
    ("nas/training/data.py", "*", "Generator"): "loader order (CPU)",
    ("nas/strategies/data.py", "*", "Generator"): "sampler order (CPU)",
    ("nas/strategies/proxylessnas.py", "step", "full"): "EdgeAdam's step count of each edge: "
    "plain numbers on the CPU, as torch.optim.Adam keeps its step (not capturable)",
    ("nas/strategies/data.py", "*", "randperm"): "sampler order (CPU)",
    ("nas/strategies/data.py", "*", "randint"): "sampler seeds (CPU)",
    ("nas/strategies/data.py", "*", "arange"): "sampler order (CPU)",
    # initial values drawn on the CPU from the run's seed (the same on every device), then
    # moved or copied into a tensor on the device
    ("nas/strategies/base.py", "attach", "randn"): "alpha init, then .to(device)",
    ("nas/strategies/components/pc_darts.py", "*", "Generator"): "init, moved after",
    ("nas/strategies/components/pc_darts.py", "*", "randn"): "edge betas' init, moved "
    "with the strategy (the run moves it after attach)",
    ("nas/strategies/components/darts_minus.py", "prepare_supernet", "eye"): "copied into "
    "the auxiliary 1x1 conv's weight",
    ("nas/selection/zero_cost.py", "*", "Generator"): "re-initialisation draws (CPU), copied",
    ("nas/selection/zero_cost.py", "*", "randn"): "re-initialisation draws, copied in place",
    ("nas/selection/zero_cost.py", "*", "randint"): "CPU choice of an index",
    ("nas/proxies/zen.py", "*", "randn"): "Gaussian init drawn on the CPU, copied in place",
    ("nas/supernet/widen.py", "_channel_map", "randint"): "channel index map (CPU indices)",
    ("nas/supernet/widen.py", "_channel_map", "arange"): "channel index map (CPU indices)",
    ("nas/strategies/drnas.py", "*", "Generator"): "widening's channel draw (CPU)",
    # decisions made on the CPU: masks, indices and one-hot gates built from Python lists,
    # moved to the device where they meet device tensors
    ("nas/strategies/rsws.py", "*", "randperm"): "architecture draw (CPU generator)",
    ("nas/strategies/rsws.py", "*", "randint"): "architecture draw (CPU generator)",
    ("nas/strategies/rsws.py", "arch_weights_of", "zeros"): "one-hot, then .to(device)",
    ("nas/strategies/proxylessnas.py", "*", "zeros"): "CPU mask / one-hot, moved",
    ("nas/strategies/proxylessnas.py", "*", "tensor"): "CPU mask / index from Python lists",
    ("nas/strategies/proxylessnas.py", "*", "arange"): "CPU index",
    ("nas/supernet/network.py", "*", "ones"): "op-mask buffer (moved with the module)",
    ("nas/supernet/chain.py", "*", "ones"): "op mask built on the CPU, copied into the buffer",
    ("nas/selection/perturbation.py", "*", "Generator"): "the selector's CPU choices",
    ("nas/selection/perturbation.py", "*", "randint"): "the selector's CPU choices",
    ("nas/selection/perturbation.py", "*", "arange"): "a CPU mask for the budget check",
    ("nas/selection/perturbation.py", "*", "tensor"): "sums moved to the device to reduce",
    ("nas/selection/rsws.py", "*", "Generator"): "the selector's CPU draws",
    ("nas/selection/rsws.py", "*", "zeros"): "CPU float64 sums of Python numbers",
    ("nas/selection/rsws.py", "*", "tensor"): "CPU float64 counts",
    # scalars and sums made from tensors keep their device; CPU-only bookkeeping
    ("nas/strategies/base.py", "*", "as_tensor"): "of a tensor: keeps its device",
    ("nas/strategies/components/sdarts.py", "*", "as_tensor"): "of a tensor: keeps its device",
    ("nas/hardware/cost.py", "*", "tensor"): "cost tables (CPU float64), moved where used",
    ("nas/hardware/cost.py", "*", "zeros"): "budget masks (CPU)",
    ("nas/hardware/export.py", "*", "Generator"): "export's example input (CPU)",
    ("nas/hardware/export.py", "*", "randn"): "export's example input (CPU)",
    ("nas/hardware/profiler.py", "*", "Generator"): "profiling input, moved to the device",
    ("nas/hardware/profiler.py", "*", "randn"): "profiling input, moved to the device",
    ("nas/pipeline/search.py", "*", "Generator"): "the run's CPU seed stream",
    ("nas/proxies/harness.py", "*", "Generator"): "proxy inputs drawn on the CPU, moved",
    ("nas/proxies/harness.py", "*", "randint"): "proxy inputs drawn on the CPU, moved",
    ("nas/proxies/harness.py", "*", "rand"): "proxy inputs drawn on the CPU, moved",
    ("nas/proxies/harness.py", "*", "randperm"): "CPU image order",
    ("nas/proxies/harness.py", "*", "tensor"): "CPU labels and channel statistics, moved",
    ("nas/analysis/run.py", "*", "tensor"): "analysis of a run folder (CPU)",
}


def _factory_calls() -> list[tuple[str, str, str, int, bool]]:
    """(file, enclosing function, factory, line, moved in the same expression) of every
    ``torch.<factory>(...)`` without ``device=``."""
    found = []
    for root in ("nas", "search_spaces"):
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            tree = ast.parse(path.read_text(), rel)
            parents: dict[ast.AST, ast.AST] = {}
            for node in ast.walk(tree):
                for child in ast.iter_child_nodes(node):
                    parents[child] = node
            for node in ast.walk(tree):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "torch"
                    and node.func.attr in FACTORIES
                ):
                    continue
                if any(k.arg == "device" for k in node.keywords):
                    continue
                if node.func.attr == "Generator" and node.args:  # Generator(device)
                    continue
                up, function, moved = parents.get(node), "<module>", False
                while up is not None:
                    if isinstance(up, ast.Attribute) and up.attr == "to":
                        moved = True
                    if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef):
                        function = up.name
                        break
                    up = parents.get(up)
                found.append((rel, function, node.func.attr, node.lineno, moved))
    return found


def test_every_tensor_factory_names_its_device_or_why_it_is_on_the_cpu():
    unexplained = [
        f"{rel}:{line} torch.{factory}(...) in {function}() has no device=; take it from an "
        "input, or list it in CPU_BY_DESIGN with the reason"
        for rel, function, factory, line, moved in _factory_calls()
        if not moved
        and (rel, function, factory) not in CPU_BY_DESIGN
        and (rel, "*", factory) not in CPU_BY_DESIGN
    ]
    assert not unexplained, "\n".join(unexplained)


def test_the_allow_list_has_no_stale_entries():
    calls = {(rel, function, factory) for rel, function, factory, _, _ in _factory_calls()}
    wild = {(rel, "*", factory) for rel, _, factory in calls}
    stale = [key for key in CPU_BY_DESIGN if key not in calls | wild]
    assert not stale, f"CPU_BY_DESIGN entries that match no call: {stale}"


# ------------------------------------------------------------------ the virtual device itself


def test_the_virtual_device_catches_what_a_gpu_would_refuse():
    with virtual_cuda() as vc:
        x = torch.randn(4, 3, device="cuda")
        assert x.is_cuda and x.device.type == "cuda" and vc.device(x) == "cuda"
        with pytest.raises(DeviceMismatch, match="mixes devices"):
            _ = x + torch.ones(3)  # a factory without device=
        assert vc.device(x + torch.ones(3, device=x.device)) == "cuda"
        _ = x * torch.tensor(2.0)  # 0-dim CPU tensors mix with CUDA ones, as on a GPU
        net = torch.nn.Linear(3, 2)
        with pytest.raises(DeviceMismatch):
            net(x)  # a module left on the CPU
        net = net.to("cuda")
        net(x).sum().backward()
        assert vc.device(net.weight.grad) == "cuda"  # the backward is checked and placed too
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        opt.step()
        assert vc.device(opt.state[net.weight]["momentum_buffer"]) == "cuda"
        with pytest.raises(DeviceMismatch, match="a cpu generator draws for a cuda tensor"):
            torch.empty(3, device="cuda").exponential_(generator=torch.Generator())
        torch.empty(3, device="cuda").exponential_(generator=torch.Generator("cuda"))
        assert vc.device(x[torch.tensor([0, 2])]) == "cuda"  # CPU indices are allowed
        assert vc.device(x.cpu()) == "cpu" and float(x.sum()) == float(x.sum())


def test_a_planted_cpu_draw_in_a_sampler_fails(monkeypatch):
    from nas.strategies import gdas

    def on_the_cpu(shape, generator, device):  # the bug: the noise is drawn where it was made
        return -torch.empty(shape).exponential_().log()

    monkeypatch.setattr(gdas, "gumbel", on_the_cpu)
    with pytest.raises(DeviceMismatch):
        _step("nb201", "gdas")


# ------------------------------------------------------------------ the toolkit on the device


def _built(space: str, strategy: str, components: tuple = (), **kwargs):
    """Supernet and strategy built and moved in the search run's order (moved supernet,
    attach, then the strategy moved with its components)."""
    sp = get_space(space)
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=family_of(sp).smallest_layers, num_classes=10)
    net = net.to("cuda")
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    s = build_plugin("search", strategy, **kwargs)
    if components:
        s.add_components(list(components))
    s.attach(SearchContext(net, opt, grad_clip=5.0), generator=torch.Generator().manual_seed(0))
    return net, s.to("cuda")


def _batch(n: int = 4, side: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 3, side, side, device="cuda"), torch.randint(0, 10, (n,), device="cuda")


def _step(space: str, strategy: str, components: tuple = (), **kwargs) -> None:
    with virtual_cuda() as vc:
        net, s = _built(space, strategy, components, **kwargs)
        metrics = s.step(Shards.of(_batch()), Shards.of(_batch()))
        assert all(vc.device(p) == "cuda" for p in net.parameters())
        assert all(vc.device(p) == "cuda" for p in s.parameters())
        assert all(torch.isfinite(v).all() for v in metrics.values())


def _one_space_per_family() -> list[str]:
    first: dict[str, str] = {}
    for name in SPACE_NAMES:
        first.setdefault(family_of(get_space(name)).name, name)
    assert set(first) == set(FAMILIES)
    return sorted(first.values())


@pytest.mark.parametrize("strategy", available("search"))
@pytest.mark.parametrize("space", _one_space_per_family())
def test_every_strategy_steps_on_the_device(space, strategy):
    _step(space, strategy)


@pytest.mark.parametrize("component", available("components"))
def test_every_component_steps_on_the_device(component):
    from nas.plugins import build_plugin as build

    c = build("components", component)
    for space in ("nb201", "darts"):
        try:
            _step(space, "darts", (c,))
        except ValueError as e:  # refused for this space (one line), not a placement error
            assert "\n" not in str(e), e
        c = build("components", component)


@pytest.mark.parametrize("form", ["mul_log", "add_linear"])
@pytest.mark.parametrize("strategy", ["darts", "drnas", "gdas", "proxylessnas"])
def test_the_hardware_cost_steps_on_the_device(strategy, form):
    from nas.hardware.cost import CostModel, CostObjective
    from nas.strategies.components.hardware_cost import HardwareCost

    with virtual_cuda():
        probe = build_supernet("nb201", C=4, layers=1, num_classes=10)
        g = torch.Generator().manual_seed(0)
        per_op = {
            ct: torch.rand(*shape, generator=g, dtype=torch.float64) * 3
            for ct, shape in probe.arch_shapes().items()
        }
        model = CostModel("latency", "nb201", 2.0, per_op)  # the table on the CPU, as loaded
        cost = HardwareCost(objective=CostObjective(model, form=form, target=5.0))
    _step("nb201", strategy, (cost,))


def test_darts_pt_candidates_are_scored_on_the_device():
    from nas.selection import evaluate_variants

    with virtual_cuda():
        net, s = _built("darts", "darts")
        base = {k: v.detach().clone() for k, v in s.arch_weights(sample=False).items()}
        variants = []
        for k in range(base["normal"].shape[1]):
            w = {ct: t.clone() for ct, t in base.items()}
            w["normal"][0, k] = 0.0
            variants.append(w)
        for batched in (False, True):
            scores = evaluate_variants(
                net, variants, "normal", [_batch()], batch_candidates=batched
            )
            assert len(scores) == len(variants)


def test_the_zero_cost_proxies_score_on_the_device():
    from nas.proxies import PROXIES, proxy_inputs, score_many

    names = sorted(PROXIES)
    with virtual_cuda():
        net, s = _built("nb201", "darts")
        inputs = proxy_inputs(names, batch_size=4, device="cuda")
        scores = score_many(net, names, inputs, weights=s.arch_weights(sample=False))
        assert set(scores) == set(names)
