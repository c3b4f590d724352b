"""nas-proxy end to end on a tiny sample, and its one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def nas_proxy(*args: str):
    cmd = [sys.executable, "-m", "nas.cli.proxy", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_scores_a_tiny_sample_and_reports(tmp_path: Path):
    out = tmp_path / "px"
    proc = nas_proxy(
        "--sample",
        "3",
        "--proxies",
        "synflow,params,flops,naswot",
        "--batch-size",
        "8",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and set(rows[0]["scores"]) == {"synflow", "params", "flops", "naswot"}
    report = json.loads((out / "correlations.json").read_text())
    assert report["cells"] == 3
    assert set(report["correlations"]["naswot"]) == {"CIFAR-10", "CIFAR-100", "ImageNet16-120"}
    assert (out / "scatter_synflow.png").stat().st_size > 0
    assert "| naswot | 3 |" in (out / "correlations.md").read_text()
    # a second run refuses to overwrite, --report redoes the report
    again = nas_proxy("--sample", "3", "--proxies", "params", "--out", str(out))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--resume" in again.stderr
    rep = nas_proxy("--proxies", "params,flops", "--out", str(out), "--report", "--no-plots")
    assert rep.returncode == 0 and "| params | 3 |" in rep.stdout


def test_unknown_proxy_is_one_line(tmp_path: Path):
    proc = nas_proxy("--proxies", "synflow,nope", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("nas-proxy: error: unknown proxy 'nope'")
    assert proc.stderr.count("\n") == 1
