"""Run logs: ``metrics.jsonl`` (one JSON object per event), TensorBoard scalars and, where the
config switches them on, the experiment trackers (``nas.trackers``: W&B, MLflow).

Shared by the search and training loops. Every event carries ``epoch`` and ``step`` (the global
step). On resume, events logged after the checkpoint that the run restarts from are dropped
from ``metrics.jsonl`` (and TensorBoard is told to purge them), so the log of a resumed run
reads as if it had never stopped: the checkpoint records how many events the log held when it
was written (``events``), and the log keeps that many; a checkpoint without the count keeps the
events up to its step (work redone at the same step, such as a selection's decision, would then
be logged twice).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

from nas.trackers import TrackedWriter, open_trackers


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN / inf
    return value


class MetricLogger:
    """Appends events to ``run_dir/metrics.jsonl`` and scalars to TensorBoard."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        resume_step: int | None = None,
        resume_events: int | None = None,
        config: Any = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.events = 0  # lines in metrics.jsonl: a checkpoint records it
        if resume_step is not None:
            self.events = self._truncate_after(resume_step, resume_events)
        elif self.path.exists():
            self.path.unlink()
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 (closed in close())
        writer = SummaryWriter(
            log_dir=str(self.run_dir / "tensorboard"),
            purge_step=resume_step + 1 if resume_step is not None else None,
        )
        self.tb: Any = writer
        trackers = self._open_trackers(config, resume=resume_step is not None)
        if trackers:  # the same scalars, figures and text go to them as to TensorBoard
            self.tb = TrackedWriter(writer, trackers)

    def _open_trackers(self, config: Any, *, resume: bool) -> list[Any]:
        if config is None:
            return []
        from omegaconf import DictConfig, OmegaConf

        tree = config
        if isinstance(config, DictConfig):
            tree = OmegaConf.to_container(config, resolve=True)
        settings = tree.get("trackers") if isinstance(tree, dict) else None
        if not settings:
            return []
        run_name = f"{self.run_dir.parent.name}/{self.run_dir.name}"
        try:
            return open_trackers(
                settings, self.run_dir, run_name=run_name, config=tree, resume=resume
            )
        except Exception:
            self._file.close()  # nothing half-open when a tracker fails to start
            raise

    def _truncate_after(self, step: int, events: int | None) -> int:
        """Keep the first ``events`` events (or, without the count, those up to ``step``);
        the number kept."""
        if not self.path.exists():
            return 0
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a kill: drop it
            if events is None and record.get("step", 0) > step:
                continue
            kept.append(line)
        if events is not None:
            kept = kept[:events]
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, self.path)
        return len(kept)

    def log(self, event: str, *, epoch: int, step: int, **values: Any) -> None:
        """One event: JSON line with all values; numeric values also go to TensorBoard."""
        record = {"event": event, "epoch": epoch, "step": step}
        record.update({k: _clean(v) for k, v in values.items()})
        self._file.write(json.dumps(record) + "\n")
        self.events += 1
        for key, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.tb.add_scalar(f"{event}/{key}" if "/" not in key else key, value, step)

    def text(self, tag: str, text: str, step: int) -> None:
        self.tb.add_text(tag, text, step)

    def close(self) -> None:
        self._file.close()
        self.tb.close()
