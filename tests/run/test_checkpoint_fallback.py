"""The last two checkpoints, each with a checksum; a damaged newest one falls back.

``Checkpointer.save`` keeps the checkpoint it replaces as ``previous.pt`` and stores in each
the SHA-256 of its contents. ``resume=true`` on a run whose ``last.pt`` is torn (truncated) or
changed after it was written (its checksum fails) moves it aside, continues from
``previous.pt`` with one line saying so, and ends equal to the uninterrupted run, its metrics
log included. A file refused for what it holds (an unsafe pickle) is not skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nas import distributed as D
from nas.run.checkpoint import (
    Checkpointer,
    CheckpointError,
    DamagedCheckpointError,
    checksum,
    load_checkpoint,
    load_resume,
)

HOOKED = Path(__file__).resolve().parents[1] / "hooked_cli.py"
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", NAS_PROGRESS="none")
# nb201, 2 search steps per epoch: step 3 is the first of epoch 2
SEARCH = ["space=nb201", "space.C=4", "epochs=3", "data.max_items=64", "batch_size=16",
          "figures=false", "eval=false"]  # fmt: skip


class _Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(3))


def _checkpointer(path: Path) -> tuple[Checkpointer, _Counter]:
    model = _Counter()
    ckpt = Checkpointer(path, kind="search", env=D.DistEnv(), error=ValueError, what="a test")
    ckpt.register("model", model)
    return ckpt, model


def _save(ckpt: Checkpointer, model: _Counter, value: float, epoch: int) -> None:
    with torch.no_grad():
        model.w.fill_(value)
    ckpt.save({"epoch": epoch, "global_step": 2 * epoch, "step_in_epoch": 0})


def test_each_save_keeps_the_one_before_with_its_checksum(tmp_path):
    last = tmp_path / "last.pt"
    ckpt, model = _checkpointer(last)
    _save(ckpt, model, 1.0, 1)
    assert not (tmp_path / "previous.pt").exists()
    _save(ckpt, model, 2.0, 2)
    _save(ckpt, model, 3.0, 3)
    newest = load_checkpoint(last, kind="search")
    before = load_checkpoint(tmp_path / "previous.pt", kind="search")
    assert (newest["epoch"], before["epoch"]) == (3, 2)
    assert newest["model"]["w"].tolist() == [3.0] * 3
    assert newest["checksum"] == checksum(newest) != before["checksum"]
    # a file that loads but whose contents changed after it was written fails its checksum
    newest["model"]["w"][1] = 2.5
    torch.save(newest, last)
    with pytest.raises(DamagedCheckpointError, match="fails its checksum"):
        load_checkpoint(last, kind="search")
    state, line = load_resume(last, kind="search")
    assert state["epoch"] == 2 and line is not None
    assert "fails its checksum" in line and "resuming from the checkpoint before it" in line
    assert "previous.pt: epoch 2, step 4" in line and "\n" not in line
    assert (tmp_path / "last.pt.damaged").is_file()
    assert load_checkpoint(last, kind="search")["epoch"] == 2  # last.pt is the good one again
    # the next save keeps that good one as the previous
    _save(ckpt, model, 4.0, 3)
    assert load_checkpoint(tmp_path / "previous.pt", kind="search")["epoch"] == 2


def test_no_fallback_without_a_good_previous_or_for_an_unsafe_file(tmp_path):
    last = tmp_path / "last.pt"
    ckpt, model = _checkpointer(last)
    _save(ckpt, model, 1.0, 1)
    last.write_bytes(last.read_bytes()[:100])  # torn, and no previous
    with pytest.raises(DamagedCheckpointError, match="corrupt or truncated"):
        load_resume(last, kind="search")
    _save(ckpt, model, 1.0, 1)
    _save(ckpt, model, 2.0, 2)
    (tmp_path / "previous.pt").write_bytes(b"\0" * 64)
    last.write_bytes(last.read_bytes()[:100])
    with pytest.raises(DamagedCheckpointError, match="the one before it too"):
        load_resume(last, kind="search")
    assert not (tmp_path / "last.pt.damaged").exists()  # nothing moved when nothing loads
    # a checkpoint of another kind is refused, not skipped for the one before it
    _save(ckpt, model, 1.0, 1)
    _save(ckpt, model, 2.0, 2)
    with pytest.raises(CheckpointError, match="not a nas-train checkpoint"):
        load_resume(last, kind="train")


def _search(run_dir: Path, *extra: str, sigterm_at: int = 0) -> subprocess.CompletedProcess[str]:
    hook = [str(HOOKED), "search", f"--sigterm-at-step={sigterm_at}", "--"] if sigterm_at else []
    cmd = [sys.executable, *(hook or ["-m", "nas.cli.search"]), *SEARCH, *extra,
           f"hydra.run.dir={run_dir}"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "changed"])
def test_a_search_resumed_from_a_damaged_checkpoint_equals_the_uninterrupted_one(tmp_path, damage):
    whole = _search(tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr
    run = tmp_path / "stopped"
    stopped = _search(run, sigterm_at=3)
    assert stopped.returncode != 0 and "preempted" in stopped.stderr, stopped.stderr
    last = run / "checkpoints" / "last.pt"
    assert load_checkpoint(last, kind="search")["step_in_epoch"] == 1
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    resumed = _search(run, "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    lines = [ln for ln in resumed.stderr.splitlines() if "resuming from the checkpoint" in ln]
    assert len(lines) == 1 and "previous.pt: epoch 1, step 2" in lines[0], resumed.stderr
    assert (run / "checkpoints" / "last.pt.damaged").is_file()

    a = torch.load(tmp_path / "whole" / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(last, weights_only=True)
    for part in ("supernet", "strategy"):
        flat_a, flat_b = _tensors(a[part]), _tensors(b[part])
        assert flat_a.keys() == flat_b.keys()
        for k in flat_a:
            assert torch.equal(flat_a[k], flat_b[k]), (part, k)
    genotype = [
        json.loads((d / "genotype.json").read_text())["text"] for d in (tmp_path / "whole", run)
    ]
    assert genotype[0] == genotype[1]
    # the metrics log reads as one run: no step twice, the same losses
    steps = [_steps(d / "metrics.jsonl") for d in (tmp_path / "whole", run)]
    assert steps[0] == steps[1]


def _tensors(tree: object, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return {prefix: tree}
    if isinstance(tree, dict):
        out: dict[str, torch.Tensor] = {}
        for k, v in tree.items():
            out.update(_tensors(v, f"{prefix}.{k}"))
        return out
    if isinstance(tree, (list, tuple)):
        out = {}
        for i, v in enumerate(tree):
            out.update(_tensors(v, f"{prefix}.{i}"))
        return out
    return {}


def _steps(log: Path) -> list[tuple[int, float]]:
    events = [json.loads(line) for line in log.read_text().splitlines()]
    return [(e["step"], e["loss"]) for e in events if e["event"] == "step"]
