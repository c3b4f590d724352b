"""DrNAS: Dirichlet weights, the KL regulariser, stage transitions (pruning + Net2Wider)."""

import pytest
import torch
from torch.distributions import Dirichlet, kl_divergence

from nas.strategies import DrNAS, SearchContext
from nas.strategies.drnas import dirichlet_kl_to_uniform
from nas.supernet import build_supernet
from nas.supernet.widen import widen_op
from search_spaces.ops import build_op


def _setup(space="nb201", C=8, layers=1, **kwargs):
    torch.manual_seed(0)
    k = kwargs["stages"][0]["partial_channels"] if kwargs.get("stages") else 1
    net = build_supernet(space, C=C, layers=layers, num_classes=10, partial_channels=k)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    strategy = DrNAS(**kwargs)
    strategy.attach(
        SearchContext(net, opt, grad_clip=5.0), generator=torch.Generator().manual_seed(0)
    )
    return net, opt, strategy


def _batch(n=8, hw=16):
    return torch.randn(n, 3, hw, hw), torch.randint(0, 10, (n,))


def test_kl_matches_torch_distributions():
    conc = torch.rand(14, 7) * 3 + 0.1
    ours = dirichlet_kl_to_uniform(conc)
    ref = kl_divergence(Dirichlet(conc), Dirichlet(torch.ones_like(conc)))
    assert torch.allclose(ours, ref, atol=1e-5)


def test_kl_regulariser_is_scaled_sum_over_edges_and_cells():
    net, _, s = _setup("darts", C=4, layers=3, reg_type="kl", reg_scale=0.5)
    with torch.no_grad():
        for p in s.arch_parameters():
            p.normal_()
    expected = sum(
        kl_divergence(
            Dirichlet(torch.nn.functional.elu(b) + 1), Dirichlet(torch.ones_like(b))
        ).sum()
        for b in s.arch_parameters()
    )
    assert torch.allclose(s.arch_regularizer(), 0.5 * expected)
    assert s.arch_optimizer.param_groups[0]["weight_decay"] == 0.0  # KL replaces L2
    _, _, l2 = _setup()
    assert (
        l2.arch_regularizer() is None and l2.arch_optimizer.param_groups[0]["weight_decay"] == 1e-3
    )


def test_weights_are_pathwise_dirichlet_samples_and_eval_uses_the_mean():
    net, _, s = _setup()
    a, b = s.arch_weights(sample=True)["cell"], s.arch_weights(sample=True)["cell"]
    assert not torch.equal(a, b)  # a fresh sample per forward
    assert torch.allclose(a.sum(-1), torch.ones(6))
    a.pow(2).sum().backward()  # pathwise: the sample carries a gradient to beta
    assert s.arch_params["cell"].grad.abs().sum() > 0
    conc = torch.nn.functional.elu(s.arch_params["cell"]) + 1
    mean = s.arch_weights(sample=False)["cell"]
    assert torch.allclose(mean, conc / conc.sum(-1, keepdim=True))
    assert s.log_state()["eval_weights"] == "dirichlet mean"
    sampled = DrNAS(eval_weights="sample")
    sampled.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0))
    assert not torch.equal(
        sampled.arch_weights(sample=False)["cell"], sampled.arch_weights(sample=False)["cell"]
    )


def test_second_order_works_with_partial_channels():
    stages = [{"epochs": 1, "partial_channels": 2, "keep": 5}]
    net, _, s = _setup(order=2, stages=stages)
    metrics = s.step(_batch(), _batch())
    assert all(torch.isfinite(v) for v in metrics.values())
    assert s.arch_params["cell"].grad.abs().sum() > 0


