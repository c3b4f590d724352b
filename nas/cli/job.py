"""A job composed in-process, as Hydra's ``@hydra.main`` composes it for a command line.

``nas.search`` / ``nas.train`` (``nas.api``) run in the caller's process, where Hydra's main
(which parses ``sys.argv`` and owns the process) cannot be used. ``compose_job`` does what
Hydra's ``run_job`` does before it calls the task: compose the same config folders with the
same overrides (Hydra's compose API over the same config loader), set Hydra's runtime config
(``HydraConfig``: the choices that name plug-ins, the task overrides, the run folder made
absolute) and hand the task the config without its ``hydra`` node. ``job_context`` restores
the caller's Hydra state afterwards, so that notebooks can compose and run again.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, open_dict, read_write

from nas.cli.config_check import CommandLineError


def compose_job(
    config_dir: Path, config_name: str, overrides: list[str]
) -> tuple[DictConfig, Path]:
    """The task config and the absolute run folder of the job ``overrides`` describe, with
    ``HydraConfig`` set as inside a Hydra app (call it within ``job_context``)."""
    if GlobalHydra.instance().is_initialized():  # a caller's own initialize(): not ours to keep
        GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            config = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
    except (HydraException, ValueError, KeyError, TypeError) as e:
        text = str(e).strip()
        raise CommandLineError(text.splitlines()[0] if text else type(e).__name__) from None
    HydraConfig.instance().set_config(config)
    run_dir = Path(os.path.abspath(str(config.hydra.run.dir)))
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
        config.hydra.runtime.output_dir = str(run_dir)
    HydraConfig.instance().set_config(config)
    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]
    return task, run_dir


@contextmanager
def job_context() -> Iterator[None]:
    """Hydra's runtime config of one in-process job; the caller's is restored on exit."""
    previous = HydraConfig.instance().cfg
    try:
        yield
    finally:
        HydraConfig.instance().cfg = previous
