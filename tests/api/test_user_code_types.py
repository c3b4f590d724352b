"""The user code the project shows (the README's ``python`` blocks, the code cells of
``notebooks/quickstart.ipynb``) type-checks against the installed package: mypy, run from a
folder outside the repository with a config of its own (not the repository's ``files =``),
finds no error in that code.

The editable install is a path hook mypy does not follow, so the package's folder is given as
``MYPYPATH``; its modules are then followed silently, as mypy treats an installed package
(their own findings are the repository's mypy run's business, not the user's)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("mypy")


def _readme_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def _notebook_code() -> str:
    notebook = json.loads((ROOT / "notebooks" / "quickstart.ipynb").read_text())
    cells = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    # IPython's own lines (%magic, !shell) are not Python; the cells run in order, one module
    lines = [
        line for cell in cells for line in cell.splitlines() if not line.startswith(("%", "!"))
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_readme_and_notebook_code_type_check(tmp_path):
    blocks = _readme_blocks()
    assert blocks, "README.md has no ```python block"
    files = []
    for i, block in enumerate(blocks):
        files.append(tmp_path / f"readme_{i}.py")
        files[-1].write_text(block)
    files.append(tmp_path / "quickstart.py")
    files[-1].write_text(_notebook_code())
    (tmp_path / "mypy.ini").write_text(
        "[mypy]\n[mypy-nas.*,search_spaces.*]\nfollow_imports = silent\n"
    )
    spec = importlib.util.find_spec("nas")
    assert spec is not None and spec.origin is not None
    env = dict(os.environ, MYPYPATH=str(Path(spec.origin).parents[1]))
    cmd = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-incremental",
           "--cache-dir", str(tmp_path / "cache"), *[f.name for f in files]]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
