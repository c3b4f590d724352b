"""The FBNet family (Wu et al., CVPR 2019): space, genotypes, published networks, supernet,
and the commands that take the networks by name.

The published networks' figures are those ``search_spaces.fbnet`` records from running
facebookresearch/mobile-vision (``fbnet_v2``'s ``fbnet_a``, ``fbnet_b``, ``fbnet_c``): every
parameter (``sum(p.numel())``), and the conv weights alone, which is what mobile-vision's own
counter reports as "params" (its "flops" add the pooling's 1504 or 1984 x 49 input elements to
the multiply-adds counted here). The reference is not a dependency of the tests.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from nas.hardware.parts import network_layout
from nas.selection.base import derive_genotype
from nas.summary import count_macs, count_parameters
from nas.supernet import build_supernet
from search_spaces import get_space, parse_genotype, resolve_genotype
from search_spaces.families import FAMILIES, family_of, family_of_network
from search_spaces.fbnet import FBNetNetwork, fbnet_network
from search_spaces.fbnet_space import (
    CONV_OPS,
    FBNET_BLOCKS,
    FBNET_OPS,
    divisible_width,
    parse_block_op,
)
from search_spaces.genotype import FBNetGenotype, genotype_from_json
from search_spaces.published import NETWORK_TEXT

CT = "fbnet_blocks"
FBNET_A = resolve_genotype("fbnet_a")
ALL_K3E3 = FBNetGenotype(("k3e3",) * 22)
# every parameter, conv + linear multiply-accumulates at 224x224 (1000 classes), conv weights
PUBLISHED = {
    "fbnet_a": (4_321_232, 244_452_664, 4_270_288),
    "fbnet_b": (4_818_216, 291_004_424, 4_766_672),
    "fbnet_c": (5_592_784, 378_136_224, 5_525_424),
}


# ---------------------------------------------------------------------------------- the space


@pytest.mark.parametrize("name", ["fbnet", "fbnet_cifar"])
def test_the_space_is_fbnets_chain(name):
    space = get_space(name)
    chain = space.cells[CT]
    assert space.family == "fbnet" and space.cell_types == (CT,) and not space.selects_inputs
    assert family_of(space) is FAMILIES["fbnet"]
    assert chain.num_edges == 22 and chain.num_ops == 9
    assert [(e.src, e.dst) for e in chain.edges] == [(i, i + 1) for i in range(22)]
    assert all(e.ops == FBNET_OPS for e in chain.edges) and FBNET_OPS[-1] == "skip"
    assert CONV_OPS == ("k3e1", "k3e1g2", "k3e3", "k3e6", "k5e1", "k5e1g2", "k5e3", "k5e6")
    assert FBNET_OPS[:-1] == CONV_OPS
    # 16 blocks keep their shape: all but each stride-2 block and the two that widen (16 -> 24
    # in the CIFAR layout, 64 -> 112, 184 -> 352)
    assert [i for i, s in enumerate(chain.skippable) if not s] == [1, 5, 9, 13, 17, 21]
    assert chain.widths == (16, 24, 32, 64, 112, 184, 352)
    assert chain.depths == (1, 4, 4, 4, 4, 4, 1)
    cifar = name == "fbnet_cifar"
    assert chain.strides == (1, 1 if cifar else 2, 2, 2, 1, 2, 1)
    assert chain.stem_stride == (1 if cifar else 2) and chain.head_width == 1984


def test_published_blocks_are_paths_of_the_chain():
    chain = get_space("fbnet").cells[CT]
    shapes = chain.block_shapes(chain.widths_at(16))
    for name, (blocks, head) in FBNET_BLOCKS.items():
        assert [(c, s) for _, c, s in blocks] == [(c, s) for _, c, s in shapes], name
        assert NETWORK_TEXT[name] == resolve_genotype(name).text()
        assert head in (1504, 1984)
    assert NETWORK_TEXT["fbnet_a"].endswith("@1504") and "@" not in NETWORK_TEXT["fbnet_b"]


def test_widths_round_as_mobile_vision():
    chain = get_space("fbnet_cifar").cells[CT]
    w = chain.widths_at(4)  # a quarter: the CPU config's width
    assert (w.stem, w.stages, w.head) == (8, (8, 8, 8, 16, 32, 48, 88), 496)
    assert chain.widths_at(16, 1504).head == 1504 and chain.widths_at(32).stages[-1] == 704
    assert [divisible_width(v) for v in (4, 12, 28, 46, 1, 8.9)] == [8, 16, 32, 48, 8, 8]
    assert parse_block_op("k5e1g2") == (5, 1, 2) and parse_block_op("k3e6") == (3, 6, 1)
    with pytest.raises(ValueError, match="'skip' is not an FBNet block op"):
        parse_block_op("skip")


# ---------------------------------------------------------------------------------- genotypes


def test_genotype_text_and_json_round_trip():
    for g in (FBNET_A, ALL_K3E3, resolve_genotype("fbnet_c")):
        text = g.text()
        assert text.startswith(FBNetGenotype.text_start) and " " not in text
        assert parse_genotype(text) == g and str(g) == text
        assert FBNetGenotype.from_text(text) == g
        data = json.loads(json.dumps(g.to_json()))
        assert data["type"] == "fbnet" and genotype_from_json(data) == g
        assert genotype_from_json(json.dumps(data)) == g
        assert parse_genotype(json.dumps(data), space="fbnet_cifar") == g
    assert FBNET_A.head == 1504 and FBNET_A.to_json()["head"] == 1504
    assert "head" not in ALL_K3E3.to_json() and "@" not in ALL_K3E3.text()
    assert FBNetGenotype(ALL_K3E3.ops, 1984) == ALL_K3E3  # the space's own width: none carried
    assert parse_genotype(ALL_K3E3.text() + "@1984") == ALL_K3E3


def test_genotype_structure_and_drawing():
    g = FBNET_A
    assert g.edges(CT)[:3] == [("skip", 0, 1), ("k3e3", 1, 2), ("k3e1", 2, 3)]
    assert g.output_nodes(CT) == (22,) and g.cell_types == (CT,)
    nodes, edges = g.drawing(CT)
    assert len(nodes) == 23 and nodes[0] == ("0", "input") and nodes[-1] == ("22", "output")
    assert len(edges) == 22 and len(set(FBNetGenotype.layout(nodes).values())) == 23
    with pytest.raises(ValueError, match="one cell type 'fbnet_blocks', not 'blocks'"):
        g.edges("blocks")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FBNetGenotype(("k3e3",) * 21), "expected 22 ops, got 21"),
        (
            lambda: FBNetGenotype(("k3e3",) * 21 + ("k7e6",)),
            "block 21: unknown operation 'k7e6'; expected one of k3e1, k3e1g2, ",
        ),
        (
            lambda: FBNetGenotype(("k3e3", "skip") + ("k3e3",) * 20),
            "block 1: 'skip' is not allowed there: only a block of stride 1 with equal",
        ),
        (lambda: FBNetGenotype(ALL_K3E3.ops, 0), "expected a positive channel count"),
        (lambda: parse_genotype("fbnet:"), "malformed FBNet genotype"),
        (lambda: parse_genotype("fbnet:k3e3--k3e3"), "malformed FBNet genotype"),
        (lambda: parse_genotype(ALL_K3E3.text() + "@15x"), "malformed FBNet last-conv width"),
        (lambda: genotype_from_json({"type": "fbnet"}), 'needs "ops": \\[op, ...\\]'),
        (lambda: ALL_K3E3.validate(get_space("proxyless")), "cannot be used with space"),
        (lambda: resolve_genotype("fbnet_d"), "unknown published genotype 'fbnet_d'"),
        (lambda: fbnet_network("fbnet_d"), "unknown FBNet network 'fbnet_d'; expected one of"),
    ],
)
def test_refusals_are_one_line(make, message):
    with pytest.raises(ValueError, match=message) as info:
        make()
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------ networks, exact figures


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_networks_have_the_reference_counts(name):
    net = fbnet_network(name)
    convs = sum(m.weight.numel() for m in net.modules() if isinstance(m, torch.nn.Conv2d))
    assert (count_parameters(net), count_macs(net, (3, 224, 224)), convs) == PUBLISHED[name]
    # the same network from its genotype through the family (what nas-train, nas-summary build)
    family = family_of(resolve_genotype(name))
    built, spec = family.network(
        resolve_genotype(name), C=16, layers=22, num_classes=1000, image_size=224
    )
    assert spec.family == "FBNetNetwork" and family_of_network(built) is family
    assert {k: v.shape for k, v in built.state_dict().items()} == {
        k: v.shape for k, v in net.state_dict().items()
    }
    assert count_macs(built, spec.input_size) == PUBLISHED[name][1]


def test_network_blocks_shortcuts_and_groups():
    net = fbnet_network("fbnet_a")
    blocks = list(net.stages)[1:-1]
    assert len(blocks) == 22 and isinstance(blocks[0], torch.nn.Identity)  # skip
    assert not blocks[1].residual and blocks[2].residual and blocks[2].pw is None  # k3e1
    grouped = blocks[11]  # k5e1g2: no expansion conv, a shuffle, a grouped projection
    assert grouped.pw is None and grouped.shuffle.groups == 2 and grouped.pwl[0].groups == 2
    assert net.stages[0][0].stride == (2, 2) and net.stages[-1][0].out_channels == 1504
    assert net.stages[0][0].bias is not None and net.head.kernel_size == (1, 1)
    x = torch.arange(8.0).view(1, 8, 1, 1)
    assert grouped.shuffle(x).flatten().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    with pytest.raises(ValueError, match="keeps 7, 12, 17, 22 searchable blocks .*; got blocks=5"):
        family_of(FBNET_A).network(FBNET_A, C=16, layers=5, num_classes=10)


def test_a_smaller_depth_skips_each_stages_last_blocks():
    family = family_of(ALL_K3E3)
    chain = get_space("fbnet").cells[CT]
    assert chain.kept(1) == tuple(i < 1 for d in (1, 4, 4, 4, 4, 4, 1) for i in range(d))
    shallow, spec = family.network(ALL_K3E3, C=4, layers=7, num_classes=10, image_size=32)
    skipped = FBNetGenotype(
        tuple(op if keep else "skip" for op, keep in zip(ALL_K3E3.ops, chain.kept(1)))
    )
    full, _ = family.network(skipped, C=4, layers=22, num_classes=10, image_size=32)
    assert count_parameters(shallow) == count_parameters(full) and str(spec).endswith("blocks=7)")
    same, _ = family.network(ALL_K3E3, C=4, layers=1, num_classes=10, image_size=32)
    assert count_parameters(same) == count_parameters(shallow)


def test_cifar_network_forward_backward_and_hooks():
    torch.manual_seed(0)
    family = family_of(FBNET_A)
    net, spec = family.network(FBNET_A, C=4, layers=22, num_classes=10, image_size=32)
    assert isinstance(net, FBNetNetwork) and net.stages[0][0].stride == (1, 1)
    assert spec.input_size == (3, 32, 32) and net.widths.head == 376  # 1504 / 4
    x = torch.randn(2, 3, 32, 32)
    logits, aux = family.logits(net(x))
    assert logits.shape == (2, 10) and aux is None
    logits.sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    assert family.features(net, x).shape == (2, 376, 4, 4)  # 32 -> 4: three halvings
    net.eval()
    assert torch.equal(family.reference_logits(net, x), net(x))


def test_derive_random_and_kept_edges():
    family = FAMILIES["fbnet"]
    space = get_space("fbnet_cifar")
    w = torch.zeros(22, 9)
    w[:, 8] = 1.0  # `skip` strongest everywhere: only the blocks that keep their shape take it
    w[:, 7] = 0.5
    g = derive_genotype(space, {CT: w}, {CT: torch.ones(22, 9, dtype=torch.bool)})
    chain = space.cells[CT]
    assert [op == "skip" for op in g.ops] == list(chain.skippable)
    assert all(op == "k5e6" for op, s in zip(g.ops, chain.skippable) if not s)
    assert family.genotype(space, {CT: g.edges(CT)}) == g
    with pytest.raises(ValueError, match="one op on each of its 22 blocks; got 21"):
        family.genotype(space, {CT: g.edges(CT)[:21]})
    sample = family.random_genotypes(space, 5, random.Random(0))
    assert len(set(sample)) == 5 and all(isinstance(s, FBNetGenotype) for s in sample)
    allowed = family.allowed_ops(space)[CT]
    assert [row[8] for row in allowed] == list(chain.skippable) and all(all(r[:8]) for r in allowed)


def test_latency_layout_parts_build_with_the_network_parameters():
    layout = network_layout("fbnet_cifar", C=4, layers=22, image_size=32, num_classes=10)
    fixed = sum(count_parameters(p.build()) * n for p, n in layout.fixed)
    chosen = sum(
        count_parameters(p.build()) * n
        for ops in layout.choices[CT]
        for p, n in ops[2]  # k3e3 on every block
    )
    net, _ = family_of(ALL_K3E3).network(ALL_K3E3, C=4, layers=22, num_classes=10, image_size=32)
    assert fixed + chosen == count_parameters(net)
    assert all(not ops[8] for ops in layout.choices[CT])  # `skip` adds nothing
    shallow = network_layout("fbnet", C=16, layers=7, image_size=224, num_classes=1000)
    assert sum(1 for ops in shallow.choices[CT] if ops[0]) == 7


# -------------------------------------------------------------------------------- supernet


def test_supernet_forward_backward_and_masked_skip():
    torch.manual_seed(0)
    net = build_supernet("fbnet_cifar", C=4, layers=22, num_classes=10)
    w = torch.softmax(torch.randn(22, 9), -1).requires_grad_()
    out = net(torch.randn(2, 3, 32, 32), {CT: w})
    out.sum().backward()
    assert out.shape == (2, 10) and w.grad is not None and bool(w.grad[:, :8].abs().sum() > 0)
    skippable = torch.tensor(get_space("fbnet_cifar").cells[CT].skippable)
    assert torch.equal(net.op_mask(CT)[:, 8], skippable) and net.arch_shapes() == {CT: (22, 9)}
    # its weights: the fixed parts and every candidate of every block, nothing else
    layout = network_layout("fbnet_cifar", C=4, layers=22, image_size=32, num_classes=10)
    parts = [p for p, _ in layout.fixed] + [
        p for ops in layout.choices[CT] for counted in ops for p, _ in counted
    ]
    assert sum(p.numel() for p in net.parameters()) == sum(
        count_parameters(p.build()) for p in parts
    )
    with pytest.raises(ValueError, match="partial channels \\(K=2\\) are not available"):
        build_supernet("fbnet_cifar", C=4, layers=22, num_classes=10, partial_channels=2)
    with pytest.raises(ValueError, match="keeps 7, 12, 17, 22 searchable blocks .*; got blocks=8"):
        build_supernet("fbnet_cifar", C=4, layers=8, num_classes=10)


def test_a_shallow_supernet_leaves_only_skip_on_the_blocks_it_drops():
    net = build_supernet("fbnet_cifar", C=4, layers=7, num_classes=10)
    mask = net.op_mask(CT)
    dropped = [i for i, keep in enumerate(get_space("fbnet_cifar").cells[CT].kept(1)) if not keep]
    assert len(dropped) == 15 and all(mask[i].tolist() == [False] * 8 + [True] for i in dropped)
    out = net(torch.randn(2, 3, 16, 16), {CT: torch.full((22, 9), 1 / 9)})
    assert out.shape == (2, 10)


# -------------------------------------------------------------------------------- commands


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


def _image_folder(root: Path, per_class: int) -> Path:
    rng = np.random.default_rng(0)
    for c, name in enumerate(["cat", "dog", "fox"]):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.integers(0, 80, (40 + 8 * (i % 3), 48, 3), dtype=np.uint8)
            pixels[..., c] += 170
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


@pytest.mark.slow
def test_nas_train_takes_fbnet_a_by_name(tmp_path):
    """``nas-train genotype=fbnet_a`` at a tiny width and depth on generated 96-pixel images
    (the ImageNet layout), one epoch of two steps."""
    train, val = _image_folder(tmp_path / "train", 4), _image_folder(tmp_path / "val", 1)
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "nas.cli.train", "genotype=fbnet_a", "model.fbnet.C=4",
        "model.fbnet.blocks=7", "data=imagefolder", f"data.root={train}",
        f"data.val_root={val}", "data.num_workers=0", "data.image_size=96", "batch_size=6",
        "epochs=1", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["network"].startswith("FBNetNetwork(C=4, blocks=7")
    assert results["genotype"] == NETWORK_TEXT["fbnet_a"]


def test_nas_summary_export_and_plot_take_the_names(tmp_path, capsys):
    from nas.cli.export import main as nas_export
    from nas.cli.plot import main as nas_plot
    from nas.cli.summary import main as nas_summary

    assert nas_summary(["fbnet_c", "--network", "imagenet"]) == 0
    out = capsys.readouterr().out
    assert "FBNetNetwork on 224x224 input: params 5.593M (5,592,784;" in out
    assert "378.1M multiply-adds" in out and NETWORK_TEXT["fbnet_c"] in out
    pt = tmp_path / "b.pt"
    assert nas_export(["fbnet_b", "--C", "4", "--layers", "7", "--torchscript", str(pt)]) == 0
    assert pt.is_file()  # written only once loaded back and within 1e-4 of PyTorch
    for spec in ("fbnet_a", NETWORK_TEXT["fbnet_a"]):
        out_dir = tmp_path / f"plot{len(spec)}"
        assert nas_plot([spec, "-o", str(out_dir), "--engine", "matplotlib"]) == 0
        assert (out_dir / "cell.png").is_file()


@pytest.mark.slow
def test_tiny_search_through_the_cli(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "nas.cli.search", "space=fbnet_cifar", "search=fbnet",
        "space.C=4", "space.layers=7", "batch_size=8", "data.max_items=16", "epochs=1",
        "eval=false", "figures=false", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((run_dir / "genotype.json").read_text())
    assert record["space"] == "fbnet_cifar" and record["genotype"]["type"] == "fbnet"
    assert isinstance(parse_genotype(record["text"], space="fbnet_cifar"), FBNetGenotype)
