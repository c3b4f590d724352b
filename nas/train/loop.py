"""The retraining loop: train a genotype's network from scratch, the way the papers did.

Retraining stage (``nas.train``), after search and selection. One loop for every recipe of
``configs/train/experiment`` (see ALGORITHMS.md, sections 2-4):

* DARTS CIFAR-10 (Liu et al., ICLR 2019, ``train.py``): SGD momentum 0.9, lr 0.025 cosine to 0,
  weight decay 3e-4, gradient clipping 5, auxiliary head weight 0.4, cutout 16, drop-path
  probability ``drop_path * epoch / epochs`` (ramped linearly over the epochs);
* DARTS ImageNet (``train_imagenet.py``): step decay x0.97 per epoch, label smoothing 0.1 on the
  training loss only;
* DrNAS (Chen et al., ICLR 2021): CIFAR as DARTS with batch 64 and drop-path 0.3; ImageNet with
  a 5-epoch linear warm-up, then DrNAS's linear decay (``adjust_lr``);
* RobustDARTS (Zela et al., ICLR 2020): C=16, 8 cells for CIFAR-100 and SVHN.

The learning rate is set per epoch, as every reference does (``LambdaLR`` stepped at the end of
an epoch: epoch e trains with factor(e)).

Data parallel: under ``torchrun`` every process takes ``batch_size / world_size`` images of
each global batch (``nas.train.data``), gradients are averaged by DDP
(``nas.distributed``, the only ``torch.distributed`` code), so the recipe's global batch
and learning rate hold whatever the world size. Metrics are summed over the ranks (loss x
images, correct, images) before they are divided. Rank 0 alone writes the run folder and prints.

Reproducibility: every epoch reseeds Python, NumPy and torch from (seed, epoch, rank); the data
order comes from (seed, epoch). A checkpoint (model, EMA, optimiser, schedule, AMP scaler,
sampler position, every rank's RNG states, running sums) is written atomically at the end of
every epoch and, on SIGTERM, at the next step boundary, so ``resume=true`` ends with exactly the
weights of an uninterrupted run (on CPU without data-loader workers; with workers a SIGTERM
resume in the middle of an epoch sees the same images with other augmentation draws).
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from torch.utils.data import Dataset, Subset

from nas import distributed as D
from nas.checkpoint import (
    CheckpointError,
    atomic_save,
    load_checkpoint,
    rng_state,
    seed_everything,
    set_rng_state,
)
from nas.data import build_dataset, dataset_info, eval_transform, train_transform
from nas.metrics import MetricLogger
from nas.progress import Progress, start_line
from nas.run.config import (
    SCHEDULES,
    TRAIN_NEUTRAL_KEYS,
    TRAIN_NEUTRAL_WORDS,
    set_on_command_line,
    validate_train_config,
)
from nas.run.disk import atomic_write_text
from nas.run.resume import check_epochs, check_same_config, follow_new_schedule
from nas.run.signals import Preempted, StopSignals
from nas.summary import summarize
from nas.train.data import eval_loader, start_epoch, stream_seed, train_loader
from nas.train.ema import EMA
from nas.train.model import (
    NetworkSpec,
    build_network,
    logits_of,
    resolve_train_genotype,
    unused_parameters,
)
from search_spaces.genotype import AnyGenotype, NB201Genotype, genotype_from_json

_SUMS = ("loss", "top1", "top5", "n")  # the running sums of an epoch, in this order


class TrainError(ValueError):
    """A training run that cannot go on (bad configuration, non-finite loss, unusable folder)."""


@dataclass
class TrainResult:
    run_dir: Path
    results: dict[str, Any]


# ------------------------------------------------------------------------------ schedules


def lr_factor(
    *,
    schedule: str,
    epochs: int,
    lr: float,
    lr_min: float = 0.0,
    gamma: float = 0.97,
    decay_period: int = 1,
    warmup_epochs: int = 0,
) -> Callable[[int], float]:
    """The learning rate of epoch e as a factor of ``lr``.

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


# ------------------------------------------------------------------------------ validation


def validate_config(cfg: DictConfig) -> None:
    """Check every value a training run reads; one-line errors naming key and value
    (``nas.run.config``, where the command line checks them before importing torch)."""
    validate_train_config(cfg, TrainError)


