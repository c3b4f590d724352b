"""Faults at random instants: the tiny pipeline (a search with a component, DARTS-PT's
selection, the retraining of its genotype) killed with SIGKILL at 8 instants drawn over its
whole run, resumed each time, equals the uninterrupted run to the last bit
(``experiments/reliability/fault_injection.py``; a longer soak runs the same script)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nas.metrics import MetricLogger

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_killed_at_eight_random_instants_equals_the_uninterrupted_run(tmp_path):
    script = REPO / "experiments" / "reliability" / "fault_injection.py"
    out = tmp_path / "fi"
    done = subprocess.run(
        [sys.executable, str(script), "--kills", "8", "--seed", "0", "--out", str(out)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "fault_injection.json").read_text())
    assert report["equal"] and all(report["checks"].values())
    assert sum(report["landed"].values()) >= 1  # at least one kill hit a running process


def test_a_resumed_log_keeps_the_events_its_checkpoint_counted(tmp_path):
    """Work redone at the same step after a resume (a selection's decision) is not logged
    twice: the log keeps the events the checkpoint counted, not all those up to its step."""
    log = MetricLogger(tmp_path)
    for k in range(3):
        log.log("epoch", epoch=k, step=4)
    counted = log.events  # what a checkpoint written now records
    log.log("pt_decision", epoch=2, step=4)  # after the checkpoint, at the same step
    log.close()
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"event": "torn')  # a line cut by the kill
    resumed = MetricLogger(tmp_path, resume_step=4, resume_events=counted)
    resumed.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["epoch"] * 3
    assert resumed.events == 3
    # a checkpoint of an earlier version (no count): the events up to its step
    older = MetricLogger(tmp_path, resume_step=4)
    older.close()
    assert older.events == 3
