"""Which config of a group a run uses: the configs folder and the plug-in names.

Torch-free, so that the command lines check names before torch loads. A plug-in (search
strategy, selector) is named by the config file that chose it (``search=drnas`` ->
``drnas``): Hydra's runtime choice when Hydra runs the job; otherwise (a config composed with
Hydra's compose API, or read back from a run folder's ``config.yaml``) the file of the group in
``configs/`` whose ``_target_`` is the config's, and last the class name in lower case (a
plug-in of the user's own folders). Configs carry no ``name:`` key of their own.

Importing this module registers the OmegaConf resolver ``${choice:<group>}`` (the run folder
of ``nas-search`` is ``outputs/${space.name}-${choice:search}``).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import nas

PLUGIN_GROUPS = ("search", "selection")


def config_dir() -> Path:
    """The folder holding ``nas_search.yaml``: the installed package data, else the
    checkout's ``configs/``."""
    package = Path(nas.__file__).resolve().parent
    for candidate in (package / "configs", package.parent / "configs"):
        if (candidate / "nas_search.yaml").is_file():
            return candidate
    raise FileNotFoundError(
        f"no configs found: expected {package / 'configs'} (installed package) or "
        f"{package.parent / 'configs'} (source checkout); reinstall nas-toolkit"
    )


def options(group_dirs: list[Path]) -> list[str]:
    """The config names of a group found in any of ``group_dirs``."""
    return sorted({p.stem for d in group_dirs if d.is_dir() for p in d.glob("*.yaml")})


def group_options(group: str) -> list[str]:
    """The config names of ``group`` in the toolkit's own ``configs/``."""
    return options([config_dir() / group])


@cache
def _targets(group: str) -> dict[str, str]:
    """``_target_`` -> config name, for the files of ``group`` in ``configs/`` (first name wins)."""
    out: dict[str, str] = {}
    for name in group_options(group):
        node = OmegaConf.load(config_dir() / group / f"{name}.yaml")
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if isinstance(target, str):
            out.setdefault(target, name)
    return out


def _hydra_choice(group: str) -> str | None:
    if not HydraConfig.initialized():
        return None
    value = HydraConfig.get().runtime.choices.get(group)
    return str(value) if value else None


def plugin_name(cfg: Any, group: str) -> str:
    """The name of the plug-in config ``cfg[group]`` (``search`` or ``selection``)."""
    choice = _hydra_choice(group)
    return choice if choice is not None else target_name(cfg, group)


def target_name(cfg: Any, group: str) -> str:
    """The name of ``cfg[group]`` from its ``_target_`` alone (a config read back from a run
    folder): the config file of ``configs/<group>`` with that target, else the class name in
    lower case; "" without a ``_target_``."""
    node = cfg.get(group) if isinstance(cfg, (DictConfig, dict)) else None
    target = node.get("_target_") if isinstance(node, (DictConfig, dict)) else None
    if not isinstance(target, str) or not target:
        return ""
    return _targets(group).get(target, target.rpartition(".")[2].lower())


def _choice_resolver(group: str, *, _root_: DictConfig) -> str:
    return plugin_name(_root_, group)


def run_variant(cfg: Any) -> str:
    """What a search adds to the default run-folder name besides space and strategy, so that
    searches differing in them get different folders: ``+<component>`` for each component,
    ``-<metric>`` for a cost term, ``-<selector>`` for a selector other than the default one
    (``nb201-darts+sdarts_rs-latency-pt``); "" for a plain search."""
    parts = []
    components = cfg.get("components") if isinstance(cfg, (DictConfig, dict)) else None
    if components:
        parts += [f"+{name}" for name in components]
    cost = cfg.get("cost") if isinstance(cfg, (DictConfig, dict)) else None
    if isinstance(cost, (DictConfig, dict)) and cost.get("metric"):
        parts.append(f"-{cost.get('metric')}")
    selection = plugin_name(cfg, "selection") if cfg.get("selection") is not None else ""
    if selection and selection != default_choice("selection"):
        parts.append(f"-{selection}")
    return "".join(parts)


@cache
def default_choice(group: str) -> str | None:
    """The option of ``group`` that ``nas_search.yaml``'s defaults list picks."""
    node = OmegaConf.load(config_dir() / "nas_search.yaml")
    defaults = node.get("defaults", []) if isinstance(node, DictConfig) else []
    for entry in defaults:
        if isinstance(entry, DictConfig) and group in entry:
            value = entry[group]
            return str(value) if value is not None else None
    return None


def _variant_resolver(*, _root_: DictConfig) -> str:
    return run_variant(_root_)


def genotype_tag(spec: Any) -> str:
    """A short, file-name-safe tag of a ``nas-train`` genotype, for its run folder: a
    published name as it is (``DARTS_V2``), an NB201 index as ``nb201-<index>``, a search's run
    folder or genotype.json as that folder's last two parts (``darts_cifar10-seed0``), genotype
    text as ``g`` and 8 hex digits of its SHA-1."""
    import hashlib
    import re

    from search_spaces.families import indexed_family  # torch-free, like this module

    text = str(spec).strip()
    if text.isdigit():  # a published network by number: its family's name and the number
        return f"{indexed_family().name}-{int(text)}"
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", text):
        return text
    looks_like_text = text.startswith(("|", "{")) or "(" in text
    if not looks_like_text:
        path = Path(text)
        folder = path.parent if path.name == "genotype.json" or path.suffix == ".json" else path
        parts = [p for p in folder.parts[-2:] if p not in ("", ".", "..", "/")]
        tag = "-".join(parts)
        if tag:
            return re.sub(r"[^A-Za-z0-9_.+-]", "_", tag)
    return "g" + hashlib.sha1(text.encode()).hexdigest()[:8]


def _train_name_resolver(*, _root_: DictConfig) -> str:
    """``nas-train``'s run-folder name: the recipe (or data) name, the data set where the recipe
    is run on other data, and the genotype's tag (``darts_cifar10-cifar100-DARTS_V2``)."""
    name = str(_root_.get("name") or "")
    data = _root_.get("data")
    data_name = str(data.get("name")) if isinstance(data, DictConfig) and data.get("name") else ""
    parts = [name]
    tokens = name.replace("-", "_").split("_")
    if data_name and data_name != name and data_name.replace("-", "_") not in tokens:
        parts.append(data_name)
    parts.append(genotype_tag(_root_.get("genotype")))
    return "-".join(p for p in parts if p)


if not OmegaConf.has_resolver("train_name"):
    OmegaConf.register_new_resolver("train_name", _train_name_resolver)
if not OmegaConf.has_resolver("choice"):
    OmegaConf.register_new_resolver("choice", _choice_resolver)
if not OmegaConf.has_resolver("variant"):
    OmegaConf.register_new_resolver("variant", _variant_resolver)
