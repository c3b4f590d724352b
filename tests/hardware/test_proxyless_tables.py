"""Latency tables of the MobileNet block chain: profiled (``nas-profile --space
proxyless_cifar`` / ``proxyless``), calibrated, used by every cost form, the budget selector and
budgeted DARTS-PT; and imported from a lookup table in the format of ProxylessNAS's released
``mobile_trim.yaml`` (``nas-profile --import-lut``), whose sums must be the reference's expected
latencies (mit-han-lab/proxylessnas ``SuperProxylessNASNets.expected_latency``). Tiny sizes;
no timing is asserted."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from nas.hardware.cost import (
    CostModel,
    CostObjective,
    allowed_ops,
    budget_argmax_genotype,
    cheapest_cost,
)
from nas.hardware.lut import import_lookup_table, is_imported
from nas.hardware.parts import network_layout
from nas.hardware.profiler import profile
from nas.hardware.table import load_table
from nas.hardware.validate import random_genotypes
from nas.plugins import build_plugin
from nas.selection import PerturbationSelection
from nas.strategies import SearchContext
from nas.strategies.components.hardware_cost import HardwareCost
from nas.supernet import build_supernet
from search_spaces.genotype import ProxylessGenotype, genotype_from_json
from search_spaces.proxyless_space import PUBLISHED_BLOCKS
from search_spaces.space import get_space

LUT = Path(__file__).parent / "data" / "proxyless_lut.yaml"
MOBILE = ProxylessGenotype(PUBLISHED_BLOCKS["proxyless_mobile"][0])
TINY = dict(C=8, layers=6, image_size=16, num_classes=10)  # one block per stage


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", module, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


# --------------------------------------------------------------- the reference's estimate


def reference_latency(lut: dict, ops: tuple[str, ...], probs: torch.Tensor | None = None) -> float:
    """The reference's expected latency of the default space (widths 24..320, 224x224, 1000
    classes), walked as ``SuperProxylessNASNets.expected_latency`` walks it, written here
    apart from the importer: ``probs`` [21, 7] weights the ops (else ``ops`` one-hot)."""
    mean = {k: v["mean"] for k, v in lut.items()}
    total = mean["Conv-input:224x224x3-output:112x112x32"]
    total += mean["Conv_1-input:7x7x320-output:7x7x1280"]
    total += mean["Logits-input:7x7x1280-output:1000"]
    total += mean[
        "expanded_conv-input:112x112x32-output:112x112x16-expand:1-kernel:3-stride:1-idskip:0"
    ]
    names = get_space("proxyless").cells["blocks"].edges[0].ops
    size, c_in, i = 112, 16, 0
    for width, depth, first_stride in zip(
        (24, 40, 80, 96, 192, 320), (4, 4, 4, 4, 4, 1), (2, 2, 2, 1, 2, 1)
    ):
        for j in range(depth):
            stride = first_stride if j == 0 else 1
            skip = int(stride == 1 and c_in == width)
            out = size // stride
            for k, op in enumerate(names):
                p = float(probs[i, k]) if probs is not None else float(op == ops[i])
                if op == "none" or p == 0:
                    continue
                kernel, expand = int(op[0]), int(op[-1])
                total += (
                    p
                    * mean[
                        f"expanded_conv-input:{size}x{size}x{c_in}-output:{out}x{out}x{width}"
                        f"-expand:{expand}-kernel:{kernel}-stride:{stride}-idskip:{skip}"
                    ]
                )
            size, c_in, i = out, width, i + 1
    return total


@pytest.fixture(scope="module")
def imported():
    layout = network_layout("proxyless", C=32, layers=21, image_size=224, num_classes=1000)
    return import_lookup_table(LUT, layout, device_name="fixture")


def test_fixture_is_in_the_released_format():
    lut = yaml.safe_load(LUT.read_text())
    assert len(lut) == 72  # as the released file: 70 keys of the space, 2 unused first blocks
    assert all(set(v) == {"count", "mean", "var"} for v in lut.values())


def test_imported_sums_are_the_reference_expected_latencies(imported):
    lut = yaml.safe_load(LUT.read_text())
    model = CostModel.from_table(imported, "latency")
    genotypes = [MOBILE, *random_genotypes("proxyless", 6, seed=5)]
    for g in genotypes:
        assert isinstance(g, ProxylessGenotype)
        assert model.of_genotype(g) == pytest.approx(reference_latency(lut, g.ops), rel=1e-12)
    # and the expected latency under architecture weights (softmax over the allowed ops)
    alpha = torch.randn(21, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w = torch.softmax(alpha.masked_fill(~allowed_ops("proxyless")["blocks"], -torch.inf), -1)
    got = float(model.expected({"blocks": w}))
    assert got == pytest.approx(reference_latency(lut, (), w), rel=1e-12)
    assert is_imported(imported) and imported.environment["device_name"] == "fixture"
    # MACs and parameters are computed here, exactly, as for a profiled table
    flops = CostModel.from_table(imported, "flops")
    assert 0 < flops.of_genotype(MOBILE) < 400  # M MACs at 224, 24-wide first stage


@pytest.mark.skipif(
    not os.environ.get("NAS_PROXYLESS_LUT"), reason="set NAS_PROXYLESS_LUT to mobile_trim.yaml"
)
def test_released_table_gives_the_reference_figure():
    """The released Pixel 1 table (not shipped): the reference's 82.52 ms for the released
    mobile network's blocks at the default 24-wide space."""
    layout = network_layout("proxyless", C=32, layers=21, image_size=224, num_classes=1000)
    table = import_lookup_table(os.environ["NAS_PROXYLESS_LUT"], layout)
    assert CostModel.from_table(table, "latency").of_genotype(MOBILE) == pytest.approx(
        82.5239, abs=1e-3
    )


