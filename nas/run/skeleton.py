"""The run skeleton that the search and the training loop share: one run, epoch after epoch.

Run skeleton (``nas.run``). ``Run`` is the frame of a run in a run folder: the device, the
process group and the mixed-precision type; the resume guard (a run folder that holds a
checkpoint continues only with ``resume=true``, and only with the run's own config:
``nas.run.resume``); the ``Checkpointer`` of the run's stateful objects; the stop flag of
SIGTERM / Ctrl-C, folded into one collective per step so that a stop seen by one rank stops
every rank at the same step boundary; the RNG states a mid-epoch checkpoint continues with; the
progress bar; and ``run()``, which writes the config, prints the start line and runs the epochs
under the signal handlers. A loop (``nas.pipeline.search.SearchRun``,
``nas.training.loop.TrainRun``) keeps only what is its own: its data, model and optimisers, its
step and its epoch.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from nas import distributed as D
from nas.metrics import MetricLogger
from nas.progress import Progress
from nas.run.checkpoint import (
    Checkpointer,
    CheckpointError,
    load_resume,
    seed_everything,
    set_rng_state,
)
from nas.run.disk import atomic_write_text
from nas.run.resume import check_epochs, check_same_config
from nas.run.signals import Preempted, StopSignals


def autocast_dtype(amp: Any, device: torch.device) -> torch.dtype | None:
    """The autocast type of ``amp`` (null, bf16, fp16); ``ValueError`` for anything else."""
    if amp in (None, False, "none", "null"):
        return None
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        if device.type != "cuda":
            raise ValueError("amp=fp16 needs CUDA; on CPU use amp=bf16 or amp=null")
        return torch.float16
    raise ValueError(f"amp must be null, bf16 or fp16, got {amp!r}")


# what lowers the memory of a step, per setting (``Run.out_of_memory_line``)
MEMORY_HINTS = {
    "batch_size": "a smaller batch_size",
    "micro_batches": "more micro_batches (the same global batch in parts)",
    "space.partial_channels": "a larger space.partial_channels (1/K of the channels)",
    "amp": "amp=bf16",
}


def _word(value: Any) -> str:
    """A config value as the command line writes it (null, true, 16)."""
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def grad_scaler(device: torch.device, dtype: torch.dtype | None) -> torch.amp.GradScaler:
    """Loss scaling for float16 autocast only (PyTorch's AMP recipe: float16 gradients
    underflow without it; bfloat16 has float32's range and needs none), on ``device``."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager[Any]:
    """``torch.autocast`` to ``dtype``, or a disabled one for full precision."""
    return torch.autocast(
        device_type=device.type, dtype=dtype or torch.float32, enabled=dtype is not None
    )


def to_device(
    x: Tensor, y: Tensor, device: torch.device, *, channels_last: bool
) -> tuple[Tensor, Tensor]:
    """A batch on ``device`` (images in NHWC with ``channels_last``), copied asynchronously."""
    x = x.to(device, non_blocking=True)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, y.to(device, non_blocking=True)


class StopFlag:
    """SIGTERM / Ctrl-C (``nas.run.signals``), or ``request()`` (tests), and the one collective
    that tells every rank: ``sum_with_stop`` sums a step's values over the ranks with the flag
    appended, so a stop seen by any rank stops all of them at the same step boundary."""

    def __init__(self, program: str, env: D.DistEnv, device: torch.device) -> None:
        self.signals = StopSignals(program)
        self.env = env
        self.device = device
        self._requested = False

    def request(self) -> None:
        """Ask for a stop at the next step boundary, as SIGTERM does (tests inject it here)."""
        self._requested = True

    @property
    def wanted(self) -> bool:
        """Whether this rank wants to stop."""
        return self._requested or self.signals.requested

    def sum_with_stop(self, values: Tensor | None) -> tuple[list[float], bool]:
        """(``values`` summed over the ranks, whether any rank wants to stop), in one
        all-reduce. In a single process nothing is reduced, and without ``values`` nothing
        is read from the device (no synchronisation of a GPU step)."""
        if not self.env.distributed:
            return ([] if values is None else values.tolist()), self.wanted
        flag = torch.tensor([float(self.wanted)], dtype=torch.float64, device=self.device)
        packed = flag if values is None else torch.cat([values.double().reshape(-1), flag])
        summed = D.all_reduce_sum(packed).tolist()
        return summed[:-1], summed[-1] > 0

    def preempted(self, checkpoint: Path) -> Preempted:
        return Preempted(checkpoint, self.signals.signum or signal.SIGTERM)


class Run:
    """The frame of one run in one run folder (see the module docstring).

    A subclass sets ``program``, ``kind`` (of its checkpoints), ``error`` (its one-line error
    type), ``holds`` and ``fits`` (what its run folder holds, what a checkpoint must fit, for
    messages) and ``broadcast_errors`` (the errors rank 0 hands to the others as one line),
    calls ``locate`` and ``configure`` in its constructor, registers its stateful objects
    with ``self.checkpointer``, and defines ``run_epoch``, ``finish`` and ``start_line``."""

    program: str
    kind: str
    error: type[ValueError]
    holds: str
    fits: str
    broadcast_errors: tuple[type[Exception], ...]
    new_run_advice: str = "another hydra.run.dir"
    #: the settings that lower a run's memory, named with their values when it runs out
    memory_keys: tuple[str, ...] = ("batch_size", "micro_batches", "amp")

    cfg: DictConfig
    epochs: int
    epoch: int
    step_in_epoch: int
    global_step: int
    logger: MetricLogger | None

    def locate(self, cfg: DictConfig, run_dir: str | Path) -> None:
        """Where the run lives: its folder, its process (``torchrun``'s rank) and device."""
        self.run_dir = Path(run_dir)
        self.ckpt_path = self.run_dir / "checkpoints" / "last.pt"
        try:
            self.env = D.env_from_torchrun()
            self.device = D.select_device(str(cfg.device), self.env)
        except ValueError as e:
            raise self.error(str(e)) from None
        self.main = self.env.is_main

    def configure(self, cfg: DictConfig) -> None:
        """The run's config (after ``locate``): seed, epochs, precision, and the empty frame
        of position, stop flag and checkpointer."""
        self.cfg = cfg
        self.seed = int(cfg.seed)
        self.epochs = int(cfg.epochs)
        try:
            self.amp_dtype = autocast_dtype(cfg.get("amp"), self.device)
        except ValueError as e:
            raise self.error(str(e)) from None
        self.epoch = 0  # epochs completed
        self.step_in_epoch = 0  # global batches of the current epoch done (after a stop)
        self.global_step = 0
        self.logger = None
        self.resume_rng: dict[str, Any] | None = None
        self.stop = StopFlag(self.program, self.env, self.device)
        self.checkpointer = Checkpointer(
            self.ckpt_path, kind=self.kind, env=self.env, error=self.error, what=self.fits
        )

    def main_then_broadcast(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on rank 0 and hand its value, or its one-line error, to every rank."""
        return D.main_then_broadcast(fn, self.broadcast_errors, self.error)

    # ----------------------------------------------------------------------------- resume

    def load_resume_checkpoint(self) -> dict[str, Any] | None:
        """Runs on rank 0: the checkpoint ``resume=true`` continues, or None for a new run (a
        folder that holds a run without ``resume=true`` is refused)."""
        if not bool(self.cfg.resume):
            if self.ckpt_path.exists():
                raise self.error(
                    f"run folder {self.run_dir} already holds a {self.holds} ({self.ckpt_path}); "
                    f"pass resume=true to continue it, or {self.new_run_advice} for a new one"
                )
            return None
        if not self.ckpt_path.exists():
            raise self.error(
                f"resume=true, but {self.run_dir} holds no checkpoint ({self.ckpt_path}): the "
                "run stopped before its first checkpoint (the end of its first epoch) or never "
                "ran there; run the same command again without resume=true"
            )
        try:
            state, fallback = load_resume(
                self.ckpt_path,
                kind=self.kind,
                trust_pickle=bool(self.cfg.get("trust_pickle", False)),
            )
        except CheckpointError as e:
            raise self.error(str(e)) from None
        if fallback is not None:
            print(f"{self.program}: {fallback}", file=sys.stderr, flush=True)
        return state

    def check_same_values(
        self, state: dict[str, Any], *, neutral: Iterable[str], neutral_words: str
    ) -> None:
        """``resume=true`` continues the stopped run or nothing: the checkpoint's config and
        this run's agree but for the result-neutral keys (``nas.run.resume``; ``ValueError``)."""
        new = OmegaConf.to_container(self.cfg, resolve=True)
        assert isinstance(new, dict)
        check_same_config(
            state["config"],
            new,
            checkpoint=self.ckpt_path,
            neutral=neutral,
            neutral_words=neutral_words,
        )

    def check_epoch_change(
        self, state: dict[str, Any], settings: Callable[[int, int], Mapping[str, float]]
    ) -> None:
        """``epochs`` may change only where every epoch already started keeps its
        ``settings(total, epoch)`` (learning rate, drop-path probability; ``ValueError``)."""
        started = int(state["epoch"]) + (1 if int(state["step_in_epoch"]) else 0)
        check_epochs(
            old_epochs=int(state["config"]["epochs"]),
            new_epochs=self.epochs,
            started=started,
            settings=settings,
            checkpoint=self.ckpt_path,
        )

    def load_counters(self, state: dict[str, Any]) -> None:
        """The position of a checkpoint, and the RNG states a mid-epoch one continues with
        (at any world size: ``Checkpointer.rank_rng``)."""
        self.epoch = int(state["epoch"])
        self.step_in_epoch = int(state["step_in_epoch"])
        self.global_step = int(state["global_step"])
        events = state.get("log_events")  # None: a checkpoint of an earlier version
        self.resume_events = None if events is None else int(events)
        self.resume_rng = self.checkpointer.rank_rng(state) if self.step_in_epoch else None

    def counters(self) -> dict[str, Any]:
        """The position a checkpoint saves with the run's objects."""
        return {
            "config": OmegaConf.to_container(self.cfg, resolve=True),
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "global_step": self.global_step,
            # the events of the metrics log so far: a resume keeps exactly these
            "log_events": self.logger.events if self.logger is not None else None,
        }

    def start_logger(self, resumed: bool) -> None:
        """Rank 0's metrics log (a resumed run drops what the log holds after its step)."""
        if self.main:
            self.logger = MetricLogger(
                self.run_dir,
                resume_step=self.global_step if resumed else None,
                resume_events=getattr(self, "resume_events", None) if resumed else None,
                config=self.cfg,
            )

    # -------------------------------------------------------------------------- an epoch

    def start_rng(self, fresh_seed: Callable[[], int]) -> bool:
        """The global generators at the start of (the rest of) an epoch: reseeded from
        ``fresh_seed()`` at its start, the checkpoint's states in its middle. True at the start."""
        if self.step_in_epoch == 0:
            seed_everything(fresh_seed())
            return True
        assert self.resume_rng is not None
        set_rng_state(self.resume_rng)
        return False

    def progress(self, *, total: int, desc: str, steps_after: int) -> Progress:
        """The bar (or lines) of a pass of ``total`` steps, from ``step_in_epoch`` on."""
        return Progress(
            total=total,
            initial=self.step_in_epoch,
            desc=desc,
            enabled=self.main,
            log_every=int(self.cfg.log_every),
            first_step=self.global_step,
            steps_after=steps_after,
        )

    # ------------------------------------------------------------------------------- run

    def run_epoch(self) -> None:
        raise NotImplementedError

    def finish(self) -> Any:
        raise NotImplementedError

    def start_line(self) -> str:
        raise NotImplementedError

    def on_start(self) -> None:
        """What rank 0 prints or logs after the start line (nothing by default)."""

    def run(self) -> Any:
        """Write the config, print the start line, train the remaining epochs under the
        SIGTERM / Ctrl-C handlers, then ``finish``; the metrics log is closed whatever happens."""
        if self.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(
                self.run_dir / "config.yaml", OmegaConf.to_yaml(self.cfg, resolve=True)
            )
            print(self.start_line(), flush=True)
            self.on_start()
        try:
            with self.stop.signals:
                while self.epoch < self.epochs:
                    self.run_epoch()
                return self.finish()
        except (torch.OutOfMemoryError, MemoryError):
            raise self.error(self.out_of_memory_line()) from None
        finally:
            if self.logger is not None:
                self.logger.close()

    def out_of_memory_line(self) -> str:
        """One line for a run that ran out of memory: where its last checkpoint is and the
        settings that lower memory, with their values."""
        values = ", ".join(
            f"{key}={_word(OmegaConf.select(self.cfg, key, default=None))}"
            for key in self.memory_keys
        )
        kept = (
            f"the last checkpoint, {self.ckpt_path}, is kept (resume=true continues from it)"
            if self.ckpt_path.is_file()
            else "no checkpoint was written yet"
        )
        hints = ", ".join(MEMORY_HINTS[key] for key in self.memory_keys if key in MEMORY_HINTS)
        return f"out of memory on {self.device}; {kept}; now {values}: try {hints}"
