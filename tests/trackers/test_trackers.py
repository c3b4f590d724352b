"""W&B and MLflow next to TensorBoard (``nas.trackers``), with the real libraries: W&B in its
offline mode (its run file read back record by record), MLflow on a local file store. Each
test is skipped, saying so, where its library is not installed (``pip install -e ".[dev]"``
installs both)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from nas.metrics import MetricLogger


def _tensorboard_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def _wandb_records(run_dir: Path):
    """The records of an offline W&B run file (a LevelDB-style log of protobuf records after a
    7-byte header), as W&B's own reader decodes them."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, chunk = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(chunk)
            chunk = b""
            yield record


def _wandb_history(run_dir: Path) -> tuple[dict[str, dict[int, float]], set[str], dict]:
    scalars: dict[str, dict[int, float]] = {}
    images: set[str] = set()
    config: dict = {}
    for record in _wandb_records(run_dir):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config = {i.key: json.loads(i.value_json) for i in record.run.config.update}
        elif kind == "history":
            items = {
                i.key or "/".join(i.nested_key): json.loads(i.value_json)
                for i in record.history.item
            }
            step = int(items["_step"])
            here = {k[: -len("/_type")] for k, v in items.items() if k.endswith("/_type")}
            images |= {k for k in here if items[f"{k}/_type"] == "image-file"}
            for key, value in items.items():
                if key.startswith("_") or key.rpartition("/")[0] in here:
                    continue  # W&B's own fields, and an image's width, height, ...
                if isinstance(value, (int, float)):
                    scalars.setdefault(key, {})[step] = float(value)
    return scalars, images, config