def per_rank_batch(batch_size: int, world_size: int, what: str = "batch_size") -> int:
    """The per-process share of a global batch (``nas.distributed.per_rank_batch``)."""
    try:
        return D.per_rank_batch(batch_size, world_size, what)
    except ValueError as e:
        raise TrainError(str(e)) from None


def autocast_dtype(amp: Any, device: torch.device) -> torch.dtype | None:
    if amp in (None, False, "none", "null"):
        return None
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        if device.type != "cuda":
            raise TrainError("amp=fp16 needs CUDA; on CPU use amp=bf16 or amp=null")
        return torch.float16
    raise TrainError(f"amp must be null, bf16 or fp16, got {amp!r}")


def _main_then_broadcast(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on rank 0 and hand its value, or its one-line error, to every rank."""
    return D.main_then_broadcast(
        fn, (TrainError, CheckpointError, ValueError, FileNotFoundError), TrainError
    )


# ----------------------------------------------------------------------------- data


def _datasets(cfg: DictConfig) -> tuple[Dataset[Any], Dataset[Any]]:
    """(training set with the recipe's augmentation, test set with evaluation preprocessing)."""
    data = cfg.data
    name = str(data.name)
    if bool(cfg.augment):
        transform = train_transform(
            name,
            cutout=int(data.get("cutout", 0) or 0),
            color_jitter=bool(data.get("color_jitter", True)),
            image_size=data.get("image_size"),
        )
    else:  # no random augmentation at all (tests, debugging): the evaluation preprocessing
        transform = eval_transform(name, image_size=data.get("image_size"))
    root = data.get("root")
    download = bool(data.get("download", False))
    train_set = build_dataset(name, root=root, train=True, transform=transform, download=download)
    test_set = build_dataset(
        name,
        root=root,
        val_root=data.get("val_root"),
        train=False,
        transform=eval_transform(name, image_size=data.get("image_size")),
    )
    max_items = data.get("max_items")
    if max_items is not None:  # the first N training images only: smoke tests, tiny studies
        train_set = Subset(train_set, range(min(int(max_items), len(train_set))))  # type: ignore[arg-type]
    eval_items = cfg.eval.get("max_items")
    if eval_items is not None:
        test_set = Subset(test_set, range(min(int(eval_items), len(test_set))))  # type: ignore[arg-type]
    return train_set, test_set


# --------------------------------------------------------------------------- the run


class TrainRun:
    """One training run in one run folder; ``run()`` trains and returns the results."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path) -> None:
        validate_config(cfg)
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.ckpt_path = self.run_dir / "checkpoints" / "last.pt"
        self.env = D.env_from_torchrun()
        self.main = self.env.is_main
        self.seed = int(cfg.seed)
        self.epochs = int(cfg.epochs)
        self.batch_size = per_rank_batch(int(cfg.batch_size), self.env.world_size)
        eval_batch = cfg.eval.get("batch_size") or cfg.batch_size
        self.eval_batch_size = per_rank_batch(
            int(eval_batch), self.env.world_size, "eval.batch_size"
        )
        try:
            self.device = D.select_device(str(cfg.device), self.env)
        except ValueError as e:
            raise TrainError(str(e)) from None
        self.amp_dtype = autocast_dtype(cfg.get("amp"), self.device)
        self.channels_last = bool(cfg.channels_last)
        try:
            self.genotype: AnyGenotype = resolve_train_genotype(cfg.genotype)
        except (ValueError, FileNotFoundError) as e:
            raise TrainError(str(e)) from None
        try:
            info = dataset_info(str(cfg.data.name), cfg.data)
        except (ValueError, FileNotFoundError) as e:
            raise TrainError(str(e)) from None
        self.num_classes = int(info["num_classes"])
        # Data before the rendezvous: a rank without its data stops now, and torchrun ends the
        # others, instead of everyone waiting in the first collective.
        try:
            train_set, test_set = _datasets(cfg)
        except (ValueError, FileNotFoundError) as e:
            raise TrainError(str(e)) from None

        D.init_distributed(self.env, self.device)
        resume_state = _main_then_broadcast(self._resume_state)

        seed_everything(self.seed)  # the same initial weights on every rank
        self.net, self.spec = self._build_network(int(info["image_size"]))
        self.summary = summarize(self.net, self.spec.input_size)
        self.net.to(self.device)
        if self.channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)
        if bool(cfg.sync_bn) and self.env.distributed:
            try:
                self.net = D.convert_sync_batchnorm(self.net, self.device)
            except ValueError as e:
                raise TrainError(str(e)) from None
        decay = cfg.ema.get("decay")
        self.ema = EMA(self.net, decay=float(decay)) if decay is not None else None
        find_unused = self.env.distributed and bool(
            unused_parameters(self.net, self.spec, self.device)
        )
        self.model: nn.Module = D.wrap_ddp(
            self.net, self.device, find_unused_parameters=find_unused
        )
        if bool(cfg.compile):
            self.model = torch.compile(self.model)  # type: ignore[assignment]
            if self.main and self.spec.drop_path and float(cfg.model.drop_path) > 0:
                # Dynamo specialises on the network's float attribute drop_path_prob.
                print(
                    "nas-train: note: compile=true with drop-path: the drop-path probability "
                    "changes every epoch and each change recompiles the network (minutes on a "
                    "CPU); the ImageNet recipes have no drop-path",
                    file=sys.stderr,
                    flush=True,
                )

        opt = cfg.optimizer
        self.optimizer = torch.optim.SGD(
            self.net.parameters(),
            lr=float(opt.lr),
            momentum=float(opt.momentum),
            weight_decay=float(opt.weight_decay),
            nesterov=bool(opt.nesterov),
            foreach=True,  # one kernel per step for all parameters, not one per tensor
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lr_factor(
                schedule=str(opt.schedule),
                epochs=self.epochs,
                lr=float(opt.lr),
                lr_min=float(opt.lr_min),
                gamma=float(opt.gamma),
                decay_period=int(opt.decay_period),
                warmup_epochs=int(opt.warmup_epochs),
            ),
        )
        self.grad_clip = float(opt.grad_clip or 0.0)
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.amp_dtype == torch.float16
        )
        self.train_criterion = nn.CrossEntropyLoss(label_smoothing=float(cfg.label_smoothing))
        self.eval_criterion = nn.CrossEntropyLoss()
        self.aux_weight = float(cfg.model.auxiliary_weight)
        self.drop_path = float(cfg.model.drop_path) if self.spec.drop_path else 0.0

        num_workers = int(cfg.data.get("num_workers", 0) or 0)
        pin = bool(cfg.data.get("pin_memory", False))
        self.train_loader = train_loader(
            train_set,
            batch_size=self.batch_size,
            seed=self.seed,
            num_replicas=self.env.world_size,
            rank=self.env.rank,
            num_workers=num_workers,
            pin_memory=pin,
        )
        self.test_loader = eval_loader(
            test_set,
            batch_size=self.eval_batch_size,
            num_replicas=self.env.world_size,
            rank=self.env.rank,
            num_workers=num_workers,
            pin_memory=pin,
        )
        self.num_train = len(train_set)  # type: ignore[arg-type]
        self.num_test = len(test_set)  # type: ignore[arg-type]

        self.epoch = 0  # epochs completed
        self.step_in_epoch = 0  # global steps of the current epoch done (after a SIGTERM)
        self.global_step = 0
        self.best: dict[str, Any] = {}
        self.final: dict[str, Any] = {}
        self.train_seconds = 0.0
        self._sums = torch.zeros(len(_SUMS), dtype=torch.float64, device=self.device)
        self._resume_rng: dict[str, Any] | None = None
        if resume_state is not None:
            self._load(resume_state)
        self.logger = (
            MetricLogger(
                self.run_dir,
                resume_step=self.global_step if resume_state is not None else None,
                config=self.cfg,
            )
            if self.main
            else None
        )
        # SIGTERM / Ctrl-C (nas.run.signals); tests set _stop_requested to request a stop
        self._signals = StopSignals("nas-train")
        self._stop_requested = False

    # --------------------------------------------------------------------------- building

    def _build_network(self, image_size: int) -> tuple[nn.Module, NetworkSpec]:
        m = self.cfg.model
        try:
            return build_network(
                self.genotype,
                num_classes=self.num_classes,
                image_size=image_size,
                darts_C=int(m.darts.C),
                darts_layers=int(m.darts.layers),
                nb201_C=int(m.nb201.C),
                nb201_N=int(m.nb201.N),
                auxiliary=bool(m.auxiliary),
            )
        except ValueError as e:
            raise TrainError(str(e).splitlines()[0]) from None

    # ------------------------------------------------------------------------ checkpoints

    def _resume_state(self) -> dict[str, Any] | None:
        """Runs on rank 0: the checkpoint to continue, or None for a new run."""
        if not bool(self.cfg.resume):
            if self.ckpt_path.exists():
                raise TrainError(
                    f"run folder {self.run_dir} already holds a training run ({self.ckpt_path}); "
                    "pass resume=true to continue it, or name=... / hydra.run.dir=... for a new one"
                )
            return None
        state = load_checkpoint(self.ckpt_path, kind="train")
        theirs = genotype_from_json(state["genotype"])
        if str(theirs) != str(self.genotype):
            raise TrainError(
                f"checkpoint {self.ckpt_path} trains the genotype {theirs}, not the genotype "
                f"{self.genotype} asked for; resume with the run's own config"
            )
        try:
            self._check_resumable(state)
        except ValueError as e:
            raise TrainError(str(e)) from None
        if state["step_in_epoch"] and state["world_size"] != self.env.world_size:
            raise TrainError(
                f"checkpoint {self.ckpt_path} was written in the middle of an epoch by "
                f"{state['world_size']} process(es); resume it with the same number, not "
                f"{self.env.world_size}"
            )
        return state

    def _check_resumable(self, state: dict[str, Any]) -> None:
        """``resume=true`` continues the stopped run or nothing: the same values but for the
        result-neutral keys (``nas.run.config``), and ``epochs`` changed only where the epochs
        already started keep their learning rate and drop-path probability."""
        old = state["config"]
        new = OmegaConf.to_container(self.cfg, resolve=True)
        assert isinstance(new, dict)
        check_same_config(
            old,
            new,
            checkpoint=self.ckpt_path,
            neutral=TRAIN_NEUTRAL_KEYS,
            neutral_words=TRAIN_NEUTRAL_WORDS,
        )
        opt = self.cfg.optimizer
        lr = float(opt.lr)
        # TinyNetwork (an NB201 cell) has no drop-path; the DARTS networks ramp it with epochs
        has_drop_path = not isinstance(self.genotype, NB201Genotype)
        drop_path = float(self.cfg.model.drop_path) if has_drop_path else 0.0

        def settings(total: int, epoch: int) -> dict[str, float]:
            factor = lr_factor(
                schedule=str(opt.schedule),
                epochs=total,
                lr=lr,
                lr_min=float(opt.lr_min),
                gamma=float(opt.gamma),
                decay_period=int(opt.decay_period),
                warmup_epochs=int(opt.warmup_epochs),
            )
            return {
                "learning rate": lr * factor(epoch),
                "drop-path probability": drop_path_prob(drop_path, epoch, total),
            }

        started = int(state["epoch"]) + (1 if int(state["step_in_epoch"]) else 0)
        check_epochs(
            old_epochs=int(old["epochs"]),
            new_epochs=self.epochs,
            started=started,
            settings=settings,
            checkpoint=self.ckpt_path,
        )

    def _checkpoint(self, *, best: bool = False) -> None:
        """All ranks call this (it gathers every rank's RNG state); rank 0 writes."""
        rngs = D.all_gather_object(rng_state())
        sums = D.all_reduce_sum(self._sums.clone())
        if not self.main:
            return
        state = {
            "kind": "train",
            "version": 1,
            "config": OmegaConf.to_container(self.cfg, resolve=True),
            "genotype": self.genotype.to_json(),
            "network": str(self.spec),
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "global_step": self.global_step,
            "world_size": self.env.world_size,
            "sums": sums.cpu(),
            "best": dict(self.best),
            "final": dict(self.final),
            "train_seconds": self.train_seconds,
            "model": self.net.state_dict(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rngs,
        }
        atomic_save(state, self.ckpt_path)
        if best:
            atomic_save(state, self.run_dir / "checkpoints" / "best.pt")

    def _load(self, state: dict[str, Any]) -> None:
        try:
            self.net.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.scaler.load_state_dict(state["scaler"])
            if self.ema is not None:
                if state.get("ema") is None:
                    raise KeyError("the checkpoint has no EMA weights (ema.decay was null)")
                self.ema.load_state_dict(state["ema"])
        except (RuntimeError, KeyError, ValueError) as e:
            reason = str(e).splitlines()[0]
            raise TrainError(
                f"checkpoint {self.ckpt_path} does not fit this network ({reason}); resume with "
                "the run's own config"
            ) from None
        self.epoch = int(state["epoch"])
        self.step_in_epoch = int(state["step_in_epoch"])
        self.global_step = int(state["global_step"])
        self.best = dict(state["best"])
        self.final = dict(state["final"])
        self.train_seconds = float(state["train_seconds"])
        if self.main:  # rank 0 carries the sums of the ranks up to the checkpoint
            self._sums.copy_(state["sums"].to(self.device))
        if self.step_in_epoch:
            self._resume_rng = state["rng"][self.env.rank]
        if int(state["config"]["epochs"]) != self.epochs:
            # more epochs: the next epoch's learning rate is the new schedule's (the checkpoint
            # holds the old one's, e.g. 0 after a finished cosine)
            follow_new_schedule(self.scheduler, self.epoch)

    # ------------------------------------------------------------------------------ steps

    def _to_device(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        x = x.to(self.device, non_blocking=True)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y.to(self.device, non_blocking=True)

    def _autocast(self) -> Any:
        return torch.autocast(
            device_type=self.device.type,
            dtype=self.amp_dtype or torch.float32,
            enabled=self.amp_dtype is not None,
        )

    def _train_step(self, x: Tensor, y: Tensor) -> Tensor:
        """Forward, backward, clip, optimiser step, EMA; returns the step's loss (on device)."""
        with self._autocast():
            logits, logits_aux = logits_of(self.model(x), self.spec.family)
            loss = self.train_criterion(logits, y)
            if logits_aux is not None:
                loss = loss + self.aux_weight * self.train_criterion(logits_aux, y)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.net.parameters(), self.grad_clip, foreach=True)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.ema is not None:
            self.ema.update(self.net)
        with torch.no_grad():
            self._sums += _batch_sums(loss.detach(), logits.detach(), y)
        return loss.detach()

    def run(self) -> TrainResult:
        if self.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            config = OmegaConf.to_yaml(self.cfg, resolve=True)
            atomic_write_text(self.run_dir / "config.yaml", config)
            keys = ["genotype", "data.name", "data.max_items", "epochs", "batch_size", "seed"]
            resumed = self.epoch or None
            line = start_line("nas-train", self.run_dir, self.cfg, keys, device=self.device,
                              processes=self.env.world_size, resumed_at_epoch=resumed)  # fmt: skip
            print(line, flush=True)
            self._log_start()
        try:
            with self._signals:
                while self.epoch < self.epochs:
                    self._run_epoch()
            results = self._results()
        finally:
            if self.logger is not None:
                self.logger.close()
        return TrainResult(self.run_dir, results)

    def _run_epoch(self) -> None:
        epoch, start = self.epoch, self.step_in_epoch
        if start == 0:
            seed_everything(stream_seed(self.seed, epoch, self.env.rank, 99))
            self._sums.zero_()
        else:
            assert self._resume_rng is not None
            set_rng_state(self._resume_rng)
        drop = drop_path_prob(self.drop_path, epoch, self.epochs)
        if self.spec.drop_path:
            self.net.drop_path_prob = drop  # type: ignore[assignment]
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.model.train()
        batches = start_epoch(self.train_loader, seed=self.seed, epoch=epoch, start_batch=start)
        bar = Progress(
            total=start + len(self.train_loader),
            initial=start,
            desc=f"epoch {epoch + 1}/{self.epochs}",
            enabled=self.main,
            log_every=int(self.cfg.log_every),
            first_step=self.global_step,
            steps_after=(self.epochs - epoch - 1) * (start + len(self.train_loader)),
        )
        sums_at_start = D.all_reduce_sum(self._sums.clone())
        t0 = time.perf_counter()
        for x, y in batches:
            loss = self._train_step(*self._to_device(x, y))
            self.step_in_epoch += 1
            self.global_step += 1
            step_loss = None
            if self.global_step % int(self.cfg.log_every) == 0:
                step_loss = float(D.all_reduce_sum(loss.double().reshape(1)).item())
                step_loss /= self.env.world_size
                self._check_finite({"train_loss": step_loss}, epoch)
                if self.logger is not None:
                    self.logger.log(
                        "step", epoch=epoch, step=self.global_step, lr=lr, train_loss=step_loss
                    )
            bar.update(1, images=int(x.shape[0]) * self.env.world_size, loss=step_loss)
            wanted = self._stop_requested or self._signals.requested
            stop = D.any_rank(wanted, self.device) if self.env.distributed else wanted
            if stop:
                bar.close()
                self._checkpoint()
                raise Preempted(self.ckpt_path, self._signals.signum or signal.SIGTERM)
        bar.close()
        elapsed = time.perf_counter() - t0
        self.train_seconds += elapsed
        sums = D.all_reduce_sum(self._sums.clone())
        images = float(sums[3] - sums_at_start[3])
        train = _means(sums, "train")
        self._check_finite(train, epoch)
        self.scheduler.step()
        self.epoch += 1
        self.step_in_epoch = 0
        self._sums.zero_()

        entry: dict[str, Any] = {
            "lr": lr,
            "drop_path_prob": drop,
            **train,
            "images_per_s": images / max(elapsed, 1e-9),
            "epoch_time_s": elapsed,
        }
        if self.epoch % int(self.cfg.eval.every) == 0 or self.epoch == self.epochs:
            entry.update(self.evaluate(self.net, "test"))
            if self.ema is not None:
                entry.update(self.evaluate(self.ema.module, "ema_test"))
        is_best = "test_top1" in entry and entry["test_top1"] > self.best.get("test_top1", -1.0)
        if is_best:
            self.best = {"test_top1": entry["test_top1"], "epoch": epoch + 1}
        self.final = entry
        self._log_epoch(epoch, entry)
        self._checkpoint(best=is_best and bool(self.cfg.save_best))

    def _check_finite(self, values: dict[str, float], epoch: int) -> None:
        for key, value in values.items():
            if not math.isfinite(value):
                raise TrainError(
                    f"{key} became {value} in epoch {epoch + 1} (step {self.global_step}); "
                    f"stopped, the last good checkpoint {self.ckpt_path} is kept"
                )

    @torch.no_grad()
    def evaluate(self, net: nn.Module, prefix: str) -> dict[str, float]:
        """Loss, top-1 and top-5 (%) of ``net`` in eval mode on the whole test set, each rank
        taking its share; rank 0's batch-norm statistics are used on every rank."""
        D.broadcast_buffers(net)
        was_training = net.training
        net.eval()
        sums = torch.zeros(len(_SUMS), dtype=torch.float64, device=self.device)
        for x, y in self.test_loader:
            x, y = self._to_device(x, y)
            with self._autocast():
                logits, _ = logits_of(net(x), self.spec.family)
                loss = self.eval_criterion(logits.float(), y)
            sums += _batch_sums(loss, logits, y)
        net.train(was_training)
        return _means(D.all_reduce_sum(sums), prefix)

    # ---------------------------------------------------------------------------- logging

    def _log_start(self) -> None:
        s = self.summary
        world = self.env.world_size
        print(
            f"network: {self.spec} from genotype {self.genotype}\n"
            f"params {s.params_without_aux / 1e6:.3f}M ({s.params_without_aux:,}, auxiliary "
            f"head excluded; {s.params:,} with it), {s.macs / 1e6:.1f}M multiply-adds per "
            f"{self.spec.input_size[1]}x{self.spec.input_size[2]} image\n"
            f"data {self.cfg.data.name}: {self.num_train} training / {self.num_test} test "
            f"images; global batch {self.cfg.batch_size} = {world} process(es) x "
            f"{self.batch_size}; {self.epochs} epochs on {self.device}",
            flush=True,
        )
        ignored = set_on_command_line(
            "model.auxiliary", "model.auxiliary_weight", "model.drop_path"
        )
        if self.spec.family == "TinyNetwork" and ignored:  # only when the user asked for them
            print(
                f"TinyNetwork has no auxiliary head and no drop-path: {', '.join(ignored)} "
                "do not apply",
                flush=True,
            )
        if self.logger is not None and self.global_step == 0:
            self.logger.log(
                "model",
                epoch=0,
                step=0,
                network=str(self.spec),
                genotype=str(self.genotype),
                params=s.params_without_aux,
                params_with_aux=s.params,
                macs=s.macs,
                world_size=world,
                global_batch=int(self.cfg.batch_size),
                per_rank_batch=self.batch_size,
            )
            self.logger.text("genotype", str(self.genotype), 0)

    def _log_epoch(self, epoch: int, entry: dict[str, Any]) -> None:
        if not self.main:
            return
        assert self.logger is not None
        self.logger.log("epoch", epoch=epoch, step=self.global_step, **entry)
        line = (
            f"epoch {epoch + 1}/{self.epochs}  lr {entry['lr']:.4g}  "
            f"train_loss {entry['train_loss']:.4f}  train_top1 {entry['train_top1']:.2f}"
        )
        if "test_top1" in entry:
            line += (
                f"  test_loss {entry['test_loss']:.4f}  test_top1 {entry['test_top1']:.2f}  "
                f"test_top5 {entry['test_top5']:.2f}"
            )
        if "ema_test_top1" in entry:
            line += f"  ema_test_top1 {entry['ema_test_top1']:.2f}"
        print(line + f"  {entry['images_per_s']:.1f} img/s", flush=True)

    def _results(self) -> dict[str, Any]:
        s = self.summary
        results: dict[str, Any] = {
            "genotype": str(self.genotype),
            "genotype_json": self.genotype.to_json(),
            "network": str(self.spec),
            "data": str(self.cfg.data.name),
            "params": s.params_without_aux,
            "params_with_aux": s.params,
            "macs": s.macs,
            "epochs": self.epochs,
            "world_size": self.env.world_size,
            "global_batch": int(self.cfg.batch_size),
            "per_rank_batch": self.batch_size,
            "train_seconds": self.train_seconds,
            "final": self.final,
            "best": self.best,
        }
        if self.main:
            atomic_write_text(self.run_dir / "results.json", json.dumps(results, indent=2) + "\n")
        return results


def _batch_sums(loss: Tensor, logits: Tensor, y: Tensor) -> Tensor:
    """[loss x n, top-1 hits, top-5 hits, n] of one batch, as float64 on the batch's device."""
    n = y.shape[0]
    k = min(5, logits.shape[1])
    hits = logits.topk(k, dim=1).indices.eq(y[:, None])
    return torch.stack(
        [
            loss.double() * n,
            hits[:, 0].sum().double(),
            hits.any(dim=1).sum().double(),
            # a fill on the device: a host tensor here would be a copy, i.e. a GPU sync, per step
            torch.full((), float(n), dtype=torch.float64, device=y.device),
        ]
    )


def _means(sums: Tensor, prefix: str) -> dict[str, float]:
    loss, top1, top5, n = (float(v) for v in sums.tolist())
    n = max(n, 1.0)
    return {
        f"{prefix}_loss": loss / n,
        f"{prefix}_top1": 100.0 * top1 / n,
        f"{prefix}_top5": 100.0 * top5 / n,
    }


def run_train(cfg: DictConfig, run_dir: str | Path) -> TrainResult:
    """Train (or, with ``resume=true``, continue training) the network ``cfg`` describes,
    writing the run folder ``run_dir`` (rank 0 only under torchrun)."""
    return TrainRun(cfg, run_dir).run()


# ------------------------------------------------------------------------- evaluation only


def checkpoint_file(spec: Any) -> Path:
    """A training checkpoint from a file path or a run folder (its ``checkpoints/last.pt``)."""
    if spec is None or str(spec).strip() == "":
        raise TrainError(
            "eval_only=true needs checkpoint=<a nas-train checkpoint or run folder>; got null"
        )
    path = Path(str(spec)).expanduser()
    if path.is_dir():
        path = path / "checkpoints" / "last.pt"
    return path


def run_eval(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate the weights (and EMA weights) of a training checkpoint on the test set of
    ``cfg.data``; the network is built from the checkpoint's own config. Writes nothing."""
    env = D.env_from_torchrun()
    path = checkpoint_file(cfg.get("checkpoint"))
    try:
        device = D.select_device(str(cfg.device), env)
    except ValueError as e:
        raise TrainError(str(e)) from None
    amp_dtype = autocast_dtype(cfg.get("amp"), device)
    eval_batch = int(cfg.eval.get("batch_size") or cfg.batch_size)
    batch = per_rank_batch(eval_batch, env.world_size, "eval.batch_size")
    name = str(cfg.data.name)
    try:
        info = dataset_info(name, cfg.data)
        test_set: Dataset[Any] = build_dataset(
            name,
            root=cfg.data.get("root"),
            val_root=cfg.data.get("val_root"),
            train=False,
            transform=eval_transform(name, image_size=cfg.data.get("image_size")),
        )
    except (ValueError, FileNotFoundError) as e:
        raise TrainError(str(e)) from None
    eval_items = cfg.eval.get("max_items")
    if eval_items is not None:
        test_set = Subset(test_set, range(min(int(eval_items), len(test_set))))  # type: ignore[arg-type]
    D.init_distributed(env, device)
    state = _main_then_broadcast(lambda: load_checkpoint(path, kind="train"))
    old = OmegaConf.create(state["config"])
    trained_on = str(old.data.name)
    try:
        trained_classes = int(dataset_info(trained_on, old.data)["num_classes"])
    except (ValueError, FileNotFoundError):  # its image folder is not here: trust the weights
        trained_classes = int(info["num_classes"])
    if trained_classes != int(info["num_classes"]):
        raise TrainError(
            f"checkpoint {path} was trained on {trained_on} ({trained_classes} classes); "
            f"data={name} has {info['num_classes']}"
        )
    genotype = genotype_from_json(state["genotype"])
    m = old.model
    net, spec = build_network(
        genotype,
        num_classes=int(info["num_classes"]),
        image_size=int(info["image_size"]),
        darts_C=int(m.darts.C),
        darts_layers=int(m.darts.layers),
        nb201_C=int(m.nb201.C),
        nb201_N=int(m.nb201.N),
        auxiliary=bool(m.auxiliary),
    )
    net.load_state_dict(state["model"])
    net.to(device)
    channels_last = bool(cfg.channels_last)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    loader = eval_loader(
        test_set,
        batch_size=batch,
        num_replicas=env.world_size,
        rank=env.rank,
        num_workers=int(cfg.data.get("num_workers", 0) or 0),
        pin_memory=bool(cfg.data.get("pin_memory", False)),
    )
    criterion = nn.CrossEntropyLoss()

    @torch.no_grad()
    def evaluate(model: nn.Module, prefix: str) -> dict[str, float]:
        model.eval()
        sums = torch.zeros(len(_SUMS), dtype=torch.float64, device=device)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(
                device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None
            ):
                logits, _ = logits_of(model(x), spec.family)
                loss = criterion(logits.float(), y)
            sums += _batch_sums(loss, logits, y)
        return _means(D.all_reduce_sum(sums), prefix)

    results: dict[str, Any] = {
        "checkpoint": str(path.absolute()),
        "network": str(spec),
        "genotype": str(genotype),
        "epoch": int(state["epoch"]),
        "data": name,
        "test_images": len(test_set),  # type: ignore[arg-type]
        **evaluate(net, "test"),
    }
    if state.get("ema") is not None:
        ema_net = build_network(
            genotype,
            num_classes=int(info["num_classes"]),
            image_size=int(info["image_size"]),
            darts_C=int(m.darts.C),
            darts_layers=int(m.darts.layers),
            nb201_C=int(m.nb201.C),
            nb201_N=int(m.nb201.N),
            auxiliary=bool(m.auxiliary),
        )[0]
        ema_net.load_state_dict(state["ema"]["module"])
        ema_net.to(device)
        if channels_last:
            ema_net = ema_net.to(memory_format=torch.channels_last)
        results.update(evaluate(ema_net, "ema_test"))
    return results
