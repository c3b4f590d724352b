"""The retraining loop: train a genotype's network from scratch, the way the papers did.

Retraining stage (``nas.training``), after search and selection. One loop for every recipe of
``configs/train/experiment``:

* DARTS CIFAR-10 (Liu et al., ICLR 2019, ``train.py``): SGD momentum 0.9, lr 0.025 cosine to 0,
  weight decay 3e-4, gradient clipping 5, auxiliary head weight 0.4, cutout 16, drop-path
  probability ``drop_path * epoch / epochs`` (ramped linearly over the epochs);
* DARTS ImageNet (``train_imagenet.py``): step decay x0.97 per epoch, label smoothing 0.1 on the
  training loss only;
* DrNAS (Chen et al., ICLR 2021): CIFAR as DARTS with batch 64 and drop-path 0.3; ImageNet with
  a 5-epoch linear warm-up, then DrNAS's linear decay (``adjust_lr``);
* RobustDARTS (Zela et al., ICLR 2020): C=16, 8 cells for CIFAR-100 and SVHN.

The learning rate is set per epoch, as the DARTS-family references do (``LambdaLR`` stepped at
the end of an epoch: epoch e trains with factor(e)), or with ``optimizer.lr_per_step`` at every
step, as ProxylessNAS's cosine (step i of epoch e trains with factor(e + i / steps per epoch)).
Options of every recipe: ``optimizer.no_weight_decay`` (batch-norm and / or bias parameters
without weight decay, ProxylessNAS's ``no_decay_keys``), ``data.color_jitter`` as four factors,
and knowledge distillation from a fixed teacher (``distill``, ``nas.training.distill``: the loss
is CE + weight x KD, both parts logged as ``train_ce`` and ``train_kd``).

Data parallel: under ``torchrun`` every process takes ``batch_size / world_size`` images of
each global batch (``nas.training.data``), gradients are averaged by DDP
(``nas.distributed``, the only ``torch.distributed`` code), so the recipe's global batch
and learning rate hold whatever the world size. Metrics are summed over the ranks (loss x
images, correct, images) before they are divided. Rank 0 alone writes the run folder and prints.

Reproducibility: every epoch reseeds Python, NumPy and torch from (seed, epoch, rank); the data
order comes from (seed, epoch). A checkpoint (model, EMA, optimiser, schedule, AMP scaler,
sampler position, every rank's RNG states, running sums) is written atomically at the end of
every epoch and, on SIGTERM, at the next step boundary, so ``resume=true`` ends with exactly the
weights of an uninterrupted run (on CPU without data-loader workers; with workers a SIGTERM
resume in the middle of an epoch sees the same images with other augmentation draws).

The test set, its loader, the network's building and placement and the evaluation pass are
module functions (``eval_dataset``, ``eval_data_loader``, ``build_train_network``,
``place_network``, ``evaluate_network``), which ``nas.training.evaluate`` (``eval_only=true``)
measures a checkpoint with.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset

from nas import distributed as D
from nas.data import build_dataset, dataset_info, eval_transform, train_transform
from nas.progress import start_line
from nas.run.checkpoint import CheckpointError, seed_everything
from nas.run.config import (
    TRAIN_NEUTRAL_KEYS,
    TRAIN_NEUTRAL_WORDS,
    set_on_command_line,
    validate_train_config,
)
from nas.run.disk import atomic_write_text
from nas.run.resume import follow_new_schedule
from nas.run.schedules import drop_path_prob, train_lr_factor
from nas.run.seeds import TRAIN_EPOCH_RNG, stream_seed
from nas.run.skeleton import Run, autocast, grad_scaler, to_device
from nas.summary import summarize
from nas.training.data import eval_loader, start_epoch, train_loader, with_color_jitter
from nas.training.distill import DistillError, Teacher, kd_loss, load_teacher
from nas.training.ema import EMA
from nas.training.model import (
    NetworkSpec,
    logits_of,
    network_from_config,
    resolve_train_genotype,
    unused_parameters,
)
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype, genotype_from_json

_SUMS = ("loss", "top1", "top5", "n")  # the running sums of an epoch, in this order


class TrainError(ValueError):
    """A training run that cannot go on (bad configuration, non-finite loss, unusable folder)."""


@dataclass
class TrainResult:
    run_dir: Path
    results: dict[str, Any]


# ------------------------------------------------------------------------------ validation


def validate_config(cfg: DictConfig) -> None:
    """Check every value a training run reads; one-line errors naming key and value
    (``nas.run.config``, where the command line checks them before importing torch)."""
    validate_train_config(cfg, TrainError)


def _schedule(cfg: DictConfig, epochs: int) -> Callable[[int], float]:
    """The recipe's learning-rate factor per epoch for a run of ``epochs`` epochs."""
    opt = cfg.optimizer
    return train_lr_factor(
        schedule=str(opt.schedule),
        epochs=epochs,
        lr=float(opt.lr),
        lr_min=float(opt.lr_min),
        gamma=float(opt.gamma),
        decay_period=int(opt.decay_period),
        warmup_epochs=int(opt.warmup_epochs),
    )