def _run(module: str, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", WANDB_SILENT="true")
    env["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 asks for this to use a file store
    cmd = [sys.executable, "-m", module, *overrides, f"hydra.run.dir={run_dir}"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


SEARCH = ["space=nb201", "space.C=4", "space.layers=1", "batch_size=16", "data.max_items=64"]
SEARCH += ["log_every=1", "epochs=2"]
TRAIN = ["model.darts.C=4", "model.darts.layers=3", "batch_size=32", "data.max_items=64"]
TRAIN += ["eval.max_items=32", "log_every=1", "epochs=1"]


@pytest.fixture(scope="module")
def search_run(tmp_path_factory):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install wandb)")
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install mlflow-skinny)")
    root = tmp_path_factory.mktemp("trackers")
    run_dir = root / "search"
    proc = _run(
        "nas.cli.search",
        run_dir,
        *SEARCH,
        "trackers.wandb.enabled=true",
        "trackers.wandb.mode=offline",
        "trackers.mlflow.enabled=true",
        f"trackers.mlflow.tracking_uri=file://{root / 'mlruns'}",
    )
    assert proc.returncode == 0, proc.stderr
    return run_dir, f"file://{root / 'mlruns'}"


@pytest.mark.slow
def test_wandb_gets_the_tensorboard_scalars_figures_and_config(search_run):
    run_dir, _ = search_run
    tb = _tensorboard_scalars(run_dir)
    scalars, images, config = _wandb_history(run_dir)
    assert "step/train_loss" in tb and any(t.startswith("arch/") for t in tb)
    assert set(scalars) == set(tb)
    for tag, values in tb.items():
        assert scalars[tag] == pytest.approx(values, rel=1e-6), tag
    assert {"figures/cell", "figures/weights_final"} <= images
    assert config["space"]["name"] == "nb201" and config["epochs"] == 2
    ids = json.loads((run_dir / "trackers.json").read_text())
    assert set(ids) == {"wandb", "mlflow"}


@pytest.mark.slow
def test_mlflow_gets_the_tensorboard_scalars_figures_and_config(search_run):
    from mlflow.tracking import MlflowClient

    run_dir, uri = search_run
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    client = MlflowClient(tracking_uri=uri)
    run_id = json.loads((run_dir / "trackers.json").read_text())["mlflow"]
    run = client.get_run(run_id)
    tb = _tensorboard_scalars(run_dir)
    assert set(run.data.metrics) == set(tb)
    for tag in ("step/train_loss", "epoch/train_loss", "nb201/cifar10/test"):
        history = {m.step: m.value for m in client.get_metric_history(run_id, tag)}
        assert history == pytest.approx(tb[tag], rel=1e-6), tag
    assert run.data.params["space.name"] == "nb201" and run.data.params["epochs"] == "2"
    assert run.info.run_name == f"{run_dir.parent.name}/{run_dir.name}"
    assert run.info.status == "FINISHED"
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.yaml", "images", "text"} <= artifacts
    logged = " ".join(a.path for a in client.list_artifacts(run_id, "images"))
    assert "figures~cell" in logged


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_tracker_run(search_run, tmp_path):
    from mlflow.tracking import MlflowClient

    _, uri = search_run
    run_dir = tmp_path / "resumed"
    common = [*SEARCH[:-1], "trackers.mlflow.enabled=true", f"trackers.mlflow.tracking_uri={uri}"]
    assert _run("nas.cli.search", run_dir, *common, "epochs=1").returncode == 0
    first = json.loads((run_dir / "trackers.json").read_text())["mlflow"]
    proc = _run("nas.cli.search", run_dir, *common, "epochs=2", "resume=true")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((run_dir / "trackers.json").read_text())["mlflow"] == first
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    history = MlflowClient(tracking_uri=uri).get_metric_history(first, "epoch/train_loss")
    assert sorted(m.step for m in history) == sorted(
        _tensorboard_scalars(run_dir)["epoch/train_loss"]
    )


@pytest.mark.slow
def test_nas_train_logs_to_mlflow(tmp_path):
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install mlflow-skinny)")
    from mlflow.tracking import MlflowClient

    uri = f"file://{tmp_path / 'mlruns'}"
    run_dir = tmp_path / "train"
    proc = _run(
        "nas.cli.train", run_dir, *TRAIN, "trackers.mlflow.enabled=true",
        f"trackers.mlflow.tracking_uri={uri}", "trackers.mlflow.experiment=retrain",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(json.loads((run_dir / "trackers.json").read_text())["mlflow"])
    assert client.get_experiment(run.info.experiment_id).name == "retrain"
    assert set(run.data.metrics) == set(_tensorboard_scalars(run_dir))
    assert run.data.params["genotype"] == "DARTS_V2"


@pytest.mark.parametrize("kind", ["wandb", "mlflow"])
def test_a_missing_library_is_one_line_saying_what_to_install(tmp_path, monkeypatch, kind):
    module = "mlflow.tracking" if kind == "mlflow" else "wandb"
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    config = {"trackers": {kind: {"enabled": True}}}
    with pytest.raises(ValueError, match=rf'pip install "nas-toolkit\[{kind}\]"'):
        MetricLogger(tmp_path, config=config)


def test_trackers_are_off_by_default(tmp_path):
    from hydra import compose, initialize_config_dir

    from nas.cli.search import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="nas_search")
    assert not cfg.trackers.wandb.enabled and not cfg.trackers.mlflow.enabled
    logger = MetricLogger(tmp_path, config=cfg)
    assert type(logger.tb).__name__ == "SummaryWriter" and not (tmp_path / "trackers.json").exists()
    logger.close()


def test_a_tracker_that_cannot_start_is_one_line(tmp_path, monkeypatch):
    from nas import trackers

    def refuse(self, *args, **kwargs):
        raise RuntimeError("api key not configured\nsecond line")

    monkeypatch.setattr(trackers.WandbTracker, "__init__", refuse)
    with pytest.raises(
        ValueError,
        match=r"^trackers.wandb: could not start a run \(RuntimeError: api key not configured\); expected",
    ) as info:
        trackers.open_trackers(
            {"wandb": {"enabled": True}}, tmp_path, run_name="r", config={}, resume=False
        )
    assert "\n" not in str(info.value)
