"""Where ``nas-search`` and ``nas-train`` find their Hydra configs, and the users' own folders.

The configs live in the repository's top-level ``configs/``. A wheel (or any non-editable
install) carries the same files as the package data ``nas/configs`` (``setup.py`` maps the
folder there at build time), so the commands work from any folder; a source checkout or an
editable install reads ``configs/`` itself. Users add folders of their own (new ``data/``,
``experiment/``, ``train/experiment/`` files) with Hydra's ``hydra.searchpath=[file:///dir]``
or ``--config-dir /dir``; the group checks here accept the names found there too.
"""

from __future__ import annotations

import os
from pathlib import Path

from nas.choices import config_dir, options

__all__ = ["config_dir", "options", "user_folders", "user_search_path"]


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