def _step_schedule(cfg: DictConfig, epochs: int, steps_per_epoch: int) -> Callable[[int], float]:
    """The recipe's learning-rate factor per step (``optimizer.lr_per_step``): step s of the
    run trains with the schedule at the fractional epoch s / steps_per_epoch (ProxylessNAS's
    cosine over epochs x steps, ``search/run_manager.py`` ``_calc_learning_rate``); a warm-up
    rises linearly per step, (s + 1) / (warmup_epochs x steps_per_epoch)."""
    opt = cfg.optimizer
    per_epoch = train_lr_factor(
        schedule=str(opt.schedule),
        epochs=epochs,
        lr=float(opt.lr),
        lr_min=float(opt.lr_min),
        gamma=float(opt.gamma),
        decay_period=int(opt.decay_period),
        warmup_epochs=0,
    )
    warmup_steps = int(opt.warmup_epochs) * steps_per_epoch

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        # the schedules' formulas hold at fractional epochs (a step schedule stays a staircase)
        return per_epoch(step / steps_per_epoch)  # type: ignore[arg-type]

    return factor


def parameter_groups(
    net: nn.Module, weight_decay: float, exempt: list[str]
) -> list[dict[str, Any]]:
    """The optimiser's parameter groups: those named by ``exempt`` without weight decay
    (``bn``: the weights and biases of normalisation layers; ``bias``: every bias), the rest
    with ``weight_decay``. ProxylessNAS's ``no_decay_keys`` (``search/run_manager.py``,
    ``build_optimizer``) picks the same parameters by the names of its layers (``bn``)."""
    if not exempt:
        return [{"params": list(net.parameters()), "weight_decay": weight_decay}]
    norms = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    skip: set[int] = set()
    for module in net.modules():
        for name, p in module.named_parameters(recurse=False):
            if ("bn" in exempt and isinstance(module, norms)) or (
                "bias" in exempt and name == "bias"
            ):
                skip.add(id(p))
    params = list(net.parameters())
    return [
        {"params": [p for p in params if id(p) not in skip], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) in skip], "weight_decay": 0.0},
    ]


def per_rank_batch(batch_size: int, world_size: int, what: str = "batch_size") -> int:
    """The per-process share of a global batch (``nas.distributed.per_rank_batch``)."""
    try:
        return D.per_rank_batch(batch_size, world_size, what)
    except ValueError as e:
        raise TrainError(str(e)) from None


# ----------------------------------------------------------------------------- data


def _datasets(cfg: DictConfig) -> tuple[Dataset[Any], Dataset[Any]]:
    """(training set with the recipe's augmentation, test set with evaluation preprocessing)."""
    train_set = _train_set(cfg)
    return train_set, eval_dataset(cfg)


def _train_set(cfg: DictConfig) -> Dataset[Any]:
    """The training set with the recipe's augmentation (the first ``data.max_items`` images
    only where set)."""
    data = cfg.data
    name = str(data.name)
    if bool(cfg.augment):
        jitter = data.get("color_jitter", True)
        transform = train_transform(
            name,
            cutout=int(data.get("cutout", 0) or 0),
            color_jitter=bool(jitter),
            image_size=data.get("image_size"),
        )
        if not isinstance(jitter, bool):  # four factors: the recipe's own ColorJitter
            transform = with_color_jitter(transform, [float(v) for v in jitter])
    else:  # no random augmentation at all (tests, debugging): the evaluation preprocessing
        transform = eval_transform(name, image_size=data.get("image_size"))
    root = data.get("root")
    download = bool(data.get("download", False))
    train_set = build_dataset(name, root=root, train=True, transform=transform, download=download)
    max_items = data.get("max_items")
    if max_items is not None:  # the first N training images only: smoke tests, tiny studies
        train_set = Subset(train_set, range(min(int(max_items), len(train_set))))  # type: ignore[arg-type]
    return train_set


