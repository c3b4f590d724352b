"""The command line checked before Hydra runs and before torch is imported.

Hydra creates the run folder before the run starts and answers an unknown key with a page of
text (``foo=1``) or not at all (``+foo=1`` lands in ``config.yaml``), and a bad value used to
surface only after torch was imported (~20 s). So ``nas-search`` and ``nas-train`` first compose
the config of every job the command line describes (each combination of a ``-m`` sweep) with
Hydra's compose API, and refuse in one line, before anything is created:

* a key that the config does not have (``foo=1``, ``optimizer.lrr=0.1``), and one that ``+``
  would add, except a constructor argument of a plug-in (``+search.x=...``: the plug-in's own
  constructor accepts or refuses it by name);
* a value the run would refuse (``nas.run.config``);
* a run folder that cannot be created or written (a read-only file system).

It records the folders the command will create (``nas.cli.launch.NEW_DIRS``), so that a run
refused later (a busy folder, a foreign checkpoint) removes them again.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict

from nas.cli import launch
from nas.progress import check_mode as check_progress_mode
from nas.run.folder import missing_dirs

# Hydra's own flags: with these, Hydra prints or answers something; no run starts.
_HYDRA_INFO_FLAGS = (
    "-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info", "-p",
    "--package", "--resolve", "-sc", "--shell-completion", "-cn", "--config-name", "-cp",
    "--config-path", "-cd", "--config-dir", "--experimental-rerun",
)  # fmt: skip
_MAX_JOBS_CHECKED = 256
_MISSING = object()


class CommandLineError(ValueError):
    """A command line that would not run: one line saying what is wrong."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _line(override: Any) -> str:
    return str(override.input_line)


def _keys_of(node: Any) -> list[str]:
    return sorted(str(k) for k in node) if isinstance(node, DictConfig) else []


def _unknown_key(program: str, key: str, schema: DictConfig, how: str) -> CommandLineError:
    parent, _, _ = key.rpartition(".")
    node = OmegaConf.select(schema, parent, default=None) if parent else schema
    options = _keys_of(node)
    if not parent:  # the groups are keys too, but set with group=option
        options = [k for k in options if k != "hydra"]
    parts = key.split(".")
    listed = _keys_of(OmegaConf.select(schema, "components", default=None))
    if len(parts) >= 2 and parts[0] == "components" and parts[1] not in listed:
        wanted = ",".join([*listed, parts[1]])
        return CommandLineError(
            f"{how}: component {parts[1]!r} is not in this run's components "
            f"({', '.join(listed) or 'none'}); add it with components=[{wanted}]"
        )
    where = f"{parent} has" if parent else f"{program} reads"
    return CommandLineError(
        f"unknown config key {key!r} ({how}); {where}: {', '.join(options)}"
        if options
        else f"unknown config key {key!r} ({how}); {parent} takes no keys"
    )


def _compose(config_dir: Path, config_name: str, overrides: list[str], hydra: bool) -> DictConfig:
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            return compose(config_name=config_name, overrides=overrides, return_hydra_config=hydra)
    except (HydraException, ValueError, KeyError, TypeError) as e:
        raise CommandLineError(_first_line(e)) from None


def check_command_line(
    program: str,
    argv: Sequence[str],
    *,
    config_dir: Path,
    config_name: str,
    groups: Sequence[str],
    validate: Callable[[DictConfig], None],
    plugin_sections: Sequence[str] = (),
) -> None:
    """Compose every job of ``argv`` and check its keys, values and run folder; raise
    ``CommandLineError`` (one line) on the first problem. ``argv`` is what Hydra will see."""
    if any(a in _HYDRA_INFO_FLAGS or a.startswith("--cfg") for a in argv):
        return
    try:  # the environment's settings too, before the run folder exists
        check_progress_mode()
    except ValueError as e:
        raise CommandLineError(_first_line(e)) from None
    multirun = "-m" in argv or "--multirun" in argv
    words = [a for a in argv if not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(words)
    except HydraException as e:
        raise CommandLineError(_first_line(e)) from None

    choices: list[list[str]] = []
    for o in parsed:
        if o.is_sweep_override():
            if not multirun:
                raise CommandLineError(
                    f"{_line(o)} is a sweep: add -m to run one job per value, or write "
                    f"{o.get_key_element()}=[...] for a list"
                )
            choices.append([f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()])
        else:
            choices.append([_line(o)])
    jobs = itertools.islice(itertools.product(*choices), _MAX_JOBS_CHECKED)
    for job in jobs:
        _check_job(program, list(job), config_dir, config_name, groups, validate,
                   plugin_sections, multirun)  # fmt: skip


def _check_job(
    program: str,
    overrides: list[str],
    config_dir: Path,
    config_name: str,
    groups: Sequence[str],
    validate: Callable[[DictConfig], None],
    plugin_sections: Sequence[str],
    multirun: bool,
) -> None:
    parsed = OverridesParser.create().parse_overrides(overrides)
    is_group = [o.key_or_group in groups or o.key_or_group.startswith("hydra") for o in parsed]
    schema = _compose(
        config_dir, config_name, [_line(o) for o, g in zip(parsed, is_group) if g], False
    )
    for o, group in zip(parsed, is_group):
        if group:
            continue
        key = o.key_or_group
        exists = OmegaConf.select(schema, key, default=_MISSING) is not _MISSING
        if o.is_delete():
            if not exists:
                raise _unknown_key(program, key, schema, _line(o))
            raise CommandLineError(
                f"{_line(o)} would remove {key}, which {program} reads; set a value instead"
            )
        if exists:
            if o.is_add():
                raise CommandLineError(
                    f"{key} is already in the config: set it with {key}=..., without the +"
                )
            continue
        plugin = key.split(".")[0] in plugin_sections and "." in key
        if (o.is_add() or o.is_force_add()) and plugin:
            continue  # a plug-in constructor argument: the constructor checks its name
        how = (
            f"{_line(o)} adds a key that no part of {program} reads"
            if o.is_add() or o.is_force_add()
            else _line(o)
        )
        raise _unknown_key(program, key, schema, how)

    cfg = _compose(config_dir, config_name, overrides, True)
    hydra_node = cfg.hydra
    with open_dict(cfg):
        del cfg["hydra"]
    try:
        validate(cfg)
    except ValueError as e:
        raise CommandLineError(_first_line(e)) from None
    try:
        if multirun:
            run_dir = Path(str(hydra_node.sweep.dir)) / str(hydra_node.sweep.subdir)
        else:
            run_dir = Path(str(hydra_node.run.dir))
    except Exception:  # an interpolation only Hydra's run can resolve: Hydra checks the folder
        return
    if launch.is_rank0():  # the only process that writes the run folder (and probes it)
        _check_writable(run_dir)
        launch.NEW_DIRS.update(missing_dirs(run_dir))


def _check_writable(run_dir: Path) -> None:
    """Probe, leaving nothing behind: create and remove the first missing folder, or a
    temporary file in an existing run folder (``os.access`` says yes to root on a file system
    that refuses writes)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise CommandLineError(f"run folder {run_dir} is a file; expected a folder")
    missing = missing_dirs(run_dir)
    try:
        if missing:
            try:
                os.mkdir(missing[-1])
            except FileExistsError:  # created meanwhile (by Hydra in another process): usable
                return
            os.rmdir(missing[-1])
        else:
            with tempfile.TemporaryFile(dir=run_dir):
                pass
    except OSError as e:
        what = f"create run folder {run_dir}" if missing else f"write run folder {run_dir}"
        raise CommandLineError(
            f"cannot {what} ({e.strerror or e}); choose another hydra.run.dir"
        ) from None
