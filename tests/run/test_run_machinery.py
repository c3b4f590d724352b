"""nas.run, the machinery nas-search and nas-train share: lock, resume check, more epochs.

The real-process races, kills, signals and full disks are in tests/cli and tests/train; here
the pieces, and the meaning of a resume with more epochs, on in-process runs.
"""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.run.disk import atomic_write
from nas.run.folder import RunFolder
from nas.run.lock import RunFolderBusy, RunLock
from nas.run.resume import changed_keys, check_epochs, check_same_config


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------- lock


def test_lock_refuses_a_second_holder_naming_the_first(tmp_path):
    first = RunLock(tmp_path, program="nas-search")
    first.acquire()
    record = (tmp_path / ".lock").read_text()
    assert record.startswith(f"pid={os.getpid()} host=")
    with pytest.raises(RunFolderBusy, match=rf"is in use by another run \(pid {os.getpid()} on "):
        RunLock(tmp_path, program="nas-search").acquire()  # another open file: another holder
    first.release()
    assert not (tmp_path / ".lock").exists()
    second = RunLock(tmp_path, program="nas-search")
    second.acquire()  # free again
    second.release()


def test_a_dead_holders_lock_file_is_taken_over(tmp_path):
    (tmp_path / ".lock").write_text("pid=999999 host=gone since=2026-01-01T00:00:00 nas-search\n")
    lock = RunLock(tmp_path, program="nas-train")
    lock.acquire()  # the file is there, its lock is not: the kernel dropped it with its process
    assert (tmp_path / ".lock").read_text().startswith(f"pid={os.getpid()} ")
    lock.release()


def test_only_rank_0_locks(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    with RunFolder(tmp_path / "r", program="nas-search"):
        assert not (tmp_path / "r").exists()  # rank 1 neither creates nor locks the folder
    monkeypatch.setenv("RANK", "0")
    with RunFolder(tmp_path / "r", program="nas-search") as folder:
        assert folder.lock.held and (tmp_path / "r" / ".lock").is_file()


def test_a_refused_run_removes_the_folders_it_created_and_nothing_else(tmp_path):
    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(ValueError), RunFolder(existing / "a" / "b", program="nas-search"):
        raise ValueError("refused")
    assert sorted(tmp_path.rglob("*")) == [existing]
    with pytest.raises(ValueError), RunFolder(existing, program="nas-search"):
        raise ValueError("refused")
    assert existing.is_dir()  # it was there before
    # a run that wrote something keeps its folder
    with pytest.raises(ValueError), RunFolder(existing / "c", program="nas-search"):
        (existing / "c" / "metrics.jsonl").write_text("{}\n")
        raise ValueError("failed")
    assert (existing / "c" / "metrics.jsonl").is_file()


# ---------------------------------------------------------------------------- resume check


def test_changed_keys_skip_the_neutral_ones():
    old = {"seed": 0, "device": "auto", "optimizer": {"lr": 0.025, "momentum": 0.9},
           "data": {"root": "a", "name": "cifar10"}, "epochs": 2}  # fmt: skip
    new = {"seed": 1, "device": "cpu", "optimizer": {"lr": 0.025, "momentum": 0.5},
           "data": {"root": "b", "name": "cifar10"}, "epochs": 4, "extra": 1}  # fmt: skip
    assert changed_keys(old, new, ignore=("device", "data.root", "epochs")) == [
        ("extra", "<absent>", 1),
        ("optimizer.momentum", 0.9, 0.5),
        ("seed", 0, 1),
    ]
    assert changed_keys({"lr": 1}, {"lr": 1.0}) == []  # the same number
    assert changed_keys({"flag": 1}, {"flag": True}) == [("flag", 1, True)]
    with pytest.raises(ValueError, match=r"other values: seed 0 -> 1; resume with the run's own "):
        check_same_config({"seed": 0}, {"seed": 1}, checkpoint="c.pt", neutral=(),
                          neutral_words="device")  # fmt: skip


def test_more_epochs_only_where_the_epochs_taken_stay_the_same():
    def cosine(total: int, epoch: int) -> dict[str, float]:
        return {"lr": 0.5 * (1 + math.cos(math.pi * epoch / total))}

    def step(total: int, epoch: int) -> dict[str, float]:
        return {"lr": 0.97**epoch}

    check_epochs(old_epochs=2, new_epochs=4, started=2, settings=step, checkpoint="c")
    check_epochs(old_epochs=2, new_epochs=4, started=1, settings=cosine, checkpoint="c")
    with pytest.raises(ValueError, match="epochs=4 would change epoch 2 of the 2 already trained"):
        check_epochs(old_epochs=2, new_epochs=4, started=2, settings=cosine, checkpoint="c")
    with pytest.raises(ValueError, match="has already started 3 epochs; resume with epochs >= 3"):
        check_epochs(old_epochs=4, new_epochs=2, started=3, settings=step, checkpoint="c")


# ------------------------------------------------ more epochs: the run of the new total


def _search_cfg(*extra: str):
    from nas.cli.search import CONFIG_DIR

    tiny = ["space.C=4", "space.layers=1", "batch_size=16", "data.max_items=64", "eval=false",
            "figures=false", "log_every=1"]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=[*tiny, *extra])


