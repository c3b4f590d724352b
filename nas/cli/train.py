"""``nas-train``: retrain a genotype from scratch with one of the papers' recipes.

``nas-train`` alone runs the quickstart (DARTS_V2, tiny, 2 epochs on the embedded data);
``nas-train experiment=darts_cifar10 genotype=outputs/darts-darts/seed0 data.root=/data/cifar``
retrains a searched cell with the DARTS recipe; ``torchrun --nproc_per_node=8 -m
nas.cli.train ...`` (or ``torchrun --nproc_per_node=8 $(which nas-train) ...``) spreads the same
global batch over 8 processes. ``eval_only=true checkpoint=<file or run folder>`` evaluates a
checkpoint. Bad input prints one line and exits with code 2, before anything is imported or
written where the command line alone shows it (``nas.cli.config_check``); SIGTERM and Ctrl-C
write a checkpoint at the next step and exit with code 143 / 130 after saying how to resume (a
second Ctrl-C stops at once); a run folder in use by another run, or one that cannot be
written, is one line and exit code 2 (``nas.cli.launch.run_in_folder``).

The configs have their own root, ``configs/train`` (``nas_train.yaml``, recipes in
``experiment/``); the groups shared with ``nas-search``, ``data/`` and ``hydra/launcher/``, are
the files of ``configs/`` registered in Hydra's ``ConfigStore`` (``SHARED_GROUPS``,
``register_shared_configs``), so the search's ``configs/experiment`` recipes are not on this
command's search path and the same holds from a checkout and from an installed wheel.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import hydra
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from nas.cli import launch
from nas.cli.config_check import CommandLineError, check_command_line
from nas.cli.configs import (
    config_dir,
    options,
    remove_stored,
    store_groups,
    user_folders,
    user_search_path,
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
from nas.run.config import validate_train_config
from nas.run.folder import remove_new_empty_dirs
from search_spaces.genotype import GENOTYPE_TYPES

if TYPE_CHECKING:
    from nas.training.loop import TrainResult

CONFIG_DIR = config_dir()  # configs/ of the checkout, or the installed package's copy
TRAIN_CONFIG_DIR = CONFIG_DIR / "train"
GROUP_DIRS = {"data": CONFIG_DIR / "data", "experiment": TRAIN_CONFIG_DIR / "experiment"}
# the groups of configs/ that the training configs compose too (registered in the ConfigStore)
SHARED_GROUPS = ("data", "hydra/launcher")
# where a user's config folder D holds each group for nas-train (D mirrors configs/)
_USER_GROUP = {"data": "data", "experiment": "train/experiment"}
# characters of genotype text that Hydra's override grammar would misread unquoted
_HYDRA_SPECIAL = set("|{}()[],'\" =:$\\")


def _shell_quoting(example: str) -> str:
    return (
        f'quote the whole override for the shell, e.g. nas-train "genotype={example}" (double '
        "quotes outside, the reference's single quotes inside)"
    )


def _fail(message: str) -> NoReturn:
    fail("nas-train", message)


def group_options(group: str, argv: list[str] | None = None) -> list[str]:
    """The names ``group=`` accepts: ours and those in the user's folders on the command line."""
    extra = user_folders(argv or []) or []
    return options([GROUP_DIRS[group], *(folder / _USER_GROUP[group] for folder in extra)])


def check_group_choices(argv: list[str]) -> None:
    """Reject ``group=unknown`` before Hydra does (its message spans a page), and the search's
    ``experiment=`` recipes, which are on the search path but are not training recipes."""
    if user_folders(argv) is None:  # a pkg:// entry: its options cannot be listed, let Hydra judge
        return
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+~")
        if not sep or key not in GROUP_DIRS or value in ("null", ""):
            continue
        names = group_options(key, argv)
        for choice in value.split(","):  # -m sweeps: experiment=darts_cifar10,drnas_cifar10
            if choice not in names:
                raise CommandLineError(
                    f"unknown {key} {choice!r}; expected one of {', '.join(names)}"
                )


