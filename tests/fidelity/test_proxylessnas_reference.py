"""ProxylessNAS's binary gates beside the reference's ``MixedEdge``, at float64.

With ``NAS_REFERENCE_ROOTS="proxylessnas=/path/to/checkout"`` (a checkout of
github.com/mit-han-lab/proxylessnas; the convention of ``test_fidelity_suite.py``), the
reference's own ``search/modules/mix_op.py`` is imported (through the fidelity harness's
shims, ``experiments.fidelity.common.reference_imports``; nothing in the checkout is edited)
and run beside ours on the same candidate ops (deep copies of ours: the same weights, their
own batch-norm statistics), the same input and the same sampled paths:

* one mixed edge in each mode ``two``, ``full`` and ``full_v2``: the edge's output, the gates'
  gradient (``AP_path_wb.grad``), alpha's gradient (``set_arch_param_grad``), the input's
  gradient and the batch-norm statistics after the backward (``full_v2`` runs the other paths
  in its backward, ``two`` / ``full`` in the forward);
* a chain of two mixed edges (a small supernet: the second edge's inactive paths must pass no
  gradient to the first), per edge the gates' and alpha's gradients;
* the draws: ``MixedEdge.binarize`` on the global generator seeded ``s`` beside our
  ``ProxylessNAS.sample_gates`` on a generator seeded ``s`` pick the same paths, edge by edge,
  in both sampling modes;
* ``two``'s rescale (``rescale_updated_arch_param``) after an Adam step with the reference's
  settings, beside ours.

Without the variable these tests are skipped; the known answers of the same quantities (a
forward with every op in the graph, the formula written out) are in
``tests/search/test_proxylessnas.py`` and always run.
"""

from __future__ import annotations

import copy
import importlib
import os
from typing import Any

import pytest
import torch
import torch._dynamo  # noqa: F401  imported before any reference context (see below)
from torch import nn

from experiments.fidelity import common as F
from nas.strategies import SearchContext
from nas.strategies.proxylessnas import ProxylessNAS, gate_grad_to_alpha
from nas.supernet import build_supernet
from nas.supernet.mixed_op import MixedOp

REFERENCE = F.Reference("mit-han-lab/proxylessnas", "search/modules/mix_op.py")
OPS = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
TOL = 1e-10


def _root() -> str:
    items = [i for i in os.environ.get("NAS_REFERENCE_ROOTS", "").split(",") if i.strip()]
    roots = dict(item.split("=", 1) for item in items)
    if "proxylessnas" not in roots:
        pytest.skip("no reference checkout given for proxylessnas (NAS_REFERENCE_ROOTS)")
    return F.parse_roots([f"proxylessnas={roots['proxylessnas']}"], {"proxylessnas": REFERENCE})[
        "proxylessnas"
    ]


class _Candidate(nn.Module):
    """One of our ops as a reference candidate (``is_zero_layer`` is all it asks of one)."""

    def __init__(self, op: nn.Module) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.op(x)
        return out

    def is_zero_layer(self) -> bool:
        return False


def _reference_edge(mix_op: Any, layers: Any, ours: MixedOp) -> Any:
    ops = [
        layers.ZeroLayer(stride=1) if name == "none" else _Candidate(copy.deepcopy(op))
        for name, op in zip(ours.op_names, ours.ops)
    ]
    return mix_op.MixedEdge(ops)


def _set_reference_gates(edge: Any, alpha, active: int, others: list[int]) -> None:
    edge.AP_path_alpha.data.copy_(alpha)
    edge.AP_path_wb.data.zero_()
    edge.AP_path_wb.data[active] = 1.0
    edge.active_index, edge.inactive_index = [active], list(others)
    edge.AP_path_alpha.grad = None
    edge.AP_path_wb.grad = None


def _ours_edge_forward(m: MixedOp, x, active: int, probe: list[int], mode: str):
    gates = torch.zeros(len(OPS), dtype=torch.float64)
    gates[active] = 1.0
    gates.requires_grad_(True)
    m.gate_probe, m.gate_probe_recompute = probe, mode == "full_v2"
    try:
        out = m(x, gates, [k == active for k in range(len(OPS))], None)
    finally:
        m.gate_probe = None
    return out, gates


def _bn_stats(module: nn.Module) -> list[torch.Tensor]:
    return [b for n, b in module.named_buffers() if "running" in n]


def _loss(out, weight):
    return (out.pow(2) * weight).sum() + out.sum()