def test_a_table_missing_a_shape_is_refused_in_one_line(tmp_path):
    lines = LUT.read_text().splitlines()
    key = "expanded_conv-input:28x28x40-output:14x14x80-expand:6-kernel:5-stride:2-idskip:0"
    at = lines.index(f"{key}:")
    trimmed = tmp_path / "trimmed.yaml"
    trimmed.write_text("\n".join(lines[:at] + lines[at + 4 :]) + "\n")
    layout = network_layout("proxyless", C=32, layers=21, image_size=224, num_classes=1000)
    with pytest.raises(ValueError, match="no entry " + key) as e:
        import_lookup_table(trimmed, layout)
    assert "\n" not in str(e.value)
    # another size of the space is not what the file measured: its first part is missing
    small = network_layout("proxyless", C=32, layers=21, image_size=192, num_classes=1000)
    with pytest.raises(ValueError, match="no entry Conv-input:192x192x3-output:96x96x32"):
        import_lookup_table(LUT, small)
    bad = tmp_path / "bad.yaml"
    bad.write_text("Conv-input:224x224x3-output:112x112x32:\n  count: 3\n")
    with pytest.raises(ValueError, match="has no mean latency"):
        import_lookup_table(bad, layout)


def test_budget_on_the_imported_table_is_met_and_valid(imported):
    model = CostModel.from_table(imported, "latency")
    sp = get_space("proxyless")
    floor = cheapest_cost(model, allowed_ops("proxyless"))
    assert floor is not None and floor > model.fixed  # six blocks cannot be skipped
    g = torch.Generator().manual_seed(1)
    for _trial in range(6):
        w = {"blocks": torch.softmax(torch.randn(21, 7, generator=g) * 3, -1)}
        free = budget_argmax_genotype(model, w, None, 1e18)
        for frac in (0.0, 0.3, 0.7):
            budget = floor + frac * (model.of_genotype(free) - floor)
            genotype = budget_argmax_genotype(model, w, None, budget)
            genotype.validate(sp)  # never `none` on a block without a shortcut
            assert model.of_genotype(genotype) <= budget + 1e-9


# ------------------------------------------------------------------ profiled, end to end


