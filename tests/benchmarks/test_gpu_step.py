"""gpu_step.py: the search step of a row in fp32 and bf16 (autocast), here on the CPU at a tiny
size; without a CUDA device, asking for one is a one-line error."""

import json
import subprocess
import sys

import pytest
import torch

from experiments.benchmarks import gpu_step

TINY = ["--C", "4", "--layers", "1", "--batch", "4", "--steps", "1", "--warmup", "1"]


@pytest.mark.slow
def test_fp32_and_bf16_steps_of_a_row_on_the_cpu(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [
            sys.executable,
            gpu_step.__file__,
            "--device",
            "cpu",
            "--only",
            "nb201-darts1",
            "--no-compile",
            "--threads",
            "1",
            "--json",
            str(out),
            *TINY,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert [(r["config"], r["amp"], r["compile"]) for r in rows] == [
        ("fp32 eager", "none", "False"),
        ("bf16 eager", "bf16", "False"),
    ]
    assert all(r["device"] == "cpu" and r["search_step_s"] > 0 for r in rows)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("| nb201-darts1 |")]
    assert len(lines) == 2 and "| fp32 eager |" in lines[0] and "| 1.00x |" in lines[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is here")
def test_no_cuda_device_is_one_line():
    proc = subprocess.run(
        [sys.executable, gpu_step.__file__, "--only", "nb201-darts1", *TINY],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith("--device cuda: no CUDA device here")


@pytest.mark.slow
def test_chosen_configs_run_and_cuda_graphs_are_skipped_in_a_line_off_a_cuda_device(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [
            sys.executable,
            gpu_step.__file__,
            "--device",
            "cpu",
            "--only",
            "nb201-darts1",
            "--config",
            "fp32 eager",
            "--config",
            "fp32 graphs",
            "--threads",
            "1",
            "--json",
            str(out),
            *TINY,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [r["config"] for r in json.loads(out.read_text())] == ["fp32 eager"]
    assert "| nb201-darts1 | 4 | fp32 graphs | skipped: CUDA graphs need a CUDA device" in (
        proc.stdout
    )


def test_search_step_refuses_cuda_graphs_off_a_cuda_device_in_one_line():
    proc = subprocess.run(
        [sys.executable, gpu_step.SEARCH_STEP, "--only", "nb201-darts1", "--cuda-graphs"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "--cuda-graphs records CUDA graphs and needs --device cuda, got --device cpu"
    )
