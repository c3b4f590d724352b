"""Where ``nas-search`` and ``nas-train`` find their Hydra configs, and the users' own folders.

The configs live in the repository's top-level ``configs/``. A wheel (or any non-editable
install) carries the same files as the package data ``nas/configs`` (``setup.py`` maps the
folder there at build time), so the commands work from any folder; a source checkout or an
editable install reads ``configs/`` itself. Users add folders of their own (new ``data/``,
``experiment/``, ``train/experiment/`` files) with Hydra's ``hydra.searchpath=[file:///dir]``
or ``--config-dir /dir``; the group checks here accept the names found there too. An
installed package adds its folder without any flag through the entry-point group
``nas_toolkit.configs`` (``installed_config_folders``): its plug-ins (strategies, components,
selectors, data sets, experiments; their ``_target_`` classes in the package) are then names
of the groups like the toolkit's own, as pytest finds its plug-ins.

``nas-train``'s configs have their own root, ``configs/train`` (a user folder's ``train/``);
the groups it shares with ``nas-search`` (``data/``, ``hydra/launcher/``) reach it through
Hydra's ``ConfigStore`` (``store_groups``), so that the search's ``experiment/`` recipes are not
on its search path and no command line is rewritten to find ``configs/``.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.plugins.config_source import ConfigSource
from omegaconf import OmegaConf

from nas.choices import config_dir, options
from nas.cli.config_check import CommandLineError

__all__ = [
    "config_dir",
    "config_groups",
    "installed_config_folders",
    "options",
    "remove_stored",
    "store_groups",
    "user_folders",
    "user_search_path",
    "with_installed_configs",
]

#: The entry-point group through which an installed package adds a config folder, laid out as
#: ``configs/``: ``[project.entry-points."nas_toolkit.configs"] <name> = "<package.folder>"``,
#: where ``<package.folder>`` is an importable package whose folder holds ``search/``,
#: ``components/``, ``selection/``, ... (each YAML's ``_target_`` a class of the package).
ENTRY_POINTS = "nas_toolkit.configs"


def installed_config_folders() -> list[Path]:
    """The config folders of installed packages (``ENTRY_POINTS``), in name order;
    ``CommandLineError`` (one line) naming an entry point whose package cannot be found."""
    folders = []
    for ep in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        try:
            spec = importlib.util.find_spec(ep.value)
        except (ImportError, ValueError):
            spec = None
        where = None
        if spec is not None and spec.submodule_search_locations:
            where = Path(next(iter(spec.submodule_search_locations)))
        if where is None or not where.is_dir():
            dist = ep.dist.name if ep.dist is not None else "an installed package"
            raise CommandLineError(
                f"{dist}'s {ENTRY_POINTS} entry point {ep.name} = {ep.value!r} is not an "
                "importable package folder; expected one laid out as the toolkit's configs/"
            )
        folders.append(where)
    return folders


def with_installed_configs(argv: list[str]) -> list[str]:
    """``argv`` with the installed packages' config folders on Hydra's search path, after the
    user's own (``hydra.searchpath`` entries and ``--config-dir``): unchanged without any."""
    folders = installed_config_folders()
    if not folders:
        return argv
    extra = [f"file://{f}" for f in folders]
    out, done = [], False
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "hydra.searchpath" and not done:
            entries = _split_list(value)
            arg = f"{key}=[{','.join([*entries, *(e for e in extra if e not in entries)])}]"
            done = True
        out.append(arg)
    return out if done else [*out, f"hydra.searchpath=[{','.join(extra)}]"]


def config_groups(roots: Sequence[Path], *, exclude: Sequence[str] = ()) -> tuple[str, ...]:
    """The config groups of a command: the sub-folders of its config roots (the toolkit's
    ``configs/`` and the user's folders), but ``exclude`` (folders that are not groups), in
    order of first appearance; a new group is a new folder, nothing else."""
    found: list[str] = []
    for root in roots:
        if root.is_dir():
            found += sorted(p.name for p in root.iterdir() if p.is_dir() and p.name not in found)
    return tuple(g for g in found if g not in exclude and not g.startswith(("_", ".")))


# (group, name) of the nodes store_groups put in the ConfigStore, by provider
_STORED: dict[str, list[tuple[str, str]]] = {}


def remove_stored(provider: str) -> None:
    """Take the nodes ``store_groups`` registered for ``provider`` out of the ConfigStore again
    (a process that also composes ``nas-search``'s configs, e.g. tests: Hydra would take a node
    of the same name as one of its files for that file's schema)."""
    store = ConfigStore.instance()
    for group, name in _STORED.pop(provider, []):
        node = store.repo
        for part in group.split("/"):
            node = node.get(part, {})
        node.pop(f"{name}.yaml", None)


def store_groups(groups: Sequence[str], roots: Sequence[Path], provider: str) -> None:
    """Register the YAML files of each of ``groups`` found under ``roots`` (``root/<group>/``)
    as nodes of Hydra's ``ConfigStore``, replacing those of an earlier call: the same configs,
    read from the same files, as a search path entry would give, with their ``# @package``
    header. The first root holding a name wins (the toolkit's before the user's, as on the
    search path)."""
    remove_stored(provider)
    store = ConfigStore.instance()
    stored = _STORED.setdefault(provider, [])
    for group in groups:
        taken: set[str] = set()
        for root in roots:
            for path in sorted((root / group).glob("*.yaml")):
                if path.stem in taken:
                    continue
                taken.add(path.stem)
                text = path.read_text()
                package = ConfigSource._get_header_dict(text).get("package")
                node = OmegaConf.create(text)  # the file's own values: no resolution here
                store.store(
                    name=path.stem, node=node, group=group, package=package, provider=provider
                )
                stored.append((group, path.stem))


def _split_list(value: str) -> list[str]:
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        value = value[1:-1]
    return [v.strip().strip("'\"") for v in value.split(",") if v.strip()]


def user_search_path(argv: list[str]) -> list[str]:
    """The search-path entries a command line adds (``hydra.searchpath=[...]`` entries and
    ``--config-dir`` / ``-cd`` folders as ``file://`` entries), in order."""
    entries: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "hydra.searchpath":
            entries += _split_list(value)
        elif key in ("--config-dir", "-cd"):
            folder = value if sep else (argv[i + 1] if i + 1 < len(argv) else "")
            if not sep:
                i += 1
            if folder:
                entries.append(f"file://{Path(folder).expanduser().absolute()}")
        i += 1
    return entries


def user_folders(argv: list[str]) -> list[Path] | None:
    """The folders of ``user_search_path`` (``file://`` entries); None if an entry is of
    another kind (``pkg://``), whose options cannot be listed here."""
    folders = []
    for entry in user_search_path(argv):
        if entry.startswith("file://"):
            folders.append(Path(os.path.expanduser(entry[len("file://") :])))
        else:
            return None
    return folders
