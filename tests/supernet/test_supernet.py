import pytest
import torch

from nas.supernet import DartsSupernet, MixedOp, build_supernet, channel_shuffle
from search_spaces import SPACE_NAMES, get_space


def _uniform(net):
    return {ct: torch.full(shape, 1.0 / shape[1]) for ct, shape in net.arch_shapes().items()}


def test_darts_supernet_has_the_reference_parameter_count():
    net = build_supernet("darts", C=16, layers=8, num_classes=10)
    assert sum(p.numel() for p in net.parameters()) == 1_930_618  # quark0/darts model_search


@pytest.mark.parametrize("space", SPACE_NAMES)
def test_every_space_builds_a_supernet_that_runs(space):
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    out = net(torch.randn(2, 3, 16, 16), _uniform(net))
    assert out.shape == (2, 10) and torch.isfinite(out).all()
    cells = get_space(space).cells
    assert net.arch_shapes() == {ct: (c.num_edges, c.num_ops) for ct, c in cells.items()}


def _count_calls(mixed: MixedOp):
    calls = {name: 0 for name in mixed.op_names}

    def hook(name):
        def f(module, inputs, output):
            calls[name] += 1

        return f

    for name, op in zip(mixed.op_names, mixed.ops):
        op.register_forward_hook(hook(name))
    return calls


def test_none_zero_weight_and_masked_ops_are_not_run():
    op = MixedOp(4, 1, get_space("darts").cells["normal"].edges[0].ops)
    calls = _count_calls(op)
    x = torch.randn(2, 4, 8, 8)
    w = torch.tensor([0.2, 0.0, 0.1, 0.1, 0.2, 0.2, 0.1, 0.1])
    active = [True, True, True, True, False, True, True, True]
    out = op(x, w, [a and bool(v != 0) for a, v in zip(active, w)])
    assert calls["none"] == 0  # never run
    assert calls["max_pool_3x3"] == 0  # weight exactly zero
    assert calls["sep_conv_3x3"] == 0  # masked
    assert calls["avg_pool_3x3"] == calls["dil_conv_5x5"] == 1
    # the result is the weighted sum of the ops that ran
    with torch.no_grad():
        ref = sum(w[k] * op.ops[k](x) for k in (2, 3, 5, 6, 7))
    assert torch.allclose(out, ref, atol=1e-6)


def test_supernet_skips_ops_by_weight_and_mask():
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    w = _uniform(net)
    w["cell"][:, 3] = 0.0  # nor_conv_3x3 weight zero on every edge
    mask = torch.ones(6, 5, dtype=torch.bool)
    mask[:, 2] = False  # nor_conv_1x1 masked on every edge
    net.set_op_mask("cell", mask)
    ran = []
    for cell in net.cells:
        for mixed in getattr(cell, "ops", []):
            for name, op in zip(mixed.op_names, mixed.ops):
                op.register_forward_hook(lambda m, i, o, name=name: ran.append(name))
    net(torch.randn(2, 3, 8, 8), w)
    assert ran and set(ran) == {"skip_connect", "avg_pool_3x3"}
    assert "mask_cell" in net.state_dict()
    with pytest.raises(
        ValueError, match=r"op mask for 'cell' has shape \(6, 4\); expected \(6, 5\)"
    ):
        net.set_op_mask("cell", torch.ones(6, 4))
    with pytest.raises(ValueError, match=r"architecture weights for 'cell' have shape \(6, 4\)"):
        net(torch.randn(2, 3, 8, 8), {"cell": torch.ones(6, 4)})


def test_partial_channels_mix_a_fraction_and_shuffle():
    torch.manual_seed(0)
    op = MixedOp(8, 1, ("skip_connect", "sep_conv_3x3"), partial_channels=4)
    x = torch.randn(2, 8, 6, 6)
    w = torch.tensor([1.0, 0.0])  # only the identity runs: the output is a shuffle of x
    out = op(x, w, [True, False])
    assert torch.equal(out, channel_shuffle(x, 4))
    # the ops are built on C/K channels
    assert op.ops[1][1].in_channels == 2
    reduce = MixedOp(8, 2, ("max_pool_3x3", "skip_connect"), partial_channels=2)
    assert reduce(x, torch.tensor([0.5, 0.5]), [True, True]).shape == (2, 8, 3, 3)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("with_acc", [False, True])
