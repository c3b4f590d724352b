"""End to end: ``nas-search`` as a user runs it, on tiny configs and the embedded data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import hooked_cli
import pytest
import torch

from nas.plugins import available

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


def snapshot(folder: Path) -> dict[Path, bytes | None]:
    """Every path under ``folder``: a file's bytes, None for a folder."""
    return {p: p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


def arch_state(run_dir: Path) -> dict[str, torch.Tensor]:
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    return {k: v for k, v in state["strategy"]["module"].items() if k.startswith("arch_params")}


def supernet_state(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["supernet"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "full"
    proc = nas_search(run_dir, "epochs=3")
    assert proc.returncode == 0, proc.stderr
    return run_dir


@pytest.mark.slow
def test_search_writes_the_run_folder(uninterrupted):
    run_dir = uninterrupted
    assert (run_dir / "config.yaml").is_file()
    assert (run_dir / "checkpoints" / "last.pt").is_file()
    assert not list(run_dir.glob("*.log")) and not (run_dir / ".lock").exists()
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


@pytest.mark.slow
def test_stdout_names_the_genotype(tmp_path):
    proc = nas_search(tmp_path / "r", "epochs=1")
    assert proc.returncode == 0, proc.stderr
    assert "genotype (argmax): |" in proc.stdout
    assert "NB201 cell" in proc.stdout and "CIFAR-10" in proc.stdout


def strategy_overrides(strategy: str) -> list[str]:
    """A strategy's runs of the resume test (no figures but for DARTS's, which are checked);
    a strategy without architecture weights (RS-WS) with a selector that measures the
    supernet (one reading weights is refused), at a tiny size."""
    out = [f"search={strategy}"] + ([] if strategy == "darts" else ["figures=false"])
    if strategy == "rsws":
        out += ["selection=rsws", "selection.archs=4", "selection.batches_per_arch=1",
                "selection.top_k=1"]  # fmt: skip
    return out


@pytest.fixture(scope="module")
def uninterrupted_of(tmp_path_factory, uninterrupted):
    """The uninterrupted 3-epoch run of a strategy (DARTS: ``uninterrupted``), made once."""
    runs = {"darts": uninterrupted}

    def get(strategy: str) -> Path:
        if strategy not in runs:
            run_dir = tmp_path_factory.mktemp("runs") / strategy
            proc = nas_search(run_dir, "epochs=3", *strategy_overrides(strategy))
            assert proc.returncode == 0, proc.stderr
            runs[strategy] = run_dir
        return runs[strategy]

    return get


# Interrupted runs: the hooked program (tests/hooked_cli.py) pauses at an exact step, the test
# acts (a signal, kill -9, a second run), then lets it go on. TINY: 3 steps per epoch, so step 5
# is the second step of the second epoch (one epoch-end checkpoint written).
@pytest.mark.slow
@pytest.mark.parametrize("strategy", available("search"))
def test_kill9_then_resume_equals_uninterrupted(tmp_path, uninterrupted_of, strategy):
    uninterrupted = uninterrupted_of(strategy)
    run_dir = tmp_path / "killed"
    proc = hooked_cli.start("search", *TINY, "epochs=3", *strategy_overrides(strategy),
                            f"hydra.run.dir={run_dir}", pause_at_step=5)  # fmt: skip
    hooked_cli.wait_paused(proc)
    proc.kill()
    proc.wait()
    assert proc.returncode == -signal.SIGKILL  # it really was killed mid-run
    assert not (run_dir / "genotype.json").exists()
    # the dead run's lock file is left, but the kernel dropped its lock: no stale lock
    assert (run_dir / ".lock").read_text().startswith(f"pid={proc.pid} ")
    resumed = nas_search(run_dir, "epochs=3", *strategy_overrides(strategy), "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    for state in (arch_state, supernet_state):  # (RS-WS has no architecture parameters)
        a, b = state(uninterrupted), state(run_dir)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (run_dir / "genotype.json").read_text() == (uninterrupted / "genotype.json").read_text()
    assert not (run_dir / ".lock").exists()  # a run that ends removes its lock file
    # the resumed log reads as one run: no step logged twice
    steps = [
        json.loads(line)["step"]
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "step"
    ]
    assert steps == sorted(set(steps))


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "word"), [(signal.SIGTERM, 143, "preempted"),
                                                      (signal.SIGINT, 130, "interrupted")])  # fmt: skip
def test_sigterm_and_ctrl_c_checkpoint_at_the_step_and_resume_exactly(
    tmp_path, uninterrupted, signum, code, word
):
    run_dir = tmp_path / "stopped"
    proc = hooked_cli.start("search", *TINY, "epochs=3", f"hydra.run.dir={run_dir}",
                            pause_at_step=5)  # fmt: skip
    hooked_cli.wait_paused(proc)
    proc.send_signal(signum)
    _, err = hooked_cli.release(proc)
    assert proc.returncode == code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith(f"nas-search: {word}; checkpoint written to {run_dir}")
    assert lines[-1].endswith(f"hydra.run.dir={run_dir} resume=true")
    assert len(lines) == (2 if signum == signal.SIGINT else 1), err  # Ctrl-C: a note first
    assert "Traceback" not in err
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert (state["epoch"], state["step_in_epoch"]) == (1, 2)  # at the paused step's boundary
    resumed = nas_search(run_dir, "epochs=3", "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    a, b = arch_state(uninterrupted), arch_state(run_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_second_ctrl_c_stops_at_once_and_never_tears_the_checkpoint(tmp_path, uninterrupted):
    run_dir = tmp_path / "twice"
    # paused inside the second checkpoint write: its temporary file is complete, not renamed
    proc = hooked_cli.start("search", *TINY, "epochs=3", f"hydra.run.dir={run_dir}",
                            pause_in_save=2)  # fmt: skip
    hooked_cli.wait_paused(proc)
    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    assert "interrupted; writing a checkpoint" in proc.stderr.readline()  # the first was seen
    proc.send_signal(signal.SIGINT)
    _, err = hooked_cli.release(proc)
    assert proc.returncode == 130, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("nas-search: stopped at once (Ctrl-C); the "
                                                   f"last checkpoint {run_dir}")  # fmt: skip
    assert "Traceback" not in err
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last.pt", "previous.pt"]
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert (state["epoch"], state["step_in_epoch"]) == (1, 0)  # the first epoch's, whole
    resumed = nas_search(run_dir, "epochs=3", "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    a, b = arch_state(uninterrupted), arch_state(run_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_a_second_run_into_a_busy_folder_is_refused_naming_the_holder(tmp_path):
    run_dir = tmp_path / "busy"
    first = hooked_cli.start("search", *TINY, "epochs=1", f"hydra.run.dir={run_dir}",
                             pause_at_step=1)  # fmt: skip
    hooked_cli.wait_paused(first)  # it holds the lock, mid-epoch
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    for extra in ([], ["resume=true"]):
        second = nas_search(run_dir, "epochs=1", *extra)
        assert second.returncode == 2, second.stderr
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, second.stderr
        assert f"run folder {run_dir} is in use by another run (pid {first.pid} on host" in lines[0]
    assert before == {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    out, err = hooked_cli.release(first)
    assert first.returncode == 0, err
    assert "genotype (argmax)" in out and not (run_dir / ".lock").exists()


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_keeps_the_last_checkpoint(tmp_path, uninterrupted):
    run_dir = tmp_path / "full"
    proc = hooked_cli.start("search", *TINY, "epochs=3", f"hydra.run.dir={run_dir}",
                            enospc_in_save=2)  # fmt: skip
    out, err = hooked_cli.release(proc)
    assert proc.returncode == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"nas-search: error: cannot write {run_dir} (No space left on "
                               f"device); the last complete checkpoint {run_dir}")  # fmt: skip
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last.pt", "previous.pt"]
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert state["epoch"] == 1
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        json.loads(line)  # every logged line whole
    resumed = nas_search(run_dir, "epochs=3", "resume=true")  # room again: it continues
    assert resumed.returncode == 0, resumed.stderr
    a, b = arch_state(uninterrupted), arch_state(run_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["space=darts9"],
            "unknown space 'darts9'; expected one of darts, fbnet, fbnet_cifar, nb201",
        ),
        (["search=enas"], "unknown search 'enas'; expected one of darts"),
        (["epochs=-1"], "epochs must be an int >= 0, got -1"),
        (["batch_size=abc"], "batch_size must be a positive int, got 'abc'"),
        (["search.order=3"], "search.order must be 1 or 2, got 3"),
        (["data.train_portion=1.5"], r"train_portion must be a number in \(0, 1\], got 1.5"),
        (["resume=true"], "again without resume=true"),
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


@pytest.mark.slow
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

    # both checkpoints torn (one torn newest falls back: tests/run/test_checkpoint_fallback.py)
    for name in ("last.pt", "previous.pt"):
        ckpt = run_dir / "checkpoints" / name
        ckpt.write_bytes(ckpt.read_bytes()[:1000])
    proc = nas_search(run_dir, "epochs=3", "resume=true")
    assert proc.returncode == 2 and "is corrupt or truncated" in proc.stderr
    assert "the one before it too" in proc.stderr and len(proc.stderr.splitlines()) == 1


@pytest.mark.slow
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


# ------------------------------------------------------------ refusals: one line, no trace


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["foo=1"],
            r"unknown config key 'foo' \(foo=1\); nas-search reads: amp, arch_batch, batch_size",
        ),
        (["+foo=1"], r"unknown config key 'foo' \(\+foo=1 adds a key that no part of nas-search"),
        (["optimizer.lrr=0.1"], r"unknown config key 'optimizer.lrr' .*optimizer has: grad_clip"),
        (["+seed=1"], r"seed is already in the config: set it with seed=\.\.\., without the \+"),
        (["seed=0,1"], r"seed=0,1 is a sweep: add -m"),
        (["epochs=abc"], "epochs must be an int >= 0, got 'abc'"),
        (["-m", "seed=0,1", "+foo=1"], "unknown config key 'foo'"),  # every job of a sweep
    ],
)
def test_unknown_keys_and_bad_values_are_refused_before_torch_and_leave_nothing(
    tmp_path, overrides, message
):
    """Refused from the command line alone: before Hydra creates the run folder, and before
    torch is imported (a ``torch`` that cannot be imported is on the path)."""
    fake = tmp_path / "no_torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch imported before the check')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), os.getcwd(),
                                                       os.environ.get("PYTHONPATH", "")]))  # fmt: skip
    root = tmp_path / "runs"
    cmd = [sys.executable, "-m", "nas.cli.search", *TINY, *overrides,
           f"hydra.run.dir={root}/new/r", f"hydra.sweep.dir={root}/sweep"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    import re

    assert re.search(message, lines[0]), lines[0]
    assert not root.exists()


@pytest.mark.slow
def test_refused_runs_leave_no_trace(tmp_path, uninterrupted):
    import shutil

    root = tmp_path / "runs"
    # refused after Hydra created the folder (its parents too): all of it removed again
    proc = nas_search(root / "a" / "b", "epochs=1", "resume=true")
    assert proc.returncode == 2 and "again without resume=true" in proc.stderr
    proc = nas_search(root / "c", "epochs=1", "+search.bogus=1")  # the constructor refuses it
    assert proc.returncode == 2 and "bogus" in proc.stderr
    assert not root.exists()
    # an existing run refused: every file byte-identical, nothing added (no lock file left)
    run_dir = tmp_path / "copy"
    shutil.copytree(uninterrupted, run_dir)
    before = snapshot(run_dir)
    proc = nas_search(run_dir, "epochs=3", "resume=true", "data.root=/no/such/data",
                      "data=cifar10")  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert before == snapshot(run_dir)


@pytest.mark.slow
def test_resume_refuses_a_changed_config_in_one_line(tmp_path, uninterrupted):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(uninterrupted, run_dir)
    before = snapshot(run_dir)
    proc = nas_search(run_dir, "epochs=3", "resume=true", "seed=1", "optimizer.lr=0.05",
                      "search.arch_lr=0.001", "selection=pt")  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "was written with other values: optimizer.lr 0.025 -> 0.05, search.arch_lr " in lines[0]
    assert (
        "seed 0 -> 1" in lines[0]
        and "selection._target_ nas.selection.argmax.Argmax -> nas.selection.perturbation"
        in lines[0]
    )
    assert before == snapshot(run_dir)
    # the finished 3-epoch cosine run cannot become a 4-epoch one (epoch 2's rate would change)
    proc = nas_search(run_dir, "epochs=4", "resume=true")
    assert proc.returncode == 2
    assert "epochs=4 would change epoch 2 of the 3 already trained" in proc.stderr
    assert before == snapshot(run_dir)
    # what cannot change the result may change: device, logging, figures, data loading
    proc = nas_search(run_dir, "epochs=3", "resume=true", "device=cpu", "log_every=2",
                      "figures=false", "eval=false", "data.num_workers=0",
                      "data.pin_memory=false")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (run_dir / "genotype.json").read_text() == (uninterrupted / "genotype.json").read_text()


def _can_mount() -> bool:
    import shutil

    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
                           capture_output=True)  # fmt: skip
    return probe.returncode == 0


