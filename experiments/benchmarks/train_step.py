"""Benchmark: images/s and peak memory of a retraining step, ours against the reference's way.

The setting of the DARTS CIFAR-10 recipe: DARTS_V2 in ``NetworkCIFAR`` at C=36, 20 cells, batch
96, auxiliary head (weight 0.4), drop-path 0.2 (the probability at the end of the ramp), SGD
momentum 0.9 with weight decay, gradient clipping 5. The protocol (that of
``search_step.py``): random CIFAR-sized input (3x32x32, 10 classes),
``torch.set_num_threads(2)``, warm-up steps then the median of timed steps, peak RSS of the
whole process, one fresh process per configuration.

* ``reference``: what quark0/darts ``train.py`` does per step, on modern PyTorch: the same
  network (same modules and parameters) run by the reference's forward
  (``search_spaces.reference_forward``: a ReLU per op, stride-2 ``FactorizedReduce`` on the
  full map, ``torch.cat``, drop-path as divide-then-multiply, out of place because the
  reference's in-place ``mul_`` breaks autograd today) in fp32 NCHW, ``optimizer.zero_grad()``,
  SGD and ``clip_grad_norm_`` without ``foreach`` (one kernel per parameter tensor, as in the
  PyTorch of 2019);
* ``ours``: ``TrainRun._train_step`` of ``nas.training.loop``, the code ``nas-train`` runs: the
  network's own forward (one ReLU per state shared by the ops that read it, ``FactorizedReduce``
  on the even/odd pixels, concat + ReLU in one pass, drop-path folded into the node sums; the
  same function, see ``search_spaces.reference_forward``), NHWC (``channels_last``)
  activations and weights, ``foreach`` SGD and clipping, running metric sums kept on the
  device (no ``.item()`` per step);
* ``ours-bf16``: the same with ``amp=bf16`` (bfloat16 autocast; on CPUs with AMX or
  AVX512-BF16 the convolutions run in bf16);
* ``ours-compile`` (only with ``--compile``): the same with ``compile=true`` (a cold compile on
  2 cores takes many minutes);
* ``reference-code`` (only with ``--reference-root darts=PATH``, your own checkout of
  quark0/darts): the reference's own ``cnn/model.py`` ``NetworkCIFAR`` with ``genotypes.DARTS_V2``
  and its ``train.py`` step (``zero_grad``, forward, loss + 0.4 x auxiliary loss, backward,
  ``clip_grad_norm_`` at 5, SGD step), imported from the checkout with the shims of
  ``reference_shims.py`` (its in-place drop-path included); ``--reference-channels-last`` adds
  ``reference-code-nhwc``, the same with NHWC model and input. Ratios are then against
  ``reference-code``.

    python experiments/benchmarks/train_step.py                  # reference, ours, ours-bf16
    python experiments/benchmarks/train_step.py --only ours --steps 5 --warmup 2
    python experiments/benchmarks/train_step.py --rounds 3 --steps 5   # on a shared machine
    python experiments/benchmarks/train_step.py --only ours --rounds 3 --steps 5 \
        --reference-root darts=/tmp/refs/darts --reference-channels-last   # side by side

Beside our configs the table gives the FLOPs of one step (convolutions and products, forward and
backward, counted once per process after the timing: ``throughput.py``), that count over the
median step time, and its share of the CPU's nominal FP32 peak (``--peak-gflops`` gives it).

Wall-clock medians are the protocol's measure; the CPU seconds per step (process time) are
printed beside them because on a shared machine another process's load stretches wall time
(with 2 threads, an OpenMP thread waiting for a busy core stalls the whole step).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import nominal_peak_gflops  # noqa: E402

C, LAYERS, BATCH, DROP_PATH, AUX_WEIGHT = 36, 20, 96, 0.2, 0.4
CONFIGS = ("reference", "ours", "ours-bf16", "ours-compile")
REFERENCE_CODE = ("reference-code", "reference-code-nhwc")


def _batch(channels_last: bool):
    import torch

    x = torch.randn(BATCH, 3, 32, 32)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, torch.randint(0, 10, (BATCH,))


def reference_step_fn():
    """The reference's step: fp32 NCHW, per-tensor SGD and clipping."""
    import torch
    from torch import nn

    from search_spaces.darts import NetworkCIFAR
    from search_spaces.reference_forward import reference_forward

    model = NetworkCIFAR(C, 10, LAYERS, True, "DARTS_V2")
    model.drop_path_prob = DROP_PATH
    model.train()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(
        model.parameters(), 0.025, momentum=0.9, weight_decay=3e-4, foreach=False
    )

    def step() -> None:
        x, y = _batch(channels_last=False)
        optimizer.zero_grad()
        logits, logits_aux = reference_forward(model, x)
        loss = criterion(logits, y)
        loss = loss + AUX_WEIGHT * criterion(logits_aux, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0, foreach=False)
        optimizer.step()

    return step


