"""The Python API (``nas.search``, ``nas.train``, ``nas.load_run``) against the command lines:
the same settings give the same run folder, genotype, metrics and results; the same bad input
the same one line, raised; a stopped run resumes to the uninterrupted result."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

import nas
from nas.api import Run, RunError

ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", NAS_PROGRESS="none")
TINY_SEARCH = {"epochs": 2, "data.max_items": 64, "batch_size": 16, "figures": False}
TINY_TRAIN = {"epochs": 1, "data.max_items": 64, "batch_size": 32}
# what differs between two runs of the same settings: wall-clock figures
TIMING = ("images_per_s", "epoch_time_s", "train_seconds", "seconds", "time_s")


def _cli(program: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", f"nas.cli.{program}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=cwd, timeout=600)


def _args(values: dict[str, object]) -> list[str]:
    return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()]


def _without_timing(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def _events(run_dir: Path) -> list[object]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [_without_timing(json.loads(line)) for line in lines if line.strip()]


@pytest.mark.slow
def test_search_and_train_equal_the_command_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("NAS_PROGRESS", "none")
    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    settings = ["space=nb201", "search=drnas", *_args(TINY_SEARCH)]
    done = _cli("search", *settings, f"hydra.run.dir={cli_dir}")
    assert done.returncode == 0, done.stderr
    run = nas.search(space="nb201", strategy="drnas", overrides=TINY_SEARCH, run_dir=api_dir)

    assert isinstance(run, Run) and run.kind == "search" and run.finished
    assert run.path == api_dir
    assert (api_dir / "genotype.json").read_text() == (cli_dir / "genotype.json").read_text()
    assert (api_dir / "config.yaml").read_text() == (cli_dir / "config.yaml").read_text()
    assert _events(api_dir) == _events(cli_dir)  # every step and epoch record, every weight
    # the config alone, composed without running: what the run wrote
    cfg = nas.api.search_config(space="nb201", strategy="drnas", overrides=TINY_SEARCH)
    written = yaml.safe_load((api_dir / "config.yaml").read_text())
    assert OmegaConf.to_container(cfg, resolve=True) == written
    assert str(run.genotype) in done.stdout
    assert len(run.epochs) == 2
    # the selected cell's benchmark accuracies, as the command printed them
    assert f"CIFAR-10 valid {run.benchmark['nb201/cifar10/valid']:.2f}" in done.stdout
    assert f"test {run.benchmark['nb201/cifar100/test']:.2f}" in done.stdout

    # retrain the found cell: a Run as the genotype is its folder on the command line
    cli_train, api_train = tmp_path / "cli_train", tmp_path / "api_train"
    train_settings = [*_args(TINY_TRAIN), "model.nb201.C=4", "model.nb201.N=1"]
    done = _cli("train", f"genotype={cli_dir}", *train_settings, f"hydra.run.dir={cli_train}")
    assert done.returncode == 0, done.stderr
    trained = nas.train(
        run,
        overrides={**TINY_TRAIN, "model.nb201.C": 4, "model.nb201.N": 1},
        run_dir=api_train,
    )
    assert trained.kind == "train" and trained.finished
    assert str(trained.genotype) == str(run.genotype)
    cli_results = json.loads((cli_train / "results.json").read_text())
    api_results = json.loads((api_train / "results.json").read_text())
    assert _without_timing(api_results) == _without_timing(cli_results)
    assert trained.results == api_results
    assert _events(api_train) == _events(cli_train)


@pytest.mark.slow
def test_default_run_folder_is_the_commands(tmp_path, monkeypatch):
    monkeypatch.setenv("NAS_PROGRESS", "none")
    (tmp_path / "api").mkdir()
    (tmp_path / "cli").mkdir()
    monkeypatch.chdir(tmp_path / "api")
    search = {**TINY_SEARCH, "epochs": 1}
    run = nas.search(overrides=search, components=["sdarts_rs"])
    trained = nas.train("DARTS_V2", overrides=TINY_TRAIN)
    # nas-search components=[sdarts_rs]: outputs/<space>-<strategy>+<component>/seed<seed>
    assert run.path == tmp_path / "api" / "outputs" / "nb201-darts+sdarts_rs" / "seed0"
    for program, args, api_run in [
        ("search", ["components=[sdarts_rs]", *_args(search)], run),
        ("train", ["genotype=DARTS_V2", *_args(TINY_TRAIN)], trained),
    ]:
        done = _cli(program, *args, cwd=tmp_path / "cli")
        assert done.returncode == 0, done.stderr
        relative = api_run.path.relative_to(tmp_path / "api")
        assert (tmp_path / "cli" / relative / "config.yaml").is_file(), relative


@pytest.mark.slow
@pytest.mark.parametrize(
    "kwargs, bad, cli_args",
    [
        ({"space": "nope"}, [], ["space=nope"]),
        ({}, ["foo=1"], ["foo=1"]),
        ({}, ["epochs=-1"], ["epochs=-1"]),
        ({}, ["optimizer.lrr=0.1"], ["optimizer.lrr=0.1"]),
        ({"strategy": "rsws", "selection": "argmax"}, [], ["search=rsws", "selection=argmax"]),
        (
            {"data": "cifar10"},
            ["data.root=/nonexistent"],
            ["data=cifar10", "data.root=/nonexistent"],
        ),
    ],
)
def test_the_same_bad_input_is_the_same_line(kwargs, bad, cli_args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = _cli("search", *_args(TINY_SEARCH), *cli_args)
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("nas-search: error: ")
    with pytest.raises(RunError) as raised:
        nas.search(**kwargs, overrides=[*_args(TINY_SEARCH), *bad])
    assert str(raised.value) == line[len("nas-search: error: ") :]
    assert not (tmp_path / "outputs").exists()  # a refused run leaves nothing


def test_train_refusals(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunError, match="unknown experiment 'nope'"):
        nas.train("DARTS_V2", experiment="nope")
    cfg = nas.api.train_config("DARTS_V2", experiment="darts_cifar10")
    assert cfg.genotype == "DARTS_V2" and cfg.epochs == 600  # the DARTS recipe
    with pytest.raises(RunError, match="unknown experiment 'nope'"):
        nas.api.train_config(experiment="nope")
    with pytest.raises(RunError, match="eval_only"):
        nas.train("DARTS_V2", overrides={"eval_only": True})
    with pytest.raises(RunError, match="one string"):
        nas.train("DARTS_V2", overrides="epochs=1")  # type: ignore[arg-type]
    with pytest.raises(RunError, match="genotype"):
        nas.train("not a genotype (", overrides=TINY_TRAIN)
    assert not (tmp_path / "outputs").exists()


def test_load_run_reads_runs_and_refuses_other_folders(tmp_path):
    with pytest.raises(RunError, match="does not exist"):
        nas.load_run(tmp_path / "missing")
    with pytest.raises(RunError, match="not a run folder"):
        nas.load_run(tmp_path)
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "config.yaml").write_text("seed: 0\nspace:\n  name: nb201\n")
    (stopped / "metrics.jsonl").write_text('{"event": "epoch", "epoch": 0, "train_loss": 2.0}\n')
    run = nas.load_run(stopped)
    assert run.kind == "search" and not run.finished and run.genotype is None
    assert run.epochs == [{"event": "epoch", "epoch": 0, "train_loss": 2.0}]
    assert run.checkpoint is None and run.benchmark == {}
    (stopped / "genotype.json").write_text("{torn")
    with pytest.raises(RunError, match="genotype.json is not JSON"):
        nas.load_run(stopped)
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "config.yaml").write_text("genotype: DARTS_V2\n")
    (trained / "results.json").write_text("[1, 2]")
    with pytest.raises(RunError, match="results.json holds a list"):
        nas.load_run(trained)


def test_dataframe(tmp_path):
    run = Run(tmp_path, "search", events=[{"event": "epoch", "epoch": 0, "train_loss": 1.5}])
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install pandas"):
            run.dataframe()
        return
    frame = run.dataframe()
    assert list(frame["train_loss"]) == [1.5]


def test_api_functions_are_plain_functions():
    """``nas.search`` / ``nas.train`` / ``nas.load_run`` are ``nas.api``'s functions: real
    signatures, picklable, untouched by importing the strategies and training packages; the
    packages' old names are refused naming the new ones."""
    import inspect
    import pickle

    import nas.strategies.darts
    import nas.training.loop

    assert nas.search is nas.api.search and nas.train is nas.api.train
    assert nas.load_run is nas.api.load_run
    assert nas.strategies.DARTS is nas.strategies.darts.DARTS and nas.training.run_train is not None
    assert list(inspect.signature(nas.search).parameters)[:2] == ["space", "strategy"]
    assert "genotype" in inspect.signature(nas.train).parameters
    for function in (nas.search, nas.train, nas.load_run):
        assert pickle.loads(pickle.dumps(function)) is function
    with pytest.raises(ImportError, match=r"nas\.search is now nas\.strategies"):
        importlib.import_module("nas.search.darts")
    with pytest.raises(ImportError, match=r"nas\.train is now nas\.training"):
        importlib.import_module("nas.train.loop")


