"""ProxylessNAS (``nas.strategies.proxylessnas``): binary gates, their gradient, the schedule.

Known answers at float64: the gates' gradient of every mode equals a brute-force forward in
which every op runs with a gate of 0 (its output in the graph), the architecture gradient the
formula written out, ``two``'s rescale keeps the other paths' probabilities; only the sampled
path runs in the weight step; a tiny ``nas-search search=proxylessnas``. Beside the reference
code: ``tests/fidelity/test_proxylessnas_reference.py``."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from experiments.fidelity import common as F
from nas.plugins import build_plugin
from nas.strategies import SearchContext
from nas.strategies.proxylessnas import ProxylessNAS, edge_modules, gate_grad_to_alpha
from nas.supernet import build_supernet
from nas.supernet.mixed_op import MixedOp
from search_spaces import SPACE_NAMES, get_space

# the smallest supernet of each family (DARTS-style: two reduction cells; a chain of blocks:
# all of them), and one space per family that is there
LAYERS = {"nb201": 1, "darts": 3, "proxyless": 21}
SPACES = [s for s in ("nb201", "darts", "proxyless_cifar") if s in SPACE_NAMES]


def _setup(space="nb201", epochs=None, **kwargs):
    torch.manual_seed(0)
    family = get_space(space).family
    net = build_supernet(space, C=8 if family == "proxyless" else 4, layers=LAYERS[family],
                         num_classes=10)  # fmt: skip
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    strategy = ProxylessNAS(**kwargs)
    strategy.prepare_supernet(net)
    strategy.attach(SearchContext(net, opt, grad_clip=5.0, epochs=epochs),
                    generator=torch.Generator().manual_seed(0))  # fmt: skip
    with torch.no_grad():  # spread the probabilities so that every path matters
        for a in strategy.arch_params.values():
            a.copy_(torch.randn(a.shape, generator=torch.Generator().manual_seed(3)))
    return net, strategy


def _batch(n=4, seed=0, side=16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, side, side, generator=g), torch.randint(0, 10, (n,), generator=g)


def _gate_grads(strategy, net, draw, batch, brute: bool):
    """dL/dgates of the sampled gates: ours (probes) or brute force (every op in the graph
    with gate 0, ``zero_weight_ops_run``)."""
    gates = {}
    for ct, alpha in strategy.arch_params.items():
        active, _ = draw[ct]
        g = torch.zeros_like(alpha)
        g[torch.arange(len(active)), torch.tensor(active)] = 1.0
        gates[ct] = g.requires_grad_(True)
    decided = strategy._decided()
    if brute:
        net.zero_weight_ops_run = True
    else:
        strategy._set_probes(draw, decided)
    try:
        loss, _ = strategy.loss(batch, gates)
        grads = torch.autograd.grad(loss, list(gates.values()))
    finally:
        strategy._clear_probes()
        net.zero_weight_ops_run = False
    return dict(zip(gates, grads))


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("mode", ["full_v2", "full", "two"])
def test_gate_gradients_equal_a_forward_with_every_op_in_the_graph(space, mode):
    with F.float64():
        net, strategy = _setup(space, mode=mode)
        net.double()
        net.eval()  # batch statistics aside: the same normalisation in both forwards
        draw = strategy.sample_gates(torch.Generator().manual_seed(1))
        side = 32 if get_space(space).family == "proxyless" else 16
        batch = (_batch(n=2, side=side)[0].double(), _batch(n=2)[1])
        ours = _gate_grads(strategy, net, draw, batch, brute=False)
        brute = _gate_grads(strategy, net, draw, batch, brute=True)
    for ct, (active, support) in draw.items():
        names = net.space.cells[ct].edges
        for e, k in enumerate(active):
            if names[e].ops[k] == "none":
                continue  # no gradient for this edge (the reference's zero layer)
            idx = support[e].nonzero().flatten()
            real = [int(i) for i in idx if names[e].ops[int(i)] != "none"]
            torch.testing.assert_close(ours[ct][e, real], brute[ct][e, real], rtol=1e-10,
                                       atol=1e-12)  # fmt: skip
            assert torch.count_nonzero(ours[ct][e, [i for i in range(support.shape[1])
                                                    if not support[e, i]]]) == 0  # fmt: skip


def test_arch_gradient_is_the_formula_written_out():
    torch.manual_seed(0)
    alpha = torch.randn(3, 5, dtype=torch.float64)
    g = torch.randn(3, 5, dtype=torch.float64)
    support = torch.ones(3, 5, dtype=torch.bool)
    support[1] = False
    support[1, [0, 3]] = True
    out = gate_grad_to_alpha(alpha, g, support)
    for e in range(3):
        idx = support[e].nonzero().flatten().tolist()
        q = torch.softmax(alpha[e, idx], 0)
        for a, i in enumerate(idx):
            expected = sum(g[e, j] * q[b] * (float(a == b) - q[a]) for b, j in enumerate(idx))
            assert abs(float(out[e, i] - expected)) < 1e-14
        assert all(out[e, i] == 0 for i in range(5) if i not in idx)


def test_weight_step_runs_only_the_sampled_path():
    net, strategy = _setup()
    ran = []
    hooks = [op.register_forward_hook(lambda m, i, o: ran.append(m))
             for mixed in net.mixed_ops() for op in mixed.ops]  # fmt: skip
    strategy.begin_step(0)
    strategy.weight_step(_batch())
    for h in hooks:
        h.remove()
    # one op per edge at most (none runs nothing), each edge's cell shared: 6 edges, 3 cells
    assert 0 < len(ran) <= 6 * len(edge_modules(net)["cell"][0])
    w = strategy.arch_weights(sample=True)["cell"]
    assert torch.equal(w.sum(-1), torch.ones(6)) and set(w.unique().tolist()) <= {0.0, 1.0}


def test_arch_step_keeps_no_activations_of_the_other_paths():
    """full_v2's forward holds the sampled path's activations only: the graph's saved tensors
    are those of the weight step's single path (plus each edge's input), not every op's."""
    saved = {}
    for mode in ("full_v2", "full"):
        net, strategy = _setup(space="darts", mode=mode)
        draw = strategy.sample_gates(torch.Generator().manual_seed(1))
        strategy._set_probes(draw, strategy._decided())
        count = [0]

        def pack(t, count=count):
            count[0] += t.numel()
            return t

        gates = {ct: torch.zeros_like(a).scatter_(1, torch.tensor(draw[ct][0])[:, None], 1.0)
                 .requires_grad_() for ct, a in strategy.arch_params.items()}  # fmt: skip
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            strategy.loss(_batch(), gates)
        strategy._clear_probes()
        saved[mode] = count[0]
    assert saved["full_v2"] < saved["full"]