def reference_code_step_fn(root: str, channels_last: bool):
    """quark0/darts ``train.py``'s step on its own ``NetworkCIFAR``, from the user's checkout."""
    import reference_shims
    import torch
    from torch import nn

    os.chdir(os.path.join(root, "cnn"))
    reference_shims.install(root, ["cnn"])
    import genotypes  # type: ignore[import-not-found]
    from model import NetworkCIFAR as ReferenceNetwork  # type: ignore[import-not-found]

    model = ReferenceNetwork(C, 10, LAYERS, True, genotypes.DARTS_V2)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.drop_path_prob = DROP_PATH
    model.train()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.025, momentum=0.9, weight_decay=3e-4)

    def step() -> None:
        x, y = _batch(channels_last=channels_last)
        optimizer.zero_grad()
        logits, logits_aux = model(x)
        loss = criterion(logits, y)
        loss = loss + AUX_WEIGHT * criterion(logits_aux, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()

    return step


def ours_step_fn(config: str):
    """``nas-train``'s own step, built by ``TrainRun`` from the DARTS CIFAR-10 recipe's values."""
    from nas.cli.train import compose_config
    from nas.training.loop import TrainRun

    overrides = [
        f"model.darts.C={C}",
        f"model.darts.layers={LAYERS}",
        f"batch_size={BATCH}",
        f"model.drop_path={DROP_PATH}",
        "device=cpu",
        "data.max_items=2",
        "eval.max_items=2",
        "channels_last=true",
        f"amp={'bf16' if config == 'ours-bf16' else 'null'}",
        f"compile={'true' if config == 'ours-compile' else 'false'}",
    ]
    run = TrainRun(compose_config(overrides), tempfile.mkdtemp(prefix="train_step-"))
    run.net.drop_path_prob = DROP_PATH  # type: ignore[assignment]
    run.model.train()

    def step() -> None:
        x, y = _batch(channels_last=True)
        run._train_step(x, y)

    return step


def run_one(
    config: str, steps: int, warmup: int, threads: int, root: str | None = None
) -> dict[str, object]:
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if config in REFERENCE_CODE:
        assert root is not None
        step = reference_code_step_fn(root, channels_last=config == "reference-code-nhwc")
    elif config == "reference":
        step = reference_step_fn()
    else:
        step = ours_step_fn(config)
    times, cpu_times = [], []
    for i in range(warmup + steps):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result: dict[str, object] = {
        "config": config,
        "times": times,
        "cpu_times": cpu_times,
        "peak_rss_mib": peak_rss,
    }
    if config.startswith("ours"):  # counted after the timing and the memory, on one more step
        from throughput import step_flops

        result["step_gflop"] = step_flops(step) / 1e9
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=CONFIGS, action="append")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (protocol: 2)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat the configs in turn (a shared machine)"
    )
    parser.add_argument("--compile", action="store_true", help="also time ours-compile")
    parser.add_argument(
        "--reference-root",
        metavar="darts=PATH",
        help="also run quark0/darts's own train.py step from your checkout (reference-code)",
    )
    parser.add_argument(
        "--reference-channels-last",
        action="store_true",
        help="with --reference-root: also the reference with NHWC model and input",
    )
    parser.add_argument(
        "--peak-gflops",
        type=float,
        help="the machine's nominal FP32 peak, where /proc/cpuinfo cannot give it",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = run_one(args.child, args.steps, args.warmup, args.threads, args.child_root)
        print(json.dumps(result))
        return
    if args.reference_channels_last and not args.reference_root:
        raise SystemExit("--reference-channels-last needs --reference-root darts=PATH")
    root = None
    if args.reference_root:
        from reference_runs import parse_roots

        roots = parse_roots([args.reference_root])
        if "darts" not in roots:
            raise SystemExit(
                f"--reference-root {args.reference_root}: expected darts=PATH (quark0/darts)"
            )
        root = roots["darts"]
    configs = args.only or [c for c in CONFIGS if c != "ours-compile" or args.compile]
    if root is not None:
        configs = list(REFERENCE_CODE[: 2 if args.reference_channels_last else 1]) + [
            c for c in configs if c not in REFERENCE_CODE
        ]
    print(
        f"DARTS_V2 NetworkCIFAR C={C}, {LAYERS} cells, batch {BATCH}, auxiliary, drop-path "
        f"{DROP_PATH}; median of {args.rounds} x {args.steps} steps (each process after "
        f"{args.warmup} warm-ups), {args.threads} thread(s)"
    )
    peak, how = (args.peak_gflops, "--peak-gflops") if args.peak_gflops else (None, "")
    if peak is None:
        peak, how = nominal_peak_gflops(args.threads)
    print(f"nominal peak: {peak:.0f} GFLOP/s ({how})" if peak else f"nominal peak: {how}")
    results: dict[str, dict[str, list[float]]] = {
        c: {"times": [], "cpu": [], "rss": [], "gflop": []} for c in configs
    }
    for _ in range(args.rounds):  # configs in turn: a slow spell of the machine hits all of them
        for config in configs:
            cmd = [sys.executable, __file__, "--child", config, "--steps", str(args.steps)]
            cmd += ["--warmup", str(args.warmup), "--threads", str(args.threads)]
            if config in REFERENCE_CODE:
                cmd += ["--child-root", str(root)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            results[config]["times"] += r["times"]
            results[config]["cpu"] += r["cpu_times"]
            results[config]["rss"].append(r["peak_rss_mib"])
            if "step_gflop" in r:
                results[config]["gflop"].append(r["step_gflop"])
    print(
        "| config | step s (min-max) | CPU s per step | images/s | vs reference | peak RSS MiB "
        "| GFLOP per step | GFLOP/s | share of peak |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    reference_ips = None
    for config in configs:
        times = results[config]["times"]
        ips = BATCH / statistics.median(times)
        if config == ("reference-code" if root is not None else "reference"):
            reference_ips = ips
        ratio = f"{ips / reference_ips:.2f}x" if reference_ips else "-"
        rate = "- | - | -"
        if results[config]["gflop"]:
            gflop = statistics.median(results[config]["gflop"])
            gflops = gflop / statistics.median(times)
            share = f"{100 * gflops / peak:.1f} %" if peak else "-"
            rate = f"{gflop:.1f} | {gflops:.1f} | {share}"
        print(
            f"| {config} | {statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f}) | "
            f"{statistics.median(results[config]['cpu']):.2f} | {ips:.2f} | {ratio} | "
            f"{max(results[config]['rss']):.0f} | {rate} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
