"""The search run: epochs of bi-level steps, logging, checkpoints, resume, then selection.

The pipeline's search stage (``nas.pipeline``), above the strategies (``nas.strategies``) and the
selectors (``nas.selection``), which it drives: the only place that iterates over the search
data. It follows the reference ``train_search.py`` of DARTS (Liu et al., ICLR 2019): the
training set is split by index into a weight half and an architecture half
(``nas.strategies.data``); each step takes an architecture step on an architecture batch and a
weight step on a weight batch (SGD with momentum, weight decay, gradient clipping, a cosine
learning rate per epoch); at the end the selector derives the genotype. ``run_search``, the
top function, adds what is not the loop's: the NB201 benchmark's accuracies of every epoch's
cell (``nas.bench``) and the figures of the finished run (``nas.analysis``).

The run skeleton (``nas.run.skeleton``) gives the frame: resume guard, checkpointer, stop flag,
progress. Reproducibility: every epoch reseeds Python, NumPy and torch from (seed, epoch); its
data order comes from the same pair, each image's augmentation from a seed of its own position
in that order, and each step's random draws (DrNAS's samples) from (seed, global step), so an
epoch is a pure function of the state at its start (the streams: ``nas.run.seeds``). A
checkpoint is written atomically at the end of every epoch; SIGTERM (how clusters preempt jobs)
writes one at the next step boundary, with the position in the epoch and the RNG states, and
stops. Either way ``resume=true`` continues to exactly the architecture an uninterrupted run
reaches.

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
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from nas import distributed as D
from nas.analysis import write_run_figures
from nas.bench import is_benchmark_cell, search_log_entry
from nas.choices import plugin_name
from nas.data import dataset_info
from nas.pipeline.resume import check_resumable, from_run
from nas.pipeline.selection_context import RunSelectionContext
from nas.plugins import PluginError, build_components, build_selector, build_strategy
from nas.progress import start_line
from nas.run.checkpoint import seed_everything
from nas.run.config import validate_search_config
from nas.run.disk import atomic_write_text
from nas.run.resume import follow_new_schedule
from nas.run.schedules import search_lr_factor
from nas.run.seeds import (
    ARCH_DRAWS,
    ARCH_RESTART_STRIDE,
    ARCH_SPLIT,
    EPOCH_RNG,
    EVAL_EPOCH_BASE,
    EVAL_SPLIT,
    RANK_STRIDE,
    STEP_DRAWS,
    WEIGHT_SPLIT,
    stream_seed,
)
from nas.run.signals import Preempted
from nas.run.skeleton import Run, to_device
from nas.selection.base import Selector, derived_genotype
from nas.strategies.base import Batch, SearchContext, SearchStrategy, Shards
from nas.strategies.data import epoch_loader, epoch_sampler, search_data, start_epoch
from nas.supernet import Supernet, build_supernet, compile_supernet
from nas.supernet.batched import check_batchable
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype

__all__ = ["Preempted", "SearchError", "SearchResult", "SearchRun", "run_search"]

# What the entry point lends the loop: benchmark values of a cell, logged every epoch, and what
# to do with the finished run folder (its figures), given the folder and TensorBoard's writer.
Describe = Callable[[AnyGenotype], dict[str, float]]
OnEnd = Callable[[Path, Any], None]


class SearchError(ValueError):
    """A search that cannot go on (bad configuration, non-finite loss, unusable run folder)."""


@dataclass
class SearchResult:
    genotype: AnyGenotype
    run_dir: Path
    final_metrics: dict[str, float]


def _channels_last_setting(value: Any) -> bool | str:
    if value in (True, False, "auto"):
        return value
    raise SearchError(f"channels_last must be true, false or auto, got {value!r}")


def validate_config(cfg: DictConfig) -> None:
    """Check the top-level values a search needs; one-line errors naming key and value
    (``nas.run.config``, where the command line checks them before importing torch)."""
    validate_search_config(cfg, SearchError)


class SearchRun(Run):
    """One search in one run folder. ``run()`` returns the selected genotype.

    ``describe`` (a genotype's benchmark values, logged with every epoch) and ``on_end`` (what
    to do with the finished run folder) come from the entry point, ``run_search``."""

    program = "nas-search"
    memory_keys = ("batch_size", "micro_batches", "space.partial_channels", "amp")
    kind = "search"
    error = SearchError
    holds = "search"
    fits = "this search's supernet or strategy"
    broadcast_errors: tuple[type[Exception], ...] = (SearchError,)

    def __init__(
        self,
        cfg: DictConfig,
        run_dir: str | Path,
        *,
        describe: Describe | None = None,
        on_end: OnEnd | None = None,
    ) -> None:
        self.describe = describe
        self.on_end = on_end
        self.locate(cfg, run_dir)
        # The process group first: from here on every rank reaches the same decisions (rank 0
        # reads the run folder and hands what it read, or its error, to the others).
        D.init_distributed(self.env, self.device)
        from_state = None
        if cfg.get("from_run"):
            cfg, from_state = self.main_then_broadcast(lambda: _selection_source(cfg))
        validate_config(cfg)
        self.configure(cfg)
        self._read_settings()
        # the selector before the resume check, which asks it (and its settings are checked
        # before any work)
        self.selector = self._build_selector()
        resume_state = self.main_then_broadcast(self._resume_state)
        if resume_state is None and from_state is not None:
            resume_state = from_state  # select on a finished search's supernet, not search again
        seed_everything(self.seed)

        self.strategy = self._build_strategy()
        self._check_selector_reads_what_the_strategy_learns()
        self._check_arch_batch_is_used()
        schedule_epochs = self.strategy.total_epochs
        if schedule_epochs is not None and schedule_epochs != self.epochs:
            raise SearchError(
                f"epochs={self.epochs}, but the stages of search.stages add up to "
                f"{schedule_epochs} epochs; set epochs={schedule_epochs} or change the stages"
            )
        info = self._build_data()
        self.supernet = self._build_supernet(info)
        self._build_optimisers()

        self.phase = "search"  # then "select", then "done"
        self.stopped_early = False  # a component ended the search before its epochs
        self._epoch_sums: dict[str, float] = {}
        self._final: dict[str, float] = {}
        self._register_state()
        if resume_state is not None:
            if resume_state is not from_state:
                self._check_draws_continue(resume_state)
            self._load(resume_state)
        if self.epochs > 0:  # the components' schedules of the epoch the run is in (or ended with)
            self.strategy.begin_epoch(min(self.epoch, self.epochs - 1))
        self._apply_memory_format()
        self.start_logger(resumed=resume_state is not None)

    # ------------------------------------------------------------------------- building

    @property
    def schedule_index(self) -> int:
        """The position of the weight schedule (``LambdaLR``'s index): the epoch, or with
        ``optimizer.lr_per_step`` the step of the search."""
        if self.lr_per_step:
            return self.epoch * self.steps_per_epoch + self.step_in_epoch
        return self.epoch

    def _check_draws_continue(self, state: dict[str, Any]) -> None:
        """A search resumed on another number of processes equals the uninterrupted one only
        where its steps draw no random numbers from the global generators, which every
        process seeds from its own stream (S4's ``noise``, dropout): refused where they do,
        until its search has ended."""
        old_world = int(state.get("world_size", 1))
        if old_world == self.env.world_size or state.get("phase") == "done":
            return
        drawing = next(
            (
                name
                for name, m in self.supernet.named_modules()
                if getattr(m, "draws_random_numbers", False)
                or (isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0)
            ),
            None,
        )
        if drawing is not None:
            raise SearchError(
                f"checkpoint {self.ckpt_path} was written by {old_world} process(es), and this "
                f"supernet draws random numbers in its steps ({drawing}: "
                f"{type(self.supernet.get_submodule(drawing)).__name__}), each process from its "
                f"own stream, so {self.env.world_size} process(es) would continue it "
                f"differently; resume on {old_world} process(es)"
            )

    def _check_arch_batch_is_used(self) -> None:
        """``arch_batch=random`` draws a batch for every architecture step: refused where no
        step reads one (a single-level strategy, ``fix_alpha``), rather than drawn and
        dropped."""
        if self.arch_batch == "sequential":
            return
        strategy = self.strategy
        why = (
            f"{type(strategy).__name__} is single-level (weights and architecture both step on "
            "the training batch)"
            if strategy.single_level
            else "no architecture step runs (search.fix_alpha, or a strategy without one)"
            if strategy.fix_alpha
            else None
        )
        if why:
            raise SearchError(
                f"arch_batch={self.arch_batch} draws the architecture steps' batches, but {why}; "
                "leave arch_batch=sequential"
            )

    def _read_settings(self) -> None:
        cfg = self.cfg
        self.channels_last_setting = _channels_last_setting(cfg.get("channels_last", "auto"))
        self.compile = cfg.get("compile", False)
        if not isinstance(self.compile, bool) and self.compile != "graphs":
            raise SearchError(f"compile must be true, false or graphs, got {self.compile!r}")
        if self.compile == "graphs" and self.device.type != "cuda":
            raise SearchError(
                f"compile=graphs records CUDA graphs and needs a CUDA device, got device="
                f"{self.device}; use compile=true here"
            )
        self.micro_batches = int(cfg.get("micro_batches") or 1)
        self.sync_check_every = int(cfg.get("sync_check_every") or 50)
        # the architecture batch of a step: the next of the split's shuffled epoch
        # (sequential), or a fresh random draw (random: DrNAS's and PC-DARTS's next(iter(...)))
        self.arch_batch = str(cfg.get("arch_batch", "sequential"))
        self.pieces = self.env.world_size * self.micro_batches
        if int(cfg.batch_size) < self.pieces:
            raise SearchError(
                f"batch_size={cfg.batch_size} is the global batch; {self.env.world_size} "
                f"process(es) x micro_batches={self.micro_batches} need at least {self.pieces} "
                "images"
            )

    def _build_data(self) -> dict[str, Any]:
        """The weight and architecture splits' loaders; returns the data set's facts."""
        try:
            info = dataset_info(str(self.cfg.data.name), self.cfg.data)
            weight_set, arch_set = search_data(self.cfg.data)
        except (ValueError, FileNotFoundError) as e:
            raise SearchError(str(e)) from None
        self.train_loader = epoch_loader(weight_set, self.cfg, WEIGHT_SPLIT, self.env, self.pieces)
        self.val_loader = epoch_loader(arch_set, self.cfg, ARCH_SPLIT, self.env, self.pieces)
        self.arch_draw_loader = None  # arch_batch=random: one draw per weight batch
        if self.arch_batch == "random":
            steps = epoch_sampler(self.train_loader).num_batches
            try:
                self.arch_draw_loader = epoch_loader(
                    arch_set, self.cfg, ARCH_DRAWS, self.env, self.pieces, random_draws=steps
                )
            except ValueError as e:
                raise SearchError(str(e)) from None
        return info

    def _build_supernet(self, info: dict[str, Any]) -> Supernet:
        cfg = self.cfg
        space_k = int(cfg.space.get("partial_channels", 1))
        k = self.strategy.initial_partial_channels()
        if k is not None and space_k not in (1, k):  # 1, the spaces' default: not set
            raise SearchError(
                f"space.partial_channels={space_k}, but the strategy starts the supernet at "
                f"K={k} (a component's partial_channels, or search.stages[0]); set one of the "
                f"two (space.partial_channels=1 leaves K to the strategy)"
            )
        # the component that fixes K, named when the supernet refuses it
        setter = next(
            (c.name for c in self.strategy.component_list() if c.partial_channels is not None),
            None,
        )
        k = k or space_k
        try:
            supernet: Supernet = build_supernet(
                str(cfg.space.name),
                C=int(cfg.space.C),
                layers=int(cfg.space.layers),
                num_classes=int(info["num_classes"]),
                partial_channels=k,
                stem="imagenet" if int(info["image_size"]) > 64 else "cifar",
                # the DARTS-style supernet's layout options (GDAS's head); None: the family's
                lastact=cfg.space.get("lastact"),
                pool_bn=cfg.space.get("pool_bn"),
            )
            # the components' supernet options (DARTS-'s auxiliary skip ops, PC-DARTS's edge
            # normalisation), before the weight optimiser collects the parameters
            self.strategy.prepare_supernet(supernet)
            if getattr(self.selector, "batch_candidates", False):
                # what the components made of the supernet (weight entanglement) refused
                # before the search, not when the selection starts after it
                check_batchable(supernet)
            supernet = supernet.to(self.device)
        except ValueError as e:
            prefix = f"component {setter}: " if setter and "partial channels" in str(e) else ""
            raise SearchError(prefix + str(e)) from None
        self.channels_last = False  # the format the supernet is in; see _apply_memory_format
        if self.compile:
            compile_supernet(supernet, cuda_graphs=self.compile == "graphs")
        return supernet

    def _build_optimisers(self) -> None:
        """The weight optimiser and its schedule; the strategy attaches to them (and builds its
        architecture parameters and their optimiser)."""
        opt_cfg = self.cfg.optimizer
        self.weight_optimizer = torch.optim.SGD(
            self.supernet.parameters(),
            lr=float(opt_cfg.lr),
            momentum=float(opt_cfg.momentum),
            weight_decay=float(opt_cfg.weight_decay),
            nesterov=bool(opt_cfg.get("nesterov", False)),
            foreach=True,
        )
        stage_lr = str(opt_cfg.get("stage_lr", "cosine"))
        warmup = int(opt_cfg.get("warmup_epochs", 0) or 0)
        if stage_lr == "reference" and not self.strategy.stage_start_epochs and not warmup:
            raise SearchError(
                "optimizer.stage_lr=reference is the DrNAS code's rate across progressive "
                "stages and after a warm-up, and this search has neither (search.stages, "
                "optimizer.warmup_epochs), where it is the cosine; leave optimizer.stage_lr=cosine"
            )
        self.lr_per_step = bool(opt_cfg.get("lr_per_step", False))
        self.steps_per_epoch = epoch_sampler(self.train_loader).num_batches
        try:
            factor = search_lr_factor(
                epochs=self.epochs,
                lr=float(opt_cfg.lr),
                lr_min=float(opt_cfg.lr_min),
                warmup_epochs=warmup,
                stage_lr=stage_lr,
                stage_starts=self.strategy.stage_start_epochs,
                warmup_lr=_optional_float(opt_cfg.get("warmup_lr")),
                steps_per_epoch=self.steps_per_epoch if self.lr_per_step else None,
            )
        except ValueError as e:
            raise SearchError(str(e)) from None
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.weight_optimizer, factor)
        try:
            self.strategy.attach(
                SearchContext(
                    supernet=self.supernet,
                    weight_optimizer=self.weight_optimizer,
                    grad_clip=None if opt_cfg.grad_clip is None else float(opt_cfg.grad_clip),
                    label_smoothing=float(self.cfg.get("label_smoothing", 0.0)),
                    autocast_dtype=self.amp_dtype,
                    epochs=self.epochs,
                    steps_per_epoch=epoch_sampler(self.train_loader).num_batches,
                ),
                generator=torch.Generator().manual_seed(self.seed),
            )
        except ValueError as e:
            raise SearchError(str(e)) from None
        self.strategy.to(self.device)

    def _build_strategy(self) -> SearchStrategy:
        """The strategy with its components: the ``components`` group's, then the hardware
        cost of the ``cost`` group (``nas.strategies.components.hardware_cost``)."""
        try:
            strategy = build_strategy(self.cfg)
            components = build_components(self.cfg)
        except PluginError as e:
            raise SearchError(str(e)) from e.__cause__
        try:
            if self.cfg.get("cost") is not None:  # a hardware-cost term of the architecture loss
                from nas.strategies.components.hardware_cost import HardwareCost

                components.append(HardwareCost.from_config(self.cfg.cost, strategy))
            strategy.add_components(components)
        except (ValueError, FileNotFoundError) as e:
            raise SearchError(str(e)) from None
        return strategy

    def _check_selector_reads_what_the_strategy_learns(self) -> None:
        """A selector that derives from the architecture weights (``selects_from_weights``) on
        a strategy that learns none (no ``arch_params``: uniform weights) would return the
        first op of every edge: refused in one line, naming the selectors that measure the
        supernet instead."""
        if not type(self.selector).selects_from_weights or self.strategy.has("arch_params"):
            return
        from hydra.utils import get_class

        from nas.plugins import available, plugin_config

        measuring = []
        for name in available("selection"):
            try:
                target = str(plugin_config("selection", name).get("_target_"))
                if not getattr(get_class(target), "selects_from_weights", True):
                    measuring.append(name)
            except Exception:  # a selector that cannot be imported is simply not offered
                continue
        raise SearchError(
            f"selection={plugin_name(self.cfg, 'selection')} derives the genotype from the "
            f"architecture weights, and search={plugin_name(self.cfg, 'search')} learns none "
            f"({self.strategy.mixing}); choose a selector that measures the supernet: "
            f"selection={' | '.join(measuring)}"
        )

    def _build_selector(self) -> Selector:
        try:
            return build_selector(self.cfg)
        except PluginError as e:
            raise SearchError(str(e)) from e.__cause__

    # ----------------------------------------------------------------------- checkpoints

    def _resume_state(self) -> dict[str, Any] | None:
        state = self.load_resume_checkpoint()
        if state is None:
            return None
        space = state["config"]["space"]["name"]
        if space != str(self.cfg.space.name):
            raise SearchError(
                f"checkpoint {self.ckpt_path} is a search of space {space!r}, but space="
                f"{self.cfg.space.name} was asked for; resume with the run's own config"
            )
        try:
            check_resumable(self, state)
        except ValueError as e:
            raise SearchError(str(e)) from None
        return state

    def _register_state(self) -> None:
        """What a checkpoint holds besides the position; loaded in this order (the strategy
        first: it may reshape the supernet, as DrNAS widens it to its stage's K)."""
        strategy = self.strategy
        ckpt = self.checkpointer
        ckpt.register(
            "strategy", save=strategy.checkpoint_state, load=strategy.load_checkpoint_state
        )
        ckpt.register("supernet", self.supernet)
        ckpt.register("weight_optimizer", self.weight_optimizer)
        ckpt.register("scheduler", self.scheduler)
        ckpt.register("selector", self.selector)

    def _checkpoint(self) -> None:
        """Every rank calls this (the RNG states of all ranks travel to rank 0); rank 0 writes."""
        self.checkpointer.save(
            {
                **self.counters(),
                "epoch_sums": dict(self._epoch_sums),
                "phase": self.phase,
                "stopped_early": self.stopped_early,
            }
        )

    def _load(self, state: dict[str, Any]) -> None:
        phase = str(state.get("phase", "search"))
        # the selector's progress only once a selection has begun (a finished search's
        # checkpoint, from_run=, starts a fresh selection)
        self.checkpointer.load(state, skip=("selector",) if phase == "search" else ())
        self.load_counters(state)
        self._epoch_sums = dict(state.get("epoch_sums", {}))
        self.phase = phase
        if state.get("stopped_early"):  # a component ended the search at this epoch
            self.stopped_early = True
            self.epochs = self.epoch
        if int(state["config"]["epochs"]) != self.epochs and self.epoch < self.epochs:
            # more epochs: the learning rate of the next epoch is the new schedule's (the
            # checkpoint holds the old schedule's, e.g. lr_min after a finished cosine)
            self.phase = "search"
            follow_new_schedule(self.scheduler, self.schedule_index)

    def _apply_memory_format(self) -> None:
        """NHWC (``channels_last``) unless ``channels_last=false`` (``auto``: NHWC).

        Measured on this CPU (``experiments/benchmarks/search_step.py``): NHWC makes a K=1
        supernet ~1.5x faster; with partial channels (K > 1) it is ~1.4x faster too since the
        partial-channel edge writes its bypass and shuffle in place and the narrow batch norms
        run in NCHW (``search_spaces.ops.BatchNorm2d``). Re-applied when a DrNAS stage changes
        K (widened ops are built NCHW); momentum buffers follow their parameters."""
        setting = self.channels_last_setting
        wanted = setting == "auto" or bool(setting)
        # no early return: a DrNAS stage's widened ops come back NCHW (index_select), so the
        # supernet and its momentum buffers are converted again (a no-op for tensors already
        # in the format)
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
        return to_device(x, y, self.device, channels_last=self.channels_last)

    def _shards(self, batch: list[torch.Tensor], global_size: int) -> Shards:
        """This rank's share of a global batch on the device, cut into ``micro_batches``."""
        x, y = self._to_device(batch)
        pieces = min(self.micro_batches, int(y.shape[0]))
        parts = zip(torch.tensor_split(x, pieces), torch.tensor_split(y, pieces))
        return Shards(tuple(parts), global_size)

    def start_line(self) -> str:
        keys = ["space.name", "space.C", "space.layers", "search.order", "data.name",
                "data.max_items", "epochs", "batch_size", "seed"]  # fmt: skip
        return start_line(
            "nas-search",
            self.run_dir,
            self.cfg,
            keys,
            search=plugin_name(self.cfg, "search"),
            selection=plugin_name(self.cfg, "selection"),
            components="[" + ",".join(self.cfg.get("components") or {}) + "]",
            cost=self.cfg.cost.metric if self.cfg.get("cost") else "none",
            device=self.device,
            processes=self.env.world_size,
            resumed_at_epoch=self.epoch if self.global_step else None,
        )

    def finish(self) -> SearchResult:
        """Select, then lend the finished run folder to the entry point's ``on_end``."""
        genotype = self._select()
        if self.main and self.on_end is not None:
            assert self.logger is not None
            self.on_end(self.run_dir, self.logger.tb)
        return SearchResult(genotype, self.run_dir, self._final)

    def run(self) -> SearchResult:
        result: SearchResult = super().run()
        return result

    def run_epoch(self) -> None:
        epoch = self.epoch
        lr = self.weight_optimizer.param_groups[0]["lr"]
        self.strategy.begin_epoch(epoch)  # the components' schedules (epsilon, beta, lambda)
        images_per_s = self._train_steps(
            key=epoch,
            update_arch=self.strategy.updates_arch(epoch)
            and self.strategy.components_update_arch(epoch),
            desc=f"epoch {epoch + 1}/{self.epochs}",
        )
        self.strategy.on_epoch_end(epoch)
        stop = self.strategy.stop_reason(epoch)  # a component's early stopping (skip_stop)
        self._apply_memory_format()  # a DrNAS stage may have changed K
        if not self.lr_per_step:
            self.scheduler.step()
        self.epoch += 1
        # batch-norm running statistics are the only state the ranks do not share (each
        # normalises its own images): rank 0's go to all, for evaluation and the checkpoint
        D.broadcast_buffers(self.supernet)
        self._check_in_sync()
        self._log_epoch(epoch, lr, images_per_s)
        if stop is not None and self.epoch < self.epochs:
            self.stopped_early = True
            self.epochs = self.epoch  # the loop ends here; selection follows
            if self.main:
                print(f"{self.program}: the search stops after epoch {epoch + 1}: {stop}",
                      flush=True)  # fmt: skip
            if self.logger is not None:
                self.logger.log("early_stop", epoch=epoch, step=self.global_step, reason=stop)
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

    def _train_steps(self, *, key: int, update_arch: bool, desc: str) -> float:
        """One pass over the weight split (with architecture batches alongside), from
        ``self.step_in_epoch`` on; ``key`` fixes the order, the seeds and the augmentation.
        Returns images/s. SIGTERM: checkpoint at the next step boundary, then ``Preempted``."""
        start = self.step_in_epoch
        rank_stream = EPOCH_RNG + RANK_STRIDE * self.env.rank
        if self.start_rng(lambda: stream_seed(self.seed, key, rank_stream)):
            self._epoch_sums = {}
        lr = self.weight_optimizer.param_groups[0]["lr"]
        self.supernet.train()
        train_iter = start_epoch(self.train_loader, self.seed, key, start, WEIGHT_SPLIT)
        val_iter = self._arch_batches(key, start)
        total = start + len(self.train_loader)
        epochs_after = self.epochs - self.epoch - 1 if self.phase == "search" else 0
        bar = self.progress(
            total=total,
            desc=desc,
            steps_after=max(epochs_after, 0) * epoch_sampler(self.train_loader).num_batches,
        )
        t0 = time.perf_counter()
        images = 0
        for train_batch, train_size in train_iter:
            try:
                val_batch, val_size = next(val_iter)
            except StopIteration:  # the architecture half is shorter: start it again
                restart = key + ARCH_RESTART_STRIDE * (self.step_in_epoch + 1)
                val_iter = start_epoch(self.val_loader, self.seed, restart, 0, ARCH_SPLIT)
                val_batch, val_size = next(val_iter)
            tb = self._shards(train_batch, train_size)
            vb = self._shards(val_batch, val_size)
            self.strategy.begin_step(stream_seed(self.seed, self.global_step, STEP_DRAWS))
            lr = self.weight_optimizer.param_groups[0]["lr"]  # lr_per_step: this step's
            local = self.strategy.step(tb, vb, update_arch=update_arch)
            if self.lr_per_step and self.phase == "search":
                self.scheduler.step()  # the next step's rate (a selection's tuning keeps it)
            # one collective per step: the metrics (shares of the global means) and the stop
            names = sorted(local)
            values = torch.stack(
                [torch.as_tensor(local[k], dtype=torch.float64, device=self.device) for k in names]
            )
            summed, stop = self.stop.sum_with_stop(values)
            metrics = dict(zip(names, summed))
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
                raise self.stop.preempted(self.ckpt_path)
        bar.close()
        self.step_in_epoch = 0
        return images / max(time.perf_counter() - t0, 1e-9)

    def _arch_batches(self, key: int, start: int) -> Iterator[tuple[Any, int]]:
        """The architecture batches of the pass ``key`` from its step ``start`` on: random
        draws (``arch_batch=random``), or the split's epoch in order, restarted with a new key
        where it ends before the weight split (as ``_train_steps`` restarts it, so that a pass
        resumed past a restart reads the batches the uninterrupted pass read)."""
        if self.arch_draw_loader is not None:
            return start_epoch(self.arch_draw_loader, self.seed, key, start, ARCH_DRAWS)
        val_batches = epoch_sampler(self.val_loader).num_batches
        restarts, position = divmod(start, val_batches)
        if restarts:  # _train_steps restarted the split at step restarts * val_batches
            key += ARCH_RESTART_STRIDE * (restarts * val_batches + 1)
        return start_epoch(self.val_loader, self.seed, key, position, ARCH_SPLIT)

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Loss and accuracy of the deterministic architecture weights on the architecture half,
        with the supernet in eval mode (as the reference ``infer``), so nothing is updated;
        each rank measures its share, the sums are all-reduced."""
        weights = self.strategy.arch_weights(sample=False)
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)
        it = start_epoch(self.val_loader, self.seed, EVAL_EPOCH_BASE + self.epoch, 0, EVAL_SPLIT)
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
            **self.strategy.component_log_state(),
        }
        bench = self.describe(genotype) if self.describe is not None else {}
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

    def selector_preview(self) -> AnyGenotype:
        """The genotype the current weights rank highest, logged every epoch whatever the
        selector (``nas.selection.base.derived_genotype``)."""
        return derived_genotype(self.strategy)

    def _select(self) -> AnyGenotype:
        self.phase = "select"
        self._check_in_sync()
        context = RunSelectionContext(self)
        genotype = self.selector.select(
            self.strategy, context.val_batches(key=0, limit=None), context=context
        )
        genotype = D.broadcast_object(genotype)  # one genotype, rank 0's, whatever happened
        self.phase = "done"
        self._checkpoint()
        if self.main:
            record: dict[str, Any] = {
                "space": str(self.cfg.space.name),
                "genotype": genotype.to_json(),
                "text": str(genotype),
                "selector": plugin_name(self.cfg, "selection"),
                "strategy": plugin_name(self.cfg, "search"),
                "world_size": self.env.world_size,
            }
            family = family_of(genotype)
            if family.num_indexed:  # a published network by number: its text and its index
                record["arch"] = str(genotype)
                record["index"] = family.index_of(genotype)
            atomic_write_text(self.run_dir / "genotype.json", json.dumps(record, indent=2) + "\n")
        return genotype


def _selection_source(cfg: DictConfig) -> tuple[DictConfig, dict[str, Any]]:
    try:
        return from_run(cfg)
    except ValueError as e:
        raise SearchError(str(e)) from None


def nb201_accuracies(genotype: AnyGenotype) -> dict[str, float]:
    """The NB201 benchmark's accuracies of an NB201 cell (nothing for other spaces)."""
    if not is_benchmark_cell(genotype):
        return {}
    entry: dict[str, float] = search_log_entry(genotype)
    return entry


def write_figures(run_dir: Path, tb: Any) -> None:
    """Cell diagrams and weight plots into ``figures/`` and TensorBoard (never fatal)."""
    try:
        write_run_figures(run_dir, tb)
    except Exception as e:  # a plot must never cost a finished search
        print(f"nas-search: warning: figures skipped ({e})", file=sys.stderr)


def run_search(cfg: DictConfig, run_dir: str | Path) -> SearchResult:
    """Run (or, with ``resume=true``, continue) the search that ``cfg`` describes in ``run_dir``:
    the search run, with the NB201 benchmark's accuracies logged every epoch and, unless
    ``figures=false``, the figures of the finished run."""
    on_end = write_figures if bool(cfg.get("figures", True)) else None
    return SearchRun(cfg, run_dir, describe=nb201_accuracies, on_end=on_end).run()


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
