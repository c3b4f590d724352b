"""Benchmark on a CUDA device: the search step of every row, eager, compiled and as CUDA graphs,
fp32 and bf16.

For each setting of ``search_step.py`` (``--only`` to choose) and each of fp32 eager, bf16 eager
(``amp=bf16``: the steps under autocast, as ``nas-search amp=bf16``), fp32 compiled and bf16
compiled (``compile=true``), and fp32 and bf16 as CUDA graphs (``compile=graphs``), one fresh
process runs ``search_step.py``'s measurement of ours on the device (warm-up steps, then the median
of the timed steps, each part of a step ended by a ``torch.cuda.synchronize``) and reports the
search step, images/s, the speed-up over fp32 eager, the peak device memory
(``torch.cuda.max_memory_allocated``) and the cold first step (the compile, for the compiled runs).

    python experiments/benchmarks/gpu_step.py                      # every row, six configs
    python experiments/benchmarks/gpu_step.py --only nb201-darts1 --only darts-darts1
    python experiments/benchmarks/gpu_step.py --no-compile         # eager only (no cold compile)
    python experiments/benchmarks/gpu_step.py --only nb201-darts1 --config "fp32 eager" \
        --config "fp32 graphs"                                     # the NB201 step as CUDA graphs

Graphs (fp32 and bf16; CUDA only): ``nas-search compile=graphs``, the compiled forward and
backward recorded once as CUDA graphs (inductor's ``reduce-overhead`` mode) and replayed each
step, one launch instead of hundreds of small kernels; with ``--no-compile`` they are skipped too.

Without a CUDA device it says so in one line; ``--device cpu`` runs the same measurements on
the CPU (what the test suite does, at a tiny size with ``--C``, ``--layers``, ``--batch``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from search_step import SETTINGS, _child, _shape_flags  # noqa: E402

SEARCH_STEP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "search_step.py")
CONFIGS = (  # label, amp, compile ("graphs": compiled and recorded as CUDA graphs)
    ("fp32 eager", "none", False),
    ("bf16 eager", "bf16", False),
    ("fp32 compile", "none", True),
    ("bf16 compile", "bf16", True),
    ("fp32 graphs", "none", "graphs"),
    ("bf16 graphs", "bf16", "graphs"),
)


def measure(name: str, amp: str, compile_: bool | str, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement in a fresh process; its JSON, or {"error": its last stderr line}."""
    cmd = [sys.executable, SEARCH_STEP, "--child", name, "--device", args.device, "--amp", amp]
    cmd += [
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--threads",
        str(args.threads),
    ]
    cmd += _shape_flags(args)
    cmd += ["--cuda-graphs"] if compile_ == "graphs" else ["--compile"] if compile_ else []
    return _child(cmd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SETTINGS), action="append")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of each process")
    parser.add_argument("--no-compile", action="store_true", help="skip the compiled configs")
    parser.add_argument(
        "--config",
        choices=[label for label, _, _ in CONFIGS],
        action="append",
        help="only these configs (default: all)",
    )
    parser.add_argument("--C", type=int)
    parser.add_argument("--layers", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.threads < 1:
        raise SystemExit(
            f"--steps {args.steps} --warmup {args.warmup} --threads {args.threads}: expected "
            "steps, threads >= 1 and warmup >= 0"
        )
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            f"--device {args.device}: no CUDA device here (torch {torch.__version__}, "
            f"cuda {torch.version.cuda}); run it on a GPU machine, or --device cpu"
        )
    name_of = args.device if args.device == "cpu" else torch.cuda.get_device_name(args.device)
    print(f"{name_of}, torch {torch.__version__}; median of {args.steps} steps after {args.warmup}")
    print(
        "| setting | batch | config | search step s | images/s | vs fp32 eager | "
        "peak device MiB | first step s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for name in args.only or list(SETTINGS):
        batch = args.batch or SETTINGS[name][6]
        base: float | None = None
        for label, amp, compile_ in CONFIGS:
            if (compile_ and args.no_compile) or (args.config and label not in args.config):
                continue
            if compile_ == "graphs" and not args.device.startswith("cuda"):
                print(f"| {name} | {batch} | {label} | skipped: CUDA graphs need a CUDA device "
                      "| | | | |", flush=True)  # fmt: skip
                continue
            r = measure(name, amp, compile_, args)
            rows.append({"setting": name, "config": label, **r})
            if "error" in r:
                print(f"| {name} | {batch} | {label} | failed: {r['error']} | | | | |", flush=True)
                continue
            step = r["search_step_s"]
            base = step if base is None and label == "fp32 eager" else base
            speed = f"{base / step:.2f}x" if base else "-"
            print(
                f"| {name} | {batch} | {label} | {step:.4f} | {batch / step:.1f} | {speed} | "
                f"{r['peak_device_mib']:.0f} | {r['first_step_s']:.1f} |",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