@pytest.fixture(scope="module")
def cifar_table(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("proxyless") / "cifar.json"
    proc = _run(
        "nas.cli.profile", "--space", "proxyless_cifar", "--C", "8", "--layers", "6",
        "--image-size", "16", "--warmup", "0", "--repeats", "2", "--calibrate", "3",
        "--net-warmup", "0", "--net-repeats", "1", "-q", "-o", str(path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.mark.slow
def test_profile_covers_every_part_and_calibrates(cifar_table):
    table = load_table(cifar_table)
    layout = network_layout("proxyless_cifar", **TINY)
    assert set(table.entries) == {p.key for p in layout.parts()}
    assert table.calibration is not None and table.calibration["n"] == 3
    names = {p.name for p in layout.parts()}
    assert {"proxyless_stem", "proxyless_first", "proxyless_mix", "proxyless_classifier"} <= names
    shown = _run("nas.cli.profile", "--show", str(cifar_table), "--check")
    assert shown.returncode == 0 and "cheapest network" in shown.stdout


def test_profile_the_imagenet_layout_at_a_small_size(tmp_path):
    out = tmp_path / "in.json"
    proc = _run(
        "nas.cli.profile", "--space", "proxyless", "--C", "8", "--layers", "6", "--image-size",
        "64", "--num-classes", "5", "--no-time", "-q", "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    table = load_table(out)
    assert "proxyless_stem:3>8:s2:64x64" in table.entries


@pytest.mark.slow
def test_import_cli_and_its_refusals(tmp_path):
    out = tmp_path / "pixel.json"
    proc = _run("nas.cli.profile", "--import-lut", str(LUT), "--space", "proxyless",
                "--device-name", "Pixel 1", "-o", str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # measured elsewhere: a check refuses it unless forced
    shown = _run("nas.cli.profile", "--show", str(out), "--check")
    assert shown.returncode == 2 and "measured elsewhere" in shown.stderr
    forced = _run("nas.cli.profile", "--show", str(out), "--check", "--force")
    assert forced.returncode == 0 and "imported from" in forced.stdout
    for args, message in [
        (["--from", str(out), "--calibrate", "2", "--force"], "imported from a lookup table"),
        (["--import-lut", str(LUT), "--space", "nb201"], "no reference latency lookup table"),
        (["--import-lut", str(LUT), "--space", "proxyless_cifar"], "no entry Conv-input"),
        (["--import-lut", str(LUT), "--space", "proxyless", "--calibrate", "2"], "--calibrate"),
    ]:
        bad = _run("nas.cli.profile", *args, "-o", str(tmp_path / "x.json"))
        assert bad.returncode == 2, args
        assert message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("form", CostObjective.forms)
def test_every_cost_form_steps_on_the_chain(cifar_table, form):
    model = CostModel.from_table(load_table(cifar_table), "latency", calibrated=False)
    target = max(2.0, 1.2 * cheapest_cost(model, allowed_ops("proxyless_cifar")))  # > 1 for logs
    torch.manual_seed(0)
    net = build_supernet("proxyless_cifar", C=8, layers=6, num_classes=10)
    strategy = build_plugin("search", "darts")
    strategy.add_components(
        [HardwareCost(objective=CostObjective(model, form=form, target=target))]
    )
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9)
    strategy.attach(
        SearchContext(net, opt, grad_clip=5.0), generator=torch.Generator().manual_seed(0)
    )
    g = torch.Generator().manual_seed(0)
    batch = (torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g))
    before = [a.detach().clone() for a in strategy.arch_parameters()]
    strategy.begin_step(0)
    out = strategy.step(batch, batch)
    assert torch.isfinite(out["expected_latency"])
    after = strategy.arch_parameters()
    assert all(torch.isfinite(a).all() for a in after)
    assert any(not torch.equal(a.detach(), b) for a, b in zip(after, before))


class _Ctx:
    search_lr = 0.025

    def __init__(self, batches):
        self.batches = batches

    def val_batches(self, *, key, limit):
        return iter(self.batches if limit is None else self.batches[:limit])

    def train_epoch(self, **kwargs):
        pass

    def reset_weight_optimizer(self, lr):
        pass

    def checkpoint(self):
        pass

    def stop_point(self):
        pass

    def log(self, event, **values):
        pass

    def all_reduce_sum(self, tensor):
        return tensor

    def broadcast(self, obj):
        return obj


def test_budgeted_darts_pt_on_the_chain(tmp_path):
    rng = random.Random(0)
    table = profile(network_layout("proxyless_cifar", **TINY), timed=False)
    for entry in table.entries.values():
        entry["latency_ms"] = rng.uniform(0.1, 3.0)
    table.protocol["timed"] = True
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table.to_json()))
    model = CostModel.from_table(table, "latency")
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g))]
    torch.manual_seed(0)
    net = build_supernet("proxyless_cifar", C=8, layers=6, num_classes=10)
    strategy = build_plugin("search", "darts", init_scale=0.0)
    strategy.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0))
    with torch.no_grad():
        for p in strategy.arch_parameters():
            p.normal_(0, 2.0)
    allowed = {ct: net.op_mask(ct).clone() for ct in net.arch_shapes()}
    floor = cheapest_cost(model, allowed)
    assert floor is not None
    top = floor + float(model.per_op["blocks"].max(-1).values.sum())
    budget = floor + 0.3 * (top - floor)
    pt = PerturbationSelection(proj_intv=0, table=str(path), budget=budget, force=True)
    genotype = pt.select(strategy, context=_Ctx(batches))
    genotype.validate(get_space("proxyless_cifar"))
    assert model.of_genotype(genotype) <= budget + 1e-9


@pytest.mark.slow
def test_search_with_cost_and_budget_on_the_chain(tmp_path, cifar_table):
    # the plain sums (a calibration of 3 networks may have any slope and intercept)
    table = load_table(cifar_table)
    table.calibration = None
    cifar_table = table.save(tmp_path / "plain.json")
    model = CostModel.from_table(table, "latency")
    floor = cheapest_cost(model, allowed_ops("proxyless_cifar"))
    dearest = model.fixed + float(model.per_op["blocks"].max(-1).values.sum())
    assert floor is not None
    budget = floor + 0.3 * (dearest - floor)
    run = tmp_path / "run"
    proc = _run(
        "nas.cli.search", "space=proxyless_cifar", "space.C=8", "space.layers=6",
        "batch_size=8", "data.max_items=32", "epochs=1", "eval=false", "cost=latency",
        f"cost.table={cifar_table}", f"cost.target={max(2.0, dearest / 2)}",
        "cost.form=add_linear", "selection=budget", f"selection.table={cifar_table}",
        f"selection.budget={budget}", f"hydra.run.dir={run}",
        "selection.measure=false",  # the table budget; timing: test_budget_measured.py
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    genotype = genotype_from_json(json.loads((run / "genotype.json").read_text())["genotype"])
    assert model.of_genotype(genotype) <= budget + 1e-9
