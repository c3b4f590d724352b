import pytest
import torch

from nas.summary import count_parameters, summarize
from search_spaces import published_genotype, published_names
from search_spaces.darts import NetworkCIFAR, NetworkImageNet, drop_path
from search_spaces.reference_forward import reference_forward


def test_darts_v2_cifar_has_the_reference_parameter_count():
    model = NetworkCIFAR(36, 10, 20, True, "DARTS_V2")
    assert count_parameters(model) == 3_349_342  # quark0/darts, auxiliary head excluded
    assert count_parameters(model, include_auxiliary=True) > 3_349_342


@pytest.mark.parametrize("name", published_names())
def test_every_published_genotype_builds_and_trains(name):
    torch.manual_seed(0)
    model = NetworkCIFAR(8, 10, 5, True, published_genotype(name))
    model.drop_path_prob = 0.2
    model.train()
    x = torch.randn(2, 3, 32, 32)
    logits, logits_aux = model(x)
    assert logits.shape == (2, 10) and logits_aux is not None and logits_aux.shape == (2, 10)
    (logits.sum() + 0.4 * logits_aux.sum()).backward()  # drop-path must not break autograd
    assert all(p.grad is not None for n, p in model.named_parameters() if "classifier" in n)
    model.eval()
    logits, logits_aux = model(x)
    assert logits_aux is None


def test_genotype_may_be_text_or_object():
    g = published_genotype("DrNAS_cifar10")
    a = NetworkCIFAR(8, 10, 5, False, g)
    b = NetworkCIFAR(8, 10, 5, False, str(g))
    assert count_parameters(a) == count_parameters(b)
    with pytest.raises(ValueError, match="expected a DARTS-style genotype"):
        NetworkCIFAR(8, 10, 5, False, "|none~0|+|none~0|none~1|+|none~0|none~1|none~2|")


def test_reduction_cells_and_auxiliary_position():
    model = NetworkCIFAR(8, 10, 8, True, "DARTS_V2")
    assert [i for i, c in enumerate(model.cells) if c.reduction] == [2, 5]
    # the auxiliary head reads cell 2*layers//3 = 5 (reduction output, 4 * 4C channels)
    assert model.auxiliary_head.features[2].in_channels == 4 * 32


def test_imagenet_network():
    model = NetworkImageNet(48, 1000, 14, True, "DARTS_V2")
    assert count_parameters(model) == 4_718_752
    # the ImageNet auxiliary head has no BN after its 768-channel conv
    bns = [m for m in model.auxiliary_head.features if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(bns) == 1
    small = NetworkImageNet(8, 5, 5, True, "DARTS_V2").train()
    logits, aux = small(torch.randn(2, 3, 224, 224))
    assert logits.shape == (2, 5) and aux.shape == (2, 5)


def test_drop_path_is_per_sample_and_not_in_place():
    torch.manual_seed(0)
    x = torch.ones(10000, 2, 2, 2, requires_grad=True)
    y = drop_path(x, 0.3)
    assert torch.equal(x.detach(), torch.ones_like(x))  # input untouched
    kept = (y[:, 0, 0, 0] != 0).float()
    assert abs(kept.mean().item() - 0.7) < 0.02
    assert torch.allclose(y[kept.bool()], torch.full_like(y[kept.bool()], 1 / 0.7))
    per_sample = y.flatten(1)
    assert torch.all((per_sample == 0).all(1) | (per_sample != 0).all(1))
    y.sum().backward()
    assert drop_path(x, 0.0) is x


def test_summary_counts_macs():
    s = summarize(NetworkCIFAR(36, 10, 20, True, "DARTS_V2"), (3, 32, 32))
    assert s.params_without_aux == 3_349_342
    # stem conv alone: 32*32 outputs x 108 channels x 3*3*3 = 2,985,984 MACs; whole net ~0.53G
    assert s.macs == 528_359_040  # the count of the reference-style (module by module) forward
    linear_only = summarize(
        torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 5)), (3, 2, 2)
    )
    assert linear_only.macs == 60


@pytest.mark.parametrize("network", ["cifar", "imagenet"])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_forward_and_gradients_equal_the_reference_formulation(network, layout, monkeypatch):
    """Shared ReLUs, the even/odd-pixel FactorizedReduce, the fused concat (+ ReLU), dense
    concat gradients and drop-path folded into the node sums compute the reference's function
    (``reference_forward``): in float64 the outputs and every parameter's gradient agree to
    rounding (1e-10 relative), with drop-path on and the auxiliary head."""
    import search_spaces.darts as darts

    torch.manual_seed(0)
    if network == "cifar":
        net = NetworkCIFAR(8, 10, 5, True, "DARTS_V2")
        x = torch.randn(3, 3, 32, 32)
    else:
        net = NetworkImageNet(8, 10, 5, True, "DARTS_V2")
        x = torch.randn(3, 3, 224, 224)
    net = net.double().to(memory_format=layout)
    x = x.double().contiguous(memory_format=layout)
    net.drop_path_prob = 0.3
    net.train()

    masks: list[torch.Tensor] = []
    real_scale = darts.drop_path_scale

    def recording_scale(h, p):
        scale = real_scale(h, p)
        masks.append((scale != 0).to(h.dtype))
        return scale

    monkeypatch.setattr(darts, "drop_path_scale", recording_scale)
    state = {k: v.clone() for k, v in net.state_dict().items()}
    logits, aux = net(x)
    (logits.square().sum() + aux.square().sum()).backward()
    ours = [p.grad.clone() for p in net.parameters()]
    assert masks and any(m.sum() < len(m) for m in masks)  # drop-path did drop samples

    net.load_state_dict(state)  # BN running statistics as before our forward
    net.zero_grad()
    drawn = iter(masks)
    ref_logits, ref_aux = reference_forward(net, x, mask=lambda h, p: next(drawn))
    (ref_logits.square().sum() + ref_aux.square().sum()).backward()
    torch.testing.assert_close(logits, ref_logits, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(aux, ref_aux, rtol=1e-10, atol=1e-12)
    for (name, p), g in zip(net.named_parameters(), ours, strict=True):
        scale = p.grad.abs().max().item() + 1e-30
        assert (g - p.grad).abs().max().item() <= 1e-10 * scale, name
