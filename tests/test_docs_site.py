"""The documentation site builds with ``mkdocs build --strict``.

``mkdocs.yml`` makes the strict build fail on a broken link between pages, a link to a missing
anchor, a page left out of the navigation, an API page whose module does not load, a config file
a method page includes that is gone, and a CLI reference or notebook list that cannot be
generated (``docs/hooks.py``, ``docs/gen_cli.py``). Skipped where MkDocs is not installed (it
comes with the ``docs`` and ``dev`` extras).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def test_the_documentation_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    for page in ("index.html", "cli/index.html", "api/index.html", "methods/darts/index.html"):
        assert (site / page).is_file(), f"the site has no {page}"
    notebooks = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    for name in notebooks:  # every notebook gets a page, without a line of mkdocs.yml
        assert (site / "notebooks" / name / "index.html").is_file(), f"no page for {name}.ipynb"
    cli = (site / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("nas-search", "nas-train", "nas-bench", "nas-export", "nas-plot"):
        assert command in cli