def hydra_quote(value: str) -> str:
    """``value`` as one quoted string of Hydra's override grammar (the quote character escaped
    inside), so any genotype text reaches ``nas-train`` unchanged."""
    quote = "'" if '"' in value and "'" not in value else '"'
    return quote + value.replace(quote, "\\" + quote) + quote


def check_genotype_quoting(argv: list[str]) -> None:
    """One line saying how to quote when the shell mangled pasted genotype text whose form holds
    spaces and quotes (a genotype class's ``shell_text``, as ``Genotype(...)``): split at its
    spaces (unbalanced brackets) or stripped of the op names' quotes."""
    forms = [g.shell_text for g in GENOTYPE_TYPES.values() if g.shell_text is not None]
    for arg in argv:
        key, sep, value = arg.partition("=")
        form = next((f for f in forms if value.startswith(f[0])), None)
        if not (sep and key.lstrip("+") == "genotype" and form):
            continue
        start, example = form
        if value.count("(") != value.count(")") or value.count("[") != value.count("]"):
            raise CommandLineError(
                f"genotype= holds only the start of the {start} text ({value!r}): the shell "
                f"split it at its spaces; {_shell_quoting(example)}"
            )
        if "'" not in value and '"' not in value:
            raise CommandLineError(
                f"the op names in genotype= lost their quotes to the shell; "
                f"{_shell_quoting(example)}"
            )


def register_shared_configs(argv: list[str]) -> None:
    """Put the ``SHARED_GROUPS`` of ``configs/`` and of the user's folders named by
    ``hydra.searchpath`` (theirs after ours: a name of ours wins) in Hydra's ``ConfigStore``,
    before Hydra composes; ``--config-dir`` folders Hydra reads itself."""
    searchpath = [a for a in argv if a.partition("=")[0].lstrip("+") == "hydra.searchpath"]
    store_groups(SHARED_GROUPS, [CONFIG_DIR, *(user_folders(searchpath) or [])], "nas-train")


@contextmanager
def shared_configs(argv: list[str]) -> Iterator[None]:
    """``register_shared_configs`` for one composition inside a process that may also compose
    ``nas-search``'s configs (tests, notebooks); the nodes are removed afterwards."""
    register_shared_configs(argv)
    try:
        yield
    finally:
        remove_stored("nas-train")


def prepare_argv(argv: list[str]) -> list[str]:
    """The command line Hydra sees: genotype text quoted for Hydra's grammar (an NB201 arch
    string or ``Genotype(...)`` text works as typed), and each of the user's folders laid out as
    ``configs/`` (``hydra.searchpath``, ``--config-dir``) given to Hydra as its ``train/``
    (``train/experiment/`` recipes), the root of nas-train's configs in it, where it has one;
    its shared groups (``data/``) come through ``register_shared_configs``."""
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key.lstrip("+") == "hydra.searchpath":
            continue  # rewritten below
        if (
            sep
            and key.lstrip("+") in ("genotype", "checkpoint")
            and not (value[:1] in "'\"" and value[-1:] == value[:1] and len(value) > 1)
            and _HYDRA_SPECIAL.intersection(value)
        ):
            arg = f"{key}={hydra_quote(value)}"
        out.append(arg)
    entries = []
    for entry in user_search_path(argv):
        if not entry.startswith("file://"):
            entries.append(entry)  # pkg://: Hydra reads it as given
        elif Path(entry[len("file://") :], "train").is_dir():
            entries.append(f"{entry}/train")
    if entries:
        # next to the user's overrides: Hydra's argparse takes them as one run of positionals
        at = next((i for i, a in enumerate(out) if "=" in a and not a.startswith("-")), len(out))
        out.insert(at, f"hydra.searchpath=[{','.join(entries)}]")
    return out


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    """The config ``nas-train <overrides>`` would run with (tests, notebooks)."""
    argv = list(overrides or [])
    check_group_choices(argv)
    with (
        shared_configs(argv),
        initialize_config_dir(config_dir=str(TRAIN_CONFIG_DIR), version_base="1.3"),
    ):
        return compose(config_name="nas_train", overrides=prepare_argv(argv))


# what a training refuses as bad input (one line), not as a bug (a traceback)
BAD_INPUT = (ValueError, FileNotFoundError)


