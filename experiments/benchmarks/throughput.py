"""Throughput of a timed step: its floating-point operations, counted once, over its time, and
that rate as a share of the machine's nominal peak.

FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode`` over one whole step (forward
and backward of every convolution and matrix product: 2 per multiply-accumulate; batch norm,
activations, pooling and the optimiser's element-wise work are not counted, so the figure is a
lower bound of the work done).

The nominal peak of a CPU is ``threads x clock x FP32 FLOPs per cycle per core``; the FLOPs per
cycle follow the vector units the CPU reports (``/proc/cpuinfo``): 64 with AVX-512 on Intel
Xeons and on AMD Zen 5 (family 26: two 512-bit FMA pipes), 32 with AVX-512 on Zen 4 (family 25:
512-bit operations on 256-bit pipes) and with AVX2 + FMA (two 256-bit FMA pipes), 8 below that;
the clock is the one ``/proc/cpuinfo`` reports now (no turbo assumed). ``--peak-gflops`` replaces
the estimate where the machine's figure is known.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key and key not in info:
                    info[key] = value.strip()
    except OSError:
        pass
    return info


def nominal_peak_gflops(threads: int) -> tuple[float | None, str]:
    """The CPU's nominal FP32 peak over ``threads`` cores, and how it was reckoned."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    try:
        ghz = float(info["cpu MHz"]) / 1000
    except (KeyError, ValueError):
        return None, "no clock in /proc/cpuinfo: pass --peak-gflops"
    amd = "AMD" in info.get("vendor_id", "") or "AMD" in info.get("model name", "")
    family = int(info.get("cpu family", "0") or 0)
    if "avx512f" in flags:
        per_cycle = 32 if amd and family < 26 else 64
    elif "avx2" in flags and "fma" in flags:
        per_cycle = 32
    else:
        per_cycle = 8
    peak = threads * ghz * per_cycle
    model = re.sub(r"\s+", " ", info.get("model name", "CPU"))
    how = f"{model}: {threads} cores x {ghz:.2f} GHz x {per_cycle} FP32 FLOP/cycle"
    return peak, how


def conv_backward_flops(args: tuple, out: Any) -> int:
    """FLOPs of ``aten.convolution_backward``: each gradient asked for (``output_mask``: input,
    weight) costs what the forward convolution costs, ``2 * outputs * weight[1:]`` (groups are
    in the weight's shape). torch's own formula ignores ``groups`` for the weight gradient and
    so counts a depthwise convolution's backward ``channels`` times over."""
    grad_out, x, weight = args[0], args[1], args[2]
    transposed, output_mask = args[7], args[10]
    per_output = 2 * math.prod(weight.shape[1:])
    forward = per_output * (x.numel() if transposed else grad_out.numel())
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def step_flops(step: Callable[[], Any]) -> float:
    """The FLOPs of one call of ``step`` (forward and backward; convolutions and products), by
    torch's FLOP formulas (``torch.utils.flop_counter.flop_registry``) on every dispatched op,
    the convolution backward by ``conv_backward_flops``. A dispatch mode of its own:
    ``FlopCounterMode``'s module tracker hooks the backward, which ``torch.autograd.grad``
    (the architecture steps) does not allow."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    conv_backward = torch.ops.aten.convolution_backward

    class Counter(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if func._overloadpacket is conv_backward and not kwargs:
                self.total += conv_backward_flops(args, out)
                return out
            formula = flop_registry.get(func._overloadpacket)
            if formula is not None:
                self.total += formula(*args, **kwargs, out_val=out)
            return out

    with Counter() as counter:
        step()
    return float(counter.total)
