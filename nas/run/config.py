"""The checks of a run's config values, and which keys a resumed run may change.

Torch-free, so that ``nas-search`` and ``nas-train`` refuse a bad value (``epochs=abc``) before
importing torch (seconds) rather than after; the loops run the same checks again for callers
that build runs in-process. Every error is one line naming the key, the value and what was
expected, raised as the caller's error class.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

SCHEDULES = ("cosine", "step", "linear")

# Keys that cannot change what a run computes: where it runs (device, memory format,
# compilation), what it logs and draws, how the data is read. A resume may change them.
SEARCH_NEUTRAL_KEYS = (
    "name",
    "resume",
    "device",
    "channels_last",
    "log_every",
    "eval",
    "figures",
    "trackers",
    "sync_check_every",
    "micro_batches",  # checked on its own: processes x micro_batches must stay (batch norm)
    "data.root",
    "data.download",
    "data.num_workers",
    "data.pin_memory",
)
SEARCH_NEUTRAL_WORDS = (
    "device, channels_last, logging (log_every, eval, figures, trackers, sync_check_every), data "
    "loading (data.root, data.num_workers, ...) and processes x micro_batches"
)
TRAIN_NEUTRAL_KEYS = (
    "name",
    "resume",
    "device",
    "channels_last",
    "compile",
    "log_every",
    "save_best",
    "trackers",
    "eval_only",
    "checkpoint",
    "genotype",  # compared as the genotype it names, not as the text that named it
    "data.root",
    "data.download",
    "data.num_workers",
    "data.pin_memory",
)
TRAIN_NEUTRAL_WORDS = (
    "device, channels_last, compile, logging (log_every, save_best, trackers) and data loading "
    "(data.root, data.num_workers, ...)"
)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _non_negative_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


class _Checker:
    def __init__(self, cfg: DictConfig, error: type[Exception]) -> None:
        self.cfg = cfg
        self.error = error

    def __call__(self, key: str, ok: Callable[[Any], bool], expected: str) -> None:
        value = OmegaConf.select(self.cfg, key, default=None)
        if not ok(value):
            raise self.error(f"{key} must be {expected}, got {value!r}")


def validate_search_config(cfg: DictConfig, error: type[Exception] = ValueError) -> None:
    """The top-level values a search reads (the plug-ins check their own when built)."""
    check = _Checker(cfg, error)
    for key in ("batch_size", "space.C", "space.layers", "log_every"):
        check(key, _positive_int, "a positive int")
    # 0: select on the untrained supernet (zero-cost selection)
    check("epochs", _non_negative_int, "an int >= 0")
    for key in ("micro_batches", "sync_check_every"):
        check(key, _optional(_positive_int), "a positive int")
    for key in ("optimizer.lr", "optimizer.grad_clip"):
        check(key, lambda v: _is_number(v) and v > 0, "a positive float")
    for key in ("optimizer.lr_min", "optimizer.weight_decay", "optimizer.momentum"):
        check(key, lambda v: _is_number(v) and v >= 0, "a number >= 0")
    check("optimizer.warmup_epochs", _optional(_non_negative_int), "an int >= 0")
    check("seed", _non_negative_int, "an int >= 0")
    for key in ("resume", "eval", "figures"):
        check(key, lambda v: isinstance(v, bool), "true or false")
    max_items = OmegaConf.select(cfg, "data.max_items", default=None)
    if max_items is not None and (not _positive_int(max_items) or max_items < 2):
        raise error(f"data.max_items must be an int >= 2 or null, got {max_items!r}")


NON_NEGATIVE_KEYS = (
    "optimizer.lr_min",
    "optimizer.momentum",
    "optimizer.weight_decay",
    "model.auxiliary_weight",
)
BOOL_KEYS = (
    "model.auxiliary",
    "channels_last",
    "compile",
    "sync_bn",
    "augment",
    "resume",
    "optimizer.nesterov",
    "save_best",
    "eval_only",
)


def validate_train_config(cfg: DictConfig, error: type[Exception] = ValueError) -> None:
    """Every value a training run reads."""
    check = _Checker(cfg, error)
    for key in (
        "epochs",
        "batch_size",
        "log_every",
        "model.darts.C",
        "model.darts.layers",
        "model.nb201.C",
        "model.nb201.N",
        "eval.every",
        "optimizer.decay_period",
    ):
        check(key, _positive_int, "a positive int")
    for key in ("eval.batch_size", "eval.max_items"):
        check(key, _optional(_positive_int), "a positive int or null")
    check("seed", _non_negative_int, "an int >= 0")
    check("optimizer.lr", lambda v: _is_number(v) and v > 0, "a number > 0")
    for key in NON_NEGATIVE_KEYS:
        check(key, lambda v: _is_number(v) and v >= 0, "a number >= 0")
    no_clip = "a number >= 0 or null (0 / null: no clipping)"
    check("optimizer.grad_clip", _optional(lambda v: _is_number(v) and v >= 0), no_clip)
    check("optimizer.warmup_epochs", _non_negative_int, "an int >= 0")
    check("optimizer.gamma", lambda v: _is_number(v) and 0 < v <= 1, "a number in (0, 1]")
    check("optimizer.schedule", lambda v: v in SCHEDULES, f"one of {', '.join(SCHEDULES)}")
    check("model.drop_path", lambda v: _is_number(v) and 0 <= v < 1, "a number in [0, 1)")
    check("label_smoothing", lambda v: _is_number(v) and 0 <= v < 1, "a number in [0, 1)")
    in_unit = _optional(lambda v: _is_number(v) and 0 < v < 1)
    check("ema.decay", in_unit, "a number in (0, 1) or null")
    for key in BOOL_KEYS:
        check(key, lambda v: isinstance(v, bool), "true or false")
    max_items = OmegaConf.select(cfg, "data.max_items", default=None)
    if max_items is not None and (not _positive_int(max_items) or max_items < 2):
        raise error(f"data.max_items must be an int >= 2 or null, got {max_items!r}")
    if cfg.optimizer.warmup_epochs > cfg.epochs:
        raise error(
            f"optimizer.warmup_epochs={cfg.optimizer.warmup_epochs} exceeds epochs={cfg.epochs}"
        )


def set_on_command_line(*keys: str) -> list[str]:
    """Which of ``keys`` the command line set (Hydra's task overrides); [] outside Hydra."""
    from hydra.core.hydra_config import HydraConfig  # Hydra's runtime, only inside a Hydra app

    if not HydraConfig.initialized():
        return []
    given = {o.partition("=")[0].lstrip("+~") for o in HydraConfig.get().overrides.task}
    return [key for key in keys if key in given]
