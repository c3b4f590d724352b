"""``nas-search``: run a differentiable architecture search from Hydra configs.

``nas-search`` alone runs the quickstart (``experiment=quickstart``, added whenever the command
line does not choose a space, strategy, selection, data set or experiment); ``nas-search
space=darts search=darts search.order=2 epochs=50`` overrides any value; ``nas-search -m
seed=0,1,2`` sweeps seeds; ``torchrun --nproc_per_node=8 -m nas.cli.search ...`` runs one
search data-parallel over 8 processes (``batch_size`` stays the global batch; see
``nas.search.loop``). Bad input (an unknown name, a value of the wrong type or range, an
unusable run folder, a non-finite loss) prints one line and exits with code 2; SIGTERM writes
a checkpoint and exits with code 143 after saying how to resume.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from nas.cli.configs import config_dir, options, user_folders
from nas.cli.launch import EXIT_BAD_INPUT, exit_preempted, fail, is_rank0

CONFIG_DIR = config_dir()  # configs/ of the checkout, or the installed package's copy
GROUPS = ("space", "search", "selection", "data", "experiment")


def _fail(message: str) -> NoReturn:
    fail("nas-search", message)


def check_group_choices(argv: list[str]) -> None:
    """Reject ``group=unknown`` before Hydra does (its message spans a page); names in the
    user's own config folders (``hydra.searchpath``, ``--config-dir``) count."""
    extra = user_folders(argv)
    if extra is None:  # a pkg:// entry: its options cannot be listed, let Hydra judge
        return
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+~")
        if not sep or key not in GROUPS or value in ("null", ""):
            continue
        names = options([CONFIG_DIR / key, *(folder / key for folder in extra)])
        for choice in value.split(","):  # -m sweeps: space=darts,nb201
            if choice not in names:
                _fail(f"unknown {key} {choice!r}; expected one of {', '.join(names)}")


@hydra.main(config_path=str(CONFIG_DIR), config_name="nas_search", version_base="1.3")
def _search(cfg: DictConfig) -> None:
    from nas import distributed
    from nas.search.loop import Preempted, SearchError, run_search

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        result = run_search(cfg, run_dir)
    except Preempted as p:
        exit_preempted("nas-search", p.checkpoint, run_dir)
    except (SearchError, ValueError, FileNotFoundError) as e:
        _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
    finally:
        distributed.shutdown()
    if not is_rank0():
        return
    print(f"run folder: {result.run_dir}")
    print(f"genotype ({OmegaConf.select(cfg, 'selection.name')}): {result.genotype}")
    bench_line = _bench_line(result.genotype)
    if bench_line:
        print(bench_line)


def _bench_line(genotype: object) -> str | None:
    from search_spaces.genotype import NB201Genotype

    if not isinstance(genotype, NB201Genotype):
        return None
    try:
        from nas.bench import format_result_line
    except ImportError:
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


def main() -> None:
    sys.argv = [sys.argv[0], *quickstart_argv(sys.argv[1:])]
    check_group_choices(sys.argv[1:])
    try:
        _search()
    except SystemExit as e:
        # Hydra reports its own config errors with exit code 1; ours are 2 everywhere.
        if e.code == 1:
            sys.exit(EXIT_BAD_INPUT)
        raise


if __name__ == "__main__":
    main()
