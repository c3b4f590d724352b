"""The checks of a run's config values, and which keys a resumed run may change.

Torch-free, so that ``nas-search`` and ``nas-train`` refuse a bad value (``epochs=abc``) before
importing torch (seconds) rather than after; the loops run the same checks again for callers
that build runs in-process. Every error is one line naming the key, the value and what was
expected, raised as the caller's error class.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from search_spaces.families import FAMILIES

SCHEDULES = ("cosine", "step", "linear")
STAGE_LRS = ("cosine", "reference")  # nas.run.schedules.search_lr_factor
ARCH_BATCHES = ("sequential", "random")  # nas.pipeline.search.SearchRun._arch_batches
WANDB_MODES = ("online", "offline", "disabled")  # nas.trackers.WandbTracker
DEVICE_WORDS = "auto, cpu, cuda or cuda:N"  # nas.distributed.select_device
AMP_WORDS = "null, bf16 or fp16"  # nas.run.skeleton.autocast_dtype

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
    "trust_pickle",
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
    "trust_pickle",
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


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _device(v: Any) -> bool:
    """What ``nas.distributed.select_device`` accepts (whether CUDA is there is its question)."""
    return isinstance(v, str) and (
        v in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", v) is not None
    )


def _amp(v: Any) -> bool:
    """What ``nas.run.skeleton.autocast_dtype`` accepts."""
    return v in (None, "none", "null", "bf16", "fp16") or v is False


def _world_size() -> int:
    """The processes of a torchrun launch (``WORLD_SIZE``; ``nas.distributed.env_from_torchrun``
    refuses a malformed one), 1 without torchrun."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


_ABSENT = object()


class _Checker:
    def __init__(self, cfg: DictConfig, error: type[Exception]) -> None:
        self.cfg = cfg
        self.error = error

    def __call__(
        self, key: str, ok: Callable[[Any], bool], expected: str, *, default: Any = None
    ) -> None:
        """``key`` must pass ``ok``; an absent key counts as ``default`` (the value the run
        takes then), or is left alone with ``default=_ABSENT``."""
        value = OmegaConf.select(self.cfg, key, default=default)
        if value is not _ABSENT and not ok(value):
            raise self.error(f"{key} must be {expected}, got {value!r}")


def _check_where_it_runs(check: _Checker, cfg: DictConfig, error: type[Exception]) -> None:
    """The keys both loops read through the run skeleton: device, mixed precision, trackers."""
    check("device", _device, DEVICE_WORDS)
    check("amp", _amp, AMP_WORDS)
    check("trust_pickle", _bool, "true or false", default=False)
    if OmegaConf.select(cfg, "amp", default=None) == "fp16" and cfg.device == "cpu":
        raise error("amp=fp16 needs CUDA; on CPU use amp=bf16 or amp=null")
    for tracker in ("wandb", "mlflow"):
        check(f"trackers.{tracker}.enabled", _bool, "true or false", default=_ABSENT)
    check("trackers.wandb.mode", _optional(lambda v: v in WANDB_MODES),
          f"{', '.join(WANDB_MODES[:-1])} or {WANDB_MODES[-1]}", default=_ABSENT)  # fmt: skip


def _check_data_loading(check: _Checker) -> None:
    """The data keys the loops read themselves (``nas.data`` checks the data set's own)."""
    check("data.num_workers", _non_negative_int, "an int >= 0", default=_ABSENT)
    for key in ("data.pin_memory", "data.download"):
        check(key, _bool, "true or false", default=_ABSENT)


