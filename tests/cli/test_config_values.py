"""Every value a run reads is checked before torch is imported (``nas.run.config``).

``nas-search`` and ``nas-train`` are run as a user runs them, with a ``torch`` on the path
that cannot be imported: a bad value must be refused in one line, exit code 2, with no run
folder left, and the fake ``torch`` shows that nothing imported the real one first. Every value
the loops and the run skeleton read is then refused by the check itself, with the message the
command line prints after ``<program>: error:``. The loops check the same values again for runs
built in-process (``SearchRun``, ``TrainRun``).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf, open_dict

SEARCH_TINY = ["space=nb201", "space.C=4", "space.layers=1", "batch_size=16",
               "data.max_items=96", "log_every=1"]  # fmt: skip
TRAIN_TINY = ["model.darts.C=4", "model.darts.layers=2", "batch_size=16", "data.max_items=32"]

# where both loops run and what they log (the run skeleton: nas.run.skeleton, nas.metrics)
WHERE_IT_RUNS = [
    ({"device": "gpu"}, "device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
    ({"device": "cuda:x"}, "device must be auto, cpu, cuda or cuda:N, got 'cuda:x'"),
    ({"amp": "fp32"}, "amp must be null, bf16 or fp16, got 'fp32'"),
    ({"amp": "fp16", "device": "cpu"}, "amp=fp16 needs CUDA; on CPU use amp=bf16 or amp=null"),
    (
        {"trackers.wandb.enabled": "maybe"},
        "trackers.wandb.enabled must be true or false, got 'maybe'",
    ),
    (
        {"trackers.wandb.mode": "live"},
        "trackers.wandb.mode must be online, offline or disabled, got 'live'",
    ),
    ({"data.num_workers": -1}, "data.num_workers must be an int >= 0, got -1"),
    ({"data.pin_memory": 3}, "data.pin_memory must be true or false, got 3"),
    ({"data.download": "sometimes"}, "data.download must be true or false, got 'sometimes'"),
]

SEARCH_ONLY = [
    ({"compile": "yes"}, "compile must be true, false or graphs, got 'yes'"),
    ({"channels_last": "yes"}, "channels_last must be true, false or auto, got 'yes'"),
    ({"channels_last": 1}, "channels_last must be true, false or auto, got 1"),
    ({"micro_batches": 0}, "micro_batches must be a positive int, got 0"),
    ({"sync_check_every": "x"}, "sync_check_every must be a positive int, got 'x'"),
    (
        {"micro_batches": 32},
        "batch_size=16 is the global batch; 1 process(es) x micro_batches=32 need at least 32 images",
    ),
    (
        {"optimizer.stage_lr": "linear"},
        "optimizer.stage_lr must be 'cosine' or 'reference', got 'linear'",
    ),
    ({"space.partial_channels": 0}, "space.partial_channels must be a positive int, got 0"),
    (
        {"from_run": "/no/such/run"},
        "from_run=/no/such/run holds no config.yaml; expected the folder of a finished nas-search run",
    ),
    ({"from_run": 3}, "from_run must be the folder of a finished nas-search run, got 3"),
    ({"data.train_portion": 1.5}, r"data.train_portion must be a number in (0, 1], got 1.5"),
]

TRAIN_ONLY = [
    (
        {"eval_only": True},
        "eval_only=true needs checkpoint=<a nas-train checkpoint or run folder>; got null",
    ),
    (
        {"eval_only": True, "checkpoint": 7},
        "checkpoint must be a nas-train checkpoint or run folder, or null, got 7",
    ),
    (
        {"genotype": None},
        "genotype must be a genotype.json, a nas-search run folder, a published name, genotype text, an NB201 arch string or index, got None",
    ),
    ({"data.cutout": -1}, "data.cutout must be an int >= 0 (pixels; 0: none), got -1"),
    ({"data.color_jitter": "no"}, "data.color_jitter must be true or false, got 'no'"),
    ({"compile": 1}, "compile must be true or false, got 1"),
]


def _refused_before_torch(program: str, args: list[str], tmp_path: Path) -> str:
    """Run ``program`` without an importable torch; its one stderr line, after checking the
    exit code and that no run folder was made."""
    fake = tmp_path / "no_torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch imported before the check')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake.parent), os.getcwd(),
                                                       os.environ.get("PYTHONPATH", "")]))  # fmt: skip
    root = tmp_path / "runs"
    cmd = [sys.executable, "-m", f"nas.cli.{program}", *args, f"hydra.run.dir={root}/r",
           f"hydra.sweep.dir={root}/sweep"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert not root.exists()
    return lines[0]


# The real entry points, for a few of the values (a subprocess costs seconds); the tests below
# call the check they run (nas.run.config) for every value.
@pytest.mark.parametrize(
    ("program", "args", "message"),
    [
        ("search", [*SEARCH_TINY, "compile=yes"], "compile must be true, false or graphs"),
        ("search", ["-m", *SEARCH_TINY, "device=cpu,gpu"], "device must be auto, cpu, cuda"),
        ("train", [*TRAIN_TINY, "amp=fp32"], "amp must be null, bf16 or fp16, got 'fp32'"),
        ("train", [*TRAIN_TINY, "eval_only=true"], "eval_only=true needs checkpoint="),
    ],
)
def test_the_command_lines_refuse_a_bad_value_before_importing_torch(
    tmp_path, program, args, message
):
    line = _refused_before_torch(program, args, tmp_path)
    assert line.startswith(f"nas-{program}: error: ") and message in line, line


@pytest.fixture(scope="module")
def configs():
    """The configs the two command lines compose (once: a composition costs a second)."""
    from nas.cli.search import CONFIG_DIR
    from nas.cli.train import compose_config

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        search = compose(config_name="nas_search", overrides=SEARCH_TINY)
    return {"search": search, "train": compose_config(TRAIN_TINY)}


def _with(cfg: DictConfig, values: dict[str, Any]) -> DictConfig:
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        for key, value in values.items():
            OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


@pytest.mark.parametrize(("values", "message"), WHERE_IT_RUNS + SEARCH_ONLY)
def test_every_value_a_search_reads_is_checked(configs, values, message):
    from nas.run.config import validate_search_config

    with pytest.raises(ValueError) as e:
        validate_search_config(_with(configs["search"], values))
    assert str(e.value) == message


@pytest.mark.parametrize(("values", "message"), WHERE_IT_RUNS + TRAIN_ONLY)
def test_every_value_a_training_reads_is_checked(configs, values, message):
    from nas.run.config import validate_train_config

    with pytest.raises(ValueError) as e:
        validate_train_config(_with(configs["train"], values))
    assert str(e.value) == message


def test_the_values_the_runs_accept_pass(configs):
    from nas.run.config import validate_search_config, validate_train_config

    for values in ({"device": "cuda:1", "amp": "bf16"}, {"amp": False, "channels_last": "auto"},
                   {"micro_batches": 16, "optimizer.stage_lr": "reference", "compile": True},
                   {"trackers.wandb.mode": None, "data.train_portion": 1.0}):  # fmt: skip
        validate_search_config(_with(configs["search"], values))
    for values in ({"device": "cpu", "amp": None, "genotype": 5},
                   {"eval_only": True, "checkpoint": "somewhere", "genotype": None}):  # fmt: skip
        validate_train_config(_with(configs["train"], values))
