"""``notebooks/quickstart.ipynb`` executed top to bottom (nbclient, the python3 kernel) at its
tiny size: a search and a retraining from Python, and the runs read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        pytest.skip("no python3 Jupyter kernel (pip install ipykernel)")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:  # committed without outputs
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    monkeypatch.setenv("NAS_QUICKSTART_TINY", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    search = tmp_path / "outputs" / "notebook-quickstart" / "search"
    record = json.loads((search / "genotype.json").read_text())
    assert f"genotype: {record['text']}" in text
    assert "search True True" in text  # read back: a finished search, the same genotype
    assert (tmp_path / "outputs" / "notebook-quickstart" / "train" / "results.json").is_file()
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the cell was drawn
