"""``torch.compile`` of a supernet's forward without graph breaks (``nas-search compile=true``).

Second stage of the pipeline (``nas.supernet``). Which ops of an edge run depends on the
architecture weights (a masked op is skipped, and one of weight zero unless
``zero_weight_ops_run``), a host-side decision
(``Supernet.active_ops``: one ``.tolist()`` per cell type) that breaks a compiled graph. Here it
is taken eagerly before each call and handed to the compiled forward as Python constants: the
graph is specialised to the pattern of active ops and recompiled only when that pattern changes
(a pruned or projected op), which is rare; under ``zero_weight_ops_run`` (SDARTS, whose clip
zeroes different entries every step) the pattern is the masks' alone. Everything
else of the forward, the custom autograd nodes of the mixed ops included, traces into one graph.

CUDA graphs (``cuda_graphs=True``, ``nas-search compile=graphs``): the same graph compiled with
inductor's ``mode="reduce-overhead"``, which records the forward's and the backward's kernels
once as CUDA graphs and replays them, one launch for the hundreds of small kernels of a supernet
forward. Every call starts a new graph step (``torch.compiler.cudagraph_mark_step_begin``): a
search step runs the forward twice (architecture, then weights), and each forward's backward
runs before the next forward, so no output of a replay is read after the next one overwrites it.
On other devices inductor compiles without graphs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from nas.supernet.network import ArchWeights, Supernet


def compile_supernet(
    supernet: Supernet, *, cuda_graphs: bool = False, **compile_kwargs: Any
) -> Supernet:
    """Make ``supernet(x, weights)`` run a compiled forward (in place; returns ``supernet``).

    ``compile_kwargs`` go to ``torch.compile`` (e.g. ``backend``, ``fullgraph``);
    ``cuda_graphs``: inductor's ``mode="reduce-overhead"``, each call a new graph step."""
    if cuda_graphs:
        if compile_kwargs.get("mode", "reduce-overhead") != "reduce-overhead":
            raise ValueError(
                f"cuda_graphs=True is mode='reduce-overhead', got mode={compile_kwargs['mode']!r}"
            )
        compile_kwargs["mode"] = "reduce-overhead"
    cls_forward = type(supernet).forward

    def forward(x: Tensor, weights: ArchWeights) -> Tensor:
        out: Tensor = cls_forward(supernet, x, weights)
        return out

    compiled = torch.compile(forward, **compile_kwargs)

    def compiled_forward(x: Tensor, weights: ArchWeights) -> Tensor:
        supernet.__dict__["_preset_active"] = supernet.active_ops(weights)
        if cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        try:
            out: Tensor = compiled(x, weights)
        finally:
            supernet.__dict__["_preset_active"] = None
        return out

    supernet.forward = compiled_forward  # type: ignore[method-assign]
    return supernet
