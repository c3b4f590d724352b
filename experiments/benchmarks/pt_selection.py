"""Benchmark: the cost of DARTS-PT's evaluations, with and without the prefix reuse.

DARTS space (S5: 7 ops, as darts-pt) at C=16, 8 layers, random CIFAR-sized batches of 64,
``num_val_batches`` fixed; ``torch.set_num_threads(2)``. Reports the wall time of one op
projection (all candidates of one edge) for a normal and a reduce edge, and of one full
selection without fine-tuning (``proj_intv=0``: 14 op + 3 topology projections per cell type),
each with the cells before the perturbed cell type computed once per batch (reuse) or once per
candidate (no reuse). Each configuration runs in a fresh process.

    python experiments/benchmarks/pt_selection.py --num-val-batches 1
    python experiments/benchmarks/pt_selection.py --only op          # the op projections alone

Batched candidates (``selection.batch_candidates``): the same rows, candidates one by one
against one batch per decision (both with prefix reuse), alternating fresh processes for
``--rounds`` rounds, best and median; ``--nchw`` runs both in NCHW instead of channels-last:

    python experiments/benchmarks/pt_selection.py --batch-candidates --rounds 3 [--nchw]

Side by side with ruocwang/darts-pt (your own checkout, see the README's performance section):
its ``projection.project_op`` / ``project_edge`` with its ``train_search.infer`` on the same
batches, ``DartsNetworkProj`` on space s5 at the same size, against ours (prefix reuse on),
alternating fresh processes for ``--rounds`` rounds (order flipped every round), best and median:

    python experiments/benchmarks/pt_selection.py --reference-root darts-pt=/tmp/refs/darts-pt \
        --rounds 3 [--reference-channels-last]

The reference's full selection is the projection part of its ``pt_project`` (14 op projections
then 3 topology projections per cell type, as ours with ``proj_intv=0``), without its tuning
epochs and without the two whole-queue ``infer`` passes it logs before them. Memory: the peak
RSS of the process minus its RSS once the supernet is built (the evaluations' own memory).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_runs import (  # noqa: E402
    add_reference_args,
    parse_roots,
    peak_rss_mib,
    pt_full_selection,
    pt_selection,
    rss_mib,
)
from throughput import nominal_peak_gflops  # noqa: E402


def _batches(num_val_batches: int, channels_last: bool) -> list[tuple[Any, Any]]:
    import torch

    def one() -> tuple[Any, Any]:
        x = torch.randn(64, 3, 32, 32)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.randint(0, 10, (64,))

    return [one() for _ in range(num_val_batches)]


def run_reference(
    what: str, root: str, channels_last: bool, num_val_batches: int, cell_type: str, threads: int
) -> dict[str, float]:
    """The reference's projection(s) in this (fresh) process, from the user's checkout."""
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    np.random.seed(0)  # the reference picks edges and nodes with np.random
    ref = pt_selection(root, C=16, layers=8, channels_last=channels_last)
    base = rss_mib()
    queue = _batches(num_val_batches, channels_last)
    t0 = time.perf_counter()
    if what == "op":
        ref.projection.project_op(ref.model, queue, ref.args, ref.infer, cell_type=cell_type)
    else:
        pt_full_selection(ref, queue)
    seconds = time.perf_counter() - t0
    peak = peak_rss_mib()
    return {"seconds": seconds, "peak_rss_mib": peak, "peak_rss_delta_mib": peak - base}


def run_child(
    what: str,
    reuse: bool,
    num_val_batches: int,
    cell_type: str,
    threads: int = 2,
    *,
    C: int = 16,
    layers: int = 8,
    batched: bool = False,
    channels_last: bool = True,
    flops: bool = False,
) -> dict[str, float]:
    """Ours in this (fresh) process: the seconds and memory of ``what``; with ``flops``, also
    its FLOPs (``throughput.step_flops``), counted after the timing on a second supernet built
    from the same seed, so the count is of the same evaluations."""
    import torch

    from nas.plugins import build_plugin
    from nas.progress import Progress
    from nas.strategies import SearchContext
    from nas.supernet import build_supernet

    torch.set_num_threads(threads)

    def build() -> Any:
        torch.manual_seed(0)
        net = build_supernet("s5", C=C, layers=layers, num_classes=10)
        if channels_last:
            net = net.to(memory_format=torch.channels_last)
        strategy = build_plugin("search", "darts")  # configs/search/darts.yaml, as nas-search
        strategy.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0))
        return strategy

    strategy = build()
    base = rss_mib()
    batches = _batches(num_val_batches, channels_last=channels_last)

    class Context:
        search_lr = 0.025
        step_in_epoch = 0

        def val_batches(self, *, key, limit):
            yield from batches[: limit or len(batches)]

        def train_epoch(self, **kwargs):
            raise AssertionError

        def reset_weight_optimizer(self, lr):
            pass

        def checkpoint(self):
            pass

        def stop_point(self):  # no stop is requested in a benchmark
            pass

        def progress(self, *, total, desc):
            return Progress(total=total, desc=desc, enabled=False)  # nothing shown

        def log(self, event, **values):
            pass

        def all_reduce_sum(self, tensor):
            return tensor

        def broadcast(self, obj):
            return obj

    def run(strategy: Any) -> None:
        pt = build_plugin(
            "selection",
            "pt",
            proj_intv=0,
            num_val_batches=num_val_batches,
            reuse_prefix=reuse,
            batch_candidates=batched,
        )
        if what == "op":
            pt.project_op(Context(), strategy, cell_type)
        else:
            pt.select(strategy, context=Context())

    t0 = time.perf_counter()
    run(strategy)
    seconds = time.perf_counter() - t0
    peak = peak_rss_mib()
    result = {"seconds": seconds, "peak_rss_mib": peak, "peak_rss_delta_mib": peak - base}
    if flops:
        from throughput import step_flops

        fresh = build()
        result["gflop"] = step_flops(lambda: run(fresh)) / 1e9
    return result


def _child(cmd: list[str]) -> dict[str, Any]:
    """One measurement in a fresh process: its JSON line, or {"error": last stderr line}."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or [f"exit {proc.returncode}"]
        return {"error": lines[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def side_by_side(args: argparse.Namespace, root: str, rows: list[tuple[str, str]]) -> None:
    base = [sys.executable, os.path.abspath(__file__), "--num-val-batches"]
    base += [str(args.num_val_batches), "--threads", str(args.threads)]
    print(
        f"num_val_batches={args.num_val_batches}, batch 64, DARTS space (S5) C=16, 8 layers; "
        f"{args.rounds} rounds, alternating fresh processes, {args.threads} threads"
    )
    peak, how = nominal_peak_gflops(args.threads)
    print(f"nominal peak: {peak:.0f} GFLOP/s ({how})" if peak else f"nominal peak: {how}")
    print(
        "| what | cell type | run | s best | s median | peak RSS delta MiB | ours vs this | "
        "GFLOP | GFLOP/s | share of peak |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for what, ct in rows:
        ct_arg = ct if ct != "-" else "normal"
        runs = {"ours (prefix reuse)": base + ["--child", what, "1", ct_arg, "--child-flops"]}
        ref = base + ["--reference-child", what, ct_arg, "--child-root", root]
        runs["reference (darts-pt)"] = ref + ["--child-nhwc", "0"]
        if args.reference_channels_last:
            runs["reference (darts-pt), channels_last"] = ref + ["--child-nhwc", "1"]
        results: dict[str, list[dict[str, Any]]] = {label: [] for label in runs}
        for r in range(args.rounds):
            for label in list(runs)[:: 1 if r % 2 == 0 else -1]:
                results[label].append(_child(runs[label]))
        label_of = "one op projection (7 candidates)" if what == "op" else "full selection"
        ours_median = None
        for label, rs in results.items():
            errors = [x["error"] for x in rs if "error" in x]
            if errors:
                print(f"| {label_of} | {ct} | {label} | failed: {errors[0]} |")
                continue
            secs = [x["seconds"] for x in rs]
            median = statistics.median(secs)
            mem = statistics.median(x["peak_rss_delta_mib"] for x in rs)
            if ours_median is None and label.startswith("ours"):
                ours_median = median
            # the reference's time over ours: how many times faster ours is than this row
            is_ours = label.startswith("ours")
            speed = f"{median / ours_median:.2f}x" if ours_median and not is_ours else "-"
            rate = "- | - | -"
            if all("gflop" in x for x in rs):  # ours: its FLOPs over its median time
                gflop = statistics.median(x["gflop"] for x in rs)
                share = f"{100 * gflop / median / peak:.1f} %" if peak else "-"
                rate = f"{gflop:.1f} | {gflop / median:.1f} | {share}"
            print(
                f"| {label_of} | {ct} | {label} | {min(secs):.1f} | {median:.1f} | "
                f"{mem:.0f} | {speed} | {rate} |",
                flush=True,
            )


def batched_rows(args: argparse.Namespace, rows: list[tuple[str, str]]) -> None:
    """Candidates one by one against one batch per decision, fresh processes in turn."""
    base = [sys.executable, os.path.abspath(__file__), "--num-val-batches"]
    base += [str(args.num_val_batches), "--threads", str(args.threads)]
    base += ["--nchw"] if args.nchw else []
    layout = "NCHW" if args.nchw else "channels-last"
    print(
        f"num_val_batches={args.num_val_batches}, batch 64, DARTS space (S5) C=16, 8 layers, "
        f"{layout}, prefix reuse; {args.rounds} rounds, alternating fresh processes, "
        f"{args.threads} threads"
    )
    print("| what | cell type | candidates | s best | s median | peak RSS delta MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for what, ct in rows:
        ct_arg = ct if ct != "-" else "normal"
        runs = {
            "one by one": base + ["--child", what, "1", ct_arg],
            "one batch": base + ["--child", what, "1", ct_arg, "--child-batched"],
        }
        results: dict[str, list[dict[str, Any]]] = {label: [] for label in runs}
        for r in range(args.rounds):
            for label in list(runs)[:: 1 if r % 2 == 0 else -1]:
                results[label].append(_child(runs[label]))
        label_of = "one op projection (7 candidates)" if what == "op" else "full selection"
        for label, rs in results.items():
            errors = [x["error"] for x in rs if "error" in x]
            if errors:
                print(f"| {label_of} | {ct} | {label} | failed: {errors[0]} |")
                continue
            secs = [x["seconds"] for x in rs]
            mem = statistics.median(x["peak_rss_delta_mib"] for x in rs)
            print(
                f"| {label_of} | {ct} | {label} | {min(secs):.1f} | "
                f"{statistics.median(secs):.1f} | {mem:.0f} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-val-batches", type=int, default=1)
    parser.add_argument("--only", choices=["op", "full"])
    parser.add_argument(
        "--batch-candidates",
        action="store_true",
        help="compare candidates one by one with one batch per decision (selection."
        "batch_candidates), both with prefix reuse",
    )
    parser.add_argument("--nchw", action="store_true", help="NCHW instead of channels-last")
    parser.add_argument("--child-batched", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-flops", action="store_true", help=argparse.SUPPRESS)
    add_reference_args(parser)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--reference-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--child-root", help=argparse.SUPPRESS)
    parser.add_argument("--child-nhwc", choices=["0", "1"], default="0", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, reuse, cell_type = args.child
        result = run_child(
            what,
            reuse == "1",
            args.num_val_batches,
            cell_type,
            args.threads,
            batched=args.child_batched,
            channels_last=not args.nchw,
            flops=args.child_flops,
        )
        print(json.dumps(result))
        return
    if args.reference_child:
        what, cell_type = args.reference_child
        nhwc = args.child_nhwc == "1"
        result = run_reference(
            what, args.child_root, nhwc, args.num_val_batches, cell_type, args.threads
        )
        print(json.dumps(result))
        return
    if args.rounds < 1 or args.num_val_batches < 1 or args.threads < 1:
        raise SystemExit(
            f"--rounds {args.rounds} --num-val-batches {args.num_val_batches} --threads "
            f"{args.threads}: expected each >= 1"
        )
    rows = []
    if args.only in (None, "op"):
        rows += [("op", "normal"), ("op", "reduce")]
    if args.only in (None, "full"):
        rows += [("full", "-")]
    if args.batch_candidates:
        batched_rows(args, rows)
        return
    roots = parse_roots(args.reference_root)
    if roots:
        if "darts-pt" not in roots:
            raise SystemExit(
                f"--reference-root: got {', '.join(roots)}; this benchmark compares with "
                "darts-pt=PATH (a checkout of ruocwang/darts-pt)"
            )
        side_by_side(args, roots["darts-pt"], rows)
        return
    print(f"num_val_batches={args.num_val_batches}, batch 64, DARTS space (S5) C=16, 8 layers")
    print("| what | cell type | with reuse s | without reuse s | speed-up |")
    print("| --- | --- | --- | --- | --- |")
    for what, ct in rows:
        times = []
        for reuse in ("1", "0"):
            cmd = [sys.executable, __file__, "--num-val-batches", str(args.num_val_batches)]
            cmd += ["--child", what, reuse, ct if ct != "-" else "normal"]
            cmd += ["--threads", str(args.threads)] + (["--nchw"] if args.nchw else [])
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            times.append(json.loads(out.strip().splitlines()[-1])["seconds"])
        label = "one op projection (7 candidates)" if what == "op" else "full selection, no tuning"
        print(
            f"| {label} | {ct} | {times[0]:.1f} | {times[1]:.1f} | {times[1] / times[0]:.2f}x |",
            flush=True,
        )


if __name__ == "__main__":
    main()
