"""gpu_acceptance.py: its dry run (every row on the CPU at a tiny size, the CUDA-only rows
skipped with their reason) writes the JSON and the table; a failing row is recorded in one line
and makes the exit status non-zero."""

import json
import os
import subprocess
import sys

import pytest
import torch

from experiments.benchmarks import gpu_acceptance as G
from nas.plugins import available


@pytest.mark.slow
def test_dry_run_writes_every_row_to_the_json_and_the_table(tmp_path):
    proc = subprocess.run(
        [sys.executable, G.__file__, "--dry-run", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_acceptance.json").read_text())
    assert report["device_name"] == "CPU" and report["torch"] == torch.__version__
    rows = {r["name"]: r for r in report["rows"]}
    strategies = available("search")
    expected = [
        f"search {s} {a} {m}"
        for s in strategies
        for m in ("eager", "graphs")
        for a in ("fp32", "bf16")
    ]
    expected += ["darts-pt", "retrain bf16", "retrain fp16", "nccl data-parallel"]
    assert list(rows) == [*expected, "deterministic twice"]
    skipped = {n for n, r in rows.items() if r["status"] == "skipped"}
    assert skipped == {n for n in expected if "graphs" in n} | {
        "retrain fp16",
        "nccl data-parallel",
    }
    assert all(rows[n]["reason"] == "skipped: needs CUDA" for n in skipped)
    ran = [r for n, r in rows.items() if n not in skipped]
    assert all(r["status"] == "ok" and r["step_s"] > 0 and r["images_per_s"] > 0 for r in ran)
    assert all(r["peak_device_mib"] is None for r in ran)  # no device memory on the CPU
    for s in strategies:
        fp32, bf16 = rows[f"search {s} fp32 eager"], rows[f"search {s} bf16 eager"]
        assert len(fp32["losses"]) == len(bf16["losses"]) == G.TINY["steps"]
        assert fp32["losses"] != bf16["losses"]  # autocast did change the arithmetic
        assert 0 <= bf16["loss_rel_diff_first"] <= G.BF16_TOLERANCE
    assert rows["deterministic twice"]["equal"] is True
    assert rows["darts-pt"]["genotype"]
    assert len(rows["retrain bf16"]["losses"]) == G.TINY["train_steps"]
    assert report["ok"] == len(ran) and report["failed"] == 0 and report["skipped"] == len(skipped)

    table = (tmp_path / "gpu_acceptance.md").read_text()
    assert "- device: CPU (cpu)" in table and f"- torch: {torch.__version__}" in table
    lines = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(lines) == 1 + len(rows)  # the header, then a line per row
    assert "| search darts fp32 graphs | skipped |" in table
    assert "| nccl data-parallel | skipped |" in table and "skipped: needs CUDA |" in table
    assert "| search darts bf16 eager | ok |" in table and "bf16 vs fp32: first loss" in table


def test_a_failing_row_is_one_line_and_the_next_rows_still_count(tmp_path):
    bad = {"kind": "search", "name": "search nosuch fp32 eager", "strategy": "nosuch"}
    bad |= {"amp": "fp32", "mode": "eager", "skip": None}
    record = G.row_in_process(bad, "cpu", G.TINY, str(tmp_path))
    assert record["status"] == "failed" and "nosuch" in record["error"]
    assert "\n" not in record["error"]
    skipped = G.row_in_process(bad | {"skip": G.NEEDS_CUDA}, "cpu", G.TINY, str(tmp_path))
    assert skipped["status"] == "skipped" and skipped["reason"] == G.NEEDS_CUDA


def test_bf16_losses_far_from_fp32_fail_the_row():
    def row(amp, losses):
        return {"kind": "search", "name": f"search darts {amp} eager", "strategy": "darts",
                "amp": amp, "mode": "eager", "status": "ok", "losses": losses}  # fmt: skip

    close, far = row("bf16", [2.301, 2.2]), row("bf16", [2.6, 2.2])
    G.compare_precisions([row("fp32", [2.3, 2.2]), close])
    assert close["status"] == "ok" and close["loss_rel_diff_first"] == pytest.approx(0.001 / 2.3)
    G.compare_precisions([row("fp32", [2.3, 2.2]), far])
    assert far["status"] == "failed" and "expected at most 0.05" in far["error"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_no_cuda_device_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, G.__file__, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "--device cuda: no CUDA device here" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_group_of_rows_in_a_fresh_process_reports_each_row(tmp_path):
    # the path every CUDA row takes, here on the CPU: one row that runs, one that fails
    good = {"kind": "search", "name": "search darts fp32 eager", "strategy": "darts"}
    good |= {"amp": "fp32", "mode": "eager", "skip": None, "group": "darts"}
    bad = good | {"name": "search nosuch fp32 eager", "strategy": "nosuch"}
    done = G.rows_in_child([good, bad], "cpu", G.TINY, str(tmp_path), timeout=300)
    assert [r["name"] for r in done] == [good["name"], bad["name"]]
    assert done[0]["status"] == "ok" and len(done[0]["losses"]) == G.TINY["steps"]
    assert done[1]["status"] == "failed" and "nosuch" in done[1]["error"]
    assert [len(g) for g in G.groups([good, bad, {"name": "x", "kind": "nccl"}])] == [2, 1]
