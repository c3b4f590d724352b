"""Benchmark: seconds per search step, images/s and peak memory of the supernet search.

The protocol: random CIFAR-sized input (3x32x32, 10
classes), ``torch.set_num_threads(2)``, warm-up steps then the median of timed steps, peak RSS
of the whole process; one fresh process per configuration. A "search step" is an
architecture step plus a weight step (forward, backward, optimiser step each), as
``SearchStrategy.step`` takes it in a real search.

    python experiments/benchmarks/search_step.py                 # all settings of the issue
    python experiments/benchmarks/search_step.py --only nb201-darts1 --steps 5 --warmup 2
    python experiments/benchmarks/search_step.py --only nb201-darts1 --only nb201-gdas \
        --only nb201-rsws                              # the sampling strategies' speed rows

Throughput: each of our rows also gives its step's FLOPs (counted once, forward and backward of
the convolutions and products: ``throughput.py``), the rate at the step's median time in GFLOP/s
and that rate as a share of the machine's nominal FP32 peak (estimated from ``/proc/cpuinfo`` and
printed with its reckoning; ``--peak-gflops`` gives it).

GDAS and RS-WS rows (and any strategy of ``WHOLE_STEP``) time ``strategy.step`` whole, in the
"arch step" column: GDAS takes its weight step first and RS-WS has no architecture step.

Side by side with the reference code (your own checkouts; see the README's performance section):
reference and ours run alternately in fresh processes (``--rounds``, the order flipped every
round), same threads, batch and shapes; the table gives the best and the median of the rounds
(each round's figure is the median of its timed steps), the peak memory and the ratios:

    python experiments/benchmarks/search_step.py --reference-root darts=/tmp/refs/darts \
        drnas=/tmp/refs/drnas darts-pt=/tmp/refs/darts-pt confopt=/tmp/refs/confopt \
        --rounds 3 [--reference-channels-last]

The references: DARTS rows run quark0/darts ``cnn/``, the NB201 DARTS row darts-pt's
``nasbench201/`` (DARTS on NB201 as darts-pt's code runs it), DrNAS rows
DrNAS's ``DARTS-space/`` and ``201-space/`` (see ``reference_runs.py``). confopt
(automl/ConfigurableOptimizer, the closest peer toolkit: ``confopt=PATH``) runs beside them on
the first-order DARTS and DrNAS rows of both spaces (``nb201-darts1``, ``nb201-drnas-k1``,
``darts-darts1``, ``s5-drnas-k4-c16``): its step needs ``pip install thop reinmax wandb``
beside torch (``confopt.utils`` imports wandb for its logger), nothing else of its
dependency list. Memory: the peak RSS of
the process minus its RSS after the imports, before the supernet is built (the same measure for
both sides, which import different libraries; ``peak_rss_mib`` in the JSON is the whole process).

``--compile``: ours with ``nas-search compile=true`` (``compile_supernet``, inductor); the row
gives the first warm-up step (the cold compile) as ``first_step_s`` beside the timed steps:

    python experiments/benchmarks/search_step.py --only nb201-darts1 --compile --steps 5
    python experiments/benchmarks/search_step.py --only darts-darts1 --compile --steps 5

``--cuda-graphs`` (with ``--device cuda``): ours with ``nas-search compile=graphs``, the compiled
forward and backward recorded as CUDA graphs and replayed (``gpu_step.py`` runs it per row).

``--fuse``: ours with the supernet's ``fuse`` on (the ops of the edges that read one state run
as one convolution chain per kind, ``nas.supernet.fused``; the row's ``fuse`` in the JSON):

    python experiments/benchmarks/search_step.py --only darts-darts1 --fuse --steps 3

DrNAS rows: the DARTS space without ``none`` (S5) with partial channels K; the reference's
figures come from ``--reference-root drnas=<checkout>``. The memory format follows
``nas-search channels_last=auto`` (NHWC); ``--channels-last true|false`` forces one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_runs import (  # noqa: E402
    add_reference_args,
    parse_roots,
    peak_rss_mib,
    rss_mib,
)
from reference_runs import search_step as reference_search_step  # noqa: E402
from throughput import nominal_peak_gflops, step_flops  # noqa: E402

SETTINGS = {
    # name: (space, C, layers, strategy, order, K, batch, reference images/s, reference peak MiB)
    "darts-darts1": ("darts", 16, 8, "darts", 1, 1, 64, 1.95, 9792),
    "darts-darts2": ("darts", 16, 8, "darts", 2, 1, 64, 0.86, 13003),
    "nb201-darts1": ("nb201", 16, 5, "darts", 1, 1, 64, 10.95, 3165),
    "nb201-drnas-k1": ("nb201", 16, 5, "drnas", 1, 1, 64, 10.36, 3132),
    "s5-drnas-k4-c16": ("s5", 16, 8, "drnas", 1, 4, 64, 4.70, 3339),
    # DrNAS's progressive stage 1: C=36, 20 cells, K=6 (the reference's own row)
    "s5-drnas-k6-c36": ("s5", 36, 20, "drnas", 1, 6, 64, 1.28, 10821),
    # K=1 at C=36 / 20 cells does not fit this machine at batch 64: compare K=6 and K=1 at 16
    "s5-drnas-k6-c36-b16": ("s5", 36, 20, "drnas", 1, 6, 16, None, None),
    "s5-drnas-k1-c36-b16": ("s5", 36, 20, "drnas", 1, 1, 16, None, None),
    # sampling strategies: one op of each edge runs; compare with the DARTS rows above
    "nb201-gdas": ("nb201", 16, 5, "gdas", 1, 1, 64, None, None),
    "nb201-rsws": ("nb201", 16, 5, "rsws", 1, 1, 64, None, None),
    "darts-gdas": ("darts", 16, 8, "gdas", 1, 1, 64, None, None),
    "darts-rsws": ("darts", 16, 8, "rsws", 1, 1, 64, None, None),
    # the 32x32 MobileNet-style chain at a quarter width (experiments/proxyless): all paths
    # (DARTS, FBNet's relaxed Gumbel-softmax) against ProxylessNAS's sampled paths
    "chain-darts1": ("proxyless_cifar", 8, 21, "darts", 1, 1, 64, None, None),
    "chain-fbnet": ("proxyless_cifar", 8, 21, "fbnet", 1, 1, 64, None, None),
    "chain-proxylessnas": ("proxyless_cifar", 8, 21, "proxylessnas", 1, 1, 64, None, None),
}

# strategies whose step is not "architecture step, then weight step": the whole step is timed
# (GDAS: weight step first; RS-WS: a weight step only; SNAS, FBNet: one joint step;
# ProxylessNAS: a weight step on one sampled path, every 5th step also the gates' step)
WHOLE_STEP = {"fbnet", "gdas", "proxylessnas", "reinmax", "rsws", "snas"}

# steps counted for the FLOPs of a sampling strategy's step (their mean)
FLOP_SAMPLES = 8

# setting -> the reference code it is compared with (``--reference-root NAME=PATH``): the
# reproduction of the method's paper first, then confopt (automl/ConfigurableOptimizer), the
# closest peer toolkit, where it has the step (first order only)
REFERENCE_OF = {
    "darts-darts1": ("darts", "confopt"),
    "darts-darts2": ("darts",),
    "nb201-darts1": ("darts-pt", "confopt"),
    "nb201-drnas-k1": ("drnas", "confopt"),
    "s5-drnas-k4-c16": ("drnas", "confopt"),
    "s5-drnas-k6-c36": ("drnas",),
    "s5-drnas-k6-c36-b16": ("drnas",),
    "s5-drnas-k1-c36-b16": ("drnas",),
}


def time_steps(
    arch_step: Callable[[Any, Any], None],
    weight_step: Callable[[Any], None],
    batch: int,
    channels_last: bool,
    steps: int,
    warmup: int,
    device: str = "cpu",
) -> dict[str, float]:
    """Median arch / weight / search step of ``steps`` timed steps after ``warmup``: the same
    loop for ours and the reference, fresh random batches of the same shape each step (on a
    CUDA device, each timed part ends with a synchronisation)."""
    import torch

    def batch_() -> tuple[Any, Any]:
        x = torch.randn(batch, 3, 32, 32, device=device)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.randint(0, 10, (batch,), device=device)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    arch_times, weight_times, first = [], [], 0.0
    for i in range(warmup + steps):
        tb, vb = batch_(), batch_()
        sync()
        t0 = time.perf_counter()
        arch_step(tb, vb)
        sync()
        t1 = time.perf_counter()
        weight_step(tb)
        sync()
        t2 = time.perf_counter()
        if i == 0:
            first = t2 - t0
        if i >= warmup:
            arch_times.append(t1 - t0)
            weight_times.append(t2 - t1)
    step = statistics.median(a + w for a, w in zip(arch_times, weight_times))
    return {
        "arch_step_s": statistics.median(arch_times),
        "weight_step_s": statistics.median(weight_times),
        "search_step_s": step,
        "images_per_s": batch / step,
        "first_step_s": first,
    }


def build_ours(
    name: str,
    channels_last: bool,
    compile_: bool | str = False,
    device: str = "cpu",
    amp: str = "none",
    fuse: bool = False,
) -> tuple[Callable[[Any, Any], None], Callable[[Any], None]]:
    """Our supernet and strategy for setting ``name``: its (arch step, weight step). For the
    strategies of ``WHOLE_STEP`` the first is the whole step (a new step seed each call) and
    the second does nothing. ``amp`` bf16 / fp16: the steps under autocast (``nas-search
    amp=``), as ``SearchContext.autocast_dtype``. ``fuse``: the supernet's ``fuse`` on (the
    ops of the edges that read one state fused, ``nas.supernet.fused``)."""
    import torch

    from nas.plugins import build_plugin
    from nas.strategies import SearchContext
    from nas.supernet import build_supernet, compile_supernet

    space, C, layers, strategy_name, order, k, _, _, _ = SETTINGS[name]
    net = build_supernet(space, C=C, layers=layers, num_classes=10, partial_channels=k).to(device)
    if fuse:
        net.fuse = True
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    if compile_:  # "graphs": nas-search compile=graphs (CUDA graphs)
        compile_supernet(net, cuda_graphs=compile_ == "graphs")
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4, foreach=True)
    autocast_dtype = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[amp]
    ctx = SearchContext(net, opt, grad_clip=5.0, autocast_dtype=autocast_dtype)
    if strategy_name not in WHOLE_STEP:
        # configs/search/<strategy>.yaml with the row's order: the defaults nas-search runs
        strategy = build_plugin("search", strategy_name, order=order)
        strategy.attach(ctx)
        return strategy.arch_step, strategy.weight_step
    whole = build_plugin("search", strategy_name)
    whole.attach(ctx)
    seeds = iter(range(10**9))

    def whole_step(tb: Any, vb: Any) -> None:
        whole.begin_step(next(seeds))
        whole.step(tb, vb)

    return whole_step, lambda tb: None


def run_one(
    name: str,
    steps: int,
    warmup: int,
    memory_format: str,
    threads: int = 2,
    compile_: bool | str = False,
    device: str = "cpu",
    amp: str = "none",
    fuse: bool = False,
) -> dict[str, float | str]:
    """Ours on one setting in this (fresh) process (for ``WHOLE_STEP`` strategies the "arch
    step" column holds the whole step, the "weight step" column 0)."""
    import torch

    torch.set_num_threads(threads)
    base_rss = rss_mib()
    torch.manual_seed(0)
    batch = SETTINGS[name][6]
    # nas-search's channels_last=auto: NHWC
    channels_last = memory_format != "false"
    arch_step, weight_step = build_ours(name, channels_last, compile_, device, amp, fuse)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)
    times = time_steps(arch_step, weight_step, batch, channels_last, steps, warmup, device)
    peak = peak_rss_mib()
    # a sampling strategy's step runs other paths each time: the mean over several steps
    samples = min(steps, FLOP_SAMPLES) if SETTINGS[name][3] in WHOLE_STEP else 1
    # counted on the eager forward: a graph replay dispatches no operators to count
    with torch.compiler.set_stance("force_eager"):
        flops = count_flops(arch_step, weight_step, batch, channels_last, device, samples)
    gpu_peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.startswith("cuda") else 0.0
    return {
        "setting": name,
        "channels_last": str(channels_last),
        "compile": str(compile_),
        "device": device,
        "amp": amp,
        "fuse": str(fuse),
        **times,
        "step_gflop": flops / 1e9,
        "gflops_per_s": flops / 1e9 / times["search_step_s"],
        "peak_rss_mib": peak,
        "peak_rss_delta_mib": peak - base_rss,
        "peak_device_mib": gpu_peak,
    }


