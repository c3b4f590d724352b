"""fisher_reference.py: ours against a checkout of ZC's code; the checkout is checked first."""

import subprocess
import sys


def test_fisher_reference_needs_a_checkout_of_zero_cost_nas(tmp_path):
    from experiments.benchmarks import fisher_reference

    proc = subprocess.run(
        [sys.executable, fisher_reference.__file__, "--reference-root", f"zc={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert f"--reference-root zc={tmp_path}: expected zc=PATH" in proc.stderr
    assert "foresight/models/nasbench2.py" in proc.stderr
