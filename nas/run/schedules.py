"""Learning-rate schedules of the two stages that train, as factors of the base rate per epoch.

Run skeleton (``nas.run``). Both loops set the rate per epoch, as every reference does
(``LambdaLR`` stepped at the end of an epoch: epoch e trains at ``lr * factor(e)``):

* ``search_lr_factor``: the weight rate of a search (DARTS, Liu et al., ICLR 2019: cosine to
  ``lr_min``; DrNAS, Chen et al., ICLR 2021: its ImageNet warm-up, and on request the rate its
  reference code really runs across progressive stages, ``reference_stage_lrs``; ProxylessNAS,
  Cai et al., ICLR 2019: a warm-up of its own cosine, then the cosine restarted, both per step);
* ``train_lr_factor``: the retraining recipes (DARTS CIFAR cosine, DARTS ImageNet step decay,
  DrNAS ImageNet's linear decay), and ``drop_path_prob``, DARTS's drop-path ramp.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from nas.run.config import SCHEDULES


def search_lr_factor(
    *,
    epochs: int,
    lr: float,
    lr_min: float,
    warmup_epochs: int = 0,
    stage_lr: str = "cosine",
    stage_starts: Sequence[int] = (),
    warmup_lr: float | None = None,
    steps_per_epoch: int | None = None,
) -> Callable[[int], float]:
    """The search's weight learning rate of epoch e (with ``steps_per_epoch``: of step s of
    the run, at the fractional epoch s / steps_per_epoch) as a factor of ``lr``.

    ``stage_lr="cosine"`` (default): cosine from ``lr`` to ``lr_min`` over all epochs (SGDR
    without restarts, as every reference intends), and during the first ``warmup_epochs`` the
    linear warm-up ``(e + 1) / warmup_epochs`` in its place (DrNAS's ImageNet search; per
    step ``(s + 1) / (warmup_epochs x steps_per_epoch)``). With ``warmup_lr`` the warm-up is
    a cosine of its own from ``warmup_lr`` to 0 over the warm-up epochs, and the cosine from
    ``lr`` to ``lr_min`` then starts over the remaining epochs (ProxylessNAS: ``nas_manager.py``
    ``warm_up`` from 0.05, then ``run_manager.py`` ``_calc_learning_rate``, per batch).
    ``stage_lr="reference"``: what the DrNAS reference code computes, ``reference_stage_lrs``."""
    if stage_lr == "reference":
        if warmup_lr is not None or steps_per_epoch is not None:
            raise ValueError(
                "optimizer.stage_lr=reference is the DrNAS code's rate per epoch after its "
                "linear warm-up; leave optimizer.warmup_lr=null and optimizer.lr_per_step=false"
            )
        lrs = reference_stage_lrs(
            epochs=epochs,
            lr=lr,
            lr_min=lr_min,
            warmup_epochs=warmup_epochs,
            stage_starts=stage_starts,
        )
        return lambda epoch: lrs[min(epoch, epochs - 1)] / lr
    if stage_lr != "cosine":
        raise ValueError(f"optimizer.stage_lr must be 'cosine' or 'reference', got {stage_lr!r}")

    n = steps_per_epoch or 1
    warm = warmup_epochs * n  # steps (or epochs) of the warm-up
    # the main cosine: over every epoch, or restarted after a cosine warm-up
    start, span = (0, epochs * n) if warmup_lr is None else (warm, (epochs - warmup_epochs) * n)

    def factor(index: int) -> float:
        if index < warm:
            if warmup_lr is None:
                return (index + 1) / warm
            return 0.5 * warmup_lr * (1 + math.cos(math.pi * index / warm)) / lr
        t = math.pi * (index - start) / max(span, 1)
        return (lr_min + (lr - lr_min) * (1 + math.cos(t)) / 2) / lr

    return factor


def reference_stage_lrs(
    *, epochs: int, lr: float, lr_min: float, warmup_epochs: int, stage_starts: Sequence[int]
) -> list[float]:
    """The weight lr of every epoch as the DrNAS reference runs it (train_search.py,
    train_search_imagenet.py, 201-space/train_search_progressive.py, with net2wider.py's
    ``configure_optimizer`` / ``configure_scheduler``).

    Its ``CosineAnnealingLR(T_max=epochs)`` steps at the end of every epoch in PyTorch's
    chainable form, ``lr_t = lr_min + (lr_(t-1) - lr_min) * (1 + cos(pi t / T)) /
    (1 + cos(pi (t-1) / T))``, from whatever the optimiser's lr is. At each stage change the
    reference builds a fresh SGD at the base ``lr`` and a new scheduler into which it loads the
    old one's state (``last_epoch`` included), so the chain restarts from ``lr`` mid-way:
    stage 2 of a 25 + 25 search runs at ``lr_min + (lr - lr_min) * c(e) / c(25)``, c(e) = 1 +
    cos(pi e / 50), twice the intended cosine (epoch 25: 0.1 instead of 0.05). During the
    ImageNet warm-up the reference overwrites the lr with ``lr (e + 1) / warmup_epochs`` at the
    start of each epoch, and the chain after it goes on from the last warm-up lr."""
    lrs: list[float] = []
    current = lr  # a new scheduler's first step (last_epoch 0) leaves the base lr
    starts = set(stage_starts)
    for epoch in range(epochs):
        if epoch in starts:
            current = lr  # the fresh SGD of the new stage, at the base lr
        if epoch < warmup_epochs:
            current = lr * (epoch + 1) / warmup_epochs
        lrs.append(current)
        t = epoch + 1  # scheduler.step() at the end of the epoch
        denominator = 1 + math.cos(math.pi * (t - 1) / epochs)
        if denominator > 0:  # t <= epochs: the chainable form is defined
            current = (
                lr_min + (current - lr_min) * (1 + math.cos(math.pi * t / epochs)) / denominator
            )
    return lrs


def train_lr_factor(
    *,
    schedule: str,
    epochs: int,
    lr: float,
    lr_min: float = 0.0,
    gamma: float = 0.97,
    decay_period: int = 1,
    warmup_epochs: int = 0,
) -> Callable[[int], float]:
    """The retraining learning rate of epoch e as a factor of ``lr`` (one of ``SCHEDULES``).

    * ``cosine``: ``lr_min + (lr - lr_min) (1 + cos(pi e / epochs)) / 2`` (DARTS CIFAR: to 0);
    * ``step``: ``gamma ** (e // decay_period)`` (DARTS ImageNet: x0.97 every epoch);
    * ``linear``: DrNAS's ImageNet ``adjust_lr``: ``(E - 5 - e) / (E - 5)``, and over the last
      5 epochs the gentler ``(E - e) / (5 (E - 5))``, which keeps the rate above 0 to the end
      (runs of 5 epochs or fewer decay as ``(E - e) / E``).

    During the first ``warmup_epochs`` the linear warm-up ``(e + 1) / warmup_epochs`` replaces
    the schedule (DrNAS ImageNet: 5 epochs).
    """
    if schedule not in SCHEDULES:
        raise ValueError(
            f"optimizer.schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}"
        )

    def factor(epoch: int) -> float:
        if epoch < warmup_epochs:
            return (epoch + 1) / warmup_epochs
        if schedule == "cosine":
            return (lr_min + (lr - lr_min) * (1 + math.cos(math.pi * epoch / epochs)) / 2) / lr
        if schedule == "step":
            return float(gamma ** (epoch // decay_period))
        tail = 5
        if epochs <= tail:
            return (epochs - epoch) / epochs
        if epochs - epoch > tail:
            return (epochs - tail - epoch) / (epochs - tail)
        return (epochs - epoch) / ((epochs - tail) * tail)

    return factor


def drop_path_prob(drop_path: float, epoch: int, epochs: int) -> float:
    """DARTS's ramp: ``drop_path * epoch / epochs`` during epoch ``epoch`` (0 in the first)."""
    return drop_path * epoch / epochs
