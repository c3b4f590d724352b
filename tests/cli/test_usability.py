"""What a new user meets first: progress without a terminal, the start line, their own config
folders on Hydra's search path, pasted genotype text, the quickstart choice, quiet defaults."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from nas.cli.configs import config_dir, user_folders, user_search_path
from nas.cli.search import quickstart_argv
from nas.progress import Progress, format_duration, start_line
from search_spaces import published_genotype


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", module, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


def test_plain_progress_lines_every_log_every_steps(monkeypatch):
    monkeypatch.setenv("NAS_PROGRESS", "lines")
    out = io.StringIO()
    bar = Progress(total=6, desc="epoch 1/2", log_every=2, first_step=10, steps_after=6, stream=out)
    for k in range(6):
        bar.update(1, images=64, loss=2.0 - k / 10)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # global steps 12, 14, 16
    assert [line.split("  ")[1] for line in lines] == [
        "step 12 (2/6)",
        "step 14 (4/6)",
        "step 16 (6/6)",
    ]
    assert "step 12 (2/6)" in lines[0] and "loss 1.9000" in lines[0]
    assert all(" img/s" in line and "ETA " in line for line in lines)
    assert "step 16 (6/6)" in lines[2]
    assert bar.bar is None  # no tqdm bar when asked for lines only


def test_progress_choice_follows_the_streams(monkeypatch):
    monkeypatch.delenv("NAS_PROGRESS", raising=False)
    # pytest captures stdout and stderr: neither is a terminal, so lines and no bar
    bar = Progress(total=3, stream=io.StringIO())
    assert bar.lines and bar.bar is None
    assert not Progress(total=3, enabled=False).lines  # other ranks print nothing
    monkeypatch.setenv("NAS_PROGRESS", "sometimes")
    with pytest.raises(ValueError, match="NAS_PROGRESS"):
        Progress(total=3)


def test_format_duration_and_start_line(tmp_path):
    assert [format_duration(s) for s in (5, 125, 3725, float("nan"))] == [
        "0:05",
        "2:05",
        "1:02:05",
        "?",
    ]
    cfg = OmegaConf.create({"space": {"name": "nb201", "C": 8}, "epochs": 3})
    line = start_line("nas-search", tmp_path, cfg, ["space.name", "space.C", "epochs", "nope"],
                      device="cpu", resumed_at_epoch=None)  # fmt: skip
    assert (
        line == f"nas-search: run folder {tmp_path}; space.name=nb201 space.C=8 epochs=3 device=cpu"
    )


def test_the_quickstart_is_added_only_when_nothing_is_chosen():
    assert quickstart_argv([]) == ["experiment=quickstart"]
    assert quickstart_argv(["seed=1", "device=cpu"]) == [
        "experiment=quickstart",
        "seed=1",
        "device=cpu",
    ]
    assert quickstart_argv(["-m", "seed=0,1"]) == ["-m", "experiment=quickstart", "seed=0,1"]
    for chosen in ("space=darts", "space.C=4", "experiment=pt_nb201", "data=cifar10", "from_run=x"):
        assert quickstart_argv([chosen]) == [chosen]


def test_configs_are_found_and_user_folders_parsed(tmp_path):
    assert (config_dir() / "nas_search.yaml").is_file()
    argv = [f"hydra.searchpath=[file://{tmp_path},pkg://x.y]", "--config-dir", "rel"]
    assert user_search_path(argv) == [
        f"file://{tmp_path}",
        "pkg://x.y",
        f"file://{Path('rel').absolute()}",
    ]
    assert user_folders(argv) is None  # a pkg:// entry: options cannot be listed
    assert user_folders(argv[1:]) == [Path("rel").absolute()]


@pytest.fixture(scope="module")
def user_configs(tmp_path_factory) -> Path:
    """A user's own config folder, laid out as configs/: a data config and a training recipe."""
    root = tmp_path_factory.mktemp("my_configs")
    (root / "data").mkdir()
    base = OmegaConf.load(config_dir() / "data" / "cifar10-mini.yaml")
    base.max_items = 48
    OmegaConf.save(base, root / "data" / "tiny_mini.yaml")
    (root / "train" / "experiment").mkdir(parents=True)
    (root / "train" / "experiment" / "tiny_recipe.yaml").write_text(
        "# @package _global_\nname: tiny_recipe\nepochs: 1\nbatch_size: 32\n"
        "model:\n  darts:\n    C: 4\n    layers: 3\neval:\n  max_items: 32\n"
    )
    return root


