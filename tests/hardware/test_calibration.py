"""A table's latency calibration: stored, refused when malformed, applied by every prediction
(cost term and budget), and fitted by ``calibrate`` as an upper line over its sample."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

import nas.hardware.validate as validate
from nas.hardware.cost import CostModel, budget_argmax_genotype
from nas.hardware.parts import network_layout
from nas.hardware.profiler import Timing, profile
from nas.hardware.table import LatencyTable, load_table
from nas.hardware.validate import calibrate, random_genotypes
from search_spaces.nb201 import index_to_arch, nb201_genotype


@pytest.fixture(scope="module")
def table() -> LatencyTable:
    t = profile(
        network_layout("nb201", C=4, layers=1, image_size=16, num_classes=10),
        warmup=0,
        repeats=1,
    )
    # deterministic latencies (the timings themselves are not under test): MACs + 0.01 ms
    for entry in t.entries.values():
        entry["latency_ms"] = entry["flops"] / 1e5 + 0.01
    return t


def test_calibration_is_saved_and_applied_to_every_prediction(tmp_path, table):
    raw = CostModel.from_table(table, "latency")
    cal = LatencyTable.from_json(table.to_json())
    cal.calibration = {"a": 2.0, "b_ms": 0.5}
    path = cal.save(tmp_path / "t.json")
    loaded = load_table(path)
    assert loaded.correction() == (2.0, 0.5)
    model = CostModel.from_table(loaded, "latency")
    plain = CostModel.from_table(loaded, "latency", calibrated=False)
    flops = CostModel.from_table(loaded, "flops")
    for i in random.Random(0).sample(range(15625), 20):
        g = nb201_genotype(index_to_arch(i))
        assert model.of_genotype(g) == pytest.approx(2.0 * raw.of_genotype(g) + 0.5)
        assert plain.of_genotype(g) == pytest.approx(raw.of_genotype(g))
    assert flops.fixed == CostModel.from_table(table, "flops").fixed  # latency only
    # the expected cost is affine too, and a budget on it is met by the calibrated prediction
    w = {"cell": torch.softmax(torch.randn(6, 5, generator=torch.Generator().manual_seed(0)), -1)}
    assert float(model.expected(w)) == pytest.approx(2.0 * float(raw.expected(w)) + 0.5)
    budget = model.fixed + float(model.per_op["cell"].mean(-1).sum())
    g = budget_argmax_genotype(model, w, None, budget)
    assert model.of_genotype(g) <= budget + 1e-9


@pytest.mark.parametrize("bad", [{"a": 0, "b_ms": 0}, {"a": "x", "b_ms": 0}, {"b_ms": 1}, 3])
def test_malformed_calibration_is_one_line(tmp_path, table, bad):
    data = table.to_json()
    data["calibration"] = bad
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="calibration .* is malformed"):
        load_table(path)


def test_calibrate_fits_an_upper_line(monkeypatch, table):
    raw = CostModel.from_table(table, "latency", calibrated=False)
    rng = np.random.default_rng(0)

    def fake(_table, genotype, **_kw):  # a whole network: 1.8 x the sum + 0.3 ms, +-10 %
        ms = (1.8 * raw.of_genotype(genotype) + 0.3) * float(rng.uniform(0.9, 1.1))
        return Timing(ms, ms, ms, ms, 1)

    monkeypatch.setattr(validate, "measure_network", fake)
    cal = calibrate(table, 40, quantile=1.0)
    assert cal["fit_a"] == pytest.approx(1.8, rel=0.1)
    assert cal["margin"] >= 1.0 and cal["share_over_pct"] == 0.0
    assert cal["a"] == pytest.approx(cal["margin"] * cal["fit_a"])
    assert cal["plain_sum"]["mean_pred_over_measured"] < 0.7  # the plain sum under-predicts
    assert abs(cal["calibrated"]["mean_pred_over_measured"] - 1) < 0.25
    median = calibrate(table, 40, quantile=0.5)
    assert 0 < median["share_over_pct"] <= 55 and median["margin"] < cal["margin"]
    with pytest.raises(ValueError, match="quantile"):
        calibrate(table, 10, quantile=0.2)


def test_random_genotypes_are_seeded_and_valid():
    from search_spaces.space import get_space

    for space in ("nb201", "darts"):
        a, b = random_genotypes(space, 5, seed=3), random_genotypes(space, 5, seed=3)
        assert a == b
        for g in a:
            g.validate(get_space(space))
    with pytest.raises(ValueError, match="at least 2"):
        random_genotypes("nb201", 1)


def test_calibrate_falls_back_to_a_proportional_line(monkeypatch, table):
    raw = CostModel.from_table(table, "latency", calibrated=False)

    def falling(_table, genotype, **_kw):  # noise that makes the least-squares slope negative
        ms = 10.0 - raw.of_genotype(genotype) * 1e-3
        return Timing(ms, ms, ms, ms, 1)

    monkeypatch.setattr(validate, "measure_network", falling)
    cal = calibrate(table, 10)
    assert cal["model"] == "proportional" and cal["b_ms"] == 0 and cal["a"] > 0
    assert cal["share_over_pct"] == 0.0
