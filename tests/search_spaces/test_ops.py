import pytest
import torch
from torch import nn

from search_spaces.ops import (
    DARTS_OPS,
    NB201_OPS,
    OPS,
    BatchNorm2d,
    FactorizedReduce,
    Identity,
    Zero,
    build_op,
)

ALL_OPS = sorted(OPS)


@pytest.mark.parametrize("name", ALL_OPS)
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("affine", [True, False])
def test_every_op_shape(name, stride, affine):
    op = build_op(name, 8, 8, stride, affine=affine)
    x = torch.randn(2, 8, 16, 16)
    y = op(x)
    assert y.shape == (2, 8, 16 // stride, 16 // stride)


def test_op_lists_are_the_papers():
    assert DARTS_OPS == (
        "none", "max_pool_3x3", "avg_pool_3x3", "skip_connect",
        "sep_conv_3x3", "sep_conv_5x5", "dil_conv_3x3", "dil_conv_5x5",
    )  # fmt: skip
    assert NB201_OPS == ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")


@pytest.mark.parametrize("stride", [1, 2])
def test_none_has_no_parameters_and_no_graph(stride):
    op = build_op("none", 8, 8, stride)
    assert isinstance(op, Zero)
    assert sum(p.numel() for p in op.parameters()) == 0
    x = torch.randn(2, 8, 7, 7, requires_grad=True)
    y = op(x)
    assert y.shape == (2, 8, 7 if stride == 1 else 4, 7 if stride == 1 else 4)
    assert not y.requires_grad and y.grad_fn is None  # it computed nothing from x
    assert torch.count_nonzero(y) == 0


def test_skip_connect_is_identity_then_factorized_reduce():
    assert isinstance(build_op("skip_connect", 8, 8, 1), Identity)
    fr = build_op("skip_connect", 8, 8, 2)
    assert isinstance(fr, FactorizedReduce)
    # two 1x1 convs of C/2 channels, the second shifted by one pixel, then BN
    assert fr.conv_1.out_channels == fr.conv_2.out_channels == 4
    x = torch.randn(1, 8, 8, 8)
    fr.eval()
    with torch.no_grad():
        ref = fr.bn(torch.cat([fr.conv_1(x.relu()), fr.conv_2(x.relu()[:, :, 1:, 1:])], 1))
    assert torch.allclose(fr(x), ref)


def _layers(op):
    return [m for m in op.modules() if not isinstance(m, nn.Sequential)]


def test_sep_conv_structure_is_applied_twice():
    op = build_op("sep_conv_5x5", 6, 6, 2, affine=False)
    kinds = [type(m).__name__ for m in _layers(op)]
    assert kinds == ["ReLU", "Conv2d", "Conv2d", "BatchNorm2d"] * 2
    convs = [m for m in op.modules() if isinstance(m, nn.Conv2d)]
    assert [c.stride[0] for c in convs] == [2, 1, 1, 1]
    assert [c.padding[0] for c in convs] == [2, 0, 2, 0]
    assert [c.groups for c in convs] == [6, 1, 6, 1]
    assert all(c.bias is None for c in convs)
    assert all(not b.affine for b in op.modules() if isinstance(b, nn.BatchNorm2d))


@pytest.mark.parametrize(("name", "k", "pad"), [("dil_conv_3x3", 3, 2), ("dil_conv_5x5", 5, 4)])
def test_dil_conv_structure(name, k, pad):
    op = build_op(name, 6, 6, 1)
    convs = [m for m in op.modules() if isinstance(m, nn.Conv2d)]
    assert convs[0].kernel_size == (k, k) and convs[0].dilation == (2, 2)
    assert convs[0].padding == (pad, pad) and convs[0].groups == 6
    assert convs[1].kernel_size == (1, 1)


def test_pools_match_reference():
    avg = build_op("avg_pool_3x3", 4, 4, 1)
    assert isinstance(avg, nn.AvgPool2d) and avg.count_include_pad is False
    assert isinstance(build_op("max_pool_3x3", 4, 4, 2), nn.MaxPool2d)


def test_nb201_conv_has_bias_only_without_affine():
    conv = [m for m in build_op("nor_conv_3x3", 4, 4, 1, affine=True) if isinstance(m, nn.Conv2d)]
    assert conv[0].bias is None
    conv = [m for m in build_op("nor_conv_3x3", 4, 4, 1, affine=False) if isinstance(m, nn.Conv2d)]
    assert conv[0].bias is not None


def test_noise_is_standard_normal_of_input_shape():
    torch.manual_seed(0)
    y = build_op("noise", 4, 4, 2)(torch.zeros(64, 4, 16, 16))
    assert y.shape == (64, 4, 8, 8)
    assert abs(y.mean().item()) < 0.02 and abs(y.std().item() - 1) < 0.02


def test_bad_op_arguments():
    with pytest.raises(ValueError, match="unknown operation 'conv_9x9'"):
        build_op("conv_9x9", 4, 4, 1)
    with pytest.raises(ValueError, match="stride must be 1 or 2"):
        build_op("sep_conv_3x3", 4, 4, 3)


@pytest.mark.parametrize("C", [4, 12])
@pytest.mark.parametrize("affine", [True, False])
def test_narrow_nhwc_batch_norm_is_the_nchw_kernels_bit_for_bit(C, affine):
    # ops.BatchNorm2d normalises a narrow channels-last input as an NCHW copy: output,
    # input gradient, parameter gradients and running statistics equal nn.BatchNorm2d's on
    # NCHW data exactly, and the output stays NHWC
    torch.manual_seed(0)
    x = torch.randn(8, C, 12, 12) * 3 + 1
    g = torch.randn_like(x)
    ours, ref = BatchNorm2d(C, affine=affine), nn.BatchNorm2d(C, affine=affine)
    if affine:
        with torch.no_grad():
            for m in (ours, ref):
                m.weight.copy_(torch.linspace(0.5, 2.0, C))
                m.bias.copy_(torch.linspace(-1.0, 1.0, C))
    xr = x.clone().requires_grad_()
    xo = x.contiguous(memory_format=torch.channels_last).requires_grad_()
    out_ref, out = ref(xr), ours(xo)
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    assert torch.equal(out, out_ref)
    out_ref.backward(g)
    out.backward(g.contiguous(memory_format=torch.channels_last))
    assert torch.equal(xo.grad, xr.grad)
    assert torch.equal(ours.running_mean, ref.running_mean)
    assert torch.equal(ours.running_var, ref.running_var)
    if affine:
        assert torch.equal(ours.weight.grad, ref.weight.grad)
        assert torch.equal(ours.bias.grad, ref.bias.grad)
    ours.eval(), ref.eval()
    assert torch.equal(ours(xo.detach()), ref(x))


def test_wide_or_nchw_batch_norm_is_nn_batch_norm():
    torch.manual_seed(0)
    for C, nhwc in [(16, True), (4, False)]:
        x = torch.randn(4, C, 6, 6)
        if nhwc:
            x = x.contiguous(memory_format=torch.channels_last)
        out, ref = BatchNorm2d(C)(x), nn.BatchNorm2d(C)(x)
        assert torch.equal(out, ref) and out.stride() == ref.stride()


def test_ops_use_the_narrow_batch_norm():
    for name in ("sep_conv_3x3", "dil_conv_5x5", "skip_connect"):
        op = build_op(name, 4, 4, 2, affine=False)
        assert any(isinstance(m, BatchNorm2d) for m in op.modules()), name
