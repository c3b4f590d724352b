"""Plug-ins built from their configs: a search strategy or a selector is one file plus one YAML.

The seam between the configs and the third and fourth stages of the pipeline (``nas.strategies``,
``nas.selection``). The config group ``search`` (or ``selection``) holds one YAML per plug-in;
its ``_target_`` names the class, every other key is a constructor argument, and its file name
is the plug-in's name (``nas.choices.plugin_name``). Nothing is registered anywhere else: a new
strategy is ``my_pkg/my_strategy.py`` (a ``SearchStrategy`` subclass) and
``configs/search/my_strategy.yaml`` (or the same file in a folder of one's own on Hydra's search
path), and ``search=my_strategy`` runs it.

Errors: a config that cannot build its plug-in (no ``_target_``, a class that cannot be
imported, an argument the constructor does not take or a value it refuses with ``ValueError``)
is a ``PluginError``, one line, with the original exception kept as its cause; any other
exception raised inside the plug-in's constructor is a bug of the plug-in and propagates with
its own traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from nas.choices import config_dir, options, plugin_name
from nas.selection.base import Selector
from nas.strategies.base import SearchStrategy
from nas.strategies.components.base import Component

KINDS: dict[str, tuple[str, type[Any]]] = {
    "search": ("search strategy", SearchStrategy),
    "selection": ("selector", Selector),
    "components": ("search component", Component),
}


class PluginError(ValueError):
    """A plug-in config that does not build its plug-in: one line saying why."""


def available(group: str, extra_dirs: list[Path] | None = None) -> list[str]:
    """The plug-in names of ``group`` (``search`` or ``selection``): its config files in
    ``configs/`` and in ``extra_dirs`` (the user's config folders)."""
    return options([config_dir() / group, *(d / group for d in extra_dirs or [])])


def _is_bad_input(cause: BaseException | None) -> bool:
    """Whether an exception out of ``instantiate`` is the config's fault, not the plug-in's."""
    if cause is None:  # Hydra's own: the target cannot be located or imported
        return True
    if isinstance(cause, (ValueError, ImportError)):
        return True
    # a keyword the constructor does not take, or a required one the config lacks
    return isinstance(cause, TypeError) and "argument" in str(cause)


def _build(cfg: DictConfig, group: str) -> Any:
    return _build_node(cfg.get(group), group, plugin_name(cfg, group))


def _build_node(node: Any, group: str, name: str) -> Any:
    kind, expected = KINDS[group]
    if not isinstance(node, DictConfig) or not node.get("_target_"):
        raise PluginError(
            f"{group} config {name!r} has no _target_ (the class to build); "
            f"the {kind}s of configs/{group}: {', '.join(available(group))}"
        )
    try:
        built = instantiate(node, _convert_="all")
    except InstantiationException as e:
        cause = e.__cause__
        if cause is not None and not _is_bad_input(cause):
            raise cause from e  # the plug-in's own bug: its traceback, not Hydra's wrapper
        line = (str(cause) if cause is not None else str(e)).strip().splitlines()
        raise PluginError(f"{kind} {name!r}: {line[0] if line else type(cause).__name__}") from (
            cause or e
        )
    if not isinstance(built, expected):
        raise PluginError(
            f"{group}._target_ {node._target_} built {type(built).__name__}, "
            f"not a {expected.__name__}"
        )
    return built


def build_strategy(cfg: DictConfig) -> SearchStrategy:
    """The search strategy of ``cfg.search``, instantiated from its ``_target_``."""
    strategy: SearchStrategy = _build(cfg, "search")
    return strategy


def build_components(cfg: DictConfig) -> list[Component]:
    """The components of ``cfg.components`` (``components=[sdarts_rs,beta_darts]``: the config
    group's files, each under its own name), in the order listed, each named by its file."""
    node = cfg.get("components")
    if node is None:
        return []
    if not isinstance(node, DictConfig):
        raise PluginError(
            f"components must be chosen from configs/components (components=[name,...]), got "
            f"{node!r}; the search components: {', '.join(available('components'))}"
        )
    built = []
    for name, sub in node.items():
        component: Component = _build_node(sub, "components", str(name))
        component.name = str(name)
        built.append(component)
    return built


def build_selector(cfg: DictConfig) -> Selector:
    """The selector of ``cfg.selection``, instantiated from its ``_target_``."""
    selector: Selector = _build(cfg, "selection")
    return selector


# ------------------------------------------------ plug-ins by name, from their YAML files


def plugin_config(group: str, name: str, extra_dirs: list[Path] | None = None) -> DictConfig:
    """The config of plug-in ``name`` of ``group`` (``search``, ``selection`` or
    ``components``) exactly as ``nas-search <group>=<name>`` composes it: its YAML file in
    ``configs/`` or in ``extra_dirs`` (ours first, as on Hydra's search path); a component's
    file holds it under its own name. The YAML files are the one list of plug-ins and of their
    defaults: tests and benchmarks build plug-ins through here, as a run does."""
    if group not in KINDS:
        raise ValueError(f"plug-in group must be one of {', '.join(KINDS)}, got {group!r}")
    for folder in [config_dir(), *(extra_dirs or [])]:
        path = folder / group / f"{name}.yaml"
        if path.is_file():
            break
    else:
        raise PluginError(
            f"{group}={name}: no such {KINDS[group][0]}; the {KINDS[group][0]}s of "
            f"configs/{group}: {', '.join(available(group, extra_dirs))}"
        )
    loaded = OmegaConf.load(path)
    node = loaded.get(name) if group == "components" and isinstance(loaded, DictConfig) else loaded
    if not isinstance(node, DictConfig):
        raise PluginError(f"{path}: expected a mapping with _target_ (the class to build)")
    return node


def build_plugin(
    group: str, name: str, extra_dirs: list[Path] | None = None, **overrides: Any
) -> Any:
    """Plug-in ``name`` of ``group`` built from its YAML (``plugin_config``) with ``overrides``
    laid over it, as ``nas-search <group>=<name> <group>.<key>=<value>`` builds it."""
    node = plugin_config(group, name, extra_dirs)
    for key in [str(k) for k in node]:
        if OmegaConf.is_interpolation(node, key) and key not in overrides:
            raw = OmegaConf.to_container(node, resolve=False)
            value = str(raw.get(key)) if isinstance(raw, dict) else "?"
            raise PluginError(
                f"{group}={name}: {key} is {value}, a value of the run's config; pass "
                f"{key}= to build it alone"
            )
    if overrides:
        merged = OmegaConf.merge(node, overrides)
        assert isinstance(merged, DictConfig)
        node = merged
    built = _build_node(node, group, name)
    if group == "components":
        built.name = name
    return built
