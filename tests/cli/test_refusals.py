"""Refused searches leave nothing, and their one line names the right key and the right fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from nas.choices import config_dir
from nas.cli.launch import _first_line
from nas.run.checkpoint import CheckpointError, load_checkpoint

TINY = ["space.C=4", "space.layers=1", "epochs=1", "batch_size=2", "eval=false", "figures=false"]


def _search(args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "nas.cli.search", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def test_a_bad_progress_mode_is_refused_before_the_run_folder(tmp_path):
    run_dir = tmp_path / "run"
    done = _search([*TINY, f"hydra.run.dir={run_dir}"], env={"NAS_PROGRESS": "fancy"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "nas-search: error: NAS_PROGRESS='fancy'; expected one of bar, lines, both, none"
    ]
    assert not run_dir.exists()


@pytest.mark.slow
def test_files_that_are_not_images_are_one_line_and_leave_nothing(tmp_path):
    for c in ("a", "b"):
        (tmp_path / "imgs" / c).mkdir(parents=True)
        for i in range(3):
            (tmp_path / "imgs" / c / f"{i}.png").write_text("not an image")
    run_dir = tmp_path / "run"
    done = _search(
        [
            "data=imagefolder",
            f"data.root={tmp_path / 'imgs'}",
            "data.num_workers=1",
            *TINY,
            f"hydra.run.dir={run_dir}",
        ]  # fmt: skip
    )
    assert done.returncode == 2, done.stderr
    err = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(err) == 1 and "is not an image PIL can read" in err[0] and ".png" in err[0]
    assert "Traceback" not in done.stderr
    assert not run_dir.exists()


@pytest.mark.slow
def test_a_refused_run_keeps_a_folder_that_was_there(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "mine.txt").write_text("keep")
    (tmp_path / "imgs" / "a").mkdir(parents=True)
    (tmp_path / "imgs" / "b").mkdir(parents=True)
    for c in ("a", "b"):
        (tmp_path / "imgs" / c / "x.png").write_text("no")
    done = _search(
        [
            "data=imagefolder",
            f"data.root={tmp_path / 'imgs'}",
            "data.num_workers=1",
            *TINY,
            f"hydra.run.dir={run_dir}",
        ]  # fmt: skip
    )
    assert done.returncode == 2
    assert (run_dir / "mine.txt").read_text() == "keep"


def test_random_bytes_are_not_a_checkpoint(tmp_path):
    path = tmp_path / "last.pt"
    for n in (1, 977, 5000):
        path.write_bytes(os.urandom(n))
        with pytest.raises(CheckpointError) as e:
            load_checkpoint(path, kind="search")
        assert "corrupt or truncated" in str(e.value) and "\n" not in str(e.value)


def test_an_error_from_a_data_worker_is_its_own_message():
    wrapped = ValueError(
        "Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most recent "
        "call last):\n  File ...\nValueError: /d/x.png is not an image PIL can read (...)"
    )
    assert _first_line(wrapped) == "/d/x.png is not an image PIL can read (...)"
    assert _first_line(ValueError("one\ntwo")) == "one"


def test_a_key_of_an_unlisted_component_says_how_to_list_it(tmp_path):
    done = _search(["components=[sdarts_rs]", "components.pc_darts.warmup_epochs=0",
                    f"hydra.run.dir={tmp_path / 'r'}"])  # fmt: skip
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "add it with components=[sdarts_rs,pc_darts]" in line
    # the fix the message suggests is a command that composes
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose(
            "nas_search",
            overrides=["components=[sdarts_rs,pc_darts]", "components.pc_darts.warmup_epochs=0"],
        )
    assert cfg.components.pc_darts.warmup_epochs == 0


@pytest.mark.parametrize(("group", "key"), [("cost", "force"), ("selection", "force")])
def test_a_foreign_table_names_the_key_that_forces_it(tmp_path, group, key):
    from nas.cli.profile import main as profile
    from nas.hardware.cost import build_objective, load_budget

    table = tmp_path / "t.json"
    assert profile(["--C", "4", "--layers", "1", "--repeats", "1", "--warmup", "0", "-q",
                    "-o", str(table)]) == 0  # fmt: skip
    data = json.loads(table.read_text())
    data["environment"]["device_name"] = "another machine"
    table.write_text(json.dumps(data))
    with pytest.raises(ValueError) as e:
        if group == "cost":
            build_objective({"table": str(table), "metric": "latency", "target": 1.0})
        else:
            load_budget(table=str(table), budget=1.0, metric="latency", force=False)
    message = str(e.value)
    assert f"force it with {group}.{key}=true" in message
    # the key the message names exists in the group's configs
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        over = ["cost=latency"] if group == "cost" else ["selection=budget"]
        cfg = compose("nas_search", overrides=over)
    assert key in cfg[group]


def test_the_start_line_names_components_and_cost(tmp_path):
    from nas.pipeline.search import SearchRun

    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose("nas_search", overrides=["components=[sdarts_rs]", "data.max_items=16",
                                               *TINY])  # fmt: skip
    line = SearchRun(cfg, tmp_path / "run").start_line()
    assert "components=[sdarts_rs]" in line and "cost=none" in line


def test_searches_that_differ_in_components_cost_or_selection_get_different_folders():
    names = set()
    cases = [[], ["components=[sdarts_rs]"], ["components=[sdarts_rs,beta_darts]"],
             ["selection=pt"], ["cost=flops", "cost.target=1"], ["space=darts"]]  # fmt: skip
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        for overrides in cases:
            cfg = compose("nas_search", overrides=["space=nb201", *overrides],
                          return_hydra_config=True)  # fmt: skip
            names.add(str(cfg.hydra.run.dir))
    assert len(names) == len(cases)
    assert "outputs/nb201-darts+sdarts_rs+beta_darts/seed0" in names
    assert "outputs/nb201-darts-pt/seed0" in names


def test_the_readme_trainings_run_in_order_get_folders_of_their_own():
    from nas.cli import train

    cases = [
        [],
        ["experiment=darts_cifar10"],
        ["experiment=darts_cifar10", "data=cifar100"],
        ["experiment=drnas_cifar10"],
        ["genotype=1462"],
        [
            "genotype=|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"
        ],
        ["genotype=outputs/darts_cifar10/seed0"],
    ]
    dirs = []
    for overrides in cases:
        with (
            train.shared_configs(overrides),
            initialize_config_dir(config_dir=str(train.TRAIN_CONFIG_DIR), version_base="1.3"),
        ):
            cfg = compose("nas_train", overrides=train.prepare_argv(overrides),
                          return_hydra_config=True)  # fmt: skip
        dirs.append(str(cfg.hydra.run.dir))
    assert len(set(dirs)) == len(cases), dirs
    assert dirs[1] == "outputs/train-darts_cifar10-DARTS_V2/seed0"
    assert dirs[2] == "outputs/train-darts_cifar10-cifar100-DARTS_V2/seed0"
    assert dirs[4] == "outputs/train-cifar10-mini-nb201-1462/seed0"
    assert dirs[6] == "outputs/train-cifar10-mini-darts_cifar10-seed0/seed0"
