"""No file the toolkit reads can run code.

A malicious pickle (an object whose ``__reduce__`` creates a marker file) given to every entry
point that reads a file runs nothing: the marker is never created, and the refusal is one line
naming the switch that trusts the file. With the switch, a legitimate file that needs the full
unpickler (a checkpoint of an earlier version, whose NumPy RNG state is NumPy's own tuple) is
read. The checkpoints the toolkit writes load with ``weights_only=True``.
"""

from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nas.run.checkpoint import (
    CheckpointError,
    UnsafeFileError,
    load_checkpoint,
    rng_state,
    safe_load,
    set_rng_state,
)

ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", NAS_PROGRESS="none")
TINY_SEARCH = ["space=nb201", "epochs=1", "data.max_items=64", "batch_size=16", "figures=false"]
TINY_TRAIN = ["model.darts.C=4", "model.darts.layers=3", "data.max_items=32", "batch_size=16"]


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


def _evil_file(path: Path, marker: Path, wrap: bool = True) -> Path:
    payload = {"kind": "train", "version": 2, "model": _Evil(marker)} if wrap else _Evil(marker)
    torch.save(payload, path)
    return path


def _cli(program: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", f"nas.cli.{program}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=cwd, timeout=600)


def _refused(done: subprocess.CompletedProcess[str], marker: Path, switch: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and switch in lines[0], done.stderr
    assert "only the full unpickler reads" in lines[0]
    assert not marker.exists(), "the malicious pickle ran"


def test_the_pickle_of_the_tests_does_run_code(tmp_path):
    """The payload is live: loaded with the full unpickler, it creates the marker."""
    marker = tmp_path / "ran"
    torch.load(_evil_file(tmp_path / "evil.pt", marker), weights_only=False)
    assert marker.exists()


@pytest.mark.slow
def test_resume_of_a_search_and_from_run(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "ran"
    done = _cli("search", *TINY_SEARCH, f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert isinstance(safe_load(run / "checkpoints" / "last.pt", switch="-"), dict)  # ours load
    _evil_file(run / "checkpoints" / "last.pt", marker)
    resumed = _cli(
        "search", *TINY_SEARCH[:-1], "epochs=2", "figures=false", "resume=true",
        f"hydra.run.dir={run}", cwd=tmp_path,
    )  # fmt: skip
    _refused(resumed, marker, "trust_pickle=true")
    selected = _cli("search", *TINY_SEARCH, f"from_run={run}", "selection=pt", cwd=tmp_path)
    _refused(selected, marker, "trust_pickle=true")
    # nas.load_run and the figures read the folder without the full unpickler
    from nas.analysis.run import load_checkpoint_arch
    from nas.api import load_run

    assert load_checkpoint_arch(run / "checkpoints" / "last.pt") == {"params": {}, "masks": {}}
    assert load_run(run).kind == "search"
    assert not marker.exists()


@pytest.mark.slow
def test_training_entry_points(tmp_path):
    marker = tmp_path / "ran"
    evil = _evil_file(tmp_path / "evil.pt", marker)
    for args in (
        ["eval_only=true", f"checkpoint={evil}"],
        [f"distill.teacher={evil}", "distill.weight=1"],
        ["distill.teacher=DARTS_V2", f"distill.weights={evil}", "distill.weight=1"],
    ):
        done = _cli("train", "genotype=DARTS_V2", *TINY_TRAIN, "epochs=1", *args, cwd=tmp_path)
        _refused(done, marker, "trust_pickle=true")
    run = tmp_path / "train"
    done = _cli("train", "genotype=DARTS_V2", *TINY_TRAIN, "epochs=1", f"hydra.run.dir={run}",
                cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    _evil_file(run / "checkpoints" / "last.pt", marker)
    resumed = _cli("train", "genotype=DARTS_V2", *TINY_TRAIN, "epochs=2", "resume=true",
                   f"hydra.run.dir={run}", cwd=tmp_path)  # fmt: skip
    _refused(resumed, marker, "trust_pickle=true")


@pytest.mark.slow
def test_export_and_benchmark_files(tmp_path):
    marker = tmp_path / "ran"
    evil = _evil_file(tmp_path / "evil.pt", marker, wrap=False)
    done = _cli("export", "DARTS_V2", "--C", "4", "--layers", "3", "--weights", str(evil),
                "--onnx", str(tmp_path / "net.onnx"), cwd=tmp_path)  # fmt: skip
    _refused(done, marker, "--trust-pickle")
    done = _cli("bench", "convert", str(evil), str(tmp_path / "out.nbt"), cwd=tmp_path)
    _refused(done, marker, "--trust-pickle")
    from nas.bench import NB201

    with pytest.raises(UnsafeFileError, match="--trust-pickle"):
        NB201(path=evil).query(0)
    assert not marker.exists()


def test_dataset_batch_files_build_arrays_only(tmp_path):
    from nas.data.formats import _load_pickle

    marker = tmp_path / "ran"
    batch = tmp_path / "data_batch_1"
    batch.write_bytes(pickle.dumps({"data": _Evil(marker), "labels": [0]}))
    with pytest.raises(ValueError, match="never holds"):
        _load_pickle(batch, encoding="bytes", expected="'data' and 'labels'")
    assert not marker.exists()
    fine = tmp_path / "data_batch_2"
    data = np.arange(12, dtype=np.uint8).reshape(1, 12)
    fine.write_bytes(pickle.dumps({b"data": data, b"labels": [3]}, protocol=2))
    entry = _load_pickle(fine, encoding="bytes", expected="'data' and 'labels'")
    assert np.array_equal(entry["data"], data) and entry["labels"] == [3]


def test_checkpoints_hold_plain_values_and_older_ones_need_the_switch(tmp_path):
    random.seed(1)
    np.random.seed(2)
    np.random.randn()  # a cached Gaussian in NumPy's state
    state = {"kind": "search", "version": 2, "rng": [rng_state()]}
    torch.save(state, tmp_path / "new.pt")
    loaded = load_checkpoint(tmp_path / "new.pt", kind="search")  # weights_only=True
    expected = (random.random(), np.random.randn(), np.random.rand())
    set_rng_state(loaded["rng"][0])
    assert (random.random(), np.random.randn(), np.random.rand()) == expected
    # an earlier version's checkpoint: NumPy's own state tuple, which needs the full unpickler
    old = {**state, "rng": [{**rng_state(), "numpy": np.random.get_state()}]}
    torch.save(old, tmp_path / "old.pt")
    with pytest.raises(CheckpointError, match="pass trust_pickle=true"):
        load_checkpoint(tmp_path / "old.pt", kind="search")
    trusted = load_checkpoint(tmp_path / "old.pt", kind="search", trust_pickle=True)
    expected = (np.random.randn(), np.random.rand())
    set_rng_state(trusted["rng"][0])
    assert (np.random.randn(), np.random.rand()) == expected