def eval_dataset(cfg: DictConfig) -> Dataset[Any]:
    """The test set of ``cfg.data`` with the evaluation preprocessing (the first
    ``eval.max_items`` images only where set): what a training run and ``run_eval`` test on."""
    data = cfg.data
    name = str(data.name)
    dataset: Dataset[Any] = build_dataset(
        name,
        root=data.get("root"),
        val_root=data.get("val_root"),
        train=False,
        transform=eval_transform(name, image_size=data.get("image_size")),
    )
    eval_items = cfg.eval.get("max_items")
    if eval_items is not None:
        dataset = Subset(dataset, range(min(int(eval_items), len(dataset))))  # type: ignore[arg-type]
    return dataset


def eval_batch_size(cfg: DictConfig, world_size: int) -> int:
    """The per-process share of the evaluation batch (``eval.batch_size``, else ``batch_size``)."""
    eval_batch = cfg.eval.get("batch_size") or cfg.batch_size
    return per_rank_batch(int(eval_batch), world_size, "eval.batch_size")


def eval_data_loader(
    dataset: Dataset[Any], cfg: DictConfig, *, batch_size: int, env: D.DistEnv
) -> DataLoader[Any]:
    """This rank's loader of the test set (``nas.training.data.eval_loader``), as ``cfg.data``
    asks for workers and pinned memory."""
    return eval_loader(
        dataset,
        batch_size=batch_size,
        num_replicas=env.world_size,
        rank=env.rank,
        num_workers=int(cfg.data.get("num_workers", 0) or 0),
        pin_memory=bool(cfg.data.get("pin_memory", False)),
    )


# -------------------------------------------------------------------------- the network


def build_train_network(
    genotype: AnyGenotype, model: DictConfig, *, num_classes: int, image_size: int
) -> tuple[nn.Module, NetworkSpec]:
    """The network of ``genotype`` as the model config ``model`` sizes it (on the CPU); a bad
    setting is one line."""
    try:
        return network_from_config(genotype, model, num_classes=num_classes, image_size=image_size)
    except ValueError as e:
        raise TrainError(str(e).splitlines()[0]) from None


def place_network(net: nn.Module, device: torch.device, *, channels_last: bool) -> nn.Module:
    """``net`` on ``device``, its weights in NHWC with ``channels_last``."""
    net.to(device)
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    return net


@torch.no_grad()
def evaluate_network(
    net: nn.Module,
    loader: DataLoader[Any],
    *,
    family: str,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    channels_last: bool,
    prefix: str,
) -> dict[str, float]:
    """Loss, top-1 and top-5 (%) of ``net`` in eval mode on what ``loader`` gives this rank,
    summed over the ranks: ``<prefix>_loss``, ``<prefix>_top1``, ``<prefix>_top5``."""
    net.eval()
    criterion = nn.CrossEntropyLoss()
    sums = torch.zeros(len(_SUMS), dtype=torch.float64, device=device)
    for x, y in loader:
        x, y = to_device(x, y, device, channels_last=channels_last)
        with autocast(device, amp_dtype):
            logits, _ = logits_of(net(x), family)
            loss = criterion(logits.float(), y)
        sums += _batch_sums(loss, logits, y)
    return _means(D.all_reduce_sum(sums), prefix)


# --------------------------------------------------------------------------- the run


