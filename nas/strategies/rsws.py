"""RS-WS: random search with weight sharing, the supernet-training half.

Third stage of the pipeline (``nas.strategies``). Li & Talwalkar, "Random Search and
Reproducibility for Neural Architecture Search", UAI 2019 (liamcli/randomNAS_release,
``searchers/random_weight_share.py:72-79``, ``benchmarks/cnn/darts/darts_wrapper_discrete.py``):
every iteration draws an architecture uniformly at random and takes one SGD step on a training
batch with it; there are no architecture parameters and no architecture steps.

* A DARTS-style space (``sample_arch``, reference ``darts_wrapper_discrete.py:258-272``): for
  each intermediate node, 2 distinct inputs uniformly from the earlier nodes and, for each, an
  op uniformly from the edge's ops, ``none`` included; normal and reduction cells
  independently. NB201 (AutoDL ``search_model_random.py:75-95``): one uniform op per edge.
* The mixing weights are 1 at each picked (edge, op) and 0 elsewhere, and the supernet runs
  only the picked ops, as AutoDL's NB201 version does, which is what makes a step cost about
  one op per edge. The DARTS-space reference's network (``model_search.Network(...,
  discrete=True)``) is not in randomNAS_release; ``experiments/fidelity/rsws.py`` compares its
  sampling, weights, weight step and scoring with our supernet standing in for that network.
* ``grad_clip`` (default 0.25, ``darts_wrapper_discrete.py:169-181``) replaces the run's
  ``optimizer.grad_clip`` (DARTS: 5); null keeps the run's.

Every draw comes from the step's seeded generator (``nas.strategies.sampling``). The deterministic
weights (evaluation, ``selection=argmax``/``pt``) are uniform over each edge's ops: RS-WS has
no preference to derive; its selection is the selector ``rsws`` (``nas.selection.rsws``), which
scores random architectures on the architecture split.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from nas.strategies.base import Batch, SearchContext, Shards
from nas.strategies.sampling import SamplingStrategy
from nas.supernet import ArchWeights, Supernet
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype
from search_spaces.space import Space

# cell type -> the picked (edge index, op index) pairs, in node order
Arch = dict[str, list[tuple[int, int]]]


def sample_arch(supernet: Supernet, generator: torch.Generator) -> Arch:
    """A uniformly random architecture of the supernet's space (unmasked ops only)."""
    arch: Arch = {}
    for ct, cell in supernet.space.cells.items():
        mask = supernet.op_mask(ct).cpu().tolist()
        picks: list[tuple[int, int]] = []
        for node in cell.intermediate_nodes:
            edges = sorted(cell.edges_into(node), key=lambda e: e.src)
            if cell.inputs_per_node is not None:
                order = torch.randperm(len(edges), generator=generator)
                edges = [edges[int(i)] for i in order[: cell.inputs_per_node]]
            for e in edges:
                allowed = [k for k in range(len(e.ops)) if mask[e.index][k]]
                k = allowed[int(torch.randint(len(allowed), (1,), generator=generator))]
                picks.append((e.index, k))
        arch[ct] = picks
    return arch


def arch_weights_of(arch: Arch, shapes: dict[str, tuple[int, int]], device: Any) -> ArchWeights:
    """One-hot mixing weights: 1 at each picked (edge, op), 0 elsewhere."""
    out = {}
    for ct, picks in arch.items():
        w = torch.zeros(shapes[ct])
        for e, k in picks:
            w[e, k] = 1.0
        out[ct] = w.to(device)
    return out


def genotype_of(space: Space, arch: Arch) -> AnyGenotype:
    """The genotype of a sampled architecture (``none`` kept where it was drawn, as the
    reference's discrete architectures)."""
    edges = {}
    for ct, picks in arch.items():
        cell_edges = space.cells[ct].edges
        edges[ct] = [(cell_edges[e].ops[k], cell_edges[e].src, cell_edges[e].dst) for e, k in picks]
    return family_of(space).genotype(space, edges)


# optimizer.grad_clip of configs/nas_search.yaml, which search.grad_clip replaces
RUN_GRAD_CLIP = 5.0


class RSWS(SamplingStrategy):
    """Supernet training on uniformly sampled architectures; no architecture parameters."""

    name = "rsws"
    mixing = "uniform one-hot draws, with no architecture parameters"
    # only the weight step, on the drawn one-hot weights
    capabilities = frozenset({"perturb"})

    def __init__(self, *, grad_clip: float | None = 0.25) -> None:
        # the base class's architecture optimiser settings are unused: there is nothing to train
        super().__init__(arch_lr=1.0, arch_betas=(0.0, 0.0), arch_weight_decay=0.0)
        if grad_clip is not None and (
            isinstance(grad_clip, bool) or not isinstance(grad_clip, (int, float)) or grad_clip <= 0
        ):
            raise ValueError(
                f"search.grad_clip must be a positive number or null, got {grad_clip!r}"
            )
        self.grad_clip = None if grad_clip is None else float(grad_clip)
        self.fix_alpha = True  # no architecture steps (and the loop's update_arch is false)

    def attach(self, ctx: SearchContext, *, generator: torch.Generator | None = None) -> None:
        """No architecture parameters or optimiser; the weight step clips at ``grad_clip``."""
        del generator
        if self.grad_clip is not None:
            if ctx.grad_clip != RUN_GRAD_CLIP:
                raise ValueError(
                    f"search.grad_clip={self.grad_clip} is RS-WS's weight clip, in place of "
                    f"optimizer.grad_clip, which is set too ({ctx.grad_clip}); set one of them "
                    "(search.grad_clip=null clips at optimizer.grad_clip)"
                )
            ctx = dataclasses.replace(ctx, grad_clip=self.grad_clip)
        self._ctx = ctx
        for c in self.component_list():
            c.attach(self, ctx)
        self.arch_optimizer = None

    def strategy_weights(self, *, sample: bool) -> ArchWeights:
        shapes = self.supernet.arch_shapes()
        if not sample:
            return {
                ct: self.apply_mask(ct, torch.full(shape, 1.0 / shape[1], device=self._device()))
                for ct, shape in shapes.items()
            }
        arch = sample_arch(self.supernet, self.generator(torch.device("cpu")))
        return arch_weights_of(arch, shapes, self._device())

    def _device(self) -> torch.device:
        return next(self.supernet.parameters()).device

    def step(
        self, train_batch: Batch | Shards, val_batch: Batch | Shards, *, update_arch: bool = True
    ) -> dict[str, Tensor]:
        """One SGD step on the training batch with a fresh random architecture (the
        architecture batch is not used)."""
        del val_batch, update_arch
        return self.weight_step(train_batch)

    def updates_arch(self, epoch: int) -> bool:
        return False

    def arch_parameters(self) -> list[nn.Parameter]:
        return []

    def checkpoint_state(self) -> dict[str, Any]:
        return {"module": self.state_dict(), "arch_optimizer": None, "epoch": self.epoch}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        self.load_state_dict(state["module"])
        self.epoch = int(state.get("epoch", 0))