@pytest.mark.slow
def test_search_with_a_user_data_config_prints_start_and_progress(tmp_path, user_configs):
    proc = _run(
        "nas.cli.search", "space=nb201", "space.C=4", "space.layers=1", "batch_size=16",
        "epochs=1", "log_every=1", "figures=false", "data=tiny_mini",
        f"hydra.searchpath=[file://{user_configs}]", f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"nas-search: run folder {tmp_path / 'run'}; space.name=nb201")
    assert "data.max_items=48" in lines[0] and "device=cpu" in lines[0]
    progress = [line for line in lines if line.startswith("epoch 1/1  step ")]
    assert len(progress) == 2  # 24 weight images in batches of 16: steps 1 and 2
    assert all("loss " in p and "img/s" in p and "ETA" in p for p in progress)


def test_unknown_user_config_names_are_refused_in_one_line(tmp_path, user_configs):
    proc = _run("nas.cli.search", "data=nope", f"hydra.searchpath=[file://{user_configs}]")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "tiny_mini" in proc.stderr  # the user's names are listed with ours


@pytest.mark.slow
def test_train_a_pasted_genotype_with_a_user_recipe(tmp_path, user_configs):
    text = str(published_genotype("DARTS_V2"))  # one argv item: what "genotype=..." gives
    proc = _run(
        "nas.cli.train", f"genotype={text}", "experiment=tiny_recipe", "data.max_items=64",
        f"hydra.searchpath=[file://{user_configs}]", f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(f"nas-train: run folder {tmp_path / 'run'}")
    config = OmegaConf.load(tmp_path / "run" / "config.yaml")
    assert config.genotype == text and config.name == "tiny_recipe" and config.epochs == 1


def test_nas_train_has_its_own_config_root(tmp_path, user_configs):
    """configs/train is nas-train's root: the search's experiments are not on its search path
    (no command line rewrite puts configs/ there); data and the launcher come from the
    ConfigStore, ours before the user's of the same name; the user's train/ is a root too."""
    from hydra import compose, initialize_config_dir

    from nas.cli.train import TRAIN_CONFIG_DIR, compose_config, prepare_argv, shared_configs

    shadow = tmp_path / "shadow"
    (shadow / "data").mkdir(parents=True)
    (shadow / "data" / "cifar10.yaml").write_text("name: not_ours\nroot: elsewhere\n")
    argv = [f"hydra.searchpath=[file://{user_configs},file://{shadow}]", "data=cifar10"]
    assert prepare_argv(argv)[0] == f"hydra.searchpath=[file://{user_configs}/train]"
    with (
        shared_configs(argv),
        initialize_config_dir(config_dir=str(TRAIN_CONFIG_DIR), version_base="1.3"),
    ):
        cfg = compose("nas_train", overrides=prepare_argv(argv), return_hydra_config=True)
        sources = [s.path for s in cfg.hydra.runtime.config_sources]
        assert str(config_dir()) not in sources and str(TRAIN_CONFIG_DIR) in sources
        assert cfg.data.name == "cifar10" and cfg.data.root == "data"  # ours win a clash
        with pytest.raises(Exception, match="darts_nb201"):  # a search experiment
            compose("nas_train", overrides=["+experiment=darts_nb201"])
    tiny = compose_config([f"hydra.searchpath=[file://{user_configs}]", "data=tiny_mini"])
    assert tiny.data.max_items == 48 and compose_config(["experiment=darts_cifar10"]).epochs == 600


def test_genotype_text_split_by_the_shell_says_how_to_quote(tmp_path):
    # what bash passes for: nas-train genotype=Genotype(normal=[('sep_conv_3x3', 0), ...
    # written inside single quotes: the spaces split it, the inner quotes vanish
    proc = _run("nas.cli.train", "genotype=Genotype(normal=[(sep_conv_3x3,", "0),", "(skip, 1)])")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert (
        'quote the whole override for the shell, e.g. nas-train "genotype=Genotype(' in proc.stderr
    )


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [[], ["model.drop_path=0.3"]])
def test_nb201_cell_note_only_when_asked_for_what_does_not_apply(tmp_path, overrides):
    proc = _run(
        "nas.cli.train", "genotype=6111", "model.nb201.C=4", "model.nb201.N=1", "batch_size=32",
        "data.max_items=32", "eval.max_items=32", "epochs=1", *overrides,
        f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert ("do not apply" in proc.stdout) == bool(overrides)
    if overrides:
        assert "model.drop_path do not apply" in proc.stdout


def test_each_selection_decision_is_a_printed_line():
    from nas.pipeline.selection_context import decision_line

    line = decision_line(
        "pt_decision",
        {"kind": "op", "edge": 2, "candidates": ["none", "skip_connect"], "acc": [0.2, 0.3],
         "chosen": "skip_connect", "projection": 0, "score": 0.123456},
    )  # fmt: skip
    assert line == ("pt_decision  kind op  edge 2  chosen skip_connect  projection 0  score 0.1235")