class TrainRun(Run):
    """One training run in one run folder; ``run()`` trains and returns the results."""

    program = "nas-train"
    kind = "train"
    error = TrainError
    holds = "training run"
    fits = "this network"
    broadcast_errors = (TrainError, CheckpointError, ValueError, FileNotFoundError)
    new_run_advice = "name=... / hydra.run.dir=..."

    def __init__(self, cfg: DictConfig, run_dir: str | Path) -> None:
        validate_config(cfg)
        self.locate(cfg, run_dir)
        self.configure(cfg)
        self.batch_size = per_rank_batch(int(cfg.batch_size), self.env.world_size)
        self.eval_batch_size = eval_batch_size(cfg, self.env.world_size)
        self.channels_last = bool(cfg.channels_last)
        try:
            self.genotype: AnyGenotype = resolve_train_genotype(cfg.genotype)
            info = dataset_info(str(cfg.data.name), cfg.data)
        except (ValueError, FileNotFoundError) as e:
            raise TrainError(str(e)) from None
        self.num_classes = int(info["num_classes"])
        # Data and teacher before the rendezvous: a rank without them stops now, and torchrun
        # ends the others, instead of everyone waiting in the first collective.
        self._build_data()
        self.teacher = self._build_teacher(int(info["image_size"]))

        D.init_distributed(self.env, self.device)
        resume_state = self.main_then_broadcast(self._resume_state)

        seed_everything(self.seed)  # the same initial weights on every rank
        self._build_model(int(info["image_size"]))
        self._build_optimiser()

        self.best: dict[str, Any] = {}
        self.final: dict[str, Any] = {}
        self.train_seconds = 0.0
        self._sums = torch.zeros(len(_SUMS), dtype=torch.float64, device=self.device)
        # the two parts of the loss under distillation: [CE x n, KD x n]
        self._kd_sums = torch.zeros(2, dtype=torch.float64, device=self.device)
        self._register_state()
        if resume_state is not None:
            self._load(resume_state)
        self.start_logger(resumed=resume_state is not None)

    # --------------------------------------------------------------------------- building

    def _build_data(self) -> None:
        """The training and test loaders, each rank's share."""
        cfg = self.cfg
        try:
            train_set, test_set = _datasets(cfg)
        except (ValueError, FileNotFoundError) as e:
            raise TrainError(str(e)) from None
        self.train_loader = train_loader(
            train_set,
            batch_size=self.batch_size,
            seed=self.seed,
            num_replicas=self.env.world_size,
            rank=self.env.rank,
            num_workers=int(cfg.data.get("num_workers", 0) or 0),
            pin_memory=bool(cfg.data.get("pin_memory", False)),
        )
        self.test_loader = eval_data_loader(
            test_set, cfg, batch_size=self.eval_batch_size, env=self.env
        )
        self.num_train = len(train_set)  # type: ignore[arg-type]
        self.num_test = len(test_set)  # type: ignore[arg-type]
        # global batches per epoch, whatever the world size: the unit of a per-step schedule
        self.steps_per_epoch = max(1, math.ceil(self.num_train / int(cfg.batch_size)))

    def _build_teacher(self, image_size: int) -> Teacher | None:
        """This rank's distillation teacher on its device, or None (``nas.training.distill``)."""
        distill = self.cfg.get("distill")
        if distill is None or distill.teacher is None:
            return None
        try:
            return load_teacher(
                distill,
                self.cfg.model,
                num_classes=self.num_classes,
                image_size=image_size,
                data_name=str(self.cfg.data.name),
                device=self.device,
                channels_last=self.channels_last,
                trust_pickle=bool(self.cfg.get("trust_pickle", False)),
            )
        except DistillError as e:
            raise TrainError(str(e)) from None

    def _build_model(self, image_size: int) -> None:
        """The network on the device (NHWC, SyncBatchNorm, EMA, DDP, compile as asked)."""
        cfg = self.cfg
        self.net, self.spec = build_train_network(
            self.genotype, cfg.model, num_classes=self.num_classes, image_size=image_size
        )
        self.summary = summarize(self.net, self.spec.input_size)
        self.net = place_network(self.net, self.device, channels_last=self.channels_last)
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
        self.aux_weight = float(cfg.model.auxiliary_weight)
        self.drop_path = float(cfg.model.drop_path) if self.spec.drop_path else 0.0

    def _build_optimiser(self) -> None:
        """SGD, its schedule (per epoch or per step), the AMP scaler and the recipe's losses."""
        cfg = self.cfg
        opt = cfg.optimizer
        exempt = [str(k) for k in opt.get("no_weight_decay") or []]
        self.optimizer = torch.optim.SGD(
            parameter_groups(self.net, float(opt.weight_decay), exempt),
            lr=float(opt.lr),
            momentum=float(opt.momentum),
            weight_decay=float(opt.weight_decay),
            nesterov=bool(opt.nesterov),
            foreach=True,  # one kernel per step for all parameters, not one per tensor
        )
        self.lr_per_step = bool(opt.get("lr_per_step", False))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, self._lr_factor(self.epochs)
        )
        distill = cfg.get("distill")
        self.kd_weight = float(distill.weight) if self.teacher is not None else 0.0
        self.kd_temperature = float(distill.temperature) if distill is not None else 1.0
        self.kd_scale_t2 = bool(distill.scale_t2) if distill is not None else True
        self.grad_clip = float(opt.grad_clip or 0.0)
        self.scaler = grad_scaler(self.device, self.amp_dtype)
        self.train_criterion = nn.CrossEntropyLoss(label_smoothing=float(cfg.label_smoothing))

    # ------------------------------------------------------------------------ checkpoints

    def _resume_state(self) -> dict[str, Any] | None:
        """Runs on rank 0: the checkpoint to continue, or None for a new run. A checkpoint
        written in the middle of an epoch resumes at any world size: its position counts
        global batches, which every world size splits the same way (``nas.training.data``)."""
        state = self.load_resume_checkpoint()
        if state is None:
            return None
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
        return state

    def _lr_factor(self, epochs: int) -> Callable[[int], float]:
        """The schedule's factor of the ``LambdaLR``'s index: the epoch, or with
        ``optimizer.lr_per_step`` the step of the run."""
        if self.lr_per_step:
            return _step_schedule(self.cfg, epochs, self.steps_per_epoch)
        return _schedule(self.cfg, epochs)

    def _check_resumable(self, state: dict[str, Any]) -> None:
        """``resume=true`` continues the stopped run or nothing: the same values but for the
        result-neutral keys (``nas.run.config``), and ``epochs`` changed only where the epochs
        already started keep their learning rate and drop-path probability."""
        _fill_keys_added_later(state["config"])
        self.check_same_values(state, neutral=TRAIN_NEUTRAL_KEYS, neutral_words=TRAIN_NEUTRAL_WORDS)
        lr = float(self.cfg.optimizer.lr)
        # a network without drop-path (an NB201 cell) keeps 0; the DARTS networks ramp it
        has_drop_path = family_of(self.genotype).drop_path  # the model is not built yet
        drop_path = float(self.cfg.model.drop_path) if has_drop_path else 0.0

        per_step = bool(self.cfg.optimizer.get("lr_per_step", False))
        n = self.steps_per_epoch

        def settings(total: int, epoch: int) -> dict[str, float]:
            if per_step:  # the first and the last step of the epoch
                f = _step_schedule(self.cfg, total, n)
                rates = {"learning rate": lr * f(epoch * n),
                         "last-step learning rate": lr * f(epoch * n + n - 1)}  # fmt: skip
            else:
                rates = {"learning rate": lr * _schedule(self.cfg, total)(epoch)}
            return {**rates, "drop-path probability": drop_path_prob(drop_path, epoch, total)}

        self.check_epoch_change(state, settings)

    def _register_state(self) -> None:
        """What a checkpoint holds besides the position and the running sums."""
        ckpt = self.checkpointer
        ckpt.register("model", self.net)
        ckpt.register("ema", save=self._ema_state, load=self._load_ema)
        ckpt.register("optimizer", self.optimizer)
        ckpt.register("scheduler", self.scheduler)
        ckpt.register("scaler", self.scaler)

    def _ema_state(self) -> dict[str, Any] | None:
        return self.ema.state_dict() if self.ema is not None else None

    def _load_ema(self, state: dict[str, Any] | None) -> None:
        if self.ema is None:
            return
        if state is None:
            raise KeyError("the checkpoint has no EMA weights (ema.decay was null)")
        self.ema.load_state_dict(state)

    def _checkpoint(self, *, best: bool = False) -> None:
        """All ranks call this (it gathers every rank's RNG state); rank 0 writes."""
        sums = D.all_reduce_sum(self._sums.clone())
        counters = {
            **self.counters(),
            "genotype": self.genotype.to_json(),
            "network": str(self.spec),
            "sums": sums.cpu(),
            "best": dict(self.best),
            "final": dict(self.final),
            "train_seconds": self.train_seconds,
        }
        if self.teacher is not None:
            counters["distill_sums"] = D.all_reduce_sum(self._kd_sums.clone()).cpu()
        copies = [self.run_dir / "checkpoints" / "best.pt"] if best else []
        self.checkpointer.save(counters, copies=copies)

    def _load(self, state: dict[str, Any]) -> None:
        self.checkpointer.load(state)
        self.load_counters(state)
        self.best = dict(state["best"])
        self.final = dict(state["final"])
        self.train_seconds = float(state["train_seconds"])
        if self.main:  # rank 0 carries the sums of the ranks up to the checkpoint
            self._sums.copy_(state["sums"].to(self.device))
            if self.teacher is not None and "distill_sums" in state:
                self._kd_sums.copy_(state["distill_sums"].to(self.device))
        if int(state["config"]["epochs"]) != self.epochs:
            # more epochs: the next epoch's (step's) learning rate is the new schedule's (the
            # checkpoint holds the old one's, e.g. 0 after a finished cosine)
            follow_new_schedule(
                self.scheduler, self.global_step if self.lr_per_step else self.epoch
            )

    # ------------------------------------------------------------------------------ steps

    def _to_device(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        return to_device(x, y, self.device, channels_last=self.channels_last)

    def _autocast(self) -> AbstractContextManager[Any]:
        return autocast(self.device, self.amp_dtype)

    def _train_step(self, x: Tensor, y: Tensor) -> Tensor:
        """Forward, backward, clip, optimiser step, EMA (and with ``lr_per_step`` the schedule);
        returns the step's loss, and with a teacher [loss, CE part, KD part] (on device)."""
        with self._autocast():
            # the teacher sees the student's batch, augmentation and all (no gradients)
            soft = self.teacher.logits(x) if self.teacher is not None else None
            logits, logits_aux = logits_of(self.model(x), self.spec.family)
            loss = self.train_criterion(logits, y)
            if logits_aux is not None:
                loss = loss + self.aux_weight * self.train_criterion(logits_aux, y)
            ce = loss
            if soft is not None:
                kd = kd_loss(
                    logits, soft, temperature=self.kd_temperature, scale_t2=self.kd_scale_t2
                )
                loss = ce + self.kd_weight * kd
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        if self.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.net.parameters(), self.grad_clip, foreach=True)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.lr_per_step:
            self.scheduler.step()
        if self.ema is not None:
            self.ema.update(self.net)
        with torch.no_grad():
            self._sums += _batch_sums(loss.detach(), logits.detach(), y)
            if soft is not None:
                parts = torch.stack([ce.detach().double(), kd.detach().double()])
                self._kd_sums += parts * y.shape[0]
                return torch.cat([loss.detach().double().reshape(1), parts])
        return loss.detach()

    def start_line(self) -> str:
        keys = ["genotype", "data.name", "data.max_items", "epochs", "batch_size", "seed"]
        resumed = self.epoch or None
        return start_line("nas-train", self.run_dir, self.cfg, keys, device=self.device,
                          processes=self.env.world_size, resumed_at_epoch=resumed)  # fmt: skip

    def on_start(self) -> None:
        self._log_start()

    def finish(self) -> TrainResult:
        return TrainResult(self.run_dir, self._results())

    def run(self) -> TrainResult:
        result: TrainResult = super().run()
        return result

    def run_epoch(self) -> None:
        epoch, start = self.epoch, self.step_in_epoch
        if self.start_rng(lambda: stream_seed(self.seed, epoch, self.env.rank, TRAIN_EPOCH_RNG)):
            self._sums.zero_()
            self._kd_sums.zero_()
        drop = drop_path_prob(self.drop_path, epoch, self.epochs)
        if self.spec.drop_path:
            self.net.drop_path_prob = drop  # type: ignore[assignment]
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.model.train()
        batches = start_epoch(self.train_loader, seed=self.seed, epoch=epoch, start_batch=start)
        bar = self.progress(
            total=start + len(self.train_loader),
            desc=f"epoch {epoch + 1}/{self.epochs}",
            steps_after=(self.epochs - epoch - 1) * (start + len(self.train_loader)),
        )
        sums_at_start = D.all_reduce_sum(self._sums.clone())
        t0 = time.perf_counter()
        for x, y in batches:
            step_lr = float(self.optimizer.param_groups[0]["lr"])  # lr_per_step: this step's
            loss = self._train_step(*self._to_device(x, y))
            self.step_in_epoch += 1
            self.global_step += 1
            # one collective per step: the stop flag, and on logging steps the loss (and parts)
            log_step = self.global_step % int(self.cfg.log_every) == 0
            summed, stop = self.stop.sum_with_stop(loss.double().reshape(-1) if log_step else None)
            step_loss = None
            if log_step:
                values = dict(zip(("train_loss", "train_ce", "train_kd"), summed, strict=False))
                values = {k: v / self.env.world_size for k, v in values.items()}
                step_loss = values["train_loss"]
                self._check_finite(values, epoch)
                if self.logger is not None:
                    self.logger.log("step", epoch=epoch, step=self.global_step, lr=step_lr,
                                    **values)  # fmt: skip
            bar.update(1, images=int(x.shape[0]) * self.env.world_size, loss=step_loss)
            if stop:
                bar.close()
                self._checkpoint()
                raise self.stop.preempted(self.ckpt_path)
        bar.close()
        elapsed = time.perf_counter() - t0
        self.train_seconds += elapsed
        sums = D.all_reduce_sum(self._sums.clone())
        images = float(sums[3] - sums_at_start[3])
        train = _means(sums, "train")
        if self.teacher is not None:
            ce, kd = D.all_reduce_sum(self._kd_sums.clone()).tolist()
            n = max(float(sums[3]), 1.0)
            train.update(train_ce=ce / n, train_kd=kd / n)
        self._check_finite(train, epoch)
        if not self.lr_per_step:
            self.scheduler.step()
        self.epoch += 1
        self.step_in_epoch = 0
        self._sums.zero_()
        self._kd_sums.zero_()

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
        metrics = evaluate_network(
            net,
            self.test_loader,
            family=self.spec.family,
            device=self.device,
            amp_dtype=self.amp_dtype,
            channels_last=self.channels_last,
            prefix=prefix,
        )
        net.train(was_training)
        return metrics

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
        if self.teacher is not None:
            print(
                f"distillation: teacher {self.teacher.description}; loss = CE + "
                f"{self.kd_weight:g} x KD at temperature {self.kd_temperature:g}"
                + (" (x T^2)" if self.kd_scale_t2 and self.kd_temperature != 1 else ""),
                flush=True,
            )
        ignored = set_on_command_line(
            "model.auxiliary", "model.auxiliary_weight", "model.drop_path"
        )
        if not self.spec.drop_path and ignored:  # only when the user asked for them
            print(
                f"{self.spec.family} has no auxiliary head and no drop-path: {', '.join(ignored)} "
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
                **({"teacher": self.teacher.description} if self.teacher is not None else {}),
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
        if "train_kd" in entry:
            line += f" (ce {entry['train_ce']:.4f}, kd {entry['train_kd']:.4f})"
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
        if self.teacher is not None:
            results["teacher"] = self.teacher.description
        if self.main:
            atomic_write_text(self.run_dir / "results.json", json.dumps(results, indent=2) + "\n")
        return results


# Keys added to configs/train/nas_train.yaml after checkpoints were written, with the values that
# train as those checkpoints' runs did: a resume fills them in before comparing configs.
_ADDED_KEYS: dict[str, dict[str, Any]] = {
    "optimizer": {"no_weight_decay": [], "lr_per_step": False},
    "distill": {"teacher": None, "weights": None, "weight": 0.0, "temperature": 1.0,
                "scale_t2": True},
}  # fmt: skip


def _fill_keys_added_later(config: dict[str, Any]) -> None:
    """A checkpoint's config with the keys added since (``_ADDED_KEYS``) at their neutral
    values, so that a run stopped before they existed resumes."""
    for section, keys in _ADDED_KEYS.items():
        node = config.setdefault(section, {})
        if isinstance(node, dict):
            for key, value in keys.items():
                node.setdefault(key, value)


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
