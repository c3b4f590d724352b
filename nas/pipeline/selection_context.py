"""What the search run lends a selector: the one implementation of ``SelectionContext``.

The pipeline's search stage (``nas.pipeline``). A selector that measures or fine-tunes the
supernet (DARTS-PT's projections and tuning epochs, RS-WS's and Zero-Cost-PT's scoring) sees
the run only through the protocol ``nas.selection.base.SelectionContext``; this adapter maps
it onto a ``SearchRun``: the architecture split in a fixed order (``nas.run.seeds``), the
run's own training steps, checkpoint, log and collectives. Nothing here knows a selector: a
selector that declares a ``decision_event`` gets those events written as TensorBoard text too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from nas import distributed as D
from nas.progress import Progress
from nas.run.seeds import SELECTION_BASE, SELECTION_SPLIT
from nas.strategies.base import Batch
from nas.strategies.data import epoch_sampler, start_epoch

if TYPE_CHECKING:
    from nas.pipeline.search import SearchRun


class RunSelectionContext:
    """``SelectionContext`` over a search run (the selector's view of it)."""

    def __init__(self, run: SearchRun) -> None:
        self.run = run

    @property
    def search_lr(self) -> float:
        return float(self.run.cfg.optimizer.lr)

    @property
    def micro_batches(self) -> int:
        return self.run.micro_batches

    @property
    def epochs(self) -> int:
        return self.run.epochs

    @property
    def steps_per_epoch(self) -> int:
        return epoch_sampler(self.run.train_loader).num_batches

    def val_batches(self, *, key: int, limit: int | None) -> Iterator[Batch]:
        """This rank's micro-batches of the architecture split's global batches, in an order
        fixed by ``key``, of at most ``limit`` global batches."""
        run = self.run
        it = start_epoch(run.val_loader, run.seed, SELECTION_BASE + key, 0, SELECTION_SPLIT)
        for i, (batch, size) in enumerate(it):
            if limit is not None and i >= limit:
                break
            yield from run._shards(batch, size).parts

    def train_epoch(self, *, key: int, lr: float, update_arch: bool, desc: str) -> dict[str, float]:
        """One fine-tuning epoch at learning rate ``lr`` (a selector's tuning between decisions),
        logged as a ``tune`` event; returns the epoch's mean metrics."""
        run = self.run
        for group in run.weight_optimizer.param_groups:
            group["lr"] = lr
        images_per_s = run._train_steps(key=key, update_arch=update_arch, desc=desc)
        n = run._epoch_sums.get("_n", 1.0)
        means = {k: v / n for k, v in run._epoch_sums.items() if k != "_n"}
        if run.logger is not None:
            run.logger.log(
                "tune",
                epoch=run.epoch,
                step=run.global_step,
                lr=lr,
                images_per_s=images_per_s,
                **means,
            )
        return means

    def reset_weight_optimizer(self, lr: float) -> None:
        """A fresh weight optimiser state (momentum) at learning rate ``lr``."""
        optimizer = self.run.weight_optimizer
        optimizer.state.clear()
        for group in optimizer.param_groups:
            group["lr"] = lr

    def checkpoint(self) -> None:
        self.run._checkpoint()

    def progress(self, *, total: int, desc: str) -> Progress:
        """Lines about 20 times per pass (or a bar on a terminal), with an ETA; rank 0 only."""
        return Progress(total=total, desc=desc, enabled=self.run.main,
                        log_every=max(1, total // 20))  # fmt: skip

    def stop_point(self) -> None:
        """Stop here, with a checkpoint, if any rank was asked to (one collective under
        torchrun, none in a single process)."""
        _, stop = self.run.stop.sum_with_stop(None)
        if stop:
            self.run._checkpoint()
            raise self.run.stop.preempted(self.run.ckpt_path)

    def log(self, event: str, **values: Any) -> None:
        run = self.run
        if run.logger is None:
            return
        run.logger.log(event, epoch=run.epoch, step=run.global_step, **values)
        if event == type(run.selector).decision_event:
            run.logger.text(f"{event}s", json.dumps(values), run.global_step)
            print(decision_line(event, values), flush=True)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the ranks (a selector's measurements of sharded batches)."""
        return D.all_reduce_sum(tensor)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (a selector's decision, taken once)."""
        return D.broadcast_object(obj)


def decision_line(event: str, values: dict[str, Any]) -> str:
    """One printed line per selection decision: its scalar fields (the lists of candidates and
    scores stay in metrics.jsonl), e.g. ``pt_decision  kind op  cell_type cell  edge 2 ...``."""
    shown = []
    for key, value in values.items():
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, float):
            shown.append(f"{key} {value:.4g}")
        elif isinstance(value, (int, str)):
            shown.append(f"{key} {value}")
    return "  ".join([event, *shown])
