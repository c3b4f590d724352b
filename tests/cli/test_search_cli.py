"""End to end: ``nas-search`` as a user runs it, on tiny configs and the embedded data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

TINY = [
    "space=nb201",
    "space.C=4",
    "space.layers=1",
    "batch_size=16",
    "data.max_items=96",
    "log_every=1",
]


def nas_search(run_dir: Path, *overrides: str, wait: bool = True):
    cmd = [sys.executable, "-m", "nas.cli.search", *TINY, *overrides, f"hydra.run.dir={run_dir}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if not wait:
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def arch_state(run_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    return {k: v for k, v in state["strategy"]["module"].items() if k.startswith("arch_params")}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "full"
    proc = nas_search(run_dir, "epochs=3")
    assert proc.returncode == 0, proc.stderr
    return run_dir


def test_search_writes_the_run_folder(uninterrupted):
    run_dir = uninterrupted
    assert (run_dir / "config.yaml").is_file()
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    assert any((run_dir / "tensorboard").iterdir())
    # the end of the search draws the cell and the weights (nas.analysis)
    for name in (
        "cell.png",
        "weights_final.png",
        "weights_trajectory_cell.png",
        "nb201_accuracy.png",
    ):
        assert (run_dir / "figures" / name).stat().st_size > 5000
    record = json.loads((run_dir / "genotype.json").read_text())
    assert record["space"] == "nb201" and record["text"] == record["arch"]
    from search_spaces.nb201 import arch_to_index

    assert record["index"] == arch_to_index(record["arch"])
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("epoch" in e and "step" in e for e in events)
    epochs = [e for e in events if e["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [0, 1, 2]
    # every epoch logs losses, accuracies, the genotype, the lr and the benchmark accuracies
    for e in epochs:
        assert {"train_loss", "val_loss", "eval_acc", "lr", "genotype"} <= set(e)
        assert 9.9 < e["nb201/cifar10/test"] < 95  # 10.0: a cell whose output is cut off
    assert epochs[0]["lr"] > epochs[1]["lr"] > epochs[2]["lr"]  # cosine schedule
    weights = [e for e in events if e["event"] == "arch_weights"]
    assert len(weights) == 3 and len(weights[0]["cell"]) == 6
    steps = [e["step"] for e in events if e["event"] == "step"]
    assert steps == list(range(1, len(steps) + 1))


def test_stdout_names_the_genotype(tmp_path):
    proc = nas_search(tmp_path / "r", "epochs=1")
    assert proc.returncode == 0, proc.stderr
    assert "genotype (argmax): |" in proc.stdout
    assert "NB201 cell" in proc.stdout and "CIFAR-10" in proc.stdout


def _wait_for_checkpoint(run_dir: Path, proc, timeout: float = 300) -> None:
    ckpt = run_dir / "checkpoints" / "last.pt"
    t0 = time.time()
    while not ckpt.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() - t0 < timeout
        time.sleep(0.02)


def test_kill9_then_resume_equals_uninterrupted(tmp_path, uninterrupted):
    run_dir = tmp_path / "killed"
    proc = nas_search(run_dir, "epochs=3", wait=False)
    _wait_for_checkpoint(run_dir, proc)
    time.sleep(0.3)  # into the next epoch
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL  # it really was killed mid-run
    assert not (run_dir / "genotype.json").exists()
    resumed = nas_search(run_dir, "epochs=3", "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    a, b = arch_state(uninterrupted), arch_state(run_dir)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (run_dir / "genotype.json").read_text() == (uninterrupted / "genotype.json").read_text()
    # the resumed log reads as one run: no step logged twice
    steps = [
        json.loads(line)["step"]
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "step"
    ]
    assert steps == sorted(set(steps))


def test_sigterm_checkpoints_mid_epoch_and_resumes_exactly(tmp_path, uninterrupted):
    run_dir = tmp_path / "preempted"
    proc = nas_search(run_dir, "epochs=3", wait=False)
    _wait_for_checkpoint(run_dir, proc)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the search finished before SIGTERM arrived")
    assert proc.returncode == 143, err
    assert "preempted; checkpoint written to" in err and "resume=true" in err
    assert "Traceback" not in err
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert state["step_in_epoch"] > 0 or state["epoch"] > 0
    resumed = nas_search(run_dir, "epochs=3", "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    a, b = arch_state(uninterrupted), arch_state(run_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["space=darts9"], "unknown space 'darts9'; expected one of darts, nb201, s1"),
        (["search=enas"], "unknown search 'enas'; expected one of darts"),
        (["epochs=-1"], "epochs must be an int >= 0, got -1"),
        (["batch_size=abc"], "batch_size must be a positive int, got 'abc'"),
        (["search.order=3"], "search.order must be 1 or 2, got 3"),
        (["data.train_portion=1.5"], r"train_portion must be a number in \(0, 1\), got 1.5"),
        (["resume=true"], "no checkpoint at"),
        (["optimizer.lr=1e30", "eval=false"], "became nan at epoch 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, overrides, message):
    proc = nas_search(tmp_path / "r", "epochs=1", *overrides)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    import re

    assert re.search(message, lines[0]), lines[0]


def test_existing_run_folder_is_never_damaged(tmp_path, uninterrupted):
    run_dir = tmp_path / "copy"
    import shutil

    shutil.copytree(uninterrupted, run_dir)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    proc = nas_search(run_dir, "epochs=3")  # forgot resume=true
    assert proc.returncode == 2 and "already holds a search" in proc.stderr
    # a corrupt checkpoint and one from another space are refused with one line
    after = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert before == after

    ckpt = run_dir / "checkpoints" / "last.pt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    proc = nas_search(run_dir, "epochs=3", "resume=true")
    assert proc.returncode == 2 and "is corrupt or truncated" in proc.stderr


def test_checkpoint_of_another_space_is_refused(tmp_path, uninterrupted):
    import shutil

    run_dir = tmp_path / "other"
    shutil.copytree(uninterrupted, run_dir)
    cmd = [
        sys.executable, "-m", "nas.cli.search", "space=darts", "space.C=4", "space.layers=3",
        "data.max_items=96", "epochs=3", "resume=true", f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "is a search of space 'nb201', but space=darts was asked for" in proc.stderr
