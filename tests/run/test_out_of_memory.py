"""Out of memory inside a step stops the run in one line: the last good checkpoint is kept
(and resumes), and the line names the settings that lower memory with their values."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import nas
from nas.api import RunError
from nas.run.checkpoint import load_checkpoint
from nas.strategies.base import SearchStrategy
from nas.training.loop import TrainRun

SEARCH = {"epochs": 2, "data.max_items": 64, "batch_size": 16, "figures": False}
TRAIN = {"epochs": 2, "data.max_items": 32, "batch_size": 16, "model.darts.C": 4,
         "model.darts.layers": 3}  # fmt: skip


def _fail_after(monkeypatch, owner: type, name: str, calls: int, error: BaseException) -> None:
    """``owner.name`` raises ``error`` from its call number ``calls + 1`` on."""
    real = getattr(owner, name)
    seen = {"n": 0}

    def step(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen["n"] += 1
        if seen["n"] > calls:
            raise error
        return real(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, step)


@pytest.mark.slow
@pytest.mark.parametrize(
    "error", [torch.OutOfMemoryError("CUDA out of memory"), MemoryError()], ids=["cuda", "cpu"]
)
def test_a_search_out_of_memory_in_its_second_epoch(tmp_path, monkeypatch, error):
    monkeypatch.setenv("NAS_PROGRESS", "none")
    run_dir = tmp_path / "run"
    # 64 images, half for the weights, batch 16: two steps per epoch; the third fails
    _fail_after(monkeypatch, SearchStrategy, "step", 2, error)
    with pytest.raises(RunError) as raised:
        nas.search(space="nb201", strategy="darts", overrides=SEARCH, run_dir=run_dir)
    line = str(raised.value)
    assert "\n" not in line and line.startswith("out of memory on cpu")
    for setting in ("batch_size=16", "micro_batches=1", "space.partial_channels=1", "amp=null"):
        assert setting in line, line
    checkpoint = Path(run_dir) / "checkpoints" / "last.pt"
    assert f"the last checkpoint, {checkpoint}, is kept" in line
    assert load_checkpoint(checkpoint, kind="search")["epoch"] == 1  # the first epoch, whole
    monkeypatch.undo()
    resumed = nas.search(
        space="nb201", strategy="darts", overrides=SEARCH, run_dir=run_dir, resume=True
    )
    assert resumed.finished and len(resumed.epochs) == 2


def test_a_training_out_of_memory_names_its_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("NAS_PROGRESS", "none")
    _fail_after(monkeypatch, TrainRun, "_train_step", 0, MemoryError())
    with pytest.raises(RunError) as raised:
        nas.train("DARTS_V2", overrides=TRAIN, run_dir=tmp_path / "train")
    line = str(raised.value)
    assert line.startswith("out of memory on cpu; no checkpoint was written yet")
    assert "batch_size=16" in line and "space.partial_channels" not in line