@pytest.mark.parametrize("nhwc", [False, True])
def test_partial_channel_edge_equals_the_plain_formula(stride, k, with_acc, nhwc):
    """The fused path (one output write, no cat / shuffle copies) against PC-DARTS written out:
    acc + shuffle(cat([sum_k w_k op_k(x[:, :C/K]), bypass]), K), values and every gradient."""
    torch.manual_seed(0)
    ops = ("max_pool_3x3", "avg_pool_3x3", "skip_connect", "sep_conv_3x3", "dil_conv_5x5")
    op = MixedOp(16, stride, ops, partial_channels=k)
    x0 = torch.randn(3, 16, 8, 8)
    if nhwc:
        op = op.to(memory_format=torch.channels_last)
        x0 = x0.contiguous(memory_format=torch.channels_last)
    w0 = torch.tensor([0.1, 0.0, 0.3, 0.4, 0.2])  # avg_pool's zero weight: not run
    active = [True, False, True, True, True]
    acc0 = torch.randn(3, 16, 8 // stride, 8 // stride) if with_acc else None
    g = torch.randn(3, 16, 8 // stride, 8 // stride)

    def run(fused):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        acc = None if acc0 is None else acc0.clone().requires_grad_()
        if fused:
            out = op(x, w, active, acc)
        else:
            c = 16 // k
            x_op = x[:, :c].contiguous()
            mixed = sum(w[j] * op.ops[j](x_op) for j in range(len(ops)) if active[j])
            bypass = x[:, c:] if stride == 1 else torch.nn.functional.max_pool2d(x[:, c:], 2, 2)
            out = channel_shuffle(torch.cat([mixed, bypass], dim=1), k)
            out = out if acc is None else acc + out
        op.zero_grad()
        (out * g).sum().backward()
        grads = [p.grad.clone() for p in op.parameters() if p.grad is not None]
        if fused and nhwc:  # the layout is kept: NHWC in, NHWC out and NHWC gradient
            assert out.is_contiguous(memory_format=torch.channels_last)
            assert x.grad.is_contiguous(memory_format=torch.channels_last)
        return [out.detach(), x.grad, w.grad, *([] if acc is None else [acc.grad]), *grads]

    fused, plain = run(True), run(False)
    assert len(fused) == len(plain)
    for a, b in zip(fused, plain):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("stride", [1, 2])
def test_partial_channel_edge_whose_only_active_op_is_none(stride):
    """A sampled `none` (GDAS, ReinMax with PC-DARTS): no op runs, the op slot is zero, the
    bypass still flows, and the weights get a zero gradient instead of an error."""
    torch.manual_seed(0)
    op = MixedOp(8, stride, ("none", "skip_connect", "sep_conv_3x3"), partial_channels=2)
    x = torch.randn(2, 8, 4, 4, requires_grad=True)
    w = torch.tensor([1.0, 0.0, 0.0], requires_grad=True)
    out = op(x, w, [True, False, False])
    bypass = x[:, 4:] if stride == 1 else torch.nn.functional.max_pool2d(x[:, 4:], 2, 2)
    expected = channel_shuffle(torch.cat([torch.zeros_like(bypass), bypass], dim=1), 2)
    torch.testing.assert_close(out, expected)
    out.sum().backward()
    assert torch.equal(w.grad, torch.zeros(3))
    assert torch.equal(x.grad[:, :4], torch.zeros_like(x.grad[:, :4]))
    assert x.grad[:, 4:].abs().sum() > 0


def test_channel_shuffle_interleaves_groups():
    x = torch.arange(6.0).view(1, 6, 1, 1)
    assert channel_shuffle(x, 2).flatten().tolist() == [0, 3, 1, 4, 2, 5]


def test_partial_channel_settings_that_cannot_work_are_rejected():
    with pytest.raises(ValueError, match="partial-channel K=6 does not divide the 16 channels"):
        DartsSupernet(space="darts", C=16, layers=8, partial_channels=6)
    with pytest.raises(ValueError, match="skip_connect at stride 2 needs an even channel count"):
        MixedOp(6, 2, ("skip_connect", "max_pool_3x3"), partial_channels=2)  # 6/2 = 3 channels
    # DrNAS's setting: C=36, K=6 works (36/6 = 6, 72/6 = 12, 144/6 = 24)
    DartsSupernet(space="s5", C=36, layers=5, partial_channels=6)


def test_bad_supernet_arguments():
    with pytest.raises(ValueError, match="needs a DARTS-style space"):
        DartsSupernet(space="nb201")
    with pytest.raises(ValueError, match="unknown search space 'foo'"):
        build_supernet("foo", C=4, layers=3, num_classes=10)
    with pytest.raises(ValueError, match="layers must be at least 3"):
        build_supernet("darts", C=4, layers=2, num_classes=10)


def test_imagenet_search_stem_is_the_darts_imagenet_stem_at_3c():
    """DrNAS model_search_imagenet.py: stem0 3 -> 3C/2 -> 3C, stem1 3C -> 3C (C=48: 72, 144)."""
    net = build_supernet(
        "s5", C=48, layers=3, num_classes=1000, partial_channels=6, stem="imagenet"
    )
    assert isinstance(net, DartsSupernet)
    convs = [m for m in (*net.stem0, *net.stem1) if isinstance(m, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.stride) for c in convs] == [
        (3, 72, (2, 2)),
        (72, 144, (2, 2)),
        (144, 144, (2, 2)),
    ]
    first = net.cells[0]
    assert first.preprocess0.conv_1.in_channels == 144  # after a reduction: FactorizedReduce
    assert (
        next(m for m in first.preprocess1.modules() if isinstance(m, torch.nn.Conv2d)).in_channels
        == 144
    )
    small = build_supernet("s5", C=4, layers=3, num_classes=10, stem="imagenet")
    out = small(torch.randn(2, 3, 32, 32), _uniform(small))
    assert out.shape == (2, 10) and torch.isfinite(out).all()


def test_nb201_cells_track_batch_norm_running_statistics():
    """Both references build the NB201 search cells with affine=False, track_running_stats=True
    (darts-pt nasbench201/search_model.py, DrNAS 201-space/search_model.py): eval mode
    normalises with the running statistics, which live in the state dict (checkpoints)."""
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    cell_bns = [
        m
        for cell in net.cells
        if hasattr(cell, "ops")
        for m in cell.modules()
        if isinstance(m, torch.nn.BatchNorm2d)
    ]
    assert cell_bns and all(not bn.affine and bn.track_running_stats for bn in cell_bns)
    keys = set(net.state_dict())
    assert any(k.startswith("cells.0.ops.") and k.endswith("running_mean") for k in keys)
    x, w = torch.randn(8, 3, 16, 16) * 3 + 1, _uniform(net)
    net.train()
    net(x, w)  # one step of running statistics
    net.eval()
    with torch.no_grad():
        eval_out = net(x, w)
    net.train()
    with torch.no_grad():
        train_out = net(x, w)
    assert not torch.allclose(eval_out, train_out)  # eval mode reads the running statistics
    off = build_supernet("nb201", C=4, layers=1, num_classes=10, track_running_stats=False)
    assert not any("cells.0.ops." in k and "running" in k for k in off.state_dict())


@pytest.mark.parametrize("space", ["nb201", "darts", "s3"])
def test_one_shared_relu_per_state_equals_a_relu_per_op(space):
    """The cell's shared ReLU (``MixedOp.share_relu``) gives the forward of a ReLU per op, bit
    for bit, and the same gradients (to float64 rounding: the ReLU backward adds the ops'
    gradients before masking instead of after); no op's own ReLU module runs."""
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    net = net.double()
    x = torch.randn(3, 3, 16, 16, dtype=torch.float64)
    weights = {
        ct: torch.softmax(torch.randn(shape, dtype=torch.float64), -1).requires_grad_()
        for ct, shape in net.arch_shapes().items()
    }
    relu_calls = []
    for mixed in net.mixed_ops():
        for m in mixed.ops.modules():
            if isinstance(m, torch.nn.ReLU):
                m.register_forward_hook(lambda *_: relu_calls.append(1))
    results = []
    for share in (True, False):
        for mixed in net.mixed_ops():
            mixed.share_relu = share
        net.zero_grad()
        for w in weights.values():
            w.grad = None
        relu_calls.clear()
        out = net(x, weights)
        out.square().sum().backward()
        grads = [p.grad.clone() for p in net.parameters() if p.grad is not None]
        results.append(
            (out.detach(), grads, [w.grad.clone() for w in weights.values()], len(relu_calls))
        )
    (out_s, g_s, a_s, relus_s), (out_o, g_o, a_o, relus_o) = results
    assert torch.equal(out_s, out_o)
    assert len(g_s) == len(g_o) and all(
        torch.allclose(a, b, rtol=1e-10, atol=1e-12) for a, b in zip(g_s, g_o)
    )
    assert all(torch.allclose(a, b, rtol=1e-10, atol=1e-12) for a, b in zip(a_s, a_o))
    # sep_conv's second ReLU is inside the op and still runs; the first ones are shared
    assert relus_o > relus_s


def test_proxies_see_each_ops_own_relu_on_a_supernet():
    """``module_calls`` (every proxy's forward) turns the sharing off, so hooks on the ReLU
    modules (naswot) fire as in the reference, and turns it back on after."""
    from nas.proxies.base import module_calls

    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    seen = []
    for mixed in net.mixed_ops():
        for m in mixed.ops.modules():
            if isinstance(m, torch.nn.ReLU):
                m.register_forward_hook(lambda *_: seen.append(1))
    with torch.no_grad():
        net(torch.randn(2, 3, 8, 8), _uniform(net))
        assert not seen
        with module_calls(net):
            net(torch.randn(2, 3, 8, 8), _uniform(net))
    assert len(seen) == 3 * 6 * 2  # 3 cells, 6 edges, two ReLU-conv-BN ops each
    assert all(m.share_relu for m in net.mixed_ops())


@pytest.mark.parametrize("k", [1, 2])
def test_a_step_under_bf16_autocast_gives_float32_weight_gradients(k):
    """``nas-search amp=bf16``: the op outputs are bf16, the mixing weights float32; the
    weighted sum's backward returns the weights' gradient in their own dtype (it raised before)."""
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10, partial_channels=k)
    w = {ct: torch.full(s, 1.0 / s[1], requires_grad=True) for ct, s in net.arch_shapes().items()}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = net(torch.randn(2, 3, 8, 8), w)
    assert out.dtype == torch.bfloat16
    out.float().square().sum().backward()
    g = w["cell"].grad
    assert g is not None and g.dtype == torch.float32 and bool(torch.isfinite(g).all())
    assert float(g.abs().sum()) > 0


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_the_mixing_weight_gradient_of_half_precision_outputs_is_summed_in_float32(layout):
    """A mixing weight's gradient is a dot product of two bf16 tensors of a million elements
    (an NB201 edge at batch 64): taken in float32 it is the float64 sum of the same bf16
    values to float32 rounding (bf16's own dot rounds it to 8 bits)."""
    from nas.supernet.mixed_op import weighted_sum

    g = torch.Generator().manual_seed(0)
    ys = [
        torch.randn(64, 16, 32, 32, generator=g).bfloat16().contiguous(memory_format=layout)
        for _ in range(2)
    ]
    w = torch.tensor([0.3, 0.7], requires_grad=True)
    upstream = torch.randn(64, 16, 32, 32, generator=g).bfloat16().contiguous(memory_format=layout)
    weighted_sum(None, w, [0, 1], ys).backward(upstream)
    exact = torch.stack([(upstream.double() * y.double()).sum() for y in ys])
    assert w.grad is not None and w.grad.dtype == torch.float32
    torch.testing.assert_close(w.grad.double(), exact, rtol=1e-5, atol=1e-3)


# ---------------------------------------------------------- ops of weight zero (issue 31)


def _weights_with_zeros(net, dtype=torch.float64):
    """Positive weights on the simplex with exact zeros on every edge (two ops of each, in
    turn over the edges, so every op of the space has weight 0 somewhere)."""
    g = torch.Generator().manual_seed(1)
    out = {}
    for ct, (edges, ops) in net.arch_shapes().items():
        w = torch.rand(edges, ops, generator=g, dtype=dtype) + 0.1
        for e in range(edges):
            w[e, e % (ops - 1) + 1] = 0.0
            w[e, (e + 3) % (ops - 1) + 1] = 0.0
        out[ct] = w / w.sum(-1, keepdim=True)
    return out


def _reference_logits(net, x, weights):
    """``sum_k w_k * op_k(x)`` over every unmasked op of every edge, written module by module
    from the supernet's own modules (stem and head through run_prefix / run_suffix)."""

    def edge(mixed, h, w_O, mask_O):
        terms = [
            w_O[k] * op(h)
            for k, (name, op) in enumerate(zip(mixed.op_names, mixed.ops))
            if name != "none" and mask_O[k]  # none: w * 0; masked: absent
        ]
        return sum(terms[1:], terms[0])

    def cell_nodes(cell, states, w_EO, mask_EO):
        for edges in cell.edges_into:
            states.append(
                sum(edge(cell.ops[e], states[cell.edge_src[e]], w_EO[e], mask_EO[e]) for e in edges)
            )
        return states

    state = net.run_prefix(x, weights, 0)
    if isinstance(net, DartsSupernet):
        s0, s1 = state
        for cell in net.cells:
            ct = cell.cell_type
            states = [cell.preprocess0(s0), cell.preprocess1(s1)]
            states = cell_nodes(cell, states, weights[ct], net.op_mask(ct).tolist())
            s0, s1 = s1, torch.cat(states[cell.num_input_nodes :], dim=1)
        state = (s0, s1)
    else:
        for cell in net.cells:
            if hasattr(cell, "edges_into"):
                state = cell_nodes(cell, [state], weights["cell"], net.op_mask("cell").tolist())[-1]
            else:
                state = cell(state)
    return net.run_suffix(state, weights, len(net.cells))


def _zero_weight_op_params(net, weights):
    """The parameters and batch norms of the unmasked ops whose weight is exactly zero."""
    params, bns = [], []
    for cell in net.cells:
        if not hasattr(cell, "edges_into"):
            continue
        ct = getattr(cell, "cell_type", "cell")
        w, mask = weights[ct], net.op_mask(ct)
        for e, mixed in enumerate(cell.ops):
            for k, op in enumerate(mixed.ops):
                if float(w[e, k]) == 0 and bool(mask[e, k]):
                    params += list(op.parameters())
                    bns += [m for m in op.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    return params, bns


@pytest.mark.parametrize("space", ["nb201", "darts"])
def test_zero_weight_ops_run_as_the_reference_sum_over_every_op(space):
    """``zero_weight_ops_run``: loss, every parameter's gradient and the mixing weights'
    gradients equal those of the plain ``sum_k w_k * op_k(x)`` (float64), with exact zeros in
    the weights; the zero-weight ops' parameters get zero gradients, so SGD's weight decay and
    momentum move them, and their batch norms update their running statistics. Off: skipped
    (no gradient, no step, no statistics), the mixing weights' zeros get no gradient."""
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    net = net.double()
    ct0 = next(iter(net.arch_shapes()))
    mask = net.op_mask(ct0).clone()
    mask[0, -1] = False  # a masked op (with a non-zero weight) never runs, either way
    net.set_op_mask(ct0, mask)
    state0 = {k: v.clone() for k, v in net.state_dict().items()}
    w0 = _weights_with_zeros(net)
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64)
    y = torch.tensor([0, 3, 5, 9])
    params = list(net.parameters())
    zero_params, zero_bns = _zero_weight_op_params(net, w0)
    assert zero_params and zero_bns

    # the reference: every unmasked op's output times its weight
    w_ref = {ct: t.clone().requires_grad_() for ct, t in w0.items()}
    loss_ref = torch.nn.functional.cross_entropy(_reference_logits(net, x, w_ref), y)
    g_ref = torch.autograd.grad(loss_ref, [*params, *w_ref.values()], allow_unused=True)

    for run in (True, False):
        net.load_state_dict(state0)
        net.zero_weight_ops_run = run
        net.zero_grad(set_to_none=True)
        w = {ct: t.clone().requires_grad_() for ct, t in w0.items()}
        loss = torch.nn.functional.cross_entropy(net(x, w), y)
        loss.backward()
        if run:
            torch.testing.assert_close(loss, loss_ref, rtol=1e-12, atol=1e-12)
            for p, g in zip([*params, *w.values()], g_ref):
                got = p.grad
                assert (got is None) == (g is None)  # None: the masked op's parameters only
                if g is not None:
                    torch.testing.assert_close(got, g, rtol=1e-9, atol=1e-12)
            assert all(p.grad is not None and not p.grad.any() for p in zero_params)
            for ct, t in w.items():  # zero entries get <dL/do, o_k(x)>, not 0
                zero = (w0[ct] == 0) & net.op_mask(ct)
                assert t.grad[zero].abs().min() > 0
        else:
            assert all(p.grad is None for p in zero_params)
            for ct, t in w.items():
                assert not t.grad[w0[ct] == 0].any()
            # the ops that ran give the same loss: a zero weight adds nothing to the forward
            torch.testing.assert_close(loss, loss_ref, rtol=1e-12, atol=1e-12)
        moved_stats = [not torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))
                       for bn in zero_bns]  # fmt: skip
        assert all(moved_stats) if run else not any(moved_stats)
        before = [p.detach().clone() for p in zero_params]
        torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=3e-4).step()
        moved = [not torch.equal(p, b) for p, b in zip(zero_params, before)]
        assert all(moved) if run else not any(moved)


