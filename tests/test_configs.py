"""Every config composes, and every plug-in config instantiates its class, named by its file."""

import inspect
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_class
from omegaconf import OmegaConf

from nas.choices import plugin_name
from nas.cli.search import CONFIG_DIR
from nas.data import DATASETS
from nas.hardware import network_layout
from nas.hardware.profiler import profile
from nas.pipeline.search import validate_config
from nas.plugins import available, build_selector, build_strategy, plugin_config
from nas.selection import Selector
from nas.strategies import SearchStrategy
from search_spaces import SPACE_NAMES


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=list(overrides))


def test_defaults_are_the_quickstart():
    cfg = _compose()
    assert cfg.data.name == "cifar10-mini" and cfg.space.name == "nb201"
    assert plugin_name(cfg, "search") == "darts" and plugin_name(cfg, "selection") == "argmax"
    assert cfg.name == "nb201-darts"  # the run folder: <space>-<strategy>
    validate_config(cfg)


@pytest.mark.parametrize("space", _options("space"))
def test_space_configs(space):
    cfg = _compose(f"space={space}")
    assert cfg.space.name == space and space in SPACE_NAMES


@pytest.mark.parametrize("search", available("search"))
def test_search_configs_instantiate_their_strategy(search):
    cfg = _compose(f"search={search}")
    strategy = build_strategy(cfg)
    assert isinstance(strategy, SearchStrategy)
    assert plugin_name(cfg, "search") == search
    assert type(strategy) is get_class(cfg.search._target_)
    # the config a run composes is the one tests and benchmarks build from (nas.plugins)
    assert _plain(cfg.search) == _plain(plugin_config("search", search))


@pytest.mark.parametrize("selection", available("selection"))
def test_selection_configs_instantiate_their_selector(selection, tmp_path):
    extra = []
    if selection == "budget":  # the budget selector needs a table and a budget
        layout = network_layout("nb201", C=4, layers=1, image_size=16, num_classes=10)
        path = profile(layout, timed=False).save(tmp_path / "table.json")
        extra = [f"selection.table={path}", "selection.budget=1.0", "selection.metric=flops"]
    cfg = _compose(f"selection={selection}", *extra)
    selector = build_selector(cfg)
    assert isinstance(selector, Selector)
    assert plugin_name(cfg, "selection") == selection
    assert type(selector) is get_class(cfg.selection._target_)
    if not extra:
        assert _plain(cfg.selection) == _plain(plugin_config("selection", selection))


@pytest.mark.parametrize("data", _options("data"))
def test_data_configs_name_registered_datasets(data):
    cfg = _compose(f"data={data}")
    assert cfg.data.name in DATASETS
    assert 0 < cfg.data.train_portion < 1


@pytest.mark.parametrize("experiment", _options("experiment"))
def test_experiment_configs_compose_and_validate(experiment):
    cfg = _compose(f"experiment={experiment}")
    validate_config(cfg)
    strategy = build_strategy(cfg)
    assert cfg.name == experiment
    if strategy.total_epochs is not None:
        assert strategy.total_epochs == cfg.epochs


def test_drnas_paper_settings_by_name():
    cfg = _compose("experiment=drnas_darts_cifar10")
    assert (cfg.space.name, cfg.space.C, cfg.space.layers) == ("s5", 36, 20)
    assert [dict(s) for s in cfg.search.stages] == [
        {"epochs": 25, "partial_channels": 6, "keep": 7},
        {"epochs": 25, "partial_channels": 4, "keep": 4},
    ]
    assert cfg.search.arch_start_epoch == 10 and cfg.optimizer.lr == 0.1
    cfg = _compose("experiment=drnas_imagenet")
    assert (
        cfg.optimizer.warmup_epochs == 5 and cfg.batch_size == 512 and cfg.data.name == "imagenet"
    )


def _plain(node: Any) -> Any:
    """A config node as plain containers, interpolations (``${seed}``) left as written."""
    return OmegaConf.to_container(node, resolve=False)