def _modes_and_pairs():
    # (mode, active, others): the pair of `two`; every other op for full / full_v2
    return [
        ("two", 3, [2]),
        ("two", 4, [1]),
        ("full", 3, [0, 1, 2, 4]),
        ("full_v2", 2, [0, 1, 3, 4]),
        ("full_v2", 1, [0, 2, 3, 4]),
    ]


@pytest.mark.parametrize(("mode", "active", "others"), _modes_and_pairs())
def test_one_mixed_edge_beside_the_reference(mode, active, others):
    root = _root()
    with F.reference_imports(root, "search", ["search"]), F.float64():
        mix_op = importlib.import_module("modules.mix_op")
        layers = importlib.import_module("modules.layers")
        torch.manual_seed(0)
        ours = MixedOp(4, 1, OPS).double().train()
        F.randomise_affine(ours)
        ref = _reference_edge(mix_op, layers, ours).double().train()
        alpha = torch.randn(len(OPS), dtype=torch.float64)
        x = torch.randn(2, 4, 6, 6, dtype=torch.float64)
        weight = torch.randn(2, 4, 6, 6, dtype=torch.float64)

        x_ours = x.clone().requires_grad_(True)
        out, gates = _ours_edge_forward(ours, x_ours, active, others, mode)
        _loss(out, weight).backward()
        g_ours = gates.grad
        support = torch.zeros(len(OPS), dtype=torch.bool)
        support[[active, *others]] = True
        a_ours = gate_grad_to_alpha(alpha[None], g_ours[None], support[None])[0]

        mix_op.MixedEdge.MODE = mode
        try:
            _set_reference_gates(ref, alpha, active, others)
            x_ref = x.clone().requires_grad_(True)
            out_ref = ref(x_ref)
            _loss(out_ref, weight).backward()
            ref.set_arch_param_grad()
        finally:
            mix_op.MixedEdge.MODE = None
        g_ref = ref.AP_path_wb.grad
        a_ref = ref.AP_path_alpha.grad
    assert F.max_rel_diff(out, out_ref) < TOL
    assert F.max_rel_diff(g_ours, g_ref) < TOL, (g_ours, g_ref)
    assert F.max_rel_diff(a_ours, a_ref) < TOL, (a_ours, a_ref)
    assert F.max_rel_diff(x_ours.grad, x_ref.grad) < TOL
    ours_stats = [s for op in ours.ops for s in _bn_stats(op)]
    ref_stats = [s for op in ref.candidate_ops for s in _bn_stats(op)]
    assert F.max_rel_diff(ours_stats, ref_stats) < TOL


@pytest.mark.parametrize("mode", ["two", "full_v2"])
def test_two_edges_in_a_chain_beside_the_reference(mode):
    """x -> edge 1 -> edge 2 -> loss: each edge's gates and alpha gradients."""
    root = _root()
    draws = {"two": [(3, [4]), (2, [3])], "full_v2": [(3, [0, 1, 2, 4]), (4, [0, 1, 2, 3])]}
    with F.reference_imports(root, "search", ["search"]), F.float64():
        mix_op = importlib.import_module("modules.mix_op")
        layers = importlib.import_module("modules.layers")
        torch.manual_seed(1)
        ours = [MixedOp(4, 1, OPS).double().train() for _ in range(2)]
        for m in ours:
            F.randomise_affine(m)
        refs = [_reference_edge(mix_op, layers, m).double().train() for m in ours]
        alphas = [torch.randn(len(OPS), dtype=torch.float64) for _ in range(2)]
        # the input needs a gradient: the reference's full_v2 backward differentiates its
        # output with respect to it (in its network the stem's output)
        x = torch.randn(2, 4, 6, 6, dtype=torch.float64, requires_grad=True)
        weight = torch.randn(2, 4, 6, 6, dtype=torch.float64)

        h = x
        gates = []
        for m, (active, others) in zip(ours, draws[mode]):
            h, g = _ours_edge_forward(m, h, active, others, mode)
            gates.append(g)
        _loss(h, weight).backward()
        ours_alpha = []
        for g, a, (active, others) in zip(gates, alphas, draws[mode]):
            support = torch.zeros(len(OPS), dtype=torch.bool)
            support[[active, *others]] = True
            ours_alpha.append(gate_grad_to_alpha(a[None], g.grad[None], support[None])[0])

        mix_op.MixedEdge.MODE = mode
        try:
            for edge, a, (active, others) in zip(refs, alphas, draws[mode]):
                _set_reference_gates(edge, a, active, others)
            h = x
            for edge in refs:
                h = edge(h)
            _loss(h, weight).backward()
            for edge in refs:
                edge.set_arch_param_grad()
        finally:
            mix_op.MixedEdge.MODE = None
    for g, a, edge in zip(gates, ours_alpha, refs):
        assert F.max_rel_diff(g.grad, edge.AP_path_wb.grad) < TOL
        assert F.max_rel_diff(a, edge.AP_path_alpha.grad) < TOL


