"""A plug-in from an installed package: found through the entry-point group
``nas_toolkit.configs`` with no file of the repository edited and no flag.

The toy package lives in a temporary folder outside the repository, installed the way pip
leaves a package (its code plus a ``.dist-info`` folder holding ``entry_points.txt``) on a
``PYTHONPATH`` folder. Its config folder adds a strategy (a DARTS variant of its own class)
and a component; ``nas-search`` and ``nas.search`` find and run them, and a broken entry point
is refused in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", NAS_PROGRESS="none")
TINY = ["space=nb201", "epochs=1", "data.max_items=64", "batch_size=16", "figures=false"]

STRATEGY = '''
"""A toy strategy of a user's package: DARTS with its logits scaled (a temperature)."""

from nas.strategies.darts import DARTS


class ScaledDARTS(DARTS):
    def __init__(self, *, scale: float = 2.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = float(scale)

    def mix(self, alpha):
        return super().mix(self.scale * alpha)
'''

COMPONENT = '''
"""A toy component of a user's package: a penalty on the architecture logits' squares."""

from nas.strategies.components.base import Component


class SquarePenalty(Component):
    requires = frozenset({"arch_penalty"})

    def __init__(self, *, weight: float = 0.1):
        super().__init__()
        self.weight = float(weight)

    def arch_penalty(self, strategy):
        return self.weight * sum((a**2).sum() for a in strategy.arch_params.values())

    def log_state(self):
        return {"square_penalty_weight": self.weight}
'''


def _install_toy(site: Path, *, broken: bool = False) -> None:
    pkg = site / "toyplug"
    (pkg / "configs" / "search").mkdir(parents=True)
    (pkg / "configs" / "components").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "configs" / "__init__.py").write_text("")
    (pkg / "strategy.py").write_text(STRATEGY)
    (pkg / "component.py").write_text(COMPONENT)
    (pkg / "configs" / "search" / "scaled_darts.yaml").write_text(
        "_target_: toyplug.strategy.ScaledDARTS\nscale: 3.0\n"
    )
    (pkg / "configs" / "components" / "square_penalty.yaml").write_text(
        "square_penalty:\n  _target_: toyplug.component.SquarePenalty\n  weight: 0.5\n"
    )
    dist = site / "toyplug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplug\nVersion: 0.1\n")
    target = "toyplug.missing" if broken else "toyplug.configs"
    (dist / "entry_points.txt").write_text(f"[nas_toolkit.configs]\ntoy = {target}\n")


def _run(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(ENV, PYTHONPATH=os.pathsep.join([str(site), ENV.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "nas.cli.search", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


@pytest.mark.slow
def test_an_installed_package_adds_a_strategy_and_a_component(tmp_path):
    site, work = tmp_path / "site", tmp_path / "work"
    site.mkdir()
    work.mkdir()
    _install_toy(site)
    run = work / "run"
    done = _run(
        site, work, "search=scaled_darts", "components=[square_penalty]", *TINY,
        f"hydra.run.dir={run}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    config = (run / "config.yaml").read_text()
    assert "toyplug.strategy.ScaledDARTS" in config and "scale: 3.0" in config
    assert "toyplug.component.SquarePenalty" in config
    epochs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(e.get("square_penalty_weight") == 0.5 for e in epochs)
    assert (run / "genotype.json").is_file()
    # a name the package does not have is refused, listing the package's names with ours
    bad = _run(site, work, "search=scaled_dart", *TINY)
    assert bad.returncode == 2 and "scaled_darts" in bad.stderr and "drnas" in bad.stderr


@pytest.mark.slow
def test_from_python_too(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_toy(site)
    code = textwrap.dedent(
        f"""
        import nas
        run = nas.search(space="nb201", strategy="scaled_darts",
                         overrides={{"epochs": 1, "data.max_items": 64, "batch_size": 16,
                                     "figures": False}},
                         run_dir={str(tmp_path / "api")!r})
        print(run.config["search"]["_target_"])
        """
    )
    env = dict(ENV, PYTHONPATH=os.pathsep.join([str(site), ENV.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("toyplug.strategy.ScaledDARTS")


def test_a_broken_entry_point_is_one_line(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_toy(site, broken=True)
    done = _run(site, tmp_path, *TINY)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "toyplug's nas_toolkit.configs entry point toy = 'toyplug.missing'" in lines[0]
