"""Measure every part of a network layout on this machine: the latency table.

Hardware-aware search (``nas.hardware``). The protocol is our own, preferred over the ones of
the reference code (mit-han-lab/proxylessnas ``search/run_manager.py:239-245,308-331`` times
with ``time.time()`` and no CUDA synchronisation, which measures the launch, not the kernel):

* eval mode, ``torch.no_grad``, a fixed dtype and memory format, ``cudnn.benchmark`` fixed;
* ``warmup`` untimed calls, then ``repeats`` timed calls, each timed on its own: on CUDA with a
  pair of CUDA events around the call (kernel time on the device's clock, read after one
  synchronisation at the end), on CPU with ``time.perf_counter`` (the call is synchronous);
* stored: the median (the figure the objective uses, robust to a loaded machine's outliers),
  the 10th and 90th percentiles, the mean and the number of timed calls;
* exact multiply-accumulates of one image (``nas.summary.count_macs``'s convention) and
  parameters per part.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from nas.hardware.parts import NetworkLayout, Part
from nas.hardware.table import DTYPES, LatencyTable, environment, now_iso
from nas.summary import count_macs


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float
    n: int

    def as_entry(self) -> dict[str, float]:
        return {
            "latency_ms": self.median_ms,
            "p10_ms": self.p10_ms,
            "p90_ms": self.p90_ms,
            "mean_ms": self.mean_ms,
            "n": self.n,
        }


def _percentile(sorted_ms: list[float], q: float) -> float:
    """Linear-interpolation percentile of sorted values (numpy's default method)."""
    pos = (len(sorted_ms) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_ms) - 1)
    return sorted_ms[lo] + (sorted_ms[hi] - sorted_ms[lo]) * (pos - lo)


def summarize_ms(samples_ms: list[float]) -> Timing:
    s = sorted(samples_ms)
    return Timing(
        median_ms=statistics.median(s),
        p10_ms=_percentile(s, 0.1),
        p90_ms=_percentile(s, 0.9),
        mean_ms=statistics.fmean(s),
        n=len(s),
    )


def time_call(
    fn: Callable[[], object], device: torch.device, *, warmup: int, repeats: int
) -> Timing:
    """Time ``fn()`` ``repeats`` times after ``warmup`` untimed calls (see the module doc)."""
    if warmup < 0 or repeats < 1:
        raise ValueError(f"warmup must be >= 0 and repeats >= 1, got {warmup} and {repeats}")
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for start, end in zip(starts, ends):
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(device)
        return summarize_ms([s.elapsed_time(e) for s, e in zip(starts, ends)])
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return summarize_ms(samples)


def prepare(module: nn.Module, device: torch.device, dtype: str, channels_last: bool) -> nn.Module:
    module = module.to(device=device, dtype=DTYPES[dtype]).eval()
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
    return module


def make_input(
    shape: tuple[int, ...], device: torch.device, dtype: str, channels_last: bool
) -> Tensor:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(
        device=device, dtype=DTYPES[dtype]
    )
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def time_module(
    module: nn.Module,
    shape: tuple[int, ...],
    *,
    device: torch.device,
    dtype: str = "float32",
    channels_last: bool = False,
    warmup: int,
    repeats: int,
) -> Timing:
    """Time one forward pass of ``module`` (eval, no_grad) on a random input of ``shape``."""
    module = prepare(module, device, dtype, channels_last)
    x = make_input(shape, device, dtype, channels_last)
    with torch.no_grad():
        return time_call(lambda: module(x), device, warmup=warmup, repeats=repeats)


def part_costs(part: Part) -> dict[str, float]:
    """Exact MACs of one image and parameters of ``part``."""
    module = part.build().eval()
    params = sum(p.numel() for p in module.parameters())
    # the convention counts conv and linear MACs only: a module without weights has none
    macs = count_macs(module, part.input_shape(1)[1:]) if params else 0
    return {"flops": float(macs), "params": float(params)}


def profile(
    layout: NetworkLayout,
    *,
    device: torch.device | str = "cpu",
    dtype: str = "float32",
    batch: int = 1,
    warmup: int = 50,
    repeats: int = 100,
    channels_last: bool = False,
    timed: bool = True,
    progress: Callable[[int, int, Part, dict[str, float]], None] | None = None,
    done: Mapping[str, Mapping[str, float]] | None = None,
) -> LatencyTable:
    """Measure every part of ``layout``: timings (unless ``timed`` is false), MACs, params.
    ``done``: entries of parts already measured with the same settings (a stopped run's),
    taken as they are."""
    device = torch.device(device)
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; expected one of {', '.join(DTYPES)}")
    if dtype == "float16" and device.type != "cuda":
        raise ValueError("dtype float16 is for CUDA devices; use float32 or bfloat16 on a CPU")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    prev_benchmark = torch.backends.cudnn.benchmark
    # fixed, so that every part is timed with the same algorithm choice policy
    torch.backends.cudnn.benchmark = False
    entries: dict[str, dict[str, float]] = {}
    parts = layout.parts()
    try:
        for i, part in enumerate(parts):
            if done is not None and part.key in done:
                entries[part.key] = dict(done[part.key])
                if progress is not None:
                    progress(i, len(parts), part, entries[part.key])
                continue
            entry = part_costs(part)
            if timed:
                timing = time_module(
                    part.build(),
                    part.input_shape(batch),
                    device=device,
                    dtype=dtype,
                    channels_last=channels_last,
                    warmup=warmup,
                    repeats=repeats,
                )
                entry.update(timing.as_entry())
            entries[part.key] = entry
            if progress is not None:
                progress(i, len(parts), part, entry)
    finally:
        torch.backends.cudnn.benchmark = prev_benchmark
    return LatencyTable(
        environment=environment(device, dtype, channels_last=channels_last),
        network=layout.spec(),
        protocol={
            "batch": batch,
            "warmup": warmup,
            "repeats": repeats,
            "timed": timed,
            "timer": "cuda events" if device.type == "cuda" else "perf_counter",
            "statistic": "median",
        },
        entries=entries,
        created=now_iso(),
    )
