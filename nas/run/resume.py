"""Resume only the run that was stopped: the config check of ``resume=true``.

A resumed run ends exactly where the uninterrupted run would have (the tests kill real
processes to show it), but only if it continues with the values it started with. So a resume
compares the new config with the one saved in the checkpoint, key by key, and refuses with one
line naming every key that differs, except the keys that cannot change the result: where the
run executes (device, memory format, compilation), what it logs and draws, and how the data is
read (folder, workers). ``epochs`` may change too, with one meaning: the run becomes the run of
the new total from its start, which is allowed as long as every epoch already started would have
been trained the same way under the new total (the same learning rate, the same drop-path
probability); then ``resumed == uninterrupted`` holds for the new total. A cosine schedule
depends on its total from the second epoch on, so a finished cosine run cannot be extended
(that would be a different run: start one); a step schedule can be, at any point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

_ABSENT = "<absent>"


def flatten(config: Mapping[Any, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a.b": value}`` for every leaf of a nested mapping (lists are leaves)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _ignored(key: str, ignore: Iterable[str]) -> bool:
    return any(key == i or key.startswith(i + ".") for i in ignore)


def changed_keys(
    old: Mapping[Any, Any], new: Mapping[Any, Any], *, ignore: Iterable[str] = ()
) -> list[tuple[str, Any, Any]]:
    """``(key, old value, new value)`` of every leaf that differs, keys in ``ignore`` (and the
    keys under them) left out."""
    ignore = tuple(ignore)
    a, b = flatten(old), flatten(new)
    changes = []
    for key in sorted(set(a) | set(b)):
        if _ignored(key, ignore):
            continue
        va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if va != vb or type(va) is not type(vb) and not _same_number(va, vb):
            changes.append((key, va, vb))
    return changes


def _same_number(a: Any, b: Any) -> bool:
    numbers = (int, float)
    return (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )


def _short(value: Any, width: int = 40) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def describe_changes(changes: Sequence[tuple[str, Any, Any]]) -> str:
    """``seed 0 -> 1, optimizer.lr 0.025 -> 0.05`` (long values shortened)."""
    return ", ".join(f"{k} {_short(a)} -> {_short(b)}" for k, a, b in changes)


def check_same_config(
    old: Mapping[Any, Any],
    new: Mapping[Any, Any],
    *,
    checkpoint: object,
    neutral: Iterable[str],
    neutral_words: str,
) -> None:
    """Raise ``ValueError`` (one line) if ``new`` differs from the checkpoint's ``old`` config in
    a key that can change the result; ``epochs`` is left to ``check_epochs``."""
    changes = changed_keys(old, new, ignore=(*neutral, "epochs"))
    if changes:
        raise ValueError(
            f"checkpoint {checkpoint} was written with other values: {describe_changes(changes)}; "
            f"resume with the run's own values (only {neutral_words} may change, and epochs "
            "while the epochs already started stay as they were)"
        )


def check_epochs(
    *,
    old_epochs: int,
    new_epochs: int,
    started: int,
    settings: Callable[[int, int], Mapping[str, float]],
    checkpoint: object,
) -> None:
    """Allow ``epochs`` to change from ``old_epochs`` to ``new_epochs`` only where each of the
    ``started`` epochs has the same ``settings(total, epoch)`` (learning rate, drop-path
    probability, ...) under both totals; else raise ``ValueError`` saying which epoch differs."""
    if new_epochs == old_epochs:
        return
    if new_epochs < started:
        raise ValueError(
            f"epochs={new_epochs}, but the run in checkpoint {checkpoint} has already started "
            f"{started} epochs; resume with epochs >= {started}"
        )
    for epoch in range(started):
        before, after = settings(old_epochs, epoch), settings(new_epochs, epoch)
        differ = [k for k in before if before[k] != after[k]]
        if differ:
            what = ", ".join(f"{k} {before[k]:.4g} -> {after[k]:.4g}" for k in differ)
            raise ValueError(
                f"epochs={new_epochs} would change epoch {epoch + 1} of the {started} already "
                f"trained in checkpoint {checkpoint} ({what}: the schedule of {new_epochs} "
                f"epochs is not the schedule of {old_epochs}); resume with epochs={old_epochs}, "
                f"or start a new run of {new_epochs} epochs"
            )


def follow_new_schedule(scheduler: Any, epoch: int) -> None:
    """After ``epochs`` changed: give the optimiser of a ``LambdaLR`` (built with the new total)
    the learning rate of ``epoch`` under the new schedule. The checkpoint holds the rate the old
    schedule set for it (after a finished cosine: ``lr_min``, the end of the old schedule)."""
    scheduler.last_epoch = epoch
    rates = [base * scheduler.lr_lambdas[0](epoch) for base in scheduler.base_lrs]
    for group, rate in zip(scheduler.optimizer.param_groups, rates, strict=True):
        group["lr"] = rate
    scheduler._last_lr = rates
