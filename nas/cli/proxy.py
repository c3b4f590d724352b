"""``nas-proxy``: zero-cost proxies against NAS-Bench-201, from the command line.

Selection-stage tooling (``nas.proxies``; Abdelfattah et al., "Zero-Cost Proxies for
Lightweight NAS", ICLR 2021, whose NB201 protocol this follows). Scores a seeded sample of NB201
cells (default 1,000; ``--all`` for the 15,625), each the benchmark's own network (C=16, N=5,
10 classes, default PyTorch initialisation seeded per cell), every proxy on its reference input
drawn once from the embedded ``cifar10-mini`` training images, then reports Spearman rho and
Kendall tau against the benchmark's 200-epoch accuracies (CIFAR-10: ``cifar10-valid`` /
``ori-test``; CIFAR-100 and ImageNet16-120: ``x-test``), a scatter plot per proxy and the time
per cell::

    nas-proxy                                   # 1,000 cells, every proxy
    nas-proxy --sample 200 --proxies synflow,naswot --out outputs/proxies/small
    nas-proxy --all                             # the whole benchmark
    nas-proxy --out outputs/proxies --report    # the report again from the scores so far

The folder (default ``outputs/proxies/seed<seed>``) gets ``scores.jsonl`` (one line per cell,
written as it goes: a stopped run continues with ``--resume``), ``correlations.json`` and
``.md``, and ``scatter_<proxy>.png``. SIGTERM or Ctrl-C stops after the cell being scored (exit
143 / 130) with the line that continues it. Bad input prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from nas.cli.errors import one_line_errors
from nas.progress import format_duration
from nas.run.disk import atomic_write_text, check_output_folder
from nas.run.signals import StopSignals


def _parse(argv: list[str] | None) -> argparse.Namespace:
    from nas.proxies import PROXIES  # torch: after the command line parsed (fast --help)

    p = argparse.ArgumentParser(prog="nas-proxy", description=__doc__.split("\n\n")[0])
    p.add_argument("--sample", type=int, default=1000, help="cells to score (default 1000)")
    p.add_argument("--all", action="store_true", help="all 15,625 cells")
    p.add_argument("--seed", type=int, default=0, help="sample, data and initialisation seed")
    p.add_argument(
        "--proxies",
        default=",".join(PROXIES.names()),
        help=f"comma-separated names (default all: {','.join(PROXIES.names())})",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="override the data proxies' reference batch (64; naswot 128)",
    )
    p.add_argument("--zen-repeat", type=int, default=32, help="zen's repeats (reference: 32)")
    p.add_argument("--out", default=None, help="output folder (default outputs/proxies/seed<seed>)")
    p.add_argument("--resume", action="store_true", help="continue the cells of scores.jsonl")
    p.add_argument("--report", action="store_true", help="only the report from scores.jsonl")
    p.add_argument("--no-plots", action="store_true", help="skip the scatter plots")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    return p.parse_args(argv)


def _read_scores(path: Path) -> list[dict[str, Any]]:
    """The scored cells of ``scores.jsonl``; a line torn by a kill (the last) is skipped, any
    other bad line is one line naming the file and the line."""
    rows = []
    if path.is_file():
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                if n == len(lines):
                    continue  # torn by a kill: that cell is scored again on --resume
                raise ValueError(
                    f"{path}, line {n}: not a JSON row ({e.msg}); expected one scored cell "
                    "per line as nas-proxy writes them"
                ) from None
            if not isinstance(row, dict) or "index" not in row or "scores" not in row:
                raise ValueError(f"{path}, line {n}: expected a scored cell (index, scores)")
            rows.append(row)
    return rows


def report(out: Path, names: list[str] | None = None, *, plots: bool = True) -> str:
    """Correlations, tables and plots from ``out/scores.jsonl``; returns the Markdown table."""
    from nas.proxies.correlation import (  # torch (nas.proxies): after the command line parsed
        correlation_table,
        format_markdown,
        ground_truth,
    )

    rows = _read_scores(out / "scores.jsonl")
    if not rows:
        raise ValueError(f"{out / 'scores.jsonl'} holds no scored cells; run nas-proxy first")
    if names is None:
        names = [n for n in rows[0]["scores"]]
    indices = [int(r["index"]) for r in rows]
    truth = ground_truth(indices)
    scores = {n: np.array([float(r["scores"].get(n, float("nan"))) for r in rows]) for n in names}
    table = correlation_table(scores, truth)
    times = {n: float(np.mean([r["seconds"].get(n, 0.0) for r in rows])) for n in names}
    shared = float(np.mean([r["seconds"].get("gradients", 0.0) for r in rows]))
    md = format_markdown(table, times)
    note = (
        f"\n{len(rows)} NB201 cells (seed sample), signed rho / Kendall tau-b against the "
        "200-epoch accuracies: CIFAR-10 = cifar10-valid / ori-test, CIFAR-100 and "
        "ImageNet16-120 = x-test. 's per cell': each proxy's own time"
    )
    if shared:
        note += (
            f"; grad_norm, snip, fisher and jacob_cov share one forward and backward, "
            f"{shared:.3f} s per cell, not included in their own"
        )
    md += note + f"; whole cell {np.mean([r['seconds_total'] for r in rows]):.3f} s.\n"
    atomic_write_text(out / "correlations.md", md)
    atomic_write_text(
        out / "correlations.json",
        json.dumps(
            {
                "cells": len(rows),
                "targets": "CIFAR-10: cifar10-valid/ori-test; CIFAR-100, ImageNet16-120: x-test",
                "correlations": table,
                "seconds_per_cell": times,
                "shared_gradient_pass_seconds": shared,
            },
            indent=2,
        )
        + "\n",
    )
    if plots:
        from nas.analysis.proxy_figures import plot_scatter

        for n in names:
            plot_scatter(n, scores[n], truth, table[n], str(out / f"scatter_{n}.png"))
    return md


def run(args: argparse.Namespace) -> int:
    import torch  # torch: after the command line parsed (fast --help and errors)

    from nas.bench import BENCHMARK_SPACE
    from nas.proxies import get_proxy, proxy_inputs, score_many
    from nas.proxies.correlation import sample_cells
    from search_spaces.families import family_of
    from search_spaces.space import get_space

    names = [n.strip() for n in args.proxies.split(",") if n.strip()]
    for n in names:
        get_proxy(n)  # unknown names fail here, in one line
    if args.zen_repeat < 1:
        raise ValueError(f"--zen-repeat must be >= 1, got {args.zen_repeat}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    for flag, value in (("--sample", args.sample), ("--batch-size", args.batch_size)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    out = Path(args.out or f"outputs/proxies/seed{args.seed}")
    if not args.report:
        check_output_folder(out, "--out")  # before the first cell is scored
    if args.report:
        print(report(out, names, plots=not args.no_plots), end="")
        return 0
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    indices = sample_cells(15625 if args.all else args.sample, args.seed)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "scores.jsonl"
    done: set[int] = set()
    if path.exists():
        if not args.resume:
            raise ValueError(f"{path} exists; pass --resume to continue it or choose --out")
        kept = _read_scores(path)
        done = {int(r["index"]) for r in kept}
        # a line torn by a kill would run into the next row appended: keep the whole rows only
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in kept))
    # the benchmark's cells, numbered by their family, each in the paper's network (C=16, N=5)
    family = family_of(get_space(BENCHMARK_SPACE))
    C, N = family.paper_size
    inputs = proxy_inputs(names, seed=args.seed, batch_size=args.batch_size)
    options = {"zen": {"repeat": args.zen_repeat}}
    start = time.perf_counter()
    todo = [i for i in indices if i not in done]
    # SIGTERM / Ctrl-C: the cell being scored is finished and written, then the command stops
    # (143 / 130) with the line that continues it; a second Ctrl-C stops at once
    with StopSignals("nas-proxy") as stop, path.open("a") as f:
        for k, index in enumerate(todo):
            t0 = time.perf_counter()
            torch.manual_seed(args.seed * 100_003 + index)  # the cell's initialisation
            genotype = family.indexed_genotype(index)
            net, _ = family.network(genotype, C=C, layers=N, num_classes=10)
            seconds: dict[str, float] = {}
            scores = score_many(
                net, names, inputs, seed=args.seed, timings=seconds, options=options
            )
            row = {
                "index": index,
                "arch": str(genotype),
                "scores": scores,
                "seconds": seconds,
                "seconds_total": time.perf_counter() - t0,
            }
            f.write(json.dumps(row) + "\n")
            f.flush()
            elapsed = time.perf_counter() - start
            left = elapsed / (k + 1) * (len(todo) - k - 1)
            print(
                f"[{len(done) + k + 1}/{len(indices)}] cell {index}: "
                + " ".join(f"{n} {v:.4g}" for n, v in scores.items())
                + f" ({row['seconds_total']:.2f} s, ETA {format_duration(left)})",
                flush=True,
            )
            if stop.requested and k + 1 < len(todo):
                signum = stop.signum or signal.SIGTERM
                again = " ".join(shlex.quote(a) for a in args.argv if a != "--resume")
                print(
                    f"nas-proxy: stopped ({signal.Signals(signum).name}) after "
                    f"{len(done) + k + 1} of {len(indices)} cells, all in {path}; continue "
                    f"with: nas-proxy {again} --resume".replace("  ", " "),
                    file=sys.stderr,
                    flush=True,
                )
                return 128 + int(signum)
    print(f"scored {len(indices)} cells in {time.perf_counter() - start:.1f} s -> {out}")
    print(report(out, names, plots=not args.no_plots), end="")
    return 0


@one_line_errors("nas-proxy")
def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for the line that continues it
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
