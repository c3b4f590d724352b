"""Where a search starts from: its own checkpoint (``resume=true``) or a finished search's.

The pipeline's search stage (``nas.pipeline``). ``check_resumable`` decides whether a stopped
search may continue with the settings given now (the same values but for the result-neutral
keys, the same batch-norm groups, ``epochs`` changed only where the epochs already started
keep their learning rate, and not once a selector with progress of its own has begun);
``from_run`` reads a finished search (``from_run=<folder>``) so that a new selection runs on
its supernet. Both raise one-line ``ValueError``s; the search run reports them as its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from nas.choices import plugin_name
from nas.run.checkpoint import CheckpointError, load_checkpoint
from nas.run.config import SEARCH_NEUTRAL_KEYS, SEARCH_NEUTRAL_WORDS
from nas.run.schedules import search_lr_factor

if TYPE_CHECKING:
    from nas.pipeline.search import SearchRun


def check_resumable(run: SearchRun, state: dict[str, Any]) -> None:
    """``resume=true`` continues the stopped search or nothing: the same values but for the
    result-neutral keys (``nas.run.config``), the same batch-norm groups, and ``epochs``
    changed only where the epochs already started keep their learning rate."""
    old = state["config"]
    # keys added since a checkpoint was written, at the values the run had then
    old.setdefault("label_smoothing", 0.0)
    if isinstance(old.get("optimizer"), dict):
        for key, value in (("nesterov", False), ("lr_per_step", False), ("warmup_lr", None)):
            old["optimizer"].setdefault(key, value)
    run.check_same_values(state, neutral=SEARCH_NEUTRAL_KEYS, neutral_words=SEARCH_NEUTRAL_WORDS)
    old_world = int(state.get("world_size", 1))
    old_micro = int(old.get("micro_batches") or 1)
    if old_world * old_micro != run.pieces:
        pieces = old_world * old_micro
        fits = pieces % run.env.world_size == 0
        advice = (
            f"use micro_batches={pieces // run.env.world_size}"
            if fits
            else f"use a number of processes that divides {pieces}"
        )
        raise ValueError(
            f"checkpoint {run.ckpt_path} cut each batch into {pieces} batch-norm groups "
            f"({old_world} process(es) x micro_batches={old_micro}); {run.env.world_size} "
            f"process(es) x micro_batches={run.micro_batches} would search differently: "
            f"{advice}"
        )
    # a selector with progress of its own (DARTS-PT's projections, RS-WS's rounds) has begun
    # on the search's final supernet; one that reads the final weights at once can wait
    if (
        int(old["epochs"]) != run.epochs
        and state.get("phase", "search") != "search"
        and not type(run.selector).selects_from_weights
    ):
        raise ValueError(
            f"epochs={run.epochs}, but the search in checkpoint {run.ckpt_path} has ended "
            f"and its {plugin_name(run.cfg, 'selection')} selection begun; resume with "
            f"epochs={old['epochs']}"
        )
    opt = run.cfg.optimizer
    lr = float(opt.lr)
    if int(old["epochs"]) != run.epochs and bool(opt.get("lr_per_step", False)):
        raise ValueError(
            f"epochs={run.epochs}, but the search in checkpoint {run.ckpt_path} sets its "
            "learning rate per step (optimizer.lr_per_step), where the total moves every "
            f"step's rate; resume with epochs={old['epochs']}"
        )
    warmup_lr = opt.get("warmup_lr")

    def settings(total: int, epoch: int) -> dict[str, float]:
        factor = search_lr_factor(
            epochs=total,
            lr=lr,
            lr_min=float(opt.lr_min),
            warmup_epochs=int(opt.get("warmup_epochs", 0) or 0),
            warmup_lr=None if warmup_lr is None else float(warmup_lr),
        )
        return {"learning rate": lr * factor(epoch)}

    run.check_epoch_change(state, settings)


def from_run(cfg: DictConfig) -> tuple[DictConfig, dict[str, Any]]:
    """The config and final checkpoint of a finished search, to select on its supernet.

    The finished run's own config is kept (space, strategy, data, seed, schedule); the
    current ``selection`` replaces its selector."""
    folder = Path(str(cfg.from_run)).expanduser()
    if not (folder / "config.yaml").is_file():
        raise ValueError(
            f"from_run={folder} holds no config.yaml; expected the folder of a finished "
            "nas-search run"
        )
    try:
        state = load_checkpoint(
            folder / "checkpoints" / "last.pt",
            kind="search",
            trust_pickle=bool(cfg.get("trust_pickle", False)),
        )
    except CheckpointError as e:
        raise ValueError(str(e)) from None
    base = OmegaConf.load(folder / "config.yaml")
    assert isinstance(base, DictConfig)
    if int(state["epoch"]) < int(base.epochs) and not state.get("stopped_early"):
        raise ValueError(
            f"the search in {folder} stopped at epoch {state['epoch']} of {base.epochs}; "
            "finish it with resume=true first"
        )
    merged = OmegaConf.merge(
        base,
        {
            "selection": OmegaConf.to_container(cfg.selection, resolve=True),
            "resume": cfg.resume,
            "from_run": str(folder),
            "eval": cfg.get("eval", True),
            "log_every": cfg.log_every,
        },
    )
    assert isinstance(merged, DictConfig)
    # the finished search's supernet, strategy and optimiser, before any selection
    state = {**state, "phase": "search", "step_in_epoch": 0}
    return merged, state
