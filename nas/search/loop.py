"""The search loop: epochs of bi-level steps, logging, checkpoints, resume, then selection.

Third stage of the pipeline (``nas.search``); the only place that iterates over data. It
follows the reference ``train_search.py`` of DARTS (Liu et al., ICLR 2019): the training set
is split by index into a weight half and an architecture half; each step takes an
architecture step on an architecture batch and a weight step on a weight batch (SGD with
momentum, weight decay, gradient clipping, a cosine learning rate per epoch); at the end the
selector derives the genotype.

Reproducibility: every epoch reseeds Python, NumPy and torch from (seed, epoch); its data
order comes from the same pair, each image's augmentation from a seed of its own position in
that order, and each step's random draws (DrNAS's samples) from (seed, global step), so an
epoch is a pure function of the state at its start. A checkpoint is written atomically at the
end of every epoch; SIGTERM (how clusters preempt jobs) writes one at the next step boundary,
with the position in the epoch and the RNG states, and stops. Either way ``resume=true``
continues to exactly the architecture an uninterrupted run reaches.

Data parallelism (``torchrun --nproc_per_node=N nas-search ...``): ``batch_size`` is the global
batch of both splits; every rank takes a contiguous share of each global batch, and of that
share ``micro_batches`` pieces, each one forward and backward (and one batch-norm group). The
strategy weights each piece's gradient by its share of the global batch and sums over pieces
and ranks, so every rank takes the same step and holds the same supernet and architecture
(checked every ``sync_check_every`` steps). A search of global batch B with world size W and
micro-batches M normalises batch norm over groups of B / (W * M) images: keep B and W * M and
the search is the same, to float rounding, on any number of processes; checkpoints count
global batches, so a run resumes at any world size. Only rank 0 writes files and prints.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, Dataset, Sampler, Subset

from nas import distributed as D
from nas.checkpoint import (
    CheckpointError,
    atomic_save,
    load_checkpoint,
    rng_state,
    seed_everything,
    set_rng_state,
)
from nas.data import (
    build_dataset,
    dataset_info,
    imagenet_search_subsets,
    search_split,
    train_transform,
)
from nas.data.loaders import seed_worker
from nas.metrics import MetricLogger
from nas.progress import Progress, start_line
from nas.run.config import SEARCH_NEUTRAL_KEYS, SEARCH_NEUTRAL_WORDS, validate_search_config
from nas.run.disk import atomic_write_text
from nas.run.resume import check_epochs, check_same_config, follow_new_schedule
from nas.run.signals import Preempted, StopSignals
from nas.search.base import STRATEGIES, Batch, SearchContext, SearchStrategy, Shards
from nas.selection.base import SELECTORS, Selector
from nas.supernet import Supernet, build_supernet
from search_spaces.genotype import AnyGenotype, NB201Genotype
from search_spaces.nb201 import arch_to_index


class SearchError(ValueError):
    """A search that cannot go on (bad configuration, non-finite loss, unusable run folder)."""


@dataclass
class SearchResult:
    genotype: AnyGenotype
    run_dir: Path
    final_metrics: dict[str, float]


def epoch_seed(seed: int, epoch: int, stream: int = 0) -> int:
    """A well-mixed 63-bit seed for (run seed, epoch, stream)."""
    return int(np.random.SeedSequence([seed, epoch, stream]).generate_state(2, np.uint64)[0] >> 1)


class EpochSampler(Sampler[list[tuple[int, int]]]):
    """This rank's share of every global batch of an epoch, as ``(index, augmentation seed)``.

    The order of an epoch is a permutation fixed by (seed, epoch, stream), the same on every
    rank; global batch b is positions [b * B, (b + 1) * B) of it, split into ``world_size``
    contiguous shares (sizes differ by at most one: ``torch.tensor_split``). Every position
    carries its own augmentation seed, so an image looks the same whoever loads it. A final
    global batch with fewer than ``min_batch`` images (one per micro-batch of every rank) is
    left out. ``set_epoch(epoch, start_batch)`` starts anywhere in an epoch."""

    def __init__(
        self,
        num_items: int,
        *,
        seed: int,
        batch_size: int,
        stream: int,
        rank: int = 0,
        world_size: int = 1,
        min_batch: int = 1,
    ) -> None:
        self.num_items = num_items
        self.seed = seed
        self.batch_size = batch_size
        self.stream = stream
        self.rank = rank
        self.world_size = world_size
        self.min_batch = min_batch
        self.epoch = 0
        self.start_batch = 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch = epoch
        self.start_batch = start_batch

    @property
    def num_batches(self) -> int:
        """Global batches in a whole epoch."""
        full, rest = divmod(self.num_items, self.batch_size)
        return full + (1 if rest >= self.min_batch else 0)

    def global_size(self, batch: int) -> int:
        return min(self.batch_size, self.num_items - batch * self.batch_size)

    def global_sizes(self) -> list[int]:
        """Images in each global batch that ``__iter__`` yields a share of."""
        return [self.global_size(b) for b in range(self.start_batch, self.num_batches)]

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        g = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch, self.stream))
        order = torch.randperm(self.num_items, generator=g)
        item_seeds = torch.randint(2**62, (self.num_items,), generator=g)
        for b in range(self.start_batch, self.num_batches):
            positions = torch.arange(b * self.batch_size, b * self.batch_size + self.global_size(b))
            mine = torch.tensor_split(positions, self.world_size)[self.rank]
            yield list(zip(order[mine].tolist(), item_seeds[mine].tolist()))

    def __len__(self) -> int:
        return max(0, self.num_batches - self.start_batch)


class SeededItems(Dataset[Any]):
    """``dataset`` read with ``(index, seed)`` keys: torch's generator is seeded with ``seed``
    while the item is loaded (torchvision's random transforms and our cutout draw from it), so
    an image's augmentation depends on its position in the epoch only, not on the rank, the
    data-loader worker or where a resumed run restarted."""

    def __init__(self, dataset: Dataset[Any]) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        index, seed = key
        # the CPU generator only (torch.manual_seed would also reseed CUDA: 85 us per image)
        generator = torch.default_generator
        saved = generator.get_state()
        generator.manual_seed(seed)
        try:
            return self.dataset[index]
        finally:
            generator.set_state(saved)


def _loader(
    dataset: Dataset[Any], cfg: DictConfig, stream: int, env: D.DistEnv, min_batch: int
) -> DataLoader[Any]:
    sampler = EpochSampler(
        len(dataset),  # type: ignore[arg-type]
        seed=int(cfg.seed),
        batch_size=int(cfg.batch_size),
        stream=stream,
        rank=env.rank,
        world_size=env.world_size,
        min_batch=min_batch,
    )
    return DataLoader(
        SeededItems(dataset),
        batch_sampler=sampler,
        num_workers=int(cfg.data.num_workers),
        pin_memory=bool(cfg.data.pin_memory) and torch.cuda.is_available(),
        worker_init_fn=seed_worker,
        generator=torch.Generator(),
    )


def _sampler(loader: DataLoader[Any]) -> EpochSampler:
    sampler = loader.batch_sampler
    assert isinstance(sampler, EpochSampler)
    return sampler


def _start_epoch(
    loader: DataLoader[Any], seed: int, epoch: int, start_batch: int, stream: int
) -> Iterator[tuple[Any, int]]:
    """This rank's shares of the epoch's global batches from ``start_batch`` on, each with the
    size of its global batch."""
    sampler = _sampler(loader)
    sampler.set_epoch(epoch, start_batch)
    assert loader.generator is not None
    # Worker seeds derive from this generator: fix them by (seed, epoch, position).
    loader.generator.manual_seed(epoch_seed(seed, epoch, 1000 + stream + 7919 * start_batch))
    return zip(iter(loader), sampler.global_sizes())


def lr_factor(
    *,
    epochs: int,
    lr: float,
    lr_min: float,
    warmup_epochs: int = 0,
    stage_lr: str = "cosine",
    stage_starts: Sequence[int] = (),
) -> Callable[[int], float]:
    """The weight learning rate of epoch e as a factor of ``lr``.

    ``stage_lr="cosine"`` (default): cosine from ``lr`` to ``lr_min`` over all epochs (SGDR
    without restarts, as every reference intends), and during the first ``warmup_epochs`` the
    linear warm-up ``(e + 1) / warmup_epochs`` in its place (DrNAS's ImageNet search).
    ``stage_lr="reference"``: what the DrNAS reference code computes, ``reference_stage_lrs``."""
    if stage_lr == "reference":
        lrs = reference_stage_lrs(
            epochs=epochs,
            lr=lr,
            lr_min=lr_min,
            warmup_epochs=warmup_epochs,
            stage_starts=stage_starts,
        )
        return lambda epoch: lrs[min(epoch, epochs - 1)] / lr
    if stage_lr != "cosine":
        raise SearchError(f"optimizer.stage_lr must be 'cosine' or 'reference', got {stage_lr!r}")

    def factor(epoch: int) -> float:
        if epoch < warmup_epochs:
            return (epoch + 1) / warmup_epochs
        cosine = lr_min + (lr - lr_min) * (1 + math.cos(math.pi * epoch / max(epochs, 1))) / 2
        return cosine / lr

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


def _autocast_dtype(amp: Any, device: torch.device) -> torch.dtype | None:
    if amp in (None, False, "none", "null"):
        return None
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        if device.type != "cuda":
            raise SearchError("amp=fp16 needs CUDA; on CPU use amp=bf16 or amp=null")
        return torch.float16
    raise SearchError(f"amp must be null, bf16 or fp16, got {amp!r}")


def _channels_last_setting(value: Any) -> bool | str:
    if value in (True, False, "auto"):
        return value
    raise SearchError(f"channels_last must be true, false or auto, got {value!r}")


def validate_config(cfg: DictConfig) -> None:
    """Check the top-level values a search needs; one-line errors naming key and value
    (``nas.run.config``, where the command line checks them before importing torch)."""
    validate_search_config(cfg, SearchError)


class SearchRun:
    """One search in one run folder. ``run()`` returns the selected genotype."""

    def __init__(self, cfg: DictConfig, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.ckpt_path = self.run_dir / "checkpoints" / "last.pt"
        try:
            self.env = D.env_from_torchrun()
            self.device = D.select_device(str(cfg.device), self.env)
        except ValueError as e:
            raise SearchError(str(e)) from None
        self.main = self.env.is_main
        # The process group first: from here on every rank reaches the same decisions (rank 0
        # reads the run folder and hands what it read, or its error, to the others).
        D.init_distributed(self.env, self.device)
        from_state = None
        if cfg.get("from_run"):
            cfg, from_state = D.main_then_broadcast(
                lambda: _from_run(cfg), (SearchError,), SearchError
            )
        validate_config(cfg)
        self.cfg = cfg
        self.channels_last_setting = _channels_last_setting(cfg.get("channels_last", "auto"))
        self.seed = int(cfg.seed)
        self.epochs = int(cfg.epochs)
        self.micro_batches = int(cfg.get("micro_batches") or 1)
        self.sync_check_every = int(cfg.get("sync_check_every") or 50)
        pieces = self.env.world_size * self.micro_batches
        if int(cfg.batch_size) < pieces:
            raise SearchError(
                f"batch_size={cfg.batch_size} is the global batch; {self.env.world_size} "
                f"process(es) x micro_batches={self.micro_batches} need at least {pieces} images"
            )

        resume_state = D.main_then_broadcast(self._resume_state, (SearchError,), SearchError)
        if resume_state is None and from_state is not None:
            resume_state = from_state  # select on a finished search's supernet, not search again
        seed_everything(self.seed)

        self.strategy = self._build_strategy()
        schedule_epochs = self.strategy.total_epochs
        if schedule_epochs is not None and schedule_epochs != self.epochs:
            raise SearchError(
                f"epochs={self.epochs}, but the stages of search.stages add up to "
                f"{schedule_epochs} epochs; set epochs={schedule_epochs} or change the stages"
            )

        # data: the training set split by index into weight and architecture halves
        data_name = str(cfg.data.name)
        try:
            info = dataset_info(data_name, cfg.data)
        except (ValueError, FileNotFoundError) as e:
            raise SearchError(str(e)) from None
        try:
            weight_set, arch_set = self._search_data(cfg.data)
        except (ValueError, FileNotFoundError) as e:
            raise SearchError(str(e)) from None
        self.train_loader = _loader(weight_set, cfg, 0, self.env, pieces)
        self.val_loader = _loader(arch_set, cfg, 1, self.env, pieces)

        # supernet, weight optimiser and schedule; the strategy attaches to them
        k = self.strategy.initial_partial_channels() or int(cfg.space.get("partial_channels", 1))
        try:
            self.supernet: Supernet = build_supernet(
                str(cfg.space.name),
                C=int(cfg.space.C),
                layers=int(cfg.space.layers),
                num_classes=int(info["num_classes"]),
                partial_channels=k,
                stem="imagenet" if int(info["image_size"]) > 64 else "cifar",
            ).to(self.device)
        except ValueError as e:
            raise SearchError(str(e)) from None
        self.channels_last = False  # the format the supernet is in; see _apply_memory_format
        opt_cfg = cfg.optimizer
        self.weight_optimizer = torch.optim.SGD(
            self.supernet.parameters(),
            lr=float(opt_cfg.lr),
            momentum=float(opt_cfg.momentum),
            weight_decay=float(opt_cfg.weight_decay),
            foreach=True,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.weight_optimizer,
            lr_factor(
                epochs=self.epochs,
                lr=float(opt_cfg.lr),
                lr_min=float(opt_cfg.lr_min),
                warmup_epochs=int(opt_cfg.get("warmup_epochs", 0) or 0),
                stage_lr=str(opt_cfg.get("stage_lr", "cosine")),
                stage_starts=self.strategy.stage_start_epochs,
            ),
        )
        try:
            self.strategy.attach(
                SearchContext(
                    supernet=self.supernet,
                    weight_optimizer=self.weight_optimizer,
                    grad_clip=float(opt_cfg.grad_clip),
                    autocast_dtype=_autocast_dtype(cfg.get("amp"), self.device),
                ),
                generator=torch.Generator().manual_seed(self.seed),
            )
        except ValueError as e:
            raise SearchError(str(e)) from None
        self.strategy.to(self.device)
        if cfg.get("cost") is not None:  # issue 23: hardware-cost term (configs/cost)
            from nas.hardware.cost import attach_cost

            try:
                attach_cost(self.strategy, cfg.cost)
            except (ValueError, FileNotFoundError) as e:
                raise SearchError(str(e)) from None
        self.selector = self._build_selector()

        self.phase = "search"  # then "select", then "done"
        self.epoch = 0  # epochs completed
        self.step_in_epoch = 0  # batches of the current epoch done (non-zero only after SIGTERM)
        self.global_step = 0
        self._epoch_sums: dict[str, float] = {}
        if resume_state is not None:
            self._load(resume_state)
            if resume_state is from_state:  # a fresh selection: no projection of an earlier one
                for ct in self.supernet.space.cell_types:
                    self.strategy.projection_decided(ct).zero_()
        self._apply_memory_format()
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
        self._signals = StopSignals("nas-search")
        self._stop_requested = False

    # ------------------------------------------------------------------------- building

    def _search_data(self, data: DictConfig) -> tuple[Dataset[Any], Dataset[Any]]:
        """(weight split, architecture split) of the training set, with training augmentation."""
        name = str(data.name)
        transform = train_transform(
            name,
            cutout=int(data.get("cutout", 0) or 0),
            color_jitter=bool(data.get("color_jitter", True)),
            image_size=data.get("image_size"),
        )
        train_set = build_dataset(
            name,
            root=data.get("root"),
            train=True,
            transform=transform,
            download=bool(data.get("download", False)),
        )
        max_items = data.get("max_items")
        if max_items is not None:  # the first N images only: smoke tests, tiny studies
            if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 2:
                raise ValueError(f"data.max_items must be an int >= 2 or null, got {max_items!r}")
            train_set = Subset(train_set, range(min(max_items, len(train_set))))  # type: ignore[arg-type]
        if data.get("val_root"):  # an image folder's held-out folder: the architecture split
            arch_set = build_dataset(
                name, root=data.root, val_root=data.val_root, train=False, transform=transform
            )
            return train_set, arch_set
        if name == "imagenet":  # DrNAS / PC-DARTS: per-class subsets, not halves
            return imagenet_search_subsets(
                train_set,
                weight_fraction=float(data.get("weight_fraction", 0.1)),
                arch_fraction=float(data.get("arch_fraction", 0.025)),
                # the subsets are a property of the data, not of the run: every seed searches
                # on the same images (DrNAS sampled them once, offline)
                seed=int(data.get("subset_seed", 0)),
            )
        return search_split(train_set, train_portion=float(data.train_portion))

    def _build_strategy(self) -> SearchStrategy:
        from hydra.utils import instantiate

        name = str(self.cfg.search.get("name", ""))
        if name not in STRATEGIES:
            raise SearchError(
                f"unknown search strategy {name!r}; expected one of {', '.join(STRATEGIES.names())}"
            )
        try:
            strategy = instantiate(_without_name(self.cfg.search), _convert_="all")
        except Exception as e:  # Hydra wraps constructor errors; report the cause's line
            cause = e.__cause__ or e
            raise SearchError(str(cause).splitlines()[0]) from None
        if not isinstance(strategy, SearchStrategy):
            raise SearchError(
                f"search._target_ built {type(strategy).__name__}, not a SearchStrategy"
            )
        return strategy

    def _build_selector(self) -> Selector:
        from hydra.utils import instantiate

        name = str(self.cfg.selection.get("name", ""))
        if name not in SELECTORS:
            raise SearchError(
                f"unknown selector {name!r}; expected one of {', '.join(SELECTORS.names())}"
            )
        try:
            selector = instantiate(_without_name(self.cfg.selection), _convert_="all")
        except Exception as e:
            cause = e.__cause__ or e
            raise SearchError(str(cause).splitlines()[0]) from None
        if not isinstance(selector, Selector):
            raise SearchError(f"selection._target_ built {type(selector).__name__}, not a Selector")
        return selector

    # ----------------------------------------------------------------------- checkpoints

    def _resume_state(self) -> dict[str, Any] | None:
        if not bool(self.cfg.resume):
            if self.ckpt_path.exists():
                raise SearchError(
                    f"run folder {self.run_dir} already holds a search ({self.ckpt_path}); "
                    "pass resume=true to continue it, or another hydra.run.dir for a new one"
                )
            return None
        try:
            state = load_checkpoint(self.ckpt_path, kind="search")
        except CheckpointError as e:
            raise SearchError(str(e)) from None
        space = state["config"]["space"]["name"]
        if space != str(self.cfg.space.name):
            raise SearchError(
                f"checkpoint {self.ckpt_path} is a search of space {space!r}, but space="
                f"{self.cfg.space.name} was asked for; resume with the run's own config"
            )
        try:
            self._check_resumable(state)
        except ValueError as e:
            raise SearchError(str(e)) from None
        return state

    def _check_resumable(self, state: dict[str, Any]) -> None:
        """``resume=true`` continues the stopped search or nothing: the same values but for the
        result-neutral keys (``nas.run.config``), the same batch-norm groups, and ``epochs``
        changed only where the epochs already started keep their learning rate."""
        old = state["config"]
        new = OmegaConf.to_container(self.cfg, resolve=True)
        assert isinstance(new, dict)
        check_same_config(
            old,
            new,
            checkpoint=self.ckpt_path,
            neutral=SEARCH_NEUTRAL_KEYS,
            neutral_words=SEARCH_NEUTRAL_WORDS,
        )
        old_world = int(state.get("world_size", 1))
        old_micro = int(old.get("micro_batches") or 1)
        if old_world * old_micro != self.env.world_size * self.micro_batches:
            pieces = old_world * old_micro
            fits = pieces % self.env.world_size == 0
            advice = (
                f"use micro_batches={pieces // self.env.world_size}"
                if fits
                else f"use a number of processes that divides {pieces}"
            )
            raise ValueError(
                f"checkpoint {self.ckpt_path} cut each batch into {pieces} batch-norm groups "
                f"({old_world} process(es) x micro_batches={old_micro}); {self.env.world_size} "
                f"process(es) x micro_batches={self.micro_batches} would search differently: "
                f"{advice}"
            )
        if int(old["epochs"]) == self.epochs:
            return
        if state.get("phase", "search") != "search" and str(self.cfg.selection.name) != "argmax":
            raise ValueError(
                f"epochs={self.epochs}, but the search in checkpoint {self.ckpt_path} has ended "
                f"and its {self.cfg.selection.name} selection begun; resume with "
                f"epochs={old['epochs']}"
            )
        opt = self.cfg.optimizer
        lr = float(opt.lr)

        def settings(total: int, epoch: int) -> dict[str, float]:
            factor = lr_factor(
                epochs=total,
                lr=lr,
                lr_min=float(opt.lr_min),
                warmup_epochs=int(opt.get("warmup_epochs", 0) or 0),
            )
            return {"learning rate": lr * factor(epoch)}

        started = int(state["epoch"]) + (1 if int(state["step_in_epoch"]) else 0)
        check_epochs(
            old_epochs=int(old["epochs"]),
            new_epochs=self.epochs,
            started=started,
            settings=settings,
            checkpoint=self.ckpt_path,
        )

    def _checkpoint(self) -> None:
        """Every rank calls this (the RNG states of all ranks travel to rank 0); rank 0 writes."""
        rngs = D.all_gather_object(rng_state()) if self.env.distributed else None
        if self.main:
            atomic_save(
                {
                    "kind": "search",
                    "version": 1,
                    "config": OmegaConf.to_container(self.cfg, resolve=True),
                    "epoch": self.epoch,
                    "step_in_epoch": self.step_in_epoch,
                    "global_step": self.global_step,
                    "epoch_sums": dict(self._epoch_sums),
                    "supernet": self.supernet.state_dict(),
                    "strategy": self.strategy.checkpoint_state(),
                    "weight_optimizer": self.weight_optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "phase": self.phase,
                    "selector": self.selector.state_dict(),
                    "rng": rng_state(),
                    "rng_per_rank": rngs,
                    "world_size": self.env.world_size,
                },
                self.ckpt_path,
            )
        D.barrier()  # the file is complete before any rank goes on (or exits)

    def _load(self, state: dict[str, Any]) -> None:
        try:
            # the strategy first: it may reshape the supernet (DrNAS widens it to its stage's K)
            self.strategy.load_checkpoint_state(state["strategy"])
            self.supernet.load_state_dict(state["supernet"])
            self.weight_optimizer.load_state_dict(state["weight_optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
        except (RuntimeError, KeyError, ValueError) as e:
            reason = str(e).splitlines()[0]
            raise SearchError(
                f"checkpoint {self.ckpt_path} does not fit this search's supernet or strategy "
                f"({reason}); resume with the run's own config"
            ) from None
        self.epoch = int(state["epoch"])
        self.step_in_epoch = int(state["step_in_epoch"])
        self.global_step = int(state["global_step"])
        self._epoch_sums = dict(state.get("epoch_sums", {}))
        # a rank resuming at the world size of the checkpoint takes its own RNG state back;
        # at another world size, every rank takes rank 0's (only random ops such as S4's noise
        # read it: data order, augmentation and DrNAS samples have seeds of their own)
        per_rank = state.get("rng_per_rank") or [state["rng"]]
        own = len(per_rank) == self.env.world_size
        self._resume_rng = (
            (per_rank[self.env.rank] if own else state["rng"]) if self.step_in_epoch else None
        )
        self.phase = str(state.get("phase", "search"))
        if self.phase != "search":
            self.selector.load_state_dict(state["selector"])
        if int(state["config"]["epochs"]) != self.epochs and self.epoch < self.epochs:
            # more epochs: the learning rate of the next epoch is the new schedule's (the
            # checkpoint holds the old schedule's, e.g. lr_min after a finished cosine)
            self.phase = "search"
            follow_new_schedule(self.scheduler, self.epoch)

    def _apply_memory_format(self) -> None:
        """NHWC (``channels_last``) for full-width ops, NCHW for partial channels (``auto``).

        Measured on this CPU (``experiments/benchmarks/search_step.py``): NHWC makes a K=1
        supernet ~1.5x faster, but a DrNAS supernet at K=6 (ops of C/6 channels, sliced, cat
        and shuffled along the channel dimension, which NHWC stores innermost) 1.5x slower.
        Re-applied when a DrNAS stage changes K; momentum buffers follow their parameters."""
        setting = self.channels_last_setting
        wanted = self.supernet.partial_channels == 1 if setting == "auto" else bool(setting)
        if wanted == self.channels_last:
            return
        fmt = torch.channels_last if wanted else torch.contiguous_format
        self.supernet.to(memory_format=fmt)  # in place: the optimiser keeps its parameters
        for state in self.weight_optimizer.state.values():
            buf = state.get("momentum_buffer")
            if isinstance(buf, torch.Tensor) and buf.dim() == 4:
                state["momentum_buffer"] = buf.contiguous(memory_format=fmt)
        self.channels_last = wanted

    # ----------------------------------------------------------------------------- steps

    def _to_device(self, batch: list[torch.Tensor]) -> Batch:
        x, y = batch
        x = x.to(self.device, non_blocking=True)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y.to(self.device, non_blocking=True)

    def _shards(self, batch: list[torch.Tensor], global_size: int) -> Shards:
        """This rank's share of a global batch on the device, cut into ``micro_batches``."""
        x, y = self._to_device(batch)
        pieces = min(self.micro_batches, int(y.shape[0]))
        parts = zip(torch.tensor_split(x, pieces), torch.tensor_split(y, pieces))
        return Shards(tuple(parts), global_size)

    def run(self) -> SearchResult:
        if self.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            config = OmegaConf.to_yaml(self.cfg, resolve=True)
            atomic_write_text(self.run_dir / "config.yaml", config)
            print(self._start_line(), flush=True)
        try:
            with self._signals:
                while self.epoch < self.epochs:
                    self._run_epoch()
                genotype = self._select()
            if self.main and bool(self.cfg.get("figures", True)):
                self._write_figures()
        finally:
            if self.logger is not None:
                self.logger.close()
        return SearchResult(genotype, self.run_dir, self._final)

    def _start_line(self) -> str:
        keys = ["space.name", "space.C", "space.layers", "search.name", "search.order",
                "selection.name", "data.name", "data.max_items", "epochs", "batch_size",
                "seed"]  # fmt: skip
        return start_line(
            "nas-search",
            self.run_dir,
            self.cfg,
            keys,
            device=self.device,
            processes=self.env.world_size,
            resumed_at_epoch=self.epoch if self.global_step else None,
        )

    def _run_epoch(self) -> None:
        epoch = self.epoch
        lr = self.weight_optimizer.param_groups[0]["lr"]
        images_per_s = self._train_steps(
            key=epoch,
            update_arch=self.strategy.updates_arch(epoch),
            desc=f"epoch {epoch + 1}/{self.epochs}",
        )
        self.strategy.on_epoch_end(epoch)
        self._apply_memory_format()  # a DrNAS stage may have changed K
        self.scheduler.step()
        self.epoch += 1
        # batch-norm running statistics are the only state the ranks do not share (each
        # normalises its own images): rank 0's go to all, for evaluation and the checkpoint
        D.broadcast_buffers(self.supernet)
        self._check_in_sync()
        self._log_epoch(epoch, lr, images_per_s)
        self._checkpoint()

    def _check_in_sync(self) -> None:
        """Fail loudly if the ranks no longer hold the same architecture and supernet weights
        (they take identical steps from identical summed gradients, so any difference is a bug
        or a broken node, and a search that goes on would export a different genotype per rank).
        One all-reduce of the architecture parameters and one sum per weight tensor."""
        if not self.env.distributed:
            return
        with torch.no_grad():
            arch = self.strategy.arch_parameters()
            sums = torch.stack([p.double().sum() for p in self.supernet.parameters()])
            arch_spread = D.spread(arch)
            weight_spread = D.spread([sums])
        if arch_spread > 0 or weight_spread > 0:
            raise SearchError(
                f"the {self.env.world_size} processes no longer hold the same "
                f"{'architecture parameters' if arch_spread > 0 else 'supernet weights'} at "
                f"step {self.global_step} (largest difference "
                f"{max(arch_spread, weight_spread):.3g}); stopped, the last good checkpoint "
                f"{self.ckpt_path} is kept"
            )

    def _stop_wanted(self) -> bool:
        return self._stop_requested or self._signals.requested

    def _train_steps(self, *, key: int, update_arch: bool, desc: str) -> float:
        """One pass over the weight split (with architecture batches alongside), from
        ``self.step_in_epoch`` on; ``key`` fixes the order, the seeds and the augmentation.
        Returns images/s. SIGTERM: checkpoint at the next step boundary, then ``Preempted``."""
        start = self.step_in_epoch
        if start == 0:
            seed_everything(epoch_seed(self.seed, key, 99 + 1000 * self.env.rank))
            self._epoch_sums = {}
        else:
            set_rng_state(self._resume_rng)
        lr = self.weight_optimizer.param_groups[0]["lr"]
        self.supernet.train()
        train_iter = _start_epoch(self.train_loader, self.seed, key, start, 0)
        val_batches = _sampler(self.val_loader).num_batches
        val_iter = _start_epoch(self.val_loader, self.seed, key, start % val_batches, 1)
        total = start + len(self.train_loader)
        epochs_after = self.epochs - self.epoch - 1 if self.phase == "search" else 0
        bar = Progress(
            total=total,
            initial=start,
            desc=desc,
            enabled=self.main,
            log_every=int(self.cfg.log_every),
            first_step=self.global_step,
            steps_after=max(epochs_after, 0) * _sampler(self.train_loader).num_batches,
        )
        t0 = time.perf_counter()
        images = 0
        for train_batch, train_size in train_iter:
            try:
                val_batch, val_size = next(val_iter)
            except StopIteration:  # the architecture half is shorter: start it again
                val_iter = _start_epoch(
                    self.val_loader, self.seed, key + 100003 * (self.step_in_epoch + 1), 0, 1
                )
                val_batch, val_size = next(val_iter)
            tb = self._shards(train_batch, train_size)
            vb = self._shards(val_batch, val_size)
            self.strategy.begin_step(epoch_seed(self.seed, self.global_step, 5))
            local = self.strategy.step(tb, vb, update_arch=update_arch)
            # one collective per step: the metrics (shares of the global means) and SIGTERM
            names = sorted(local)
            values = torch.stack(
                [torch.as_tensor(local[k], dtype=torch.float64, device=self.device) for k in names]
                + [torch.tensor(float(self._stop_wanted()), device=self.device).double()]
            )
            summed = D.all_reduce_sum(values).tolist()
            metrics = dict(zip(names, summed[:-1]))
            stop = summed[-1] > 0
            for name, value in metrics.items():
                if not math.isfinite(value):
                    where = f"{desc}, step {self.step_in_epoch + 1}"
                    raise SearchError(
                        f"{name} became {value} at {where}; stopped, the last good checkpoint "
                        f"{self.ckpt_path} is kept"
                    )
            n = train_size
            images += n
            for name, value in metrics.items():
                self._epoch_sums[name] = self._epoch_sums.get(name, 0.0) + value * n
            self._epoch_sums["_n"] = self._epoch_sums.get("_n", 0.0) + n
            self.step_in_epoch += 1
            self.global_step += 1
            bar.update(1, images=n, loss=metrics.get("train_loss"))
            if self.global_step % self.sync_check_every == 0:
                self._check_in_sync()
            if self.logger is not None and self.global_step % int(self.cfg.log_every) == 0:
                self.logger.log("step", epoch=self.epoch, step=self.global_step, lr=lr, **metrics)
            if stop:
                bar.close()
                self._checkpoint()
                raise Preempted(self.ckpt_path, self._signals.signum or signal.SIGTERM)
        bar.close()
        self.step_in_epoch = 0
        return images / max(time.perf_counter() - t0, 1e-9)

    # ------------------------------------------- what the loop lends a fine-tuning selector

    @property
    def search_lr(self) -> float:
        return float(self.cfg.optimizer.lr)

    def val_batches(self, *, key: int, limit: int | None) -> Iterator[Batch]:
        """This rank's micro-batches of the architecture split's global batches, in an order
        fixed by ``key``, of at most ``limit`` global batches."""
        it = _start_epoch(self.val_loader, self.seed, 2 * 10**6 + key, 0, 3)
        for i, (batch, size) in enumerate(it):
            if limit is not None and i >= limit:
                break
            yield from self._shards(batch, size).parts

    def train_epoch(self, *, key: int, lr: float, update_arch: bool, desc: str) -> dict[str, float]:
        """One fine-tuning epoch at learning rate ``lr`` (a selector's tuning between decisions)."""
        for group in self.weight_optimizer.param_groups:
            group["lr"] = lr
        images_per_s = self._train_steps(key=key, update_arch=update_arch, desc=desc)
        n = self._epoch_sums.get("_n", 1.0)
        means = {k: v / n for k, v in self._epoch_sums.items() if k != "_n"}
        if self.logger is not None:
            self.logger.log(
                "tune",
                epoch=self.epoch,
                step=self.global_step,
                lr=lr,
                images_per_s=images_per_s,
                **means,
            )
        return means

    def reset_weight_optimizer(self, lr: float) -> None:
        """A fresh weight optimiser state (momentum) at learning rate ``lr``."""
        self.weight_optimizer.state.clear()
        for group in self.weight_optimizer.param_groups:
            group["lr"] = lr

    def checkpoint(self) -> None:
        self._checkpoint()

    def log(self, event: str, **values: Any) -> None:
        if self.logger is None:
            return
        self.logger.log(event, epoch=self.epoch, step=self.global_step, **values)
        if event == "pt_decision":
            self.logger.text("pt_decisions", json.dumps(values), self.global_step)

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the ranks (a selector's measurements of sharded batches)."""
        return D.all_reduce_sum(tensor)

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (a selector's decision, taken once)."""
        return D.broadcast_object(obj)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Loss and accuracy of the deterministic architecture weights on the architecture half,
        with the supernet in eval mode (as the reference ``infer``), so nothing is updated;
        each rank measures its share, the sums are all-reduced."""
        weights = self.strategy.arch_weights(sample=False)
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        it = _start_epoch(self.val_loader, self.seed, 10**6 + self.epoch, 0, 2)
        self.supernet.eval()
        with torch.random.fork_rng(devices=[]):
            for batch, _ in it:
                x, y = self._to_device(batch)
                loss, logits = self.strategy.loss((x, y), weights)
                n = int(y.shape[0])
                sums += torch.stack(
                    [
                        loss.double() * n,
                        (logits.argmax(1) == y).sum().double(),
                        loss.new_tensor(n).double(),
                    ]
                )
        self.supernet.train()
        loss_sum, correct, count = D.all_reduce_sum(sums).tolist()
        return {"eval_loss": loss_sum / count, "eval_acc": correct / count}

    def _log_epoch(self, epoch: int, lr: float, images_per_s: float) -> None:
        n = self._epoch_sums.get("_n", 1.0)
        means = {k: v / n for k, v in self._epoch_sums.items() if k != "_n"}
        if bool(self.cfg.get("eval", True)):
            means.update(self.evaluate())
        genotype = self.selector_preview()
        entry: dict[str, Any] = {
            "lr": lr,
            "images_per_s": images_per_s,
            **means,
            **self.strategy.log_state(),
        }
        bench = self._bench_entry(genotype)
        entry.update(bench)
        self._final = entry
        if self.logger is None:
            return
        self.logger.log(
            "epoch", epoch=epoch, step=self.global_step, genotype=str(genotype), **entry
        )
        self.logger.text("genotype", str(genotype), self.global_step)
        with torch.no_grad():
            weights = self.strategy.arch_weights(sample=False)
        self.logger.log(
            "arch_weights",
            epoch=epoch,
            step=self.global_step,
            **{ct: w.detach().cpu().tolist() for ct, w in weights.items()},
        )
        space = self.supernet.space
        for ct, w in weights.items():
            for edge in space.cells[ct].edges:
                for k, op in enumerate(edge.ops):
                    self.logger.tb.add_scalar(
                        f"arch/{ct}/edge{edge.index}_{edge.src}-{edge.dst}/{op}",
                        float(w[edge.index, k]),
                        self.global_step,
                    )
        nan = float("nan")
        acc = means.get("eval_acc", means.get("val_acc", nan))
        line = (
            f"epoch {epoch + 1}/{self.epochs}  lr {lr:.4g}  "
            f"train_loss {means.get('train_loss', nan):.4f}  "
            f"train_acc {means.get('train_acc', nan):.4f}  val_acc {acc:.4f}  "
            f"{images_per_s:.1f} img/s"
        )
        if bench:
            line += "  " + "  ".join(f"{k} {v:.2f}" for k, v in bench.items() if k.endswith("test"))
        print(line, flush=True)

    def _write_figures(self) -> None:
        """Cell diagrams and weight plots into ``figures/`` and TensorBoard (never fatal)."""
        assert self.logger is not None
        try:
            from nas.analysis import write_run_figures

            write_run_figures(self.run_dir, self.logger.tb)
        except Exception as e:  # a plot must never cost a finished search
            print(f"nas-search: warning: figures skipped ({e})", file=sys.stderr)

    def selector_preview(self) -> AnyGenotype:
        """The argmax genotype of the current weights, logged every epoch whatever the selector."""
        from nas.selection.argmax import Argmax

        return Argmax().select(self.strategy)

    def _bench_entry(self, genotype: AnyGenotype) -> dict[str, float]:
        if not isinstance(genotype, NB201Genotype):
            return {}
        try:
            from nas.bench import search_log_entry
        except ImportError:  # the benchmark table is optional for a search
            return {}
        entry: dict[str, float] = search_log_entry(genotype)
        return entry

    def _select(self) -> AnyGenotype:
        self.phase = "select"
        self._check_in_sync()
        genotype = self.selector.select(
            self.strategy, _batches(self.val_loader, self), context=self
        )
        genotype = D.broadcast_object(genotype)  # one genotype, rank 0's, whatever happened
        self.phase = "done"
        self._checkpoint()
        if self.main:
            record: dict[str, Any] = {
                "space": str(self.cfg.space.name),
                "genotype": genotype.to_json(),
                "text": str(genotype),
                "selector": str(self.cfg.selection.name),
                "strategy": str(self.cfg.search.name),
                "world_size": self.env.world_size,
            }
            if isinstance(genotype, NB201Genotype):
                record["arch"] = str(genotype)
                record["index"] = arch_to_index(genotype)
            atomic_write_text(self.run_dir / "genotype.json", json.dumps(record, indent=2) + "\n")
        return genotype

    _final: dict[str, float] = {}
    _resume_rng: Any = None


def _from_run(cfg: DictConfig) -> tuple[DictConfig, dict[str, Any]]:
    """The config and final checkpoint of a finished search, to select on its supernet.

    The finished run's own config is kept (space, strategy, data, seed, schedule); the
    current ``selection`` replaces its selector."""
    folder = Path(str(cfg.from_run)).expanduser()
    if not (folder / "config.yaml").is_file():
        raise SearchError(
            f"from_run={folder} holds no config.yaml; expected the folder of a finished "
            "nas-search run"
        )
    try:
        state = load_checkpoint(folder / "checkpoints" / "last.pt", kind="search")
    except CheckpointError as e:
        raise SearchError(str(e)) from None
    base = OmegaConf.load(folder / "config.yaml")
    assert isinstance(base, DictConfig)
    if int(state["epoch"]) < int(base.epochs):
        raise SearchError(
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


def _batches(loader: DataLoader[Any], run: SearchRun) -> Iterator[Batch]:
    """This rank's micro-batches of the architecture split (``val_data`` of a selector)."""
    it = _start_epoch(loader, run.seed, 2 * 10**6, 0, 3)
    for batch, size in it:
        yield from run._shards(batch, size).parts


def _without_name(node: DictConfig) -> DictConfig:
    """A plug-in config without its registry key ``name`` (not a constructor argument)."""
    out = OmegaConf.create({k: v for k, v in node.items() if k != "name"})
    assert isinstance(out, DictConfig)
    return out


def run_search(cfg: DictConfig, run_dir: str | Path) -> SearchResult:
    """Run (or, with ``resume=true``, continue) the search that ``cfg`` describes in ``run_dir``."""
    return SearchRun(cfg, run_dir).run()
