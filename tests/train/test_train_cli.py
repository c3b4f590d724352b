"""End to end: ``nas-train`` as a user runs it, on tiny networks and the embedded data."""

from __future__ import annotations

import json
import re
import shutil
import signal
from pathlib import Path

import hooked_cli
import pytest
import torch

NB201_ARCH = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def checkpoint(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)


@pytest.mark.slow
def test_run_folder_holds_everything(uninterrupted):
    run_dir = uninterrupted
    files = sorted(p.name for p in run_dir.iterdir())
    assert files == ["checkpoints", "config.yaml", "metrics.jsonl", "results.json", "tensorboard"]
    assert any((run_dir / "tensorboard").iterdir())
    log = events(run_dir)
    model = [e for e in log if e["event"] == "model"]
    assert len(model) == 1 and model[0]["network"] == "NetworkCIFAR(C=4, layers=3, auxiliary)"
    assert model[0]["params"] < model[0]["params_with_aux"] and model[0]["macs"] > 0
    epochs = [e for e in log if e["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [0, 1]
    for e in epochs:
        for key in ("train_loss", "train_top1", "train_top5", "test_loss", "test_top1",
                    "test_top5", "lr", "images_per_s", "drop_path_prob"):  # fmt: skip
            assert key in e, key
        assert 0 <= e["test_top1"] <= e["test_top5"] <= 100
    # cosine over 2 epochs: 0.025 then 0.0125; drop-path ramps 0.2 * epoch / epochs
    assert [e["lr"] for e in epochs] == pytest.approx([0.025, 0.0125])
    assert [e["drop_path_prob"] for e in epochs] == pytest.approx([0.0, 0.1])
    steps = [e["step"] for e in log if e["event"] == "step"]
    assert steps == list(range(1, 9))  # 128 images / 32 per step x 2 epochs
    results = json.loads((run_dir / "results.json").read_text())
    assert results["final"]["test_top1"] == epochs[-1]["test_top1"]
    assert results["params"] == model[0]["params"] and results["world_size"] == 1
    assert results["genotype"].startswith("Genotype(normal=[('sep_conv_3x3', 0)")
    state = checkpoint(run_dir)
    assert state["kind"] == "train" and state["epoch"] == 2 and state["step_in_epoch"] == 0
    for key in ("model", "optimizer", "scheduler", "scaler", "rng", "ema", "config"):
        assert key in state


# Interrupted runs: the hooked program (tests/hooked_cli.py) pauses at an exact step, the test
# acts, then lets it go on. TINY: 4 steps per epoch, so step 6 is in the second epoch.
@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "word"), [(signal.SIGTERM, 143, "preempted"),
                                                      (signal.SIGINT, 130, "interrupted")])  # fmt: skip
def test_sigterm_and_ctrl_c_mid_epoch_then_resume_equals_uninterrupted(
    tmp_path, uninterrupted, nas_train, tiny, signum, code, word
):
    run_dir = tmp_path / "stopped"
    proc = hooked_cli.start("train", *tiny, "epochs=2", f"hydra.run.dir={run_dir}",
                            pause_at_step=6)  # fmt: skip
    hooked_cli.wait_paused(proc)
    proc.send_signal(signum)
    _, err = hooked_cli.release(proc)
    assert proc.returncode == code, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith(f"nas-train: {word}; checkpoint written to {run_dir}")
    assert lines[-1].endswith(f"hydra.run.dir={run_dir} resume=true")
    assert "Traceback" not in err
    state = checkpoint(run_dir)
    assert (state["epoch"], state["step_in_epoch"]) == (1, 2)  # at the paused step's boundary
    resumed = nas_train(run_dir, "epochs=2", "resume=true")
    assert resumed.returncode == 0, resumed.stderr
    a, b = checkpoint(uninterrupted), checkpoint(run_dir)
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    for key in ("train_loss", "train_top1", "test_loss", "test_top1", "test_top5"):
        assert a["final"][key] == b["final"][key], key
    # the resumed log reads as one run: every step once, the same losses
    steps = [(e["step"], e["train_loss"]) for e in events(run_dir) if e["event"] == "step"]
    reference = [
        (e["step"], e["train_loss"]) for e in events(uninterrupted) if e["event"] == "step"
    ]
    assert steps == reference