def _arch(run_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    return {k: v for k, v in state["strategy"]["module"].items() if k.startswith("arch")}


def _lrs(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [e["lr"] for e in map(json.loads, lines) if e["event"] == "epoch"]


def test_a_finished_one_epoch_search_extended_to_two_is_the_two_epoch_search(tmp_path, one_thread):
    from nas.pipeline.search import SearchError, SearchRun

    SearchRun(_search_cfg("epochs=2"), tmp_path / "two").run()
    SearchRun(_search_cfg("epochs=1"), tmp_path / "ext").run()  # finished, genotype written
    SearchRun(_search_cfg("epochs=2", "resume=true"), tmp_path / "ext").run()
    a, b = _arch(tmp_path / "two"), _arch(tmp_path / "ext")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _lrs(tmp_path / "ext") == _lrs(tmp_path / "two")  # 0.025, then cosine over 2 epochs
    lines = [(tmp_path / d / "genotype.json").read_text() for d in ("two", "ext")]
    assert json.loads(lines[0])["text"] == json.loads(lines[1])["text"]
    # a third epoch would change the second, already trained: refused
    with pytest.raises(SearchError, match="epochs=3 would change epoch 2 of the 2 already"):
        SearchRun(_search_cfg("epochs=3", "resume=true"), tmp_path / "ext")


def test_a_finished_training_run_on_a_step_schedule_extends_exactly(tmp_path, one_thread):
    from nas.cli.train import compose_config
    from nas.training.loop import TrainRun

    tiny = ["model.darts.C=4", "model.darts.layers=3", "batch_size=32", "data.max_items=64",
            "eval.max_items=32", "log_every=1", "optimizer.schedule=step",
            "model.drop_path=0"]  # fmt: skip
    TrainRun(compose_config([*tiny, "epochs=2"]), tmp_path / "two").run()
    TrainRun(compose_config([*tiny, "epochs=1"]), tmp_path / "ext").run()
    TrainRun(compose_config([*tiny, "epochs=2", "resume=true"]), tmp_path / "ext").run()
    a = torch.load(tmp_path / "two" / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(tmp_path / "ext" / "checkpoints" / "last.pt", weights_only=False)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert _lrs(tmp_path / "ext") == pytest.approx([0.025, 0.025 * 0.97])


def test_atomic_write_reports_a_full_disk_hidden_behind_a_cleanup_error(tmp_path):
    # torch.save's zip writer, on a full disk: the OSError, then a RuntimeError from its cleanup
    def write(f):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos") from None

    target = tmp_path / "last.pt"
    target.write_bytes(b"old")
    with pytest.raises(OSError) as info:
        atomic_write(target, write)
    assert info.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["last.pt"]
    with pytest.raises(RuntimeError, match="a bug"):  # anything else stays what it is
        atomic_write(target, lambda f: (_ for _ in ()).throw(RuntimeError("a bug")))
