"""Every cost config composes with nas-search's and builds its objective; bad keys are one line."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR, GROUPS
from nas.hardware.cost import build_objective
from nas.hardware.parts import network_layout
from nas.hardware.profiler import profile


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    layout = network_layout("nb201", C=4, layers=1, image_size=16, num_classes=10)
    path = tmp_path_factory.mktemp("t") / "t.json"
    return profile(layout, warmup=0, repeats=1).save(path)


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=list(overrides))


def test_no_cost_by_default():
    assert "cost" in GROUPS and "cost" not in _compose()


@pytest.mark.parametrize("name", sorted(p.stem for p in (Path(CONFIG_DIR) / "cost").glob("*.yaml")))
def test_cost_configs_build_their_objective(name, table):
    cfg = _compose(f"cost={name}", f"cost.table={table}", "cost.target=2")
    objective = build_objective(cfg.cost)
    assert objective.model.metric == cfg.cost.metric == name
    assert objective.model.space == "nb201"


def test_cost_config_errors(table):
    cfg = _compose("cost=latency")
    with pytest.raises(ValueError, match="cost.table is required"):
        build_objective(cfg.cost)
    cfg = _compose("cost=latency", f"cost.table={table}")
    with pytest.raises(ValueError, match="cost.target is required"):
        build_objective(cfg.cost)
    with pytest.raises(ValueError, match="unknown cost keys"):
        build_objective({"table": str(table), "target": 2, "lamda": 1})


def test_the_form_parameter_defaults_are_the_yamls():
    """A form refuses a parameter it does not read when it differs from the config group's value
    (``nas.hardware.cost.FORM_PARAMETER_DEFAULTS``): those values are the YAMLs'."""
    import yaml

    from nas.choices import config_dir
    from nas.hardware.cost import FORM_PARAMETER_DEFAULTS

    for path in sorted((config_dir() / "cost").glob("*.yaml")):
        values = yaml.safe_load(path.read_text())
        assert {k: values[k] for k in FORM_PARAMETER_DEFAULTS} == FORM_PARAMETER_DEFAULTS, path