def _constructor_defaults(cls: type) -> dict[str, Any]:
    """The keyword parameters of ``cls``'s constructor with their defaults, following
    ``**kwargs`` that a constructor passes on to its base class's (ReinMax -> GDAS)."""
    defaults: dict[str, Any] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is not p.empty:
                defaults.setdefault(p.name, p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return defaults


def _same_value(a: Any, b: Any) -> bool:
    """Equal as config values: lists and tuples alike, ints and floats by value."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(
    "group,name", [(g, n) for g in ("search", "selection", "components") for n in available(g)]
)
def test_yaml_values_are_the_constructor_defaults(group, name):
    """A plug-in built in Python without a key runs what a run with its YAML runs: every key of
    the YAML that the constructor also defaults has the same value in both. An interpolation
    (``seed: ${seed}``, the run's seed) is the run's value, not a default, and is not compared."""
    values = _plain(plugin_config(group, name))
    defaults = _constructor_defaults(get_class(values.pop("_target_")))
    differences = [
        f"configs/{group}/{name}.yaml: {key}: YAML {value!r}, constructor default {defaults[key]!r}"
        for key, value in values.items()
        if key in defaults
        and not (isinstance(value, str) and value.startswith("${"))
        and not _same_value(value, defaults[key])
    ]
    assert not differences, "\n".join(differences)


def test_reference_settings_of_the_fidelity_review():
    """Settings checked line by line against the reference code (experiments/*/README.md)."""
    for name in ("pt_nb201", "pt_nb201_fix_alpha", "drnas_pt_nb201"):
        assert _compose(f"experiment={name}").epochs == 100  # nasbench201/train_search.py
    cfg = _compose("experiment=drnas_nb201_progressive")
    assert cfg.search.arch_start_epoch == 10  # train_search_progressive.py: `if epoch >= 10`
    assert [dict(s) for s in cfg.search.stages] == [
        {"epochs": 50, "partial_channels": 4, "keep": 5},
        {"epochs": 50, "partial_channels": 2, "keep": 3},
    ]
    cfg = _compose("experiment=drnas_imagenet")
    assert cfg.search.arch_grad_clip == 5.0  # train_search_imagenet.py clips arch grads to 5
    assert cfg.optimizer.stage_lr == "cosine"  # the intended schedule; `reference` on request
    selector = build_selector(_compose("experiment=pt_darts_cifar10"))
    assert selector.tune_lr_schedule == "constant" and selector.tune_lr_factor == 0.1


def test_sampling_strategies_reference_settings():
    """GDAS, SNAS, ReinMax, RS-WS experiments (experiments/{gdas,snas,reinmax,rsws}/README.md)."""
    cfg = _compose("experiment=gdas_darts_cifar10")
    # AutoDL's GDAS-NASNet search network: C, C, 2C (reduction), 2C, 4C (reduction), 4C
    assert (cfg.space.layers, cfg.batch_size, cfg.epochs) == (6, 256, 250)
    assert [i for i in range(6) if i in (6 // 3, 2 * 6 // 3)] == [2, 4]
    assert plugin_name(cfg, "selection") == "gdas_topk"
    strategy = build_strategy(_compose("experiment=gdas_nb201"))
    assert (strategy.tau_max, strategy.tau_min, strategy.unselected_scalars_setting) == (
        10.0,
        0.1,
        None,
    )
    cfg = _compose("experiment=snas_darts_cifar10")
    assert cfg.data.train_portion == 1.0 and cfg.epochs == 150
    snas = build_strategy(cfg)
    assert (snas.resource_penalty, snas.resource_lambda, snas.arch_optimizer_kind) == (
        "log",
        1.5e-3,  # --resource_lambda 1.5e-3 of the README's commands
        "sgd",
    )
    selector = build_selector(_compose("experiment=rsws_nb201"))
    assert (selector.rounds, selector.archs, selector.batches_per_arch, selector.top_k) == (
        1,
        100,
        8,
        0,
    )
    assert build_strategy(_compose("experiment=rsws_darts_cifar10")).grad_clip == 0.25