def count_flops(
    arch_step: Callable[[Any, Any], None],
    weight_step: Callable[[Any], None],
    batch: int,
    channels_last: bool,
    device: str = "cpu",
    samples: int = 1,
) -> float:
    """The FLOPs of one whole search step (architecture and weight step, forward and backward;
    ``throughput.step_flops``), counted after the timing on fresh batches of the row's shape:
    the mean over ``samples`` steps (more than one for strategies that sample paths)."""
    import torch

    def batch_() -> tuple[Any, Any]:
        x = torch.randn(batch, 3, 32, 32, device=device)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.randint(0, 10, (batch,), device=device)

    tb, vb = batch_(), batch_()

    def one_step() -> None:
        arch_step(tb, vb)
        weight_step(tb)

    return statistics.mean(step_flops(one_step) for _ in range(samples))


def throughput_cells(r: dict[str, Any], peak: float | None) -> str:
    """``GFLOP / step | GFLOP/s | share of peak`` of one of our rows."""
    if "gflops_per_s" not in r:
        return "- | - | -"
    share = f"{100 * r['gflops_per_s'] / peak:.1f} %" if peak else "-"
    return f"{r['step_gflop']:.1f} | {r['gflops_per_s']:.1f} | {share}"


def run_reference(
    name: str,
    root: str,
    channels_last: bool,
    steps: int,
    warmup: int,
    threads: int,
    reference: str | None = None,
) -> dict[str, float | str]:
    """One reference row in this (fresh) process: its own code from the user's checkout
    (``reference``: one of the setting's ``REFERENCE_OF``, by default the first)."""
    import torch

    torch.set_num_threads(threads)
    space, C, layers, strategy, order, k, batch, _, _ = SETTINGS[name]
    refs = REFERENCE_OF.get(name, ())
    reference = reference or (refs[0] if refs else "")
    if reference not in refs:
        raise SystemExit(
            f"--child-reference {reference or '(none)'}: expected one of "
            f"{', '.join(refs) or 'none (no reference code)'} for {name}"
        )
    torch.manual_seed(0)
    arch_step, weight_step, base_rss = reference_search_step(
        reference, root, space, C, layers, order, k, channels_last, strategy
    )
    times = time_steps(arch_step, weight_step, batch, channels_last, steps, warmup)
    peak = peak_rss_mib()
    return {
        "setting": name,
        "reference": reference,
        "channels_last": str(channels_last),
        **times,
        "peak_rss_mib": peak,
        "peak_rss_delta_mib": peak - base_rss,
    }


