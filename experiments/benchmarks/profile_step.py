"""Profile: where the time of one search step goes, by operator (``torch.profiler``).

The settings and the step of ``search_step.py`` (``--only`` one of its rows), on ours or on the
reference code (``--reference-root NAME=PATH``, as there): a few warm-up steps, then
``--steps`` profiled steps; prints the operators by self CPU time (the share of the profiled
time each takes without its children) and a summary by kind: convolution forward and backward,
batch norm, elementwise and pooling, copies and layout changes, the rest.

    python experiments/benchmarks/profile_step.py --only nb201-darts1
    python experiments/benchmarks/profile_step.py --only nb201-darts1 --amp bf16
    python experiments/benchmarks/profile_step.py --only nb201-darts1 \
        --reference-root darts-pt=/tmp/refs/darts-pt --reference-channels-last
    python experiments/benchmarks/profile_step.py --only nb201-darts1 \
        --reference-root confopt=/tmp/refs/confopt      # one reference of the row at a time

``--C``, ``--layers``, ``--batch`` shrink the setting (as in ``search_step.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_runs import parse_roots  # noqa: E402
from reference_runs import search_step as reference_search_step  # noqa: E402
from search_step import REFERENCE_OF, SETTINGS, _override_shapes, build_ours  # noqa: E402

# operator name fragments -> kind (the first that matches)
KINDS = (
    ("convolution_backward", "conv backward"),
    ("conv", "conv forward"),
    ("batch_norm", "batch norm"),
    ("threshold_backward", "ReLU"),
    ("relu", "ReLU"),
    ("pool", "pooling"),
    ("copy_", "copies, layout"),
    ("contiguous", "copies, layout"),
    ("clone", "copies, layout"),
    ("cat", "copies, layout"),
    ("empty", "allocation"),
    ("zero", "allocation"),
    ("fill_", "allocation"),
    ("mul", "elementwise"),
    ("add", "elementwise"),
    ("div", "elementwise"),
    ("sub", "elementwise"),
    ("dot", "mixing-weight gradients"),
    ("sgd", "optimiser"),
    ("foreach", "optimiser"),
    ("norm", "optimiser"),
)


def kind_of(name: str) -> str:
    low = name.lower()
    for fragment, kind in KINDS:
        if fragment in low:
            return kind
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SETTINGS), required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--channels-last", choices=["auto", "true", "false"], default="auto")
    parser.add_argument("--C", type=int, help="override the setting's initial channels")
    parser.add_argument("--layers", type=int, help="override the setting's cells (NB201: N)")
    parser.add_argument("--batch", type=int, help="override the setting's batch size")
    parser.add_argument("--reference-root", nargs="+", metavar="NAME=PATH")
    parser.add_argument("--reference-channels-last", action="store_true")
    parser.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none",
                        help="ours under autocast")  # fmt: skip
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.threads < 1 or args.top < 1:
        raise SystemExit(
            f"--steps {args.steps} --warmup {args.warmup} --threads {args.threads} --top "
            f"{args.top}: expected steps, threads, top >= 1 and warmup >= 0"
        )
    _override_shapes(args)
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    space, C, layers, strategy, order, k, batch, _, _ = SETTINGS[args.only]
    if args.reference_root:
        roots = parse_roots(args.reference_root)
        refs = REFERENCE_OF.get(args.only, ())
        given = [ref for ref in refs if ref in roots]
        if len(given) != 1:
            wanted = " or ".join(f"{ref}=PATH" for ref in refs) or "nothing (no reference code)"
            raise SystemExit(
                f"--only {args.only} profiles one reference: expected --reference-root "
                f"{wanted}, got {', '.join(roots) or 'none of them'}"
            )
        ref = given[0]
        channels_last = args.reference_channels_last
        arch_step, weight_step, _ = reference_search_step(
            ref, roots[ref], space, C, layers, order, k, channels_last, strategy
        )
        who = f"reference ({ref}{', channels_last' if channels_last else ''})"
    else:
        channels_last = args.channels_last != "false"  # auto: NHWC, as nas-search
        arch_step, weight_step = build_ours(args.only, channels_last, amp=args.amp)
        amp = "" if args.amp == "none" else f", amp {args.amp}"
        who = f"ours ({'NHWC' if channels_last else 'NCHW'}{amp})"

    def batch_() -> tuple[Any, Any]:
        x = torch.randn(batch, 3, 32, 32)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, torch.randint(0, 10, (batch,))

    def step() -> None:
        tb, vb = batch_(), batch_()
        arch_step(tb, vb)
        weight_step(tb)

    for _ in range(args.warmup):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    by_kind: dict[str, float] = defaultdict(float)
    for e in events:
        by_kind[kind_of(e.key)] += e.self_cpu_time_total
    print(f"{args.only}, {who}: {args.steps} profiled steps, self CPU {total / 1e6:.2f} s")
    print("| kind | share of self CPU time |")
    print("| --- | --- |")
    for kind, t in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"| {kind} | {100 * t / total:.1f} % |")
    print(f"\n| operator (top {args.top}) | calls per step | self CPU share |")
    print("| --- | --- | --- |")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[: args.top]:
        share = 100 * e.self_cpu_time_total / total
        print(f"| {e.key} | {e.count / args.steps:.0f} | {share:.1f} % |")


if __name__ == "__main__":
    main()