@pytest.mark.slow
def test_a_busy_folder_and_a_full_disk_are_one_line(tmp_path, nas_train, tiny):
    run_dir = tmp_path / "busy"
    first = hooked_cli.start("train", *tiny, "epochs=1", f"hydra.run.dir={run_dir}",
                             pause_at_step=1)  # fmt: skip
    hooked_cli.wait_paused(first)  # holds the lock
    second = nas_train(run_dir, "epochs=1")
    assert second.returncode == 2
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, second.stderr
    assert f"is in use by another run (pid {first.pid} on host" in lines[0]
    out, err = hooked_cli.release(first)
    assert first.returncode == 0, err
    assert not (run_dir / ".lock").exists()

    full = tmp_path / "full"  # the second checkpoint write fails as on a full disk
    proc = hooked_cli.start("train", *tiny, "epochs=2", f"hydra.run.dir={full}",
                            enospc_in_save=2)  # fmt: skip
    _, err = hooked_cli.release(proc)
    assert proc.returncode == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "(No space left on device); the last complete checkpoint" in lines[0]
    assert sorted(p.name for p in (full / "checkpoints").iterdir()) == ["last.pt", "previous.pt"]
    assert checkpoint(full)["epoch"] == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["foo=1"], r"unknown config key 'foo' \(foo=1\); nas-train reads: amp, augment"),
        (["+foo=1"], r"unknown config key 'foo' \(\+foo=1 adds a key that no part of nas-train"),
        (["model.darts.CC=3"], r"unknown config key 'model.darts.CC' .*model.darts has: C, layers"),
        (["epochs=abc"], "epochs must be a positive int, got 'abc'"),
    ],
)
def test_unknown_keys_and_bad_values_are_refused_before_torch_and_leave_nothing(
    tmp_path, tiny, overrides, message
):
    import os
    import subprocess
    import sys

    fake = tmp_path / "no_torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch imported before the check')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), os.getcwd(),
                                                       os.environ.get("PYTHONPATH", "")]))  # fmt: skip
    root = tmp_path / "runs"
    cmd = [sys.executable, "-m", "nas.cli.train", *tiny, *overrides, f"hydra.run.dir={root}/r"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not root.exists()


@pytest.mark.slow
def test_refused_runs_leave_no_trace(tmp_path, nas_train):
    root = tmp_path / "runs"
    for overrides in (["resume=true"], ["genotype=DARTS_V9"], ["data=cifar10", "data.root=/no"]):
        proc = nas_train(root / "a" / "b", "epochs=1", *overrides)
        assert proc.returncode == 2, proc.stderr
    assert not root.exists()


def test_eval_only_reproduces_the_final_test_accuracy(tiny, uninterrupted, one_thread):
    from nas.cli.train import compose_config
    from nas.training import run_eval

    cfg = compose_config([*tiny, "eval_only=true", f"checkpoint={uninterrupted}"])
    result = run_eval(cfg)
    final = json.loads((uninterrupted / "results.json").read_text())["final"]
    assert result["epoch"] == 2 and result["test_images"] == 64
    assert result["test_top1"] == pytest.approx(final["test_top1"])
    assert result["test_loss"] == pytest.approx(final["test_loss"], rel=1e-5)


def test_eval_only_gives_the_numbers_of_the_run_with_ema_and_its_eval_batch(
    tmp_path, tiny, one_thread
):
    """``run_eval`` measures with the loop's own set-up (test set, eval batch, loader, network,
    evaluation pass): in the same process it gives the run's last numbers exactly, EMA too."""
    from nas.cli.train import compose_config
    from nas.training import run_eval, run_train

    overrides = [*tiny, "epochs=1", "ema.decay=0.5", "eval.batch_size=16", "eval.max_items=40"]
    final = run_train(compose_config(overrides), tmp_path / "ema").results["final"]
    cfg = compose_config([*overrides, "eval_only=true", f"checkpoint={tmp_path / 'ema'}"])
    result = run_eval(cfg)
    assert result["epoch"] == 1 and result["test_images"] == 40
    for key in ("test_loss", "test_top1", "test_top5", "ema_test_loss", "ema_test_top1"):
        assert result[key] == final[key], key


def test_eval_only_refuses_data_of_another_class_count(tmp_path, tiny, uninterrupted, one_thread):
    from PIL import Image

    from nas.cli.train import compose_config
    from nas.training import TrainError, run_eval

    for split in ("train", "val"):
        for name in ("cat", "dog", "fox"):
            (tmp_path / split / name).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(tmp_path / split / name / "0.png")
    data = [
        "data=imagefolder",
        f"data.root={tmp_path / 'train'}",
        f"data.val_root={tmp_path / 'val'}",
    ]
    cfg = compose_config([*tiny, *data, "eval_only=true", f"checkpoint={uninterrupted}"])
    last = uninterrupted / "checkpoints" / "last.pt"
    with pytest.raises(TrainError) as info:
        run_eval(cfg)
    assert str(info.value) == (
        f"checkpoint {last} was trained on cifar10-mini (10 classes); data=imagefolder has 3"
    )


@pytest.mark.slow
def test_existing_run_folder_is_never_damaged(tmp_path, uninterrupted, nas_train):
    run_dir = tmp_path / "copy"
    shutil.copytree(uninterrupted, run_dir)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    proc = nas_train(run_dir, "epochs=2")  # forgot resume=true
    assert proc.returncode == 2 and "already holds a training run" in proc.stderr
    assert before == {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    # both checkpoints torn (one torn newest falls back: tests/run/test_checkpoint_fallback.py)
    for name in ("last.pt", "previous.pt"):
        ckpt = run_dir / "checkpoints" / name
        ckpt.write_bytes(ckpt.read_bytes()[:1000])
    proc = nas_train(run_dir, "epochs=2", "resume=true")
    assert proc.returncode == 2 and "is corrupt or truncated" in proc.stderr
    assert "the one before it too" in proc.stderr and len(proc.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # a finished cosine run of 2 epochs is not the start of one of 3
        (
            ["epochs=3"],
            r"epochs=3 would change epoch 2 of the 2 already trained .*learning rate "
            r"0.0125 -> 0.01875, drop-path probability 0.1 -> 0.06667",
        ),  # fmt: skip
        (["genotype=DARTS_V1"], "trains the genotype Genotype"),
        (
            ["model.darts.C=6", "seed=3"],
            r"was written with other values: model.darts.C 4 -> 6, "
            r"seed 0 -> 3; resume with the run's own values",
        ),  # fmt: skip
    ],
)
def test_foreign_checkpoints_are_refused(tiny, uninterrupted, overrides, message):
    from nas.cli.train import compose_config
    from nas.training.loop import TrainError, TrainRun

    cfg = compose_config([*tiny, "epochs=2", "resume=true", *overrides])
    with pytest.raises(TrainError, match=message):
        TrainRun(cfg, uninterrupted)


def test_nb201_cell_from_a_search_run_folder(tmp_path, tiny, one_thread):
    from nas.cli.train import compose_config
    from nas.training import resolve_train_genotype, run_train
    from search_spaces.nb201 import arch_to_index

    search_dir = tmp_path / "search"  # what nas-search writes at the end of an NB201 search
    search_dir.mkdir()
    record = {"space": "nb201", "genotype": {"type": "nb201", "arch": NB201_ARCH},
              "text": NB201_ARCH, "arch": NB201_ARCH, "index": arch_to_index(NB201_ARCH)}  # fmt: skip
    (search_dir / "genotype.json").write_text(json.dumps(record))
    cfg = compose_config([*tiny, f"genotype={search_dir}", "model.nb201.C=4", "model.nb201.N=1",
                          "epochs=1"])  # fmt: skip
    run_train(cfg, tmp_path / "nb201")
    results = json.loads((tmp_path / "nb201" / "results.json").read_text())
    assert results["network"] == "TinyNetwork(C=4, N=1)" and results["genotype"] == NB201_ARCH
    # the arch string itself, typed unquoted, and its benchmark index name the same cell
    typed = compose_config([f"genotype={NB201_ARCH}"]).genotype
    assert str(resolve_train_genotype(typed)) == NB201_ARCH
    index = compose_config([f"genotype={record['index']}"]).genotype
    assert str(resolve_train_genotype(index)) == NB201_ARCH


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["epochs=0"], "epochs must be a positive int, got 0"),
        (
            ["optimizer.schedule=exp"],
            "optimizer.schedule must be one of cosine, step, linear, got 'exp'",
        ),
        (["model.drop_path=1.5"], r"model.drop_path must be a number in \[0, 1\), got 1.5"),
        (["amp=fp16", "device=cpu"], "amp=fp16 needs CUDA"),
        (["device=cuda:x"], "device must be auto, cpu, cuda or cuda:N|CUDA is not available"),
        (["genotype=15625"], "NB201 index 15625 is out of range; expected 0..15624"),
        (["resume=true"], "again without resume=true"),
        (["data=imagenet16-120", "data.root=/nonexistent"], "nonexistent"),
    ],
)
def test_bad_values_are_refused_before_training(tmp_path, tiny, overrides, message):
    from nas.cli.train import compose_config
    from nas.training.loop import TrainError, TrainRun

    with pytest.raises(TrainError, match=message):
        TrainRun(compose_config([*tiny, *overrides]), tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["genotype=DARTS_V9"], "unknown published genotype 'DARTS_V9'; expected one of DARTS_V1"),
        (["data=cifar10", "data.root=/no/such/cifar"], "/no/such/cifar"),
        (
            ["experiment=drnas_nb201"],
            "unknown experiment 'drnas_nb201'; expected one of darts_cifar10",
        ),  # a search recipe
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, nas_train, overrides, message):
    proc = nas_train(tmp_path / "r", "epochs=1", *overrides)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("nas-train: error: ")
    assert re.search(message, lines[0]), lines[0]


@pytest.mark.slow
def test_eval_only_writes_no_run_folder(tmp_path, uninterrupted, nas_train):
    proc = nas_train(tmp_path / "outputs" / "eval", "eval_only=true",
                     f"checkpoint={uninterrupted}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "test_top1" in proc.stdout
    assert not (tmp_path / "outputs").exists()  # Hydra's folder for the command, removed
