"""profile_step.py: a profiled search step of ours, summarised by kind of operator."""

import re
import subprocess
import sys

import pytest

from experiments.benchmarks import profile_step, search_step


def test_kinds_of_operators():
    assert profile_step.kind_of("aten::convolution_backward") == "conv backward"
    assert profile_step.kind_of("aten::mkldnn_convolution") == "conv forward"
    assert profile_step.kind_of("aten::native_batch_norm_backward") == "batch norm"
    assert profile_step.kind_of("aten::threshold_backward") == "ReLU"
    assert profile_step.kind_of("aten::avg_pool2d") == "pooling"
    assert profile_step.kind_of("aten::copy_") == "copies, layout"
    assert profile_step.kind_of("aten::addcmul_") == "elementwise"
    assert profile_step.kind_of("aten::something_else") == "other"


@pytest.mark.slow
def test_profiles_a_tiny_step_of_ours():
    proc = subprocess.run(
        [
            sys.executable,
            profile_step.__file__,
            "--only",
            "nb201-darts1",
            "--C",
            "4",
            "--layers",
            "1",
            "--batch",
            "4",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--threads",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert out.startswith("nb201-darts1, ours (NHWC): 1 profiled steps")
    shares = [float(v) for v in re.findall(r"^\| [^|]+ \| ([\d.]+) % \|$", out, flags=re.M)]
    assert shares and abs(sum(shares) - 100.0) < 0.5  # the kinds split the whole time
    assert "| conv backward |" in out and "| conv forward |" in out
    assert search_step.SETTINGS["nb201-darts1"][1] == 16  # the parent's table is untouched


def test_bad_arguments_are_one_line_errors():
    proc = subprocess.run(
        [sys.executable, profile_step.__file__, "--only", "nb201-darts1", "--steps", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "--steps 0" in proc.stderr and "expected steps" in proc.stderr