@pytest.mark.parametrize(
    "name", ["sep_conv_3x3", "dil_conv_5x5", "skip_connect", "nor_conv_3x3", "max_pool_3x3"]
)
def test_widening_keeps_old_channels_and_copies_new_ones(name):
    stride = 2 if name in ("skip_connect", "max_pool_3x3") else 1
    op = build_op(name, 4, 4, stride, affine=False)
    if "pool" in name:
        op = torch.nn.Sequential(op, torch.nn.BatchNorm2d(4, affine=False))
    for buf_owner in op.modules():
        if isinstance(buf_owner, torch.nn.BatchNorm2d):
            buf_owner.running_mean.normal_()
    old = {n: t.detach().clone() for n, t in op.state_dict().items() if t.dim() > 0}
    params_before = dict(op.named_parameters())
    expanders = widen_op(op, 4, 8, torch.Generator().manual_seed(0))
    assert set(expanders) == set(params_before.values())  # the same Parameter objects, widened
    for n, new in op.state_dict().items():
        if n not in old:
            continue
        o = old[n]
        if name == "skip_connect" and n.startswith("bn."):
            # FactorizedReduce concatenates two halves: old channels keep their place per half
            new = torch.cat([new[:2], new[4:6], new[2:4], new[6:]])
        # the original channels keep their values
        sl = tuple(slice(0, s) for s in o.shape)
        assert torch.equal(new[sl], o), n
        # every new channel is a copy of an existing one
        for dim in range(o.dim()):
            if new.shape[dim] != o.shape[dim]:
                for c in range(o.shape[dim], new.shape[dim]):
                    piece = new.narrow(dim, c, 1)
                    sources = [new.narrow(dim, j, 1) for j in range(o.shape[dim])]
                    assert any(torch.equal(piece, src) for src in sources), (n, dim, c)
    assert op(torch.randn(2, 8, 8, 8)).shape[1] == 8  # and the widened op runs on 8 channels


def test_stage_transition_prunes_widens_and_carries_momentum():
    stages = [
        {"epochs": 1, "partial_channels": 4, "keep": 5},
        {"epochs": 1, "partial_channels": 2, "keep": 3},
    ]
    net, opt, s = _setup(stages=stages)
    for _ in range(2):
        s.step(_batch(), _batch())
    with torch.no_grad():
        s.arch_params["cell"].copy_(torch.arange(30.0).view(6, 5) % 7)
    adam_steps = s.arch_optimizer.state[s.arch_params["cell"]]["step"].item()
    mixed = net.mixed_ops()[0]
    conv = mixed.ops[3][1]  # nor_conv_3x3's conv
    w_old = conv.weight.detach().clone()
    m_old = opt.state[conv.weight]["momentum_buffer"].clone()
    assert w_old.shape[0] == 2  # C/K = 8/4

    s.on_epoch_end(0)  # the end of stage 0

    assert net.partial_channels == 2 and s.stage == 1 and conv.weight.shape[:2] == (4, 4)
    assert torch.equal(conv.weight[:2, :2], w_old)
    m_new = opt.state[conv.weight]["momentum_buffer"]
    assert m_new.shape == conv.weight.shape and torch.equal(m_new[:2, :2], m_old)
    # top-3 ops by beta stay unmasked on every edge
    beta = torch.arange(30.0).view(6, 5) % 7
    mask = net.op_mask("cell")
    assert mask.sum(-1).tolist() == [3] * 6
    for e in range(6):
        kept = beta[e][mask[e]]
        dropped = beta[e][~mask[e]]
        assert kept.min() >= dropped.max()
    w = s.arch_weights(sample=True)["cell"]
    assert torch.all(w[~mask] == 0) and torch.allclose(w.sum(-1), torch.ones(6))
    # the architecture optimiser keeps its state
    assert s.arch_optimizer.state[s.arch_params["cell"]]["step"].item() == adam_steps
    s.step(_batch(), _batch())  # and training goes on with the widened supernet


def test_arch_updates_start_later_in_each_stage():
    stages = [
        {"epochs": 3, "partial_channels": 1, "keep": 5},
        {"epochs": 3, "partial_channels": 1, "keep": 3},
    ]
    _, _, s = _setup(stages=stages, arch_start_epoch=2)
    assert [s.updates_arch(e) for e in range(6)] == [False, False, True, False, False, True]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reg_type": "l1"}, "search.reg_type must be 'l2' or 'kl'"),
        ({"stages": []}, "search.stages must list at least one stage"),
        (
            {"stages": [{"epochs": 1, "partial_channels": 2}]},
            r"search.stages\[0\] = .*expected \{epochs, partial_channels, keep\}",
        ),
        (
            {
                "stages": [
                    {"epochs": 1, "partial_channels": 2, "keep": 5},
                    {"epochs": 1, "partial_channels": 4, "keep": 5},
                ]
            },
            "partial_channels must not grow",
        ),
        ({"eval_weights": "median"}, "search.eval_weights must be 'mean' or 'sample'"),
    ],
)
def test_bad_drnas_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DrNAS(**kwargs)