def validate_search_config(cfg: DictConfig, error: type[Exception] = ValueError) -> None:
    """The top-level values a search reads (the plug-ins check their own when built)."""
    check = _Checker(cfg, error)
    for key in ("batch_size", "space.C", "space.layers", "log_every"):
        check(key, _positive_int, "a positive int")
    # 0: select on the untrained supernet (zero-cost selection)
    check("epochs", _non_negative_int, "an int >= 0")
    for key in ("micro_batches", "sync_check_every"):
        check(key, _optional(_positive_int), "a positive int")
    check("optimizer.lr", lambda v: _is_number(v) and v > 0, "a positive float")
    check("optimizer.grad_clip", _optional(lambda v: _is_number(v) and v > 0),
          "a positive float or null (not clipped)")  # fmt: skip
    for key in ("optimizer.lr_min", "optimizer.weight_decay", "optimizer.momentum"):
        check(key, lambda v: _is_number(v) and v >= 0, "a number >= 0")
    check("optimizer.warmup_epochs", _optional(_non_negative_int), "an int >= 0")
    check("optimizer.nesterov", _bool, "true or false", default=False)
    check("optimizer.lr_per_step", _bool, "true or false", default=False)
    check("optimizer.warmup_lr", _optional(lambda v: _is_number(v) and v > 0),
          "a positive float or null (a linear warm-up)")  # fmt: skip
    warmup_lr = OmegaConf.select(cfg, "optimizer.warmup_lr", default=None)
    warmup_epochs = OmegaConf.select(cfg, "optimizer.warmup_epochs", default=0) or 0
    if warmup_lr is not None and not 0 < warmup_epochs < cfg.epochs:
        raise error(
            f"optimizer.warmup_lr={warmup_lr} starts a cosine warm-up of optimizer."
            f"warmup_epochs={warmup_epochs} epochs, before the cosine restarts over the rest; "
            f"expected 0 < warmup_epochs < epochs={cfg.epochs}"
        )
    if OmegaConf.select(cfg, "optimizer.nesterov", default=False) and not OmegaConf.select(
        cfg, "optimizer.momentum", default=0
    ):
        raise error("optimizer.nesterov=true needs optimizer.momentum > 0, got 0")
    check("label_smoothing", lambda v: _is_number(v) and 0 <= v < 1, "a number in [0, 1)",
          default=0.0)  # fmt: skip
    check("seed", _non_negative_int, "an int >= 0")
    for key in ("resume", "eval", "figures"):
        check(key, lambda v: isinstance(v, bool), "true or false")
    check("compile", lambda v: _bool(v) or v == "graphs", "true, false or graphs",
          default=False)  # fmt: skip
    check("channels_last", lambda v: _bool(v) or v == "auto", "true, false or auto",
          default="auto")  # fmt: skip
    check("optimizer.stage_lr", lambda v: v in STAGE_LRS, " or ".join(map(repr, STAGE_LRS)),
          default="cosine")  # fmt: skip
    check("space.partial_channels", _optional(_positive_int), "a positive int")
    for key in ("space.lastact", "space.pool_bn"):  # null: the space family's layout
        check(key, _optional(_bool), "true or false")
    check("arch_batch", lambda v: v in ARCH_BATCHES, " or ".join(map(repr, ARCH_BATCHES)),
          default="sequential")  # fmt: skip
    micro_batches = OmegaConf.select(cfg, "micro_batches", default=None) or 1
    pieces = _world_size() * micro_batches
    if cfg.batch_size < pieces:
        raise error(
            f"batch_size={cfg.batch_size} is the global batch; {_world_size()} process(es) x "
            f"micro_batches={micro_batches} need at least {pieces} images"
        )
    from_run = OmegaConf.select(cfg, "from_run", default=None)
    if from_run is not None:
        if not isinstance(from_run, str) or not from_run.strip():
            raise error(
                f"from_run must be the folder of a finished nas-search run, got {from_run!r}"
            )
        folder = Path(from_run).expanduser()
        if not (folder / "config.yaml").is_file():
            raise error(
                f"from_run={folder} holds no config.yaml; expected the folder of a finished "
                "nas-search run"
            )
    _check_where_it_runs(check, cfg, error)
    if OmegaConf.select(cfg, "amp", default=None) == "fp16":
        # float16 gradients underflow without loss scaling (PyTorch's AMP recipe pairs fp16
        # with GradScaler); the search's steps (two optimisers, unrolled and Hessian-vector
        # products, gradients rewritten by components) have none, and bf16 needs none
        raise error(
            "amp=fp16: the search has no loss scaling, so float16 gradients would underflow; "
            "use amp=bf16 (float32's range) or amp=null"
        )
    _check_data_loading(check)
    check("data.train_portion", _optional(lambda v: _is_number(v) and 0 < v <= 1),
          "a number in (0, 1]")  # fmt: skip
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
        # the size section of each space family's networks: model.<family>.C, .<layers word>
        *(f"model.{f.name}.{key}" for f in FAMILIES.values() for key in f.size_keys),
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
    _check_where_it_runs(check, cfg, error)
    _check_data_loading(check)
    check("data.cutout", _optional(_non_negative_int), "an int >= 0 (pixels; 0: none)")
    if isinstance(OmegaConf.select(cfg, "data.color_jitter", default=None), ListConfig):
        check("data.color_jitter", _jitter_values, "true, false or [brightness, contrast, "
              "saturation, hue] (numbers >= 0, hue <= 0.5)")  # fmt: skip
    else:
        check("data.color_jitter", _bool, "true or false", default=_ABSENT)
    _check_optimiser_options(check, cfg, error)
    _check_distill(check, cfg, error)
    checkpoint = OmegaConf.select(cfg, "checkpoint", default=None)
    if checkpoint is not None and (not isinstance(checkpoint, str) or not checkpoint.strip()):
        raise error(
            f"checkpoint must be a nas-train checkpoint or run folder, or null, got {checkpoint!r}"
        )
    if cfg.eval_only and checkpoint is None:
        raise error(
            "eval_only=true needs checkpoint=<a nas-train checkpoint or run folder>; got null"
        )
    if not cfg.eval_only:
        genotype = OmegaConf.select(cfg, "genotype", default=None)
        is_index = isinstance(genotype, int) and not isinstance(genotype, bool)
        if not is_index and (not isinstance(genotype, str) or not genotype.strip()):
            raise error(
                "genotype must be a genotype.json, a nas-search run folder, a published name, "
                f"genotype text, an NB201 arch string or index, got {genotype!r}"
            )
    max_items = OmegaConf.select(cfg, "data.max_items", default=None)
    if max_items is not None and (not _positive_int(max_items) or max_items < 2):
        raise error(f"data.max_items must be an int >= 2 or null, got {max_items!r}")
    if cfg.optimizer.warmup_epochs > cfg.epochs:
        raise error(
            f"optimizer.warmup_epochs={cfg.optimizer.warmup_epochs} exceeds epochs={cfg.epochs}"
        )