def test_two_mode_keeps_the_other_paths_probabilities():
    net, strategy = _setup(mode="two")
    p_before = strategy.probabilities("cell").detach().clone()
    strategy.begin_step(0)
    draw = strategy.sample_gates(strategy.generator(torch.device("cpu")))
    strategy.begin_step(0)
    strategy.arch_step(_batch(seed=1), _batch(seed=2))
    p_after = strategy.probabilities("cell").detach()
    active, support = draw["cell"]
    for e in range(6):
        others = (~support[e]).nonzero().flatten()
        torch.testing.assert_close(p_after[e, others], p_before[e, others], rtol=1e-5, atol=1e-7)


def test_edges_whose_active_op_is_none_get_no_gradient():
    net, strategy = _setup()
    with torch.no_grad():
        strategy.arch_params["cell"][:, 0] = 20.0  # `none` is op 0 of NB201: always drawn
    before = strategy.arch_params["cell"].detach().clone()
    strategy.begin_step(0)
    strategy.arch_step(_batch(seed=1), _batch(seed=2))
    assert torch.equal(strategy.arch_params["cell"].detach(), before)


def test_schedule_every_fifth_step_and_warm_up():
    net, strategy = _setup(update_every=5)
    taken = []
    for i in range(7):
        before = strategy.arch_params["cell"].detach().clone()
        strategy.begin_step(i)
        metrics = strategy.step(_batch(seed=i), _batch(seed=10 + i))
        taken.append(not torch.equal(strategy.arch_params["cell"].detach(), before))
        assert "val_loss" in metrics  # the epoch's last architecture step's
    assert taken == [True, False, False, False, False, True, False]
    strategy.on_epoch_end(0)
    assert strategy.steps_in_epoch == 0
    _, warm = _setup(warmup_epochs=2, epochs=4)
    assert [warm.updates_arch(e) for e in range(4)] == [False, False, True, True]
    with pytest.raises(ValueError, match="warmup_epochs=4 covers all 4 epochs"):
        _setup(warmup_epochs=4, epochs=4)


def test_checkpoint_keeps_the_schedule_position():
    _, a = _setup()
    for i in range(3):
        a.begin_step(i)
        a.step(_batch(seed=i), _batch(seed=5))
    _, b = _setup()
    b.load_checkpoint_state(a.checkpoint_state())
    assert b.steps_in_epoch == 3 and set(b._last_val) == {"val_loss", "val_acc"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "one"}, "search.mode must be one of full_v2, full, two, got 'one'"),
        ({"update_every": 0}, "search.update_every must be an int >= 1, got 0"),
        ({"warmup_epochs": -1}, "search.warmup_epochs must be an int >= 0, got -1"),
    ],
)
def test_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_plugin("search", "proxylessnas", **kwargs)