needs_mount = pytest.mark.skipif(
    not _can_mount(), reason="needs a private mount namespace (unshare -m, mount)"
)


def _in_small_filesystem(
    tmp_path: Path, script: str, size: str = "1m"
) -> subprocess.CompletedProcess:
    """``script`` run in a private mount namespace where ``$FS`` is a fresh tmpfs of ``size``
    (gone with the process: the script copies what the test reads to ``$OUT``)."""
    fs, out = tmp_path / "fs", tmp_path / "out"
    fs.mkdir()
    out.mkdir()
    env = dict(os.environ, FS=str(fs), OUT=str(out), PYTHONUNBUFFERED="1",
               TINY=" ".join(TINY), PY=sys.executable)  # fmt: skip
    wrapped = f'mount -t tmpfs -o size={size} tmpfs "$FS" && {script}'
    return subprocess.run(["unshare", "-m", "sh", "-c", wrapped], capture_output=True,
                          text=True, env=env, timeout=600)  # fmt: skip


@pytest.mark.slow
@needs_mount
def test_a_really_full_disk_is_one_line_and_leaves_whole_files(tmp_path):
    # 192 KiB: the config and the logs fit, the first checkpoint (~290 KB) does not
    proc = _in_small_filesystem(
        tmp_path,
        '$PY -m nas.cli.search $TINY epochs=2 hydra.run.dir="$FS/run"; rc=$?; '
        'cp -a "$FS/run" "$OUT/"; exit $rc',
        size="192k",
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert (
        "No space left on device" in lines[0] and "no checkpoint had been written yet" in lines[0]
    )
    run_dir = tmp_path / "out" / "run"
    assert not list(run_dir.rglob("*.tmp"))
    import yaml

    assert yaml.safe_load((run_dir / "config.yaml").read_text())["epochs"] == 2
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        json.loads(line)


@needs_mount
def test_a_read_only_run_folder_is_one_line_and_untouched(tmp_path, uninterrupted):
    proc = _in_small_filesystem(
        tmp_path,
        f'cp -a "{uninterrupted}" "$FS/run" && mount -o remount,ro "$FS" && '
        '$PY -m nas.cli.search $TINY epochs=3 resume=true hydra.run.dir="$FS/run"; rc1=$?; '
        '$PY -m nas.cli.search $TINY epochs=3 hydra.run.dir="$FS/new/run"; rc2=$?; '
        'cp -a "$FS/run" "$OUT/"; echo "rc $rc1 $rc2"',
        size="4m",
    )
    assert "rc 2 2" in proc.stdout, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 2, proc.stderr
    assert "cannot write run folder" in lines[0] and "Read-only file system" in lines[0]
    assert "cannot create run folder" in lines[1] and "Read-only file system" in lines[1]
    copy = tmp_path / "out" / "run"
    assert {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()} == {
        p.relative_to(uninterrupted): p.read_bytes()
        for p in uninterrupted.rglob("*")
        if p.is_file()
    }