STOP_SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys
    import nas
    from nas.strategies.darts import DARTS

    overrides = {"epochs": 2, "data.max_items": 64, "batch_size": 16, "figures": False}
    real, steps = DARTS.step, {"n": 0}

    def step(self, *a, **k):
        out = real(self, *a, **k)
        steps["n"] += 1
        if steps["n"] == 3:  # in the second epoch: a checkpoint mid-epoch
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    DARTS.step = step
    try:
        nas.search(overrides=overrides, run_dir=sys.argv[1])
        raise SystemExit("not stopped")
    except nas.Stopped as e:
        print("STOPPED", e)
    DARTS.step = real
    resumed = nas.search(overrides=overrides, run_dir=sys.argv[1], resume=True)
    whole = nas.search(overrides=overrides, run_dir=sys.argv[2])
    print(json.dumps([str(resumed.genotype), str(whole.genotype)]))
    """
)


@pytest.mark.slow
def test_a_stopped_run_resumes_to_the_uninterrupted_result(tmp_path):
    stopped, whole = tmp_path / "stopped", tmp_path / "whole"
    done = subprocess.run(
        [sys.executable, "-c", STOP_SCRIPT, str(stopped), str(whole)],
        capture_output=True, text=True, env=ENV, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    stop_line = next(line for line in done.stdout.splitlines() if line.startswith("STOPPED"))
    assert "nas.search: stopped (SIGTERM); checkpoint written to" in stop_line
    assert "resume=True" in stop_line
    resumed, uninterrupted = json.loads(done.stdout.strip().splitlines()[-1])
    assert resumed == uninterrupted
    assert _events(stopped)[-1] == _events(whole)[-1]