NO_WEIGHT_DECAY = ("bn", "bias")  # nas.training.loop.parameter_groups


def _jitter_values(v: Any) -> bool:
    """``data.color_jitter`` as torchvision's ColorJitter(brightness, contrast, saturation, hue)
    factors (``nas.training.loop``: ProxylessNAS's hue 0.1 where the toolkit's default is 0.2)."""
    if not isinstance(v, (list, tuple, ListConfig)) or len(v) != 4:
        return False
    return all(_is_number(x) and x >= 0 for x in v) and v[3] <= 0.5


def _check_optimiser_options(check: _Checker, cfg: DictConfig, error: type[Exception]) -> None:
    """The optimiser options beyond plain SGD: parameters kept out of weight decay, the schedule
    advanced every step, Nesterov momentum."""
    words = f"a list of distinct names from {', '.join(NO_WEIGHT_DECAY)} ([] : decay everything)"
    check("optimizer.no_weight_decay", lambda v: isinstance(v, (list, ListConfig))
          and all(x in NO_WEIGHT_DECAY for x in v) and len(set(v)) == len(v), words,
          default=_ABSENT)  # fmt: skip
    check("optimizer.lr_per_step", _bool, "true or false", default=_ABSENT)
    opt = cfg.optimizer
    exempt = list(OmegaConf.select(cfg, "optimizer.no_weight_decay", default=None) or [])
    if exempt and opt.weight_decay == 0:
        raise error(
            f"optimizer.no_weight_decay=[{', '.join(exempt)}] does not apply with "
            "optimizer.weight_decay=0 (nothing decays); set one of them"
        )
    if opt.nesterov and opt.momentum == 0:
        raise error("optimizer.nesterov=true needs optimizer.momentum > 0, got 0")


DISTILL_DEFAULTS = {"weight": 0.0, "temperature": 1.0, "scale_t2": True, "weights": None}


def _check_distill(check: _Checker, cfg: DictConfig, error: type[Exception]) -> None:
    """Knowledge distillation (``nas.training.distill``): a teacher and a weight > 0 go together,
    and nothing else of the section is set without a teacher."""
    if OmegaConf.select(cfg, "distill", default=None) is None:
        return
    teacher_words = (
        "a nas-train checkpoint or run folder, a genotype reference (DARTS_V2, ...), "
        "torchvision:<model>, or null"
    )
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
    check("distill.teacher", lambda v: v is None or is_int(v) or isinstance(v, str) and
          bool(v.strip()), teacher_words)  # fmt: skip
    check("distill.weights", lambda v: v is None or isinstance(v, str) and bool(v.strip()),
          "a file, a nas-train run folder, a torchvision weights name, or null")  # fmt: skip
    check("distill.weight", lambda v: _is_number(v) and 0 <= v < float("inf"), "a number >= 0")
    check("distill.temperature", lambda v: _is_number(v) and 0 < v < float("inf"),
          "a number > 0")  # fmt: skip
    check("distill.scale_t2", _bool, "true or false")
    d = cfg.distill
    if d.teacher is None:
        for key, default in DISTILL_DEFAULTS.items():
            value = d.get(key, default)
            if value != default:
                shown = "null" if value is None else value
                raise error(
                    f"distill.{key}={shown} does not apply without distill.teacher (a nas-train "
                    "checkpoint or run folder, a genotype with distill.weights, or "
                    "torchvision:<model>)"
                )
    elif d.weight == 0:
        raise error(
            f"distill.teacher={d.teacher} is not used with distill.weight=0; set distill.weight "
            "> 0 (the loss is CE + weight x KD; once-for-all uses 1.0)"
        )


def set_on_command_line(*keys: str) -> list[str]:
    """Which of ``keys`` the command line set (Hydra's task overrides); [] outside Hydra."""
    from hydra.core.hydra_config import HydraConfig  # Hydra's runtime, only inside a Hydra app

    if not HydraConfig.initialized():
        return []
    given = {o.partition("=")[0].lstrip("+~") for o in HydraConfig.get().overrides.task}
    return [key for key in keys if key in given]