def test_partial_channels_that_do_not_divide_are_rejected_at_attach():
    net = build_supernet("darts", C=16, layers=3, num_classes=10, partial_channels=4)
    s = DrNAS(
        stages=[
            {"epochs": 1, "partial_channels": 4, "keep": 8},
            {"epochs": 1, "partial_channels": 3, "keep": 4},
        ]
    )
    with pytest.raises(ValueError, match="partial-channel K=3 does not divide the 16 channels"):
        s.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0))


def test_arch_gradient_clipped_to_arch_grad_clip():
    """DrNAS's ImageNet search clips the architecture gradient to norm 5 (train_search_imagenet.py);
    the option clips the summed gradient before the Adam step, and is off by default."""
    batch = _batch()
    norms = {}
    for clip in (None, 1e-4):
        net, _, s = _setup("darts", C=4, layers=3, arch_grad_clip=clip)
        s.begin_step(0)
        s.arch_step(batch, batch)
        norms[clip] = float(torch.norm(torch.stack([p.grad.norm() for p in s.arch_parameters()])))
    assert norms[None] > 1e-3
    assert norms[1e-4] == pytest.approx(1e-4, rel=1e-4)
    with pytest.raises(ValueError, match="search.arch_grad_clip must be a positive number"):
        DrNAS(arch_grad_clip=0)


def test_stage_transition_widens_nb201_running_statistics_with_their_channels():
    """Net2Wider copies BN running statistics with the same channel map as the conv before
    them (DrNAS net2wider.py BNWider(bn, ..., index=index)): a copied output channel carries
    its source channel's statistics, and eval mode runs on the widened supernet."""
    stages = [
        {"epochs": 1, "partial_channels": 4, "keep": 5},
        {"epochs": 1, "partial_channels": 2, "keep": 5},
    ]
    net, _, s = _setup(stages=stages)
    for _ in range(2):
        s.step(_batch(), _batch())
    op = net.mixed_ops()[0].ops[3]  # nor_conv_3x3: ReLU, conv, BN
    conv, bn = op[1], op[2]
    assert bn.track_running_stats and not bn.affine
    mean_old, var_old = bn.running_mean.clone(), bn.running_var.clone()
    assert not torch.equal(mean_old, torch.zeros(2))  # statistics were tracked
    s.on_epoch_end(0)
    assert bn.running_mean.shape == (4,) and conv.weight.shape[0] == 4
    assert torch.equal(bn.running_mean[:2], mean_old) and torch.equal(bn.running_var[:2], var_old)
    for c in (2, 3):  # each new channel: the conv filter and the statistics of one old channel
        sources = [j for j in range(2) if torch.equal(conv.weight[c, :2], conv.weight[j, :2])]
        assert sources, c
        j = sources[0]
        assert bn.running_mean[c] == bn.running_mean[j] and bn.running_var[c] == bn.running_var[j]
    net.eval()
    with torch.no_grad():
        out = net(_batch()[0], s.arch_weights(sample=False))
    assert torch.isfinite(out).all()


def test_pruning_sets_the_pruned_ops_beta_to_zero_as_the_reference():
    """xiangning-chen/DrNAS ``utils.prune`` copies the kept betas into zeros: a pruned op keeps
    concentration 1 in the Dirichlet draw (whose pathwise gradient sees the total) and in KL."""
    stages = [
        {"epochs": 1, "partial_channels": 1, "keep": 5},
        {"epochs": 1, "partial_channels": 1, "keep": 2},
        {"epochs": 1, "partial_channels": 1, "keep": 1},
    ]
    net, _, s = _setup(stages=stages)
    beta = torch.randn(6, 5, generator=torch.Generator().manual_seed(1)) + 3
    with torch.no_grad():
        s.arch_params["cell"].copy_(beta)
    s.enter_stage(1)
    keep = torch.zeros(6, 5, dtype=torch.bool).scatter(1, beta.topk(2, -1).indices, True)
    assert torch.equal(net.op_mask("cell"), keep)
    assert torch.equal(s.arch_params["cell"].detach(), beta * keep)
    assert torch.equal(s.concentration("cell")[~keep], torch.ones(int((~keep).sum())))
    with torch.no_grad():  # a pruned op never comes back, whatever its beta does later
        s.arch_params["cell"][~keep] = 10.0
    s.enter_stage(2)
    kept = torch.zeros(6, 5, dtype=torch.bool).scatter(1, beta.topk(1, -1).indices, True)
    assert torch.equal(net.op_mask("cell"), kept)
    assert torch.equal(s.arch_params["cell"].detach(), beta * kept)
