"""Analysis of real run folders: tiny real searches (NB201 and DARTS space; DARTS, DrNAS,
DARTS-PT), then their figures, TensorBoard images, ``nas-plot`` on a run, and the notebooks
executed top to bottom on those runs (with nbclient and the python3 kernel)."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from nas.analysis import load_run, load_runs, write_run_figures
from nas.cli.plot import main as nas_plot

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
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
        "pt_decisions",
        "drnas_concentration",
    ],
    "darts-drnas": [
        "cell_normal",
        "cell_reduce",
        "weights_final",
        "weights_trajectory_normal",
        "weights_trajectory_reduce",
        "argmax_ops",
        "drnas_concentration",
    ],
}


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
    assert run.pt_decisions == [] and run.nb201_keys == []
    pt = load_run(runs["nb201-drnas-pt"])
    assert len(pt.pt_decisions) == 6 and {d["kind"] for d in pt.pt_decisions} == {"op"}
    assert pt.genotype is not None and str(pt.genotype) == pt.record["text"]
    nb = load_run(runs["nb201-darts"])
    assert nb.nb201_keys and nb.concentrations() == {} and nb.pt_decisions == []
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
    assert "drnas_concentration" not in names and "weights_final" in names
    empty = tmp_path / "empty"
    empty.mkdir()
    assert write_run_figures(empty) == []
    with pytest.raises(FileNotFoundError):
        write_run_figures(tmp_path / "nowhere")


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
