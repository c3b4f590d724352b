"""End to end: ``nas-profile`` writes a table, ``nas-search`` searches with its cost term and
selects within a budget, a foreign table is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nas.hardware.cost import CostModel
from nas.hardware.table import load_table
from search_spaces.genotype import genotype_from_json


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", module, *args]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def table_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "nb201.json"
    proc = _run(
        "nas.cli.profile", "--space", "nb201", "--C", "4", "--layers", "1", "--image-size",
        "16", "--warmup", "1", "--repeats", "3", "-o", str(path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and path.is_file()
    return path


@pytest.mark.slow
def test_profile_show_and_check(table_path):
    proc = _run("nas.cli.profile", "--show", str(table_path), "--check")
    assert proc.returncode == 0, proc.stderr
    assert "nor_conv_3x3:4>4:s1:16x16" in proc.stdout and "latency: fixed parts" in proc.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (["--space", "nope", "-o", "x.json"], "unknown search space 'nope'"),
        (["--space", "nb201"], "-o/--output is required"),
        (["--show", "missing.json"], "no latency table"),
        (["--space", "nb201", "--dtype", "float16", "-o", "x.json"], "float16 is for CUDA"),
        (["--from", "x.json", "-o", "x.json"], "--from TABLE calibrates a table"),
        (["--space", "nb201", "--calibrate", "1", "-o", "x.json"], "at least 2 networks"),
    ],
)
def test_profile_bad_input_is_one_line(tmp_path, args, message):
    proc = _run("nas.cli.profile", *[a if a != "x.json" else str(tmp_path / a) for a in args])
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_profile_calibrates_an_existing_table(tmp_path, table_path):
    out = tmp_path / "calibrated.json"
    proc = _run(
        "nas.cli.profile", "--from", str(table_path), "--calibrate", "3", "--net-warmup", "0",
        "--net-repeats", "1", "-q", "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cal = load_table(out).calibration
    assert cal is not None and cal["n"] == 3 and cal["a"] > 0
    shown = _run("nas.cli.profile", "--show", str(out))
    assert shown.returncode == 0 and "calibration: whole network ~" in shown.stdout


TINY = ["space=nb201", "space.C=4", "space.layers=1", "batch_size=16", "data.max_items=64"]


@pytest.mark.slow
def test_search_with_cost_and_budget(tmp_path, table_path):
    model = CostModel.from_table(load_table(table_path), "latency")
    cheapest = model.fixed + float(model.per_op["cell"].min(-1).values.sum())
    dearest = model.fixed + float(model.per_op["cell"].max(-1).values.sum())
    budget = cheapest + 0.3 * (dearest - cheapest)
    run = tmp_path / "run"
    proc = _run(
        "nas.cli.search", *TINY, "epochs=1", "eval=false", "cost=latency",
        f"cost.table={table_path}", f"cost.target={dearest / 2}", "cost.form=add_linear",
        "selection=budget", f"selection.table={table_path}", f"selection.budget={budget}",
        "selection.measure=false",  # the table budget; timing: test_budget_measured.py
        f"hydra.run.dir={run}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((run / "genotype.json").read_text())
    genotype = genotype_from_json(record["genotype"])
    assert model.of_genotype(genotype) <= budget
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("expected_latency" in e for e in events)


@pytest.mark.slow
def test_search_refuses_a_foreign_table(tmp_path, table_path):
    data = json.loads(table_path.read_text())
    data["environment"]["torch"] = "0.0.1"
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps(data))
    run = tmp_path / "run"
    args = [*TINY, "epochs=1", "cost=latency", f"cost.table={foreign}", "cost.target=2"]
    proc = _run("nas.cli.search", *args, f"hydra.run.dir={run}")
    assert proc.returncode == 2
    assert "measured elsewhere" in proc.stderr and "torch '0.0.1'" in proc.stderr
    assert not (run / "genotype.json").exists()  # refused before the search (force: unit test)
