"""nas-proxy end to end on a tiny sample, and its one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


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


def test_sigterm_stops_after_the_cell_being_scored_and_resume_completes_it(tmp_path: Path):
    """A real process signalled while it scores: exit 143 within one cell, every written row
    whole, the line that continues it; --resume then ends with the uninterrupted scores."""
    import os
    import signal
    import time

    args = ["--sample", "40", "--proxies", "synflow,params", "--no-plots", "--threads", "1"]
    full = nas_proxy(*args, "--out", str(tmp_path / "full"))
    assert full.returncode == 0, full.stderr[-2000:]

    out = tmp_path / "stopped"
    cmd = [sys.executable, "-m", "nas.cli.proxy", *args, "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    scores = out / "scores.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (
        scores.is_file() and scores.read_text().count("\n") >= 2
    ):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert time.monotonic() - sent < 60
    assert "continue with: nas-proxy" in err and "--resume" in err
    rows = [json.loads(line) for line in scores.read_text().splitlines()]  # every row whole
    assert 2 <= len(rows) < 40

    resumed = nas_proxy(*args, "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]

    def by_cell(folder):
        lines = (folder / "scores.jsonl").read_text().splitlines()
        return {r["index"]: r["scores"] for r in map(json.loads, lines)}

    assert by_cell(out) == by_cell(tmp_path / "full")