def test_zero_weight_ops_are_skipped_without_training_or_autograd():
    """Under ``zero_weight_ops_run`` a zero-weight op runs in training mode or under autograd;
    in eval mode without autograd it could change nothing, so it is skipped; masks always."""
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    net.zero_weight_ops_run = True
    w = _uniform(net)
    w["cell"][:, 3] = 0.0  # nor_conv_3x3 weight zero on every edge
    mask = torch.ones(6, 5, dtype=torch.bool)
    mask[:, 2] = False  # nor_conv_1x1 masked on every edge
    net.set_op_mask("cell", mask)
    assert net.active_ops(w)["cell"] == mask.tolist()
    ran = []
    for mixed in net.mixed_ops():
        for name, op in zip(mixed.op_names, mixed.ops):
            # the op's own forward, or its layers after the cell's shared ReLU
            last = list(op.modules())[-1]
            last.register_forward_hook(lambda m, i, o, name=name: ran.append(name))
    x = torch.randn(2, 3, 8, 8)
    net(x, w)
    assert set(ran) == {"skip_connect", "nor_conv_3x3", "avg_pool_3x3"}
    net.eval()
    net(x, w)  # eval mode with autograd (SDARTS-ADV's attack): still runs
    assert ran.count("nor_conv_3x3") == 2 * 3 * 6
    ran.clear()
    with torch.no_grad():
        net(x, w)
    assert set(ran) == {"skip_connect", "avg_pool_3x3"}


def test_proxies_score_a_supernet_with_its_zero_weight_ops_skipped():
    """``module_calls`` (every proxy's forward) turns ``zero_weight_ops_run`` off, so a
    search that set it (SDARTS, SNAS) is scored as any other, and turns it back on after."""
    from nas.proxies.base import module_calls

    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    net.zero_weight_ops_run = True
    with module_calls(net):
        assert not net.zero_weight_ops_run
    assert net.zero_weight_ops_run
