"""A new search strategy or selector is one Python file plus one YAML, and nothing else.

The plug-ins here live in a temporary package and a temporary config folder on Hydra's search
path, as a user's would: no file of the toolkit is edited, and ``nas-search`` runs them by the
names of their YAML files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from nas.choices import config_dir, plugin_name
from nas.plugins import PluginError, available, build_selector, build_strategy

STRATEGY = '''
"""A test strategy: DARTS that insists on the schedule facts of its SearchContext."""
from nas.strategies.darts import DARTS


class ScheduledDARTS(DARTS):
    def __init__(self, *, tag: str, **kwargs):
        super().__init__(**kwargs)
        self.tag = tag

    def attach(self, ctx, *, generator=None):
        if not (isinstance(ctx.epochs, int) and isinstance(ctx.steps_per_epoch, int)):
            raise AssertionError(f"no schedule in the context: {ctx.epochs} {ctx.steps_per_epoch}")
        with open(self.tag, "w") as f:
            f.write(f"{ctx.epochs} {ctx.steps_per_epoch}")
        super().attach(ctx, generator=generator)


class Broken(DARTS):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.missing_attribute_of_a_buggy_plugin.append(1)
'''

SELECTOR = '''
"""A test selector: the argmax of the last cell type's weights, under another name."""
from nas.selection.argmax import Argmax


class LoudArgmax(Argmax):
    def select(self, strategy, val_data=None, *, context=None):
        print("loud argmax selecting")
        return super().select(strategy, val_data, context=context)
'''


@pytest.fixture
def plugin_dirs(tmp_path: Path) -> tuple[Path, Path]:
    package = tmp_path / "code" / "my_plugins"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "strategy.py").write_text(STRATEGY)
    (package / "selector.py").write_text(SELECTOR)
    configs = tmp_path / "configs"
    (configs / "search").mkdir(parents=True)
    (configs / "selection").mkdir()
    tag = tmp_path / "attached.txt"
    (configs / "search" / "scheduled.yaml").write_text(
        textwrap.dedent(f"""\
        _target_: my_plugins.strategy.ScheduledDARTS
        tag: {tag}
        arch_lr: 3.0e-4
        """)
    )
    (configs / "search" / "broken.yaml").write_text("_target_: my_plugins.strategy.Broken\n")
    (configs / "selection" / "loud.yaml").write_text("_target_: my_plugins.selector.LoudArgmax\n")
    return tmp_path / "code", configs


def _nas_search(code: Path, configs: Path, run_dir: Path, *overrides: str):
    cmd = [
        sys.executable, "-m", "nas.cli.search", f"hydra.searchpath=[file://{configs}]",
        "space=nb201", "space.C=4", "space.layers=1", "batch_size=16", "data.max_items=64",
        "epochs=1", "eval=false", "figures=false", *overrides, f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    path = os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_a_strategy_and_a_selector_of_ones_own_run_by_their_file_names(plugin_dirs, tmp_path):
    code, configs = plugin_dirs
    run_dir = tmp_path / "run"
    proc = _nas_search(code, configs, run_dir, "search=scheduled", "selection=loud")
    assert proc.returncode == 0, proc.stderr
    assert "loud argmax selecting" in proc.stdout
    assert "genotype (loud):" in proc.stdout
    record = json.loads((run_dir / "genotype.json").read_text())
    assert (record["strategy"], record["selector"]) == ("scheduled", "loud")
    # 64 images, half for the weights: 32 images in batches of 16 are 2 steps per epoch
    assert (tmp_path / "attached.txt").read_text() == "1 2"


def test_an_unknown_plugin_name_lists_those_of_every_folder(plugin_dirs, tmp_path):
    code, configs = plugin_dirs
    proc = _nas_search(code, configs, tmp_path / "run", "search=nope")
    assert proc.returncode == 2
    # the toolkit's own strategies (one YAML each in configs/search) and the user's two
    names = sorted(
        {p.stem for p in (config_dir() / "search").glob("*.yaml")} | {"broken", "scheduled"}
    )
    assert {"darts", "drnas"} <= set(names)
    assert proc.stderr.strip().splitlines() == [
        f"nas-search: error: unknown search 'nope'; expected one of {', '.join(names)}"
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_bug_inside_a_plugin_shows_its_traceback(plugin_dirs, tmp_path):
    code, configs = plugin_dirs
    proc = _nas_search(code, configs, tmp_path / "run", "search=broken")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    assert "missing_attribute_of_a_buggy_plugin" in proc.stderr


def test_a_bad_argument_is_one_line_with_its_cause_kept():
    cfg = OmegaConf.create(
        {"search": {"_target_": "nas.strategies.darts.DARTS", "order": 3}, "selection": {}}
    )
    with pytest.raises(PluginError, match="^search strategy 'darts': .*order") as info:
        build_strategy(cfg)
    assert isinstance(info.value.__cause__, ValueError)
    cfg = OmegaConf.create({"search": {"_target_": "nas.strategies.darts.DARTS", "lr_typo": 1}})
    with pytest.raises(PluginError, match="unexpected keyword argument 'lr_typo'") as info:
        build_strategy(cfg)
    assert isinstance(info.value.__cause__, TypeError)
    cfg = OmegaConf.create({"selection": {"_target_": "nas.strategies.darts.DARTS"}})
    with pytest.raises(PluginError, match="built DARTS, not a Selector"):
        build_selector(cfg)
    cfg = OmegaConf.create({"selection": {"_target_": "no_such_module.Selector"}})
    with pytest.raises(PluginError, match="^selector 'selector': "):
        build_selector(cfg)
    with pytest.raises(PluginError, match="has no _target_"):
        build_selector(OmegaConf.create({"selection": {"proxy": "naswot"}}))


def test_names_without_hydra_come_from_the_config_files():
    for group in ("search", "selection"):
        for name in available(group):
            cfg = OmegaConf.create({group: OmegaConf.load(_config(group, name))})
            assert plugin_name(cfg, group) == name


def _config(group: str, name: str) -> Path:
    return config_dir() / group / f"{name}.yaml"


def test_a_new_config_group_is_a_new_folder(tmp_path, capsys, monkeypatch):
    """nas-search's command-line check takes its groups from the config folders: a group in a
    folder of one's own (like issue 23's cost/) is checked with no edit of the toolkit."""
    from nas.cli.config_check import CommandLineError
    from nas.cli.search import GROUPS, check_config, search_groups
    from nas.cli.search import main as search_main

    assert {"space", "search", "selection", "data", "experiment", "cost"} <= set(GROUPS)
    assert "train" not in GROUPS and "hydra" not in GROUPS
    configs = tmp_path / "configs"
    (configs / "widgets").mkdir(parents=True)
    (configs / "widgets" / "gear.yaml").write_text("teeth: 12\n")
    argv = [f"hydra.searchpath=[file://{configs}]", "space=nb201"]
    assert "widgets" in search_groups(argv) and "widgets" not in GROUPS
    check_config([*argv, "+widgets=gear"])  # a known name: accepted (and composed)
    with pytest.raises(CommandLineError) as bad:
        check_config([*argv, "+widgets=sprocket"])
    assert str(bad.value) == "unknown widgets 'sprocket'; expected one of gear"
    # and nas-search says so in one line, exit code 2, before Hydra or torch run
    monkeypatch.setattr(sys, "argv", ["nas-search", *argv, "+widgets=sprocket"])
    with pytest.raises(SystemExit) as stop:
        search_main()
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "nas-search: error: unknown widgets 'sprocket'; expected one of gear"
    ]
