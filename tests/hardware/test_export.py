"""Export round trips: the ONNX file run by onnxruntime and the TorchScript file loaded back
give PyTorch's logits (1e-4), for NB201 cells, DARTS genotypes, ProxylessNAS and FBNet networks,
in every input form."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from nas.hardware.export import build_for_export, export_onnx, export_torchscript, traceable_ops

ort = pytest.importorskip("onnxruntime", reason="nas-export's ONNX check needs onnxruntime")


def _randomize(model, spread=0.5):
    """Weights and BN statistics far from their initialisation, so logits are O(1)."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * spread)
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
            elif name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
    return model


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec,C,layers",
    [
        (
            "|nor_conv_3x3~0|+|skip_connect~0|avg_pool_3x3~1|+|none~0|nor_conv_1x1~1|skip_connect~2|",
            4,
            1,
        ),
        ("DARTS_V2", 4, 3),
        ("proxyless_mobile", 8, 6),  # a released ProxylessNAS network, 1 block a stage
        ("fbnet_a", 4, 7),  # a published FBNet network (a channel shuffle), 1 block a stage
    ],
)
def test_onnx_and_torchscript_round_trip(tmp_path, spec, C, layers):
    model, _, input_size = build_for_export(spec, C=C, layers=layers, image_size=16)
    # FBNet's uncapped ReLUs take the logits to O(100) at a spread of 0.5, where float32 rounding
    # alone exceeds the 1e-4 check; at 0.3 they are O(1) again
    _randomize(model, 0.3 if spec.startswith("fbnet") else 0.5)
    x = torch.randn(3, *input_size)
    with torch.no_grad():
        assert model(x).abs().max() > 0.1  # logits big enough for the check to mean something
    assert export_onnx(model, input_size, tmp_path / "net.onnx") <= 1e-4
    session = ort.InferenceSession(str(tmp_path / "net.onnx"), providers=["CPUExecutionProvider"])
    out = session.run(None, {"images": x.numpy()})[0]  # another batch size: the batch is dynamic
    with torch.no_grad():
        assert torch.allclose(torch.from_numpy(out), model(x), atol=1e-4)
    assert export_torchscript(model, input_size, tmp_path / "net.pt") <= 1e-4


def test_traceable_ops_compute_the_same_and_are_restored():
    model, _, input_size = build_for_export("DARTS_V2", C=4, layers=3, image_size=16)
    _randomize(model)
    x = torch.randn(2, *input_size)
    from search_spaces import ops

    before = ops._EvenOddPixels
    with torch.no_grad():
        ref = model(x)
        with traceable_ops():
            assert ops._EvenOddPixels is not before
            plain = model(x)
    assert ops._EvenOddPixels is before
    assert torch.equal(ref, plain)


def test_genotype_forms_resolve_like_nas_train(tmp_path):
    from search_spaces.nb201 import arch_to_index, index_to_arch

    arch = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|"
    (tmp_path / "genotype.json").write_text(json.dumps({"genotype": _json_of(arch)}))
    by_folder = build_for_export(str(tmp_path), C=4, layers=1)[1].genotype
    by_index = build_for_export(arch_to_index(arch), C=4, layers=1)[1].genotype
    by_text = build_for_export(index_to_arch(arch_to_index(arch)), C=4, layers=1)[1].genotype
    assert str(by_folder) == str(by_index) == str(by_text) == arch


def _json_of(arch):
    from search_spaces.genotype import parse_nb201_arch

    return parse_nb201_arch(arch).to_json()


@pytest.mark.slow
def test_export_cli_bad_input_is_one_line(tmp_path):
    for args, message in (
        (["DARTS_V2"], "nothing to write"),
        (["no_such_name", "--onnx", str(tmp_path / "x.onnx")], "no_such_name"),
        (["DARTS_V2", "--weights", str(tmp_path / "w.pt"), "--onnx", "x.onnx"], "no weights file"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "nas.cli.export", *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