def _strategy(mode: str) -> ProxylessNAS:
    net = build_supernet("nb201", C=4, layers=1, num_classes=10).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.025)
    st = ProxylessNAS(mode=mode)
    st.attach(SearchContext(net, opt, grad_clip=5.0), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        st.arch_params["cell"].copy_(
            torch.randn(6, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        )
    return st


@pytest.mark.parametrize("mode", ["two", "full_v2"])
def test_the_same_paths_are_drawn(mode):
    root = _root()
    with F.reference_imports(root, "search", ["search"]), F.float64():
        mix_op = importlib.import_module("modules.mix_op")
        layers = importlib.import_module("modules.layers")
        st = _strategy(mode)
        alpha = st.arch_params["cell"].detach()
        edges = [_reference_edge(mix_op, layers, MixedOp(4, 1, OPS)).double() for _ in range(6)]
        for seed in range(20):
            ours = st.sample_gates(torch.Generator().manual_seed(seed))["cell"]
            mix_op.MixedEdge.MODE = mode if mode == "two" else None
            try:
                torch.manual_seed(seed)
                for e, edge in enumerate(edges):
                    edge.AP_path_alpha.data.copy_(alpha[e])
                    edge.binarize()
            finally:
                mix_op.MixedEdge.MODE = None
            assert [edge.active_index[0] for edge in edges] == ours[0]
            if mode == "two":
                for e, edge in enumerate(edges):
                    pair = sorted([edge.active_index[0], edge.inactive_index[0]])
                    assert ours[1][e].nonzero().flatten().tolist() == pair


def test_two_mode_rescale_beside_the_reference():
    """One Adam step (the reference's settings) and the rescale, on the gradient of a pair.
    The optimisers step outside the reference's import context: torch imports parts of itself
    lazily at a first step (``torch._dynamo``, imported above for that reason), and the context
    unloads on exit what was imported inside it, which torch refuses to import twice."""
    root = _root()
    with F.reference_imports(root, "search", ["search"]), F.float64():
        mix_op = importlib.import_module("modules.mix_op")
        layers = importlib.import_module("modules.layers")
        st = _strategy("two")
        edge = _reference_edge(mix_op, layers, MixedOp(4, 1, OPS)).double()
        alpha = st.arch_params["cell"].detach()[1].clone()
        active, other = 3, 1
        _set_reference_gates(edge, alpha, active, [other])
        edge.AP_path_wb.grad = torch.tensor([0.0, 0.7, 0.0, -0.4, 0.0], dtype=torch.float64)
        mix_op.MixedEdge.MODE = "two"
        try:
            edge.set_arch_param_grad()  # also records the pair's logits for the rescale
        finally:
            mix_op.MixedEdge.MODE = None
    grad_ref = edge.AP_path_alpha.grad.clone()
    opt = torch.optim.Adam([edge.AP_path_alpha], 1e-3, betas=(0.0, 0.999), eps=1e-8)
    opt.step()
    edge.rescale_updated_arch_param()
    # ours: the same gate gradient through the strategy's formula, its Adam and its rescale
    support = torch.zeros(6, 5, dtype=torch.bool)
    support[:, [active, other]] = True
    grads = torch.zeros(6, 5, dtype=torch.float64)
    grads[1] = gate_grad_to_alpha(alpha[None], edge.AP_path_wb.grad[None], support[1:2])[0]
    draw = {"cell": ([active] * 6, support)}
    decided = {"cell": torch.ones(6, dtype=torch.bool)}
    decided["cell"][1] = False  # only edge 1 is rescaled (the others have no gradient)
    old = [st.arch_params["cell"].detach().clone()]
    st.apply_arch_grads([grads])
    st._rescale(draw, decided, old)
    assert F.max_rel_diff(grads[1], grad_ref) < TOL
    assert F.max_rel_diff(st.arch_params["cell"].detach()[1], edge.AP_path_alpha.detach()) < TOL