def test_edge_modules_lists_every_cell():
    net = build_supernet("darts", C=4, layers=5, num_classes=10)
    edges = edge_modules(net)
    assert len(edges["normal"]) == 14 and len(edges["normal"][0]) == 3
    assert len(edges["reduce"][0]) == 2
    assert all(isinstance(m, MixedOp) for row in edges["reduce"] for m in row)
    if "proxyless_cifar" in SPACE_NAMES:  # a chain of blocks: one mixed op per edge
        chain = edge_modules(build_supernet("proxyless_cifar", C=8, layers=21, num_classes=10))
        assert [len(row) for row in chain["blocks"]] == [1] * 21


@pytest.mark.slow
def test_tiny_search_runs(tmp_path):
    cmd = [sys.executable, "-m", "nas.cli.search", "space=nb201", "search=proxylessnas",
           "space.C=4", "space.layers=1", "batch_size=16", "data.max_items=64", "epochs=2",
           "figures=false", "search.mode=two", f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "genotype (argmax): |" in done.stdout


# ---------------------------------------------------------------- as the reference's search


def test_edge_adam_is_one_torch_adam_per_edge():
    """``EdgeAdam`` on [edges, ops] equals torch's Adam on one parameter per edge (the
    reference's ``AP_path_alpha``), bit for bit, where the skipped edges' parameters have no
    gradient: they take no step and their step count stays."""
    from nas.strategies.proxylessnas import EdgeAdam

    g = torch.Generator().manual_seed(0)
    alpha = torch.nn.Parameter(torch.randn(6, 7, generator=g, dtype=torch.float64))
    rows = [torch.nn.Parameter(alpha.detach()[i].clone()) for i in range(6)]
    ours = EdgeAdam([alpha], lr=1e-3, betas=(0.0, 0.999), weight_decay=1e-4)
    ref = torch.optim.Adam(rows, lr=1e-3, betas=(0.0, 0.999), weight_decay=1e-4, foreach=False)
    for _ in range(8):
        grad = torch.randn(6, 7, generator=g, dtype=torch.float64)
        skip = torch.rand(6, generator=g) < 0.4
        alpha.grad = grad.masked_fill(skip[:, None], 0.0)
        ours.skip_rows(alpha, skip)
        ours.step()
        for i, row in enumerate(rows):
            row.grad = None if skip[i] else grad[i].clone()
        ref.step()
        assert torch.equal(alpha.detach(), torch.stack([r.detach() for r in rows]))
    counts = ours.state_dict()["state"][0]["step"].tolist()
    assert counts == [float(ref.state[r]["step"]) for r in rows] and len(set(counts)) > 1
    # one Adam over the whole matrix (a zero row instead of no gradient) moves otherwise
    plain = torch.nn.Parameter(torch.zeros(2, 3, dtype=torch.float64))
    one = torch.optim.Adam([plain], lr=1e-3, betas=(0.0, 0.999))
    edge = torch.nn.Parameter(torch.zeros(2, 3, dtype=torch.float64))
    split = EdgeAdam([edge], lr=1e-3, betas=(0.0, 0.999))
    for step, grad in enumerate(([[1.0, 0, 0], [1.0, 0, 0]], [[1.0, 0, 0], [0, 0, 0]],
                                 [[1.0, 0, 0], [1.0, 0, 0]])):  # fmt: skip
        plain.grad = torch.tensor(grad, dtype=torch.float64)
        edge.grad = plain.grad.clone()
        if step == 1:
            split.skip_rows(edge, torch.tensor([False, True]))
        one.step()
        split.step()
    assert not torch.equal(plain, edge)


def test_draws_take_one_number_per_allowed_op():
    """The draw over an edge with masked ops equals ``torch.multinomial`` over the allowed
    ops alone with the same generator (the reference's candidates lack them), and differs
    from a draw over every op with the masked ones at probability 0."""
    from nas.strategies.proxylessnas import draw

    p = torch.softmax(torch.randn(7, generator=torch.Generator().manual_seed(1)), 0)
    allowed = torch.tensor([True] * 6 + [False])
    p = p.masked_fill(~allowed, 0.0)
    ours, alone, padded = [], [], []
    for name, out in (("ours", ours), ("alone", alone), ("padded", padded)):
        gen = torch.Generator().manual_seed(0)
        for _ in range(40):
            if name == "ours":
                out.append(draw(p, allowed, 2, gen).tolist())
            elif name == "alone":
                out.append(torch.multinomial(p[:6], 2, generator=gen).tolist())
            else:
                out.append(torch.multinomial(p, 2, generator=gen).tolist())
    assert ours == alone != padded
