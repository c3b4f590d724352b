"""``nas-search``: run a differentiable architecture search from Hydra configs.

``nas-search`` alone runs the quickstart (``experiment=quickstart``, added whenever the command
line does not choose a space, strategy, selection, data set or experiment); ``nas-search
space=darts search=darts search.order=2 epochs=50`` overrides any value; ``nas-search -m
seed=0,1,2`` sweeps seeds; ``torchrun --nproc_per_node=8 -m nas.cli.search ...`` runs one
search data-parallel over 8 processes (``batch_size`` stays the global batch; see
``nas.pipeline.search``). Bad input (an unknown name, a value of the wrong type or range, an
unusable run folder, a non-finite loss) prints one line and exits with code 2, before anything
is imported or written where the command line alone shows it (``nas.cli.config_check``);
SIGTERM and Ctrl-C write a checkpoint at the next step and exit with code 143 / 130 after
saying how to resume (a second Ctrl-C stops at once); a run folder in use by another run, or
one that cannot be written, is one line and exit code 2 (``nas.cli.launch.run_in_folder``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from nas.bench import format_result_line, is_benchmark_cell
from nas.choices import plugin_name
from nas.cli.config_check import CommandLineError, check_command_line
from nas.cli.configs import (
    config_dir,
    config_groups,
    options,
    user_folders,
    with_installed_configs,
)
from nas.cli.launch import (
    EXIT_BAD_INPUT,
    fail,
    is_rank0,
    leave_if_worker,
    run_guarded,
    run_in_folder,
)
from nas.run.config import validate_search_config

if TYPE_CHECKING:
    from nas.pipeline.search import SearchResult

CONFIG_DIR = config_dir()  # configs/ of the checkout, or the installed package's copy
# folders of configs/ that are no group of nas-search: Hydra's own (hydra/launcher, chosen as
# such) and nas-train's config root
NOT_GROUPS = ("hydra", "train")
GROUPS = config_groups([CONFIG_DIR], exclude=NOT_GROUPS)  # space, search, selection, data, ...
PLUGIN_SECTIONS = ("search", "selection", "components")  # their keys: constructor arguments


def _fail(message: str) -> NoReturn:
    fail("nas-search", message)


def search_groups(argv: list[str]) -> tuple[str, ...]:
    """The config groups of ``nas-search``: the folders of ``configs/`` and of the user's own
    config folders (``hydra.searchpath``, ``--config-dir``), but ``NOT_GROUPS``."""
    return config_groups([CONFIG_DIR, *(user_folders(argv) or [])], exclude=NOT_GROUPS)


def check_group_choices(argv: list[str]) -> None:
    """Reject ``group=unknown`` before Hydra does (its message spans a page); names in the
    user's own config folders (``hydra.searchpath``, ``--config-dir``) count."""
    extra = user_folders(argv)
    if extra is None:  # a pkg:// entry: its options cannot be listed, let Hydra judge
        return
    groups = search_groups(argv)
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+~")
        if not sep or key not in groups or value in ("null", ""):
            continue
        names = options([CONFIG_DIR / key, *(folder / key for folder in extra)])
        # -m sweeps: space=darts,nb201; lists: components=[sdarts_rs,beta_darts]
        for choice in value.replace("[", ",").replace("]", ",").split(","):
            choice = choice.strip()
            if not choice:
                continue
            if choice not in names:
                raise CommandLineError(
                    f"unknown {key} {choice!r}; expected one of {', '.join(names)}"
                )


# what a search refuses as bad input (one line), not as a bug (a traceback)
BAD_INPUT = (ValueError, FileNotFoundError)


def search_job(
    cfg: DictConfig, run_dir: Path, guard: Callable[..., SearchResult] = run_guarded
) -> SearchResult:
    """The search of a composed job in its locked run folder, through ``guard``:
    ``run_in_folder`` for the command line (one line and an exit code), ``run_guarded`` for
    the Python API (exceptions with the same lines)."""

    def search() -> SearchResult:
        # the heavy imports (torch) inside the locked folder: a busy folder is refused at once
        from nas import distributed
        from nas.pipeline.search import run_search

        try:
            return run_search(cfg, run_dir)
        finally:
            distributed.shutdown()

    return guard("nas-search", run_dir, search, BAD_INPUT)


@hydra.main(config_path=str(CONFIG_DIR), config_name="nas_search", version_base="1.3")
def _search(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    result = search_job(cfg, run_dir, run_in_folder)
    if not is_rank0():
        return
    print(f"run folder: {result.run_dir}")
    print(f"genotype ({plugin_name(cfg, 'selection')}): {result.genotype}")
    bench_line = _bench_line(result.genotype)
    if bench_line:
        print(bench_line)


def _bench_line(genotype: object) -> str | None:
    if not is_benchmark_cell(genotype):
        return None
    line: str = format_result_line(genotype)
    return line


# Naming any of these starts from the plain defaults; otherwise nas-search runs the quickstart.
_CHOOSES_THE_SEARCH = ("experiment", "space", "search", "selection", "data", "from_run")


def quickstart_argv(argv: list[str]) -> list[str]:
    """``experiment=quickstart`` added unless the command line chooses what to search (a group,
    a value inside one, or ``from_run``): ``nas-search`` and ``nas-search seed=1`` run the
    quickstart, ``nas-search space=darts epochs=50`` the plain defaults."""
    for arg in argv:
        key = arg.partition("=")[0].lstrip("+~")
        if key.split(".")[0] in _CHOOSES_THE_SEARCH:
            return argv
    at = next((i for i, a in enumerate(argv) if "=" in a and not a.startswith("-")), len(argv))
    return [*argv[:at], "experiment=quickstart", *argv[at:]]


def check_config(argv: list[str]) -> None:
    """Everything the command line alone shows wrong, before Hydra or torch run:
    ``CommandLineError`` (one line)."""
    check_group_choices(argv)
    check_command_line(
        "nas-search",
        argv,
        config_dir=CONFIG_DIR,
        config_name="nas_search",
        groups=search_groups(argv),
        validate=validate_search_config,
        plugin_sections=PLUGIN_SECTIONS,
    )


def prepare(argv: list[str]) -> list[str]:
    """The overrides Hydra composes for ``nas-search <argv>`` (the quickstart added where
    nothing is chosen), checked: ``CommandLineError`` (one line) where they would not run.
    The command line and ``nas.search`` both start here."""
    argv = quickstart_argv(with_installed_configs(argv))
    check_config(argv)
    return argv


def main() -> None:
    try:
        argv = prepare(sys.argv[1:])
    except CommandLineError as e:
        _fail(str(e))
    sys.argv = [sys.argv[0], *argv]
    try:
        _search()
    except SystemExit as e:
        # Hydra reports its own config errors with exit code 1; ours are 2 everywhere.
        if e.code == 1:
            sys.exit(EXIT_BAD_INPUT)
        raise
    leave_if_worker()


if __name__ == "__main__":
    main()
