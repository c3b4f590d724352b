"""Analysis of real run folders: tiny real searches (NB201 and DARTS space; DARTS, DrNAS,
DARTS-PT), then their figures, TensorBoard images, ``nas-plot`` on a run, and the notebooks
executed top to bottom on those runs (with nbclient and the python3 kernel)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from matplotlib.image import imread

from nas.analysis import load_run, load_runs, write_run_figures
from nas.cli.plot import main as nas_plot

REPO = Path(__file__).resolve().parents[2]
# the analysis notebooks, which read run folders (quickstart.ipynb runs its own: tests/api)
NOTEBOOKS = sorted(p for p in (REPO / "notebooks").glob("*.ipynb") if p.stem != "quickstart")
TINY = ["space.C=4", "batch_size=16", "data.max_items=64", "epochs=2", "log_every=1"]
PT = ["selection=pt", "selection.proj_intv=0", "selection.num_val_batches=1"]
RUNS = {
    # name: overrides. NB201 with DARTS + argmax; NB201 with DrNAS + PT (the decision trace,
    # concentrations); the DARTS space with DrNAS (normal and reduce cells). A DARTS-space PT
    # selection (28 op + 6 topology decisions) would double the suite's time: its topology
    # trace is drawn from a synthetic log in test_analysis_cells.py.
    "nb201-darts": ["space=nb201", "space.layers=1"],
    "nb201-drnas-pt": ["space=nb201", "space.layers=1", "search=drnas", *PT],
    "darts-drnas": ["space=darts", "space.layers=3", "search=drnas"],
}


def assert_real_image(path: Path, min_bytes: int = 5_000) -> None:
    """A readable PNG of some size that is not one flat colour."""
    assert path.is_file(), path
    assert path.stat().st_size > min_bytes, (path, path.stat().st_size)
    image = imread(str(path))
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert float(np.asarray(image, dtype=float).std()) > 0.02, f"{path} is a flat image"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Tiny real searches, one after the other (one thread each: the cores are shared)."""
    root = tmp_path_factory.mktemp("analysis_runs")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    out = {}
    for name, overrides in RUNS.items():
        run_dir = root / name
        cmd = [
            sys.executable,
            "-m",
            "nas.cli.search",
            *TINY,
            *overrides,
            f"hydra.run.dir={run_dir}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out[name] = run_dir
    return out


EXPECTED = {
    "nb201-darts": [
        "cell",
        "weights_final",
        "weights_trajectory_cell",
        "argmax_ops",
        "nb201_accuracy",
    ],
    "nb201-drnas-pt": [
        "cell",
        "weights_final",
        "weights_trajectory_cell",
        "argmax_ops",
        "nb201_accuracy",
        "decisions",
        "concentration",
    ],
    "darts-drnas": [
        "cell_normal",
        "cell_reduce",
        "weights_final",
        "weights_trajectory_normal",
        "weights_trajectory_reduce",
        "argmax_ops",
        "concentration",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_write_run_figures(runs, name):
    run_dir = runs[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no figure may be skipped on a complete run
        paths = write_run_figures(run_dir)
    assert sorted(p.stem for p in paths) == sorted(EXPECTED[name])
    for p in paths:
        assert p.parent == run_dir / "figures"
        assert_real_image(p)


def test_run_data(runs):
    run = load_run(runs["darts-drnas"])
    assert run.space_name == "darts" and run.method == "drnas+argmax" and run.seed == 0
    assert set(run.arch_weights) == {"normal", "reduce"}
    assert run.arch_weights["normal"].shape == (2, 14, 8)  # [epochs, edges, ops]
    conc = run.concentrations()
    assert set(conc) == {"normal", "reduce"} and np.nanmin(conc["normal"]) > 0
    assert run.decisions == [] and run.nb201_keys == []
    pt = load_run(runs["nb201-drnas-pt"])
    assert len(pt.decisions) == 6 and {d["kind"] for d in pt.decisions} == {"op"}
    assert pt.decision_metric == "acc"
    assert pt.genotype is not None and str(pt.genotype) == pt.record["text"]
    nb = load_run(runs["nb201-darts"])
    assert nb.nb201_keys and nb.concentrations() == {} and nb.decisions == []
    assert len(load_runs(str(runs["nb201-darts"].parent))) == len(RUNS)


def test_missing_artefacts_never_raise(runs, tmp_path):
    """A folder with only part of a run: figures for what is there, no exception."""
    partial = tmp_path / "partial"
    partial.mkdir()
    src = runs["nb201-drnas-pt"]
    (partial / "metrics.jsonl").write_text((src / "metrics.jsonl").read_text() + "{torn line\n")
    (partial / "config.yaml").write_text((src / "config.yaml").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = write_run_figures(partial)  # no genotype.json, no checkpoint
    names = {p.stem for p in paths}
    assert "cell" in names  # the last argmax preview stands in for the missing genotype
    assert "concentration" not in names and "weights_final" in names
    empty = tmp_path / "empty"
    empty.mkdir()
    assert write_run_figures(empty) == []
    with pytest.raises(FileNotFoundError):
        write_run_figures(tmp_path / "nowhere")


# A strategy and a selector of a user's own package: analysis knows them only by what their
# classes declare (config.yaml's ``_target_``), never by a name.
USER_PLUGINS = """
import torch

from nas.strategies.base import SearchStrategy
from nas.selection.base import Selector


class PeakedStrategy(SearchStrategy):
    @classmethod
    def concentrations_of(cls, params_EO):
        return torch.nn.functional.softplus(params_EO) + 0.5


class TracingSelector(Selector):
    decision_event = "my_choice"

    @classmethod
    def decision_metric(cls, config):
        return config.get("scored_by", "acc")
"""


def copy_run(src: Path, dst: Path, *, search: str, selection: str, **selection_keys) -> Path:
    """``src``'s metrics, genotype and checkpoint with a config naming other plug-in classes."""
    (dst / "checkpoints").mkdir(parents=True)
    shutil.copy(src / "checkpoints" / "last.pt", dst / "checkpoints" / "last.pt")
    shutil.copy(src / "genotype.json", dst / "genotype.json")
    config = yaml.safe_load((src / "config.yaml").read_text())
    config["search"] = {"_target_": search}
    config["selection"] = {"_target_": selection, **selection_keys}
    (dst / "config.yaml").write_text(yaml.safe_dump(config))
    return dst


@pytest.mark.slow
def test_plugin_declarations_draw_their_figures(runs, tmp_path, monkeypatch):
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "my_nas_plugins.py").write_text(USER_PLUGINS)
    monkeypatch.syspath_prepend(str(tmp_path / "user"))
    src = runs["nb201-darts"]  # DARTS + argmax: no concentrations, no decisions of its own
    run_dir = copy_run(
        src,
        tmp_path / "run",
        search="my_nas_plugins.PeakedStrategy",
        selection="my_nas_plugins.TracingSelector",
        scored_by="loss",
    )
    # the decision records of the PT run, logged under the user's event name; the PT events
    # themselves (event "pt_decision") are kept and must not be read
    pt_events = read_jsonl(runs["nb201-drnas-pt"] / "metrics.jsonl")
    decisions = [e for e in pt_events if e.get("event") == "pt_decision"]
    mine = [dict(e, event="my_choice") for e in decisions]
    lines = [json.dumps(e) for e in read_jsonl(src / "metrics.jsonl") + decisions + mine]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")

    run = load_run(run_dir)
    assert run.strategy_class.__name__ == "PeakedStrategy"
    assert run.decision_event == "my_choice" and run.decisions == mine
    assert run.decision_metric == "loss"
    params = run.checkpoint_arch()["params"]
    conc = run.concentrations()
    assert set(conc) == set(params) == {"cell"}
    expected = torch.nn.functional.softplus(torch.tensor(params["cell"])).numpy() + 0.5
    np.testing.assert_allclose(conc["cell"], expected, rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = write_run_figures(run_dir)
    stems = sorted(p.stem for p in paths)
    assert stems == sorted([*EXPECTED["nb201-darts"], "decisions", "concentration"])
    assert_real_image(run_dir / "figures" / "decisions.png")
    assert_real_image(run_dir / "figures" / "concentration.png")

    # classes that are not on the path: nothing is asked, nothing fails
    lost = copy_run(
        src, tmp_path / "lost", search="not_installed.Strategy", selection="not_installed.Sel"
    )
    (lost / "metrics.jsonl").write_text((run_dir / "metrics.jsonl").read_text())
    (lost / "genotype.json").unlink()  # its record names the selector that ran
    run = load_run(lost)
    assert run.strategy_class is None and run.selector_class is None
    assert run.concentrations() == {} and run.decisions == [] and run.decision_event is None
    assert run.selector == "sel" and run.method == "strategy+sel"  # the class names, no guess
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stems = sorted(p.stem for p in write_run_figures(lost))
    assert stems == sorted(EXPECTED["nb201-darts"])
    # no config at all: a run that does not record its selector has none
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(runs["nb201-drnas-pt"] / "metrics.jsonl", bare / "metrics.jsonl")
    run = load_run(bare)
    assert run.selector is None and run.selector_class is None and run.decisions == []
    assert run.method == "?+?"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_figures_go_to_tensorboard(runs, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    paths = write_run_figures(runs["nb201-darts"], writer)
    writer.close()
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"images": 0})
    acc.Reload()
    assert sorted(acc.Tags()["images"]) == sorted(f"figures/{p.stem}" for p in paths)


def test_nas_plot_a_run_folder(runs, tmp_path, capsys):
    assert nas_plot([str(runs["nb201-drnas-pt"]), "-o", str(tmp_path / "figs")]) == 0
    printed = capsys.readouterr().out.split()
    assert len(printed) == len(EXPECTED["nb201-drnas-pt"])
    for p in printed:
        assert_real_image(Path(p))


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(runs, notebook, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        pytest.skip("no python3 Jupyter kernel (pip install ipykernel)")
    nb = nbformat.read(notebook, as_version=4)
    # committed without outputs
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, notebook.name
    monkeypatch.setenv("NAS_RUNS", str(next(iter(runs.values())).parent))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 5, f"{notebook.name} drew only {len(images)} figures"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"{len(RUNS)} run folder(s) found" in text