def _override_shapes(args: argparse.Namespace) -> None:
    """--C / --layers / --batch (quick checks at a small size) replace every setting's; the
    figures measured at the default sizes no longer compare then."""
    if args.C is None and args.layers is None and args.batch is None:
        return
    for value, flag in ((args.C, "--C"), (args.layers, "--layers"), (args.batch, "--batch")):
        if value is not None and value < 1:
            raise SystemExit(f"{flag} {value}: expected a positive integer")
    for name, (space, C, layers, strategy, order, k, batch, _, _) in SETTINGS.items():
        C, layers, batch = args.C or C, args.layers or layers, args.batch or batch
        SETTINGS[name] = (space, C, layers, strategy, order, k, batch, None, None)


def _shape_flags(args: argparse.Namespace) -> list[str]:
    flags = []
    for value, flag in ((args.C, "--C"), (args.layers, "--layers"), (args.batch, "--batch")):
        if value is not None:
            flags += [flag, str(value)]
    return flags


def _child(cmd: list[str]) -> dict[str, Any]:
    """Run one measurement in a fresh process; its JSON line, or {"error": last stderr line}."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or [f"exit {proc.returncode}"]
        return {"error": lines[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def side_by_side(args: argparse.Namespace, roots: dict[str, str]) -> None:
    base = [sys.executable, os.path.abspath(__file__), "--steps", str(args.steps)]
    base += ["--warmup", str(args.warmup), "--threads", str(args.threads)]
    base += _shape_flags(args)
    print(
        f"{args.rounds} rounds, alternating fresh processes; {args.threads} threads; "
        f"{args.warmup} warm-up + {args.steps} timed steps per process"
    )
    peak = _peak(args)
    print(
        "| setting | batch | run | search step s best | median | images/s | "
        "peak RSS delta MiB | ours vs this: speed | memory | GFLOP / step | GFLOP/s | "
        "share of peak |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.only or list(SETTINGS):
        refs = REFERENCE_OF.get(name, ())
        if not any(ref in roots for ref in refs):
            wanted = " or ".join(f"{ref}=PATH" for ref in refs) or "(no reference code)"
            print(f"| {name} | - | skipped: no --reference-root {wanted} | | | | | | |")
            continue
        runs = {"ours": base + ["--child", name, "--channels-last", args.channels_last]}
        runs["ours"] += ["--compile"] if getattr(args, "compile", False) else []
        runs["ours"] += ["--fuse"] if getattr(args, "fuse", False) else []
        for ref in (r for r in refs if r in roots):
            ref_cmd = base + ["--reference-child", name, "--child-root", roots[ref]]
            ref_cmd += ["--child-reference", ref]
            runs[f"reference ({ref})"] = ref_cmd + ["--channels-last", "false"]
            if args.reference_channels_last:
                runs[f"reference ({ref}), channels_last"] = ref_cmd + ["--channels-last", "true"]
        results: dict[str, list[dict[str, Any]]] = {label: [] for label in runs}
        for r in range(args.rounds):
            # flip the order every round, so drift of the machine hits both sides alike
            for label in list(runs)[:: 1 if r % 2 == 0 else -1]:
                results[label].append(_child(runs[label]))
        ours = _summary(results["ours"])
        for label, rs in results.items():
            row = _summary(rs)
            if "error" in row:
                print(f"| {name} | {SETTINGS[name][6]} | {label} | failed: {row['error']} |")
                continue
            speed = memory = "-"
            if label != "ours" and "error" not in ours:
                speed = f"{row['median'] / ours['median']:.2f}x"
                memory = f"{ours['memory'] / row['memory']:.2f}x"
            # the rate at the median round: our step's FLOPs over its median time
            rate = "- | - | -"
            if label == "ours" and all("step_gflop" in r for r in rs):
                flops = statistics.median(r["step_gflop"] for r in rs)
                rated = {"step_gflop": flops, "gflops_per_s": flops / row["median"]}
                rate = throughput_cells(rated, peak)
            print(
                f"| {name} | {SETTINGS[name][6]} | {label} | {row['best']:.2f} | "
                f"{row['median']:.2f} | {SETTINGS[name][6] / row['median']:.2f} | "
                f"{row['memory']:.0f} | {speed} | {memory} | {rate} |",
                flush=True,
            )


def _peak(args: argparse.Namespace) -> float | None:
    """The nominal peak GFLOP/s the shares are taken of (printed with how it was reckoned)."""
    given = getattr(args, "peak_gflops", None)  # absent where a caller builds its own namespace
    if given is not None:
        print(f"nominal peak: {given:g} GFLOP/s (--peak-gflops)")
        return float(given)
    if getattr(args, "device", "cpu") != "cpu":
        print("nominal peak: unknown for a GPU (pass --peak-gflops for the share of peak)")
        return None
    peak, how = nominal_peak_gflops(args.threads)
    print(f"nominal peak: {peak or 0:.0f} GFLOP/s ({how})")
    return peak


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [r["error"] for r in rounds if "error" in r]
    if errors:
        return {"error": errors[0]}
    steps = [r["search_step_s"] for r in rounds]
    return {
        "best": min(steps),
        "median": statistics.median(steps),
        "memory": statistics.median(r["peak_rss_delta_mib"] for r in rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SETTINGS), action="append")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--channels-last",
        choices=["auto", "true", "false"],
        default="auto",
        help="memory format; auto (as nas-search): NHWC",
    )
    parser.add_argument(
        "--compile", action="store_true", help="ours with compile=true (compile_supernet)"
    )
    parser.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="ours with compile=graphs (CUDA graphs: inductor's reduce-overhead mode; CUDA only)",
    )
    parser.add_argument(
        "--fuse", action="store_true", help="ours with the supernet's fuse on (nas.supernet.fused)"
    )
    parser.add_argument("--device", default="cpu", help="ours on this device (cpu, cuda, cuda:1)")
    parser.add_argument(
        "--amp", choices=["none", "bf16", "fp16"], default="none", help="ours under autocast"
    )
    parser.add_argument("--C", type=int, help="override every setting's initial channels")
    parser.add_argument("--layers", type=int, help="override every setting's cells (NB201: N)")
    parser.add_argument("--batch", type=int, help="override every setting's batch size")
    parser.add_argument(
        "--peak-gflops", type=float, help="the machine's nominal peak (default: estimated)"
    )
    add_reference_args(parser)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--reference-child", help=argparse.SUPPRESS)
    parser.add_argument("--child-root", help=argparse.SUPPRESS)
    parser.add_argument("--child-reference", help=argparse.SUPPRESS)
    args = parser.parse_args()
    _override_shapes(args)
    if args.cuda_graphs and not args.device.startswith("cuda"):
        raise SystemExit(
            f"--cuda-graphs records CUDA graphs and needs --device cuda, got --device {args.device}"
        )
    if args.child:
        result = run_one(
            args.child,
            args.steps,
            args.warmup,
            args.channels_last,
            args.threads,
            "graphs" if args.cuda_graphs else args.compile,
            args.device,
            args.amp,
            args.fuse,
        )
        print(json.dumps(result))
        return
    if args.reference_child:
        result = run_reference(
            args.reference_child,
            args.child_root,
            args.channels_last == "true",
            args.steps,
            args.warmup,
            args.threads,
            args.child_reference,
        )
        print(json.dumps(result))
        return
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0 or args.threads < 1:
        raise SystemExit(
            f"--rounds {args.rounds} --steps {args.steps} --warmup {args.warmup} "
            f"--threads {args.threads}: expected rounds, steps, threads >= 1 and warmup >= 0"
        )
    roots = parse_roots(args.reference_root)
    if roots and (args.device != "cpu" or args.amp != "none" or args.cuda_graphs):
        raise SystemExit(
            f"--reference-root compares fp32 steps on the CPU; got --device {args.device} "
            f"--amp {args.amp}{' --cuda-graphs' if args.cuda_graphs else ''}"
        )
    if roots:
        side_by_side(args, roots)
        return
    peak = _peak(args)
    print(
        "| setting | batch | arch step s | weight step s | search step s | images/s | "
        "reference images/s | speed-up | peak RSS MiB | reference peak MiB | NHWC | "
        "first step s | GFLOP / step | GFLOP/s | share of peak |"
    )
    print("| --- " * 15 + "|")
    for name in args.only or list(SETTINGS):
        cmd = [sys.executable, __file__, "--child", name, "--steps", str(args.steps)]
        cmd += ["--warmup", str(args.warmup), "--channels-last", args.channels_last]
        cmd += ["--threads", str(args.threads)] + _shape_flags(args)
        cmd += ["--device", args.device, "--amp", args.amp]
        cmd += ["--compile"] if args.compile else []
        cmd += ["--cuda-graphs"] if args.cuda_graphs else []
        cmd += ["--fuse"] if args.fuse else []
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        ref_ips, ref_mem = SETTINGS[name][7], SETTINGS[name][8]
        ratio = f"{r['images_per_s'] / ref_ips:.2f}x" if ref_ips else "-"
        print(
            f"| {name} | {SETTINGS[name][6]} | {r['arch_step_s']:.2f} | {r['weight_step_s']:.2f} | "
            f"{r['search_step_s']:.2f} | {r['images_per_s']:.2f} | {ref_ips or '-'} | "
            f"{ratio} | {r['peak_rss_mib']:.0f} | {ref_mem or '-'} | {r['channels_last']} | "
            f"{r['first_step_s']:.1f} | {throughput_cells(r, peak)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
