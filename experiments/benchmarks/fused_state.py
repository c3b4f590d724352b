"""Microbenchmark: the ops of the edges that read one cell state, fused or one by one.

DARTS (Liu et al., ICLR 2019, eq. 1) runs every candidate op of every edge ``(i, j)`` on the
state ``x_i``; ``nas.supernet.fused`` computes the ops of one kind over all the edges leaving a
state as one chain of grouped convolutions and batch norms. This times the forward and backward
of those ops (train mode, random output gradients), for one state of the DARTS-space supernet
at the search's shapes (C=16, 8 cells, batch 64, 32x32): state 0 of the first normal cell (4
edges x ``sep_conv_3x3``, ``sep_conv_5x5``, ``dil_conv_3x3``, ``dil_conv_5x5`` at 16 channels,
32x32) and state 0 of the first reduction cell (the same at 32 channels, stride 2), in NHWC and
NCHW:

* ``separate``: each op on the shared ReLU of the state (``after_relu``), as the unfused cell;
* ``fused``: ``fused_outputs`` (the first convolution's weights interleaved per channel group);
* ``fused-repeat``: the same, but the first convolution reads the state repeated ``n`` times
  along channels with ``n`` times the groups (the alternative the interleaving was measured
  against).

Best of ``--rounds`` rounds, the variants taken in turn in each round, ``--reps`` passes each;
milliseconds per pass (``--nchw``: NCHW too; the search runs NHWC, ``channels_last=auto``):

    python experiments/benchmarks/fused_state.py --rounds 5 --reps 2 [--nchw]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from nas.supernet import build_supernet, fused
from nas.supernet.darts import DartsSearchCell, DartsSupernet
from nas.supernet.mixed_op import MixedOp

_interleaved = fused._first_conv


def _first_conv_repeat(x: Tensor, convs: list[nn.Conv2d]) -> Tensor:
    """``_first_conv`` as one convolution of ``n`` times the groups on ``x`` repeated ``n``
    times along channels (in ``x``'s layout)."""
    c0, n = convs[0], len(convs)
    b, c, h, w = x.shape
    layout = torch.channels_last if x.stride(1) == 1 and c > 1 else torch.contiguous_format
    xr = torch.empty(b, n * c, h, w, dtype=x.dtype, device=x.device, memory_format=layout)
    xr.view(b, n, c, h, w).copy_(x.unsqueeze(1).expand(b, n, c, h, w))
    xr = _Repeat.apply(x, xr, n)
    weight = torch.cat([cv.weight for cv in convs])
    return F.conv2d(xr, weight, None, c0.stride, c0.padding, c0.dilation, c0.groups * n)


class _Repeat(torch.autograd.Function):
    """``xr`` (``x`` repeated ``n`` times along channels); the gradient of ``x`` is the sum of
    the ``n`` blocks' gradients."""

    @staticmethod
    def forward(ctx, x: Tensor, xr: Tensor, n: int) -> Tensor:  # type: ignore[override]
        ctx.n = n
        return xr

    @staticmethod
    def backward(ctx, g: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        b, c, h, w = g.shape
        return g.view(b, ctx.n, c // ctx.n, h, w).sum(1), None, None


def _state_case(
    net: DartsSupernet, cell_index: int, channels_last: bool
) -> tuple[Tensor, list[tuple[int, MixedOp, list[bool]]]]:
    cell = net.cells[cell_index]
    assert isinstance(cell, DartsSearchCell)
    C = cell.ops[0].C
    side = 32
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(64, C, side, side).contiguous(memory_format=fmt).relu()
    edges = []
    for e in cell.edges_from[0]:
        op = cell.ops[e]
        assert isinstance(op, MixedOp)
        active = [name in ("sep_conv_3x3", "sep_conv_5x5", "dil_conv_3x3", "dil_conv_5x5")
                  for name in op.op_names]  # fmt: skip
        edges.append((e, op, active))
    return x, edges


def _passes(x: Tensor, edges: list[tuple[int, MixedOp, list[bool]]]) -> dict[str, Callable]:
    def separate() -> list[Tensor]:
        return [mixed.ops[k].after_relu(x) for _, mixed, a in edges for k in mixed.running_ops(a)]

    def fused_() -> list[Tensor]:
        out = fused.fused_outputs(edges, lambda e: x)
        return [y for per_edge in out.values() for y in per_edge.values()]

    def repeat() -> list[Tensor]:
        fused._first_conv = _first_conv_repeat  # type: ignore[assignment]
        try:
            return fused_()
        finally:
            fused._first_conv = _interleaved

    grads: list[Tensor] = []

    def backward(outs: list[Tensor]) -> None:
        if not grads:
            gen = torch.Generator().manual_seed(0)
            grads.extend(
                torch.randn(y.shape, generator=gen).to(memory_format=_fmt(y)) for y in outs
            )
        torch.autograd.backward(outs, grads)

    variants = {"separate": separate, "fused": fused_, "fused-repeat": repeat}
    return {name: (lambda f=f: backward(f())) for name, f in variants.items()}


def _fmt(y: Tensor) -> torch.memory_format:
    return torch.channels_last if y.stride(1) == 1 and y.shape[1] > 1 else torch.contiguous_format


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--nchw", action="store_true", help="NCHW too (NHWC: the search's)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    net = build_supernet("darts", C=16, layers=8, num_classes=10)
    assert isinstance(net, DartsSupernet)
    print("| state | layout | separate ms | fused ms | fused-repeat ms | fused / separate |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, cell_index in (("normal cell, state 0", 0), ("reduction cell, state 0", 2)):
        for channels_last in (True, False) if args.nchw else (True,):
            cell_net = net.to(memory_format=torch.channels_last if channels_last else
                              torch.contiguous_format)  # fmt: skip
            x, edges = _state_case(cell_net, cell_index, channels_last)
            x.requires_grad_()
            passes = _passes(x, edges)
            for run in passes.values():  # warm-up
                run()
                run()
            best = {name: float("inf") for name in passes}
            for _ in range(args.rounds):
                for name, run in passes.items():
                    t0 = time.perf_counter()
                    for _ in range(args.reps):
                        run()
                    best[name] = min(best[name], (time.perf_counter() - t0) / args.reps * 1e3)
            layout = "NHWC" if channels_last else "NCHW"
            print(
                f"| {label} | {layout} | {best['separate']:.1f} | {best['fused']:.1f} | "
                f"{best['fused-repeat']:.1f} | {best['fused'] / best['separate']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
