"""The ProxylessNAS family: its space, genotypes, released networks, supernet and a tiny search.

The reference figures were measured by running the reference code at float64 on a CPU:
mit-han-lab/proxylessnas ``search/`` (``SuperProxylessNASNets`` with the defaults of
``imagenet_arch_search.py``; ``ProxylessNASNets.build_from_config`` on han-cai/files
``proxylessnas/<name>.config``; its ``count_parameters`` and ``get_flops``). The released
networks also give the reference's outputs bit for bit at float64 with the same weights
(checked beside the reference; the reference is not a dependency of the tests).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
import torch

from nas.hardware.parts import network_layout
from nas.selection.base import derive_genotype
from nas.summary import count_macs, count_parameters
from nas.supernet import build_supernet
from search_spaces import get_space, parse_genotype, resolve_genotype
from search_spaces.families import family_of, family_of_network
from search_spaces.genotype import ProxylessGenotype, genotype_from_json
from search_spaces.proxyless_space import MBCONV_OPS, PROXYLESS_OPS, make_divisible

MOBILE = resolve_genotype("proxyless_mobile")
ALL_K3E3 = ProxylessGenotype((MBCONV_OPS[0],) * 21)


# ---------------------------------------------------------------------------------- the space


@pytest.mark.parametrize("name", ["proxyless", "proxyless_cifar"])
def test_the_space_is_the_reference_chain(name):
    space = get_space(name)
    chain = space.cells["blocks"]
    assert space.family == "proxyless" and space.cell_types == ("blocks",)
    assert chain.num_edges == 21 and chain.num_ops == 7
    assert [(e.src, e.dst) for e in chain.edges] == [(i, i + 1) for i in range(21)]
    assert all(e.ops == PROXYLESS_OPS for e in chain.edges) and PROXYLESS_OPS[-1] == "none"
    # 15 skippable blocks: every stage's blocks but its first (the last stage has one block)
    assert sum(chain.skippable) == 15
    assert [i for i, s in enumerate(chain.skippable) if not s] == [0, 4, 8, 12, 16, 20]
    assert chain.widths == (24, 40, 80, 96, 192, 320) and chain.depths == (4, 4, 4, 4, 4, 1)
    cifar = name == "proxyless_cifar"
    assert chain.strides == ((1,) if cifar else (2,)) + (2, 2, 1, 2, 1)
    assert chain.stem_stride == (1 if cifar else 2)


def test_make_divisible_is_the_reference_rounding():
    assert [make_divisible(v) for v in (32 * 1.4, 16 * 1.4, 24 * 1.4, 1280 * 1.4)] == [
        48,
        24,
        32,
        1792,
    ]
    assert make_divisible(10) == 16  # round down by more than 10 %: up once more
    assert make_divisible(3) == 8


# ---------------------------------------------------------------------------------- genotypes


def test_genotype_text_and_json_round_trip():
    for g in (MOBILE, ALL_K3E3, resolve_genotype("proxyless_gpu")):
        text = g.text()
        assert text.startswith(ProxylessGenotype.text_start) and " " not in text
        assert parse_genotype(text) == g and str(g) == text
        assert ProxylessGenotype.from_text(text) == g
        data = json.loads(json.dumps(g.to_json()))
        assert data["type"] == "proxyless" and genotype_from_json(data) == g
        assert genotype_from_json(json.dumps(data)) == g
        assert parse_genotype(json.dumps(data), space="proxyless_cifar") == g
    assert "widths" not in ALL_K3E3.to_json() and "@" not in ALL_K3E3.text()
    assert MOBILE.widths == (32, 16, 32, 40, 80, 96, 192, 320, 1280)


def test_genotype_structure_and_drawing():
    g = MOBILE
    assert g.edges("blocks")[:3] == [("5x5_MBConv3", 0, 1), ("3x3_MBConv3", 1, 2), ("none", 2, 3)]
    assert g.output_nodes("blocks") == (21,)
    nodes, edges = g.drawing("blocks")
    assert len(nodes) == 22 and nodes[0] == ("0", "input") and nodes[-1] == ("21", "output")
    assert len(edges) == 21
    positions = ProxylessGenotype.layout(nodes)
    assert len(set(positions.values())) == 22
    with pytest.raises(ValueError, match="one cell type 'blocks', not 'normal'"):
        g.edges("normal")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ProxylessGenotype(("3x3_MBConv3",) * 20), "expected 21 ops, got 20"),
        (
            lambda: ProxylessGenotype(("3x3_MBConv3",) * 20 + ("9x9_MBConv3",)),
            "block 20: unknown operation '9x9_MBConv3'; expected one of 3x3_MBConv3, ",
        ),
        (
            lambda: ProxylessGenotype(("none",) + ("3x3_MBConv3",) * 20),
            "block 0: 'none' \\(skip the block\\) is not allowed there",
        ),
        (
            lambda: ProxylessGenotype(("3x3_MBConv3",) * 21, (32, 16)),
            "expected 9 \\(stem, first block, 6 stages, feature mix\\), got 2",
        ),
        (lambda: parse_genotype("proxyless:"), "malformed ProxylessNAS genotype"),
        (lambda: parse_genotype("proxyless:a--b"), "malformed ProxylessNAS genotype"),
        (lambda: parse_genotype(ALL_K3E3.text() + "@3x"), "malformed ProxylessNAS widths"),
        (lambda: genotype_from_json({"type": "proxyless"}), 'needs "ops": \\[op, ...\\]'),
        (lambda: ALL_K3E3.validate(get_space("nb201")), "cannot be used with space 'nb201'"),
    ],
)
def test_genotype_refusals_are_one_line(make, message):
    with pytest.raises(ValueError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


def test_published_names_resolve():
    names = ["proxyless_gpu", "proxyless_cpu", "proxyless_mobile", "proxyless_mobile_14"]
    for name in names:
        g = resolve_genotype(name)
        assert isinstance(g, ProxylessGenotype) and family_of(g).name == "proxyless"
    with pytest.raises(ValueError, match="unknown published genotype 'proxyless_tpu'"):
        resolve_genotype("proxyless_tpu")


# ------------------------------------------------------------------ networks, exact figures

# (parameters, conv + linear multiply-accumulates at 224x224, 1000 classes): the reference's
# count_parameters (every parameter) and get_flops; nas.summary counts the same
RELEASED = {
    "proxyless_mobile": (4_080_512, 320_427_584),
    "proxyless_gpu": (7_119_848, 465_260_160),
    "proxyless_cpu": (4_361_648, 439_243_864),
    "proxyless_mobile_14": (6_857_568, 580_883_408),
}


@pytest.mark.parametrize("name", list(RELEASED))
def test_released_networks_have_the_reference_counts(name):
    family = family_of(resolve_genotype(name))
    net, spec = family.network(
        resolve_genotype(name), C=32, layers=21, num_classes=1000, image_size=224
    )
    assert (count_parameters(net), count_macs(net, spec.input_size)) == RELEASED[name]
    assert spec.family == "ProxylessNetwork" and family_of_network(net) is family


def test_network_blocks_shortcuts_and_bn():
    net, _ = family_of(MOBILE).network(MOBILE, C=32, layers=21, num_classes=1000, image_size=224)
    blocks = net.blocks
    assert len(blocks) == 22 and blocks[0].conv.inverted_bottleneck is None  # expansion 1
    assert blocks[3].conv is None and blocks[3].residual  # a skipped block passes x on
    assert not blocks[1].residual and blocks[2].residual
    bn = net.first_conv.bn
    assert (bn.momentum, bn.eps) == (0.1, 1e-3) and net.first_conv.conv.stride == (2, 2)
    with pytest.raises(ValueError, match="keeps 6, 11, 16, 21 searchable blocks .*; got blocks=5"):
        family_of(MOBILE).network(MOBILE, C=32, layers=5, num_classes=10)


def test_a_smaller_depth_skips_each_stages_last_blocks():
    family = family_of(ALL_K3E3)
    chain = get_space("proxyless").cells["blocks"]
    assert chain.kept(3) == tuple(i < 3 for d in (4, 4, 4, 4, 4, 1) for i in range(d))
    shallow, spec = family.network(ALL_K3E3, C=8, layers=3, num_classes=10, image_size=32)
    skipped = ProxylessGenotype(
        tuple(op if keep else "none" for op, keep in zip(ALL_K3E3.ops, chain.kept(3)))
    )
    full, _ = family.network(skipped, C=8, layers=21, num_classes=10, image_size=32)
    assert count_parameters(shallow) == count_parameters(full) and str(spec).endswith("blocks=3)")
    same, _ = family.network(ALL_K3E3, C=8, layers=16, num_classes=10, image_size=32)
    assert count_parameters(same) == count_parameters(shallow)  # 16 blocks: 3 per stage
    net = build_supernet("proxyless_cifar", C=4, layers=3, num_classes=10)
    mask = net.op_mask("blocks")
    dropped = [i for i, keep in enumerate(chain.kept(3)) if not keep]
    assert dropped == [3, 7, 11, 15, 19]
    assert all(mask[i].tolist() == [False] * 6 + [True] for i in dropped)
    out = net(torch.randn(2, 3, 32, 32), {"blocks": torch.full((21, 7), 1 / 7)})
    assert out.shape == (2, 10)


def test_cifar_network_forward_backward_and_hooks():
    torch.manual_seed(0)
    family = family_of(ALL_K3E3)
    net, spec = family.network(ALL_K3E3, C=8, layers=21, num_classes=10, image_size=32)
    assert net.first_conv.conv.stride == (1, 1) and spec.input_size == (3, 32, 32)
    x = torch.randn(2, 3, 32, 32)
    logits, aux = family.logits(net(x))
    assert logits.shape == (2, 10) and aux is None
    logits.sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    features = family.features(net, x)
    assert features.shape == (2, 1280, 4, 4)  # 32 -> 4: three halvings
    net.eval()
    assert torch.equal(family.reference_logits(net, x), net(x))


def test_derive_random_and_kept_edges():
    family = family_of(get_space("proxyless"))
    space = get_space("proxyless_cifar")
    w = torch.zeros(21, 7)
    w[:, 6] = 1.0  # `none` strongest everywhere: only the skippable blocks take it
    w[:, 3] = 0.5
    masks = {"blocks": torch.ones(21, 7, dtype=torch.bool)}
    g = derive_genotype(space, {"blocks": w}, masks)
    chain = space.cells["blocks"]
    assert [op == "none" for op in g.ops] == list(chain.skippable)
    assert all(op == "5x5_MBConv6" for op, s in zip(g.ops, chain.skippable) if not s)
    kept = {"blocks": g.edges("blocks")}
    assert family.genotype(space, kept) == g
    with pytest.raises(ValueError, match="one op on each of its 21 blocks; got 20"):
        family.genotype(space, {"blocks": g.edges("blocks")[:20]})
    sample = family.random_genotypes(space, 5, random.Random(0))
    assert len(set(sample)) == 5 and all(isinstance(s, ProxylessGenotype) for s in sample)


def test_latency_layout_parts_build_with_the_network_parameters():
    layout = network_layout("proxyless_cifar", C=8, layers=21, image_size=32, num_classes=10)
    fixed = sum(count_parameters(p.build()) * n for p, n in layout.fixed)
    chosen = sum(
        count_parameters(p.build()) * n
        for ops in layout.choices["blocks"]
        for p, n in ops[0]  # 3x3_MBConv3 on every block
    )
    net, _ = family_of(ALL_K3E3).network(ALL_K3E3, C=8, layers=21, num_classes=10, image_size=32)
    assert fixed + chosen == count_parameters(net)
    assert all(not ops[6] for ops in layout.choices["blocks"])  # `none` adds nothing


# -------------------------------------------------------------------------------- supernet


def test_supernet_has_the_reference_weight_count():
    # SuperProxylessNASNets: 16,034,450 parameters, of which 282 are AP_path_alpha and
    # AP_path_wb (141 each: 6 blocks x 6 ops + 15 x 7); weight_parameters() 16,034,168
    net = build_supernet("proxyless", C=32, layers=21, num_classes=1000)
    assert sum(p.numel() for p in net.parameters()) == 16_034_168
    mask = net.op_mask("blocks")
    assert int(mask.sum()) == 141 and net.arch_shapes() == {"blocks": (21, 7)}


def test_supernet_forward_backward_and_masked_none():
    torch.manual_seed(0)
    net = build_supernet("proxyless_cifar", C=4, layers=21, num_classes=10)
    w = torch.softmax(torch.randn(21, 7), -1).requires_grad_()
    out = net(torch.randn(2, 3, 32, 32), {"blocks": w})
    out.sum().backward()
    assert out.shape == (2, 10) and w.grad is not None
    skippable = torch.tensor(get_space("proxyless_cifar").cells["blocks"].skippable)
    assert torch.equal(net.op_mask("blocks")[:, 6], skippable)
    with pytest.raises(ValueError, match="partial channels \\(K=2\\) are not available"):
        build_supernet("proxyless_cifar", C=8, layers=21, num_classes=10, partial_channels=2)
    with pytest.raises(ValueError, match="keeps 6, 11, 16, 21 searchable blocks .*; got blocks=7"):
        build_supernet("proxyless_cifar", C=8, layers=7, num_classes=10)


@pytest.mark.slow
def test_tiny_search_through_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "nas.cli.search", "space=proxyless_cifar", "search=darts",
        "space.C=4", "batch_size=8", "data.max_items=16", "epochs=1", "eval=false",
        "figures=false", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ), timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads((run_dir / "genotype.json").read_text())
    assert record["space"] == "proxyless_cifar" and record["genotype"]["type"] == "proxyless"
    g = parse_genotype(record["text"], space="proxyless_cifar")
    assert isinstance(g, ProxylessGenotype)


def test_networks_start_from_the_references_he_fout_initialisation():
    """Conv weights ~ N(0, 2 / (k*k*out)), BN at (1, 0), the classifier's bias 0, as the
    reference's ``init_model('he_fout')``: the sample std of the largest conv is close to it."""
    import math

    import torch
    from torch import nn

    from search_spaces import resolve_genotype
    from search_spaces.proxyless import ProxylessNetwork

    torch.manual_seed(0)
    net = ProxylessNetwork(resolve_genotype("proxyless_mobile"), num_classes=10)
    mix = net.feature_mix_layer[0]
    assert isinstance(mix, nn.Conv2d)
    expected = math.sqrt(2.0 / (mix.kernel_size[0] * mix.kernel_size[1] * mix.out_channels))
    assert abs(mix.weight.std().item() / expected - 1) < 0.02
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(bool((b.weight == 1).all()) and bool((b.bias == 0).all()) for b in bns)
    assert bool((net.classifier.bias == 0).all())
    bound = 1 / math.sqrt(net.classifier.in_features)
    assert net.classifier.weight.abs().max().item() <= bound