def train_job(
    cfg: DictConfig, run_dir: Path, guard: Callable[..., TrainResult] = run_guarded
) -> TrainResult:
    """The training of a composed job in its locked run folder, through ``guard``:
    ``run_in_folder`` for the command line (one line and an exit code), ``run_guarded`` for
    the Python API (exceptions with the same lines)."""

    def train() -> TrainResult:
        # the heavy imports (torch) inside the locked folder: a busy folder is refused at once
        from nas import distributed
        from nas.training.loop import run_train

        try:
            return run_train(cfg, run_dir)
        finally:
            distributed.shutdown()

    return guard("nas-train", run_dir, train, BAD_INPUT)


@hydra.main(config_path=str(TRAIN_CONFIG_DIR), config_name="nas_train", version_base="1.3")
def _train(cfg: DictConfig) -> None:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if bool(cfg.eval_only):
        _evaluate(cfg, BAD_INPUT)
        return
    result = train_job(cfg, run_dir, run_in_folder)
    if is_rank0():
        r = result.results
        final, best = r["final"], r["best"]
        print(
            f"done: {r['network']} ({r['params'] / 1e6:.3f}M params, {r['macs'] / 1e6:.1f}M "
            f"multiply-adds), {r['epochs']} epochs on {r['world_size']} process(es): test_top1 "
            f"{final.get('test_top1', float('nan')):.2f}  test_top5 "
            f"{final.get('test_top5', float('nan')):.2f}  (best top-1 "
            f"{best.get('test_top1', 0):.2f} at epoch {best.get('epoch', '-')}); results in "
            f"{result.run_dir / 'results.json'}",
            flush=True,
        )


def _evaluate(cfg: DictConfig, bad_input: tuple[type[BaseException], ...]) -> None:
    """``eval_only=true``: evaluate a checkpoint; writes nothing, so no run folder is locked."""
    # the heavy imports (torch) only once the command line is known to be good
    from nas import distributed
    from nas.training.evaluate import run_eval

    try:
        results = run_eval(cfg)
    except bad_input as e:
        _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
    finally:
        distributed.shutdown()
        # Hydra created a run folder for this command; an evaluation leaves none
        remove_new_empty_dirs(Path(HydraConfig.get().runtime.output_dir), launch.NEW_DIRS)
    if is_rank0():
        print(
            f"eval {results['checkpoint']} (epoch {results['epoch']}) on {results['data']} "
            f"({results['test_images']} images): test_loss {results['test_loss']:.4f}  "
            f"test_top1 {results['test_top1']:.2f}  test_top5 {results['test_top5']:.2f}"
            + (
                f"  ema_test_top1 {results['ema_test_top1']:.2f}"
                if "ema_test_top1" in results
                else ""
            )
        )
        print(json.dumps(results))


def check_config(argv: list[str]) -> None:
    """Everything the command line alone shows wrong, before Hydra or torch run:
    ``CommandLineError`` (one line); ``argv`` as typed (the check composes it as Hydra will
    see it, ``prepare_argv``). Leaves the shared groups registered for the composition."""
    check_genotype_quoting(argv)
    check_group_choices(argv)
    register_shared_configs(argv)
    check_command_line(
        "nas-train",
        prepare_argv(argv),
        config_dir=TRAIN_CONFIG_DIR,
        config_name="nas_train",
        groups=tuple(GROUP_DIRS),
        validate=validate_train_config,
    )


def prepare(argv: list[str]) -> list[str]:
    """The overrides Hydra composes for ``nas-train <argv>``, checked: ``CommandLineError``
    (one line) where they would not run. The command line and ``nas.train`` both start here."""
    argv = with_installed_configs(argv)
    check_config(argv)
    return prepare_argv(argv)


def main() -> None:
    try:
        argv = prepare(sys.argv[1:])
    except CommandLineError as e:
        _fail(str(e))
    sys.argv = [sys.argv[0], *argv]
    try:
        _train()
    except SystemExit as e:
        # Hydra reports its own config errors with exit code 1; ours are 2 everywhere.
        if e.code == 1:
            sys.exit(EXIT_BAD_INPUT)
        raise
    leave_if_worker()


if __name__ == "__main__":
    main()
