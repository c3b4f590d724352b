"""GPU acceptance run: one script that exercises every CUDA path of the toolkit once.

    python experiments/benchmarks/gpu_acceptance.py --out DIR           # on a GPU machine
    python experiments/benchmarks/gpu_acceptance.py --dry-run --out DIR # the same rows, CPU, tiny

The rows (each independent: a failure is recorded with its one-line error and the run goes on;
the exit status is 1 if any row failed):

- ``search <strategy> <fp32|bf16> <eager|graphs>``: every registered search strategy
  (``nas.plugins.available("search")``) for 20 steps on the NB201 supernet, with the steps
  under autocast for bf16 (``nas-search amp=bf16``) and the supernet recorded as CUDA graphs
  for ``graphs`` (``nas-search compile=graphs``); a bf16 row also gives how far its losses are
  from the fp32 row's (same weights, data and draws);
- ``darts-pt``: a one-epoch DARTS search of a tiny supernet, then DARTS-PT's projections
  (``selection=pt``, one tuning epoch between projections, one validation batch per
  candidate), through ``nas.search`` as ``nas-search`` runs it, its loaders with pinned memory
  on a GPU (the data config's ``pin_memory: true``, as for the retraining rows);
- ``retrain <bf16|fp16>``: 50 steps of ``nas.train`` (``nas-train``) on DARTS_V2 at a small
  size with ``amp=``; fp16 uses the gradient scaler (CUDA only);
- ``nccl data-parallel``: the DARTS fp32 row again inside a one-process NCCL process group,
  so every gradient all-reduce of the strategy goes through NCCL; its losses are checked
  against the plain row's;
- ``deterministic twice``: the DARTS fp32 row run twice with deterministic algorithms
  (``torch.use_deterministic_algorithms``), its losses and architecture checked for equality.

Each row gives its median step time (every step between ``torch.cuda.synchronize`` calls), the
peak device memory (``torch.cuda.max_memory_allocated``) and images/s; the pipeline rows
(``darts-pt``, ``retrain``) give the images/s their own loop logs and the whole run's time. The
results go to ``gpu_acceptance.json`` and ``gpu_acceptance.md`` in ``DIR``, headed by the device's
name and the torch version. On a CUDA device the rows run in fresh processes (a strategy's
four rows in one, every other row alone), so that a fault on the device cannot take the later
rows with it; ``--dry-run`` runs the rows in this process on the CPU at a tiny size, the
CUDA-only rows marked "skipped: needs CUDA". ``--tiny`` gives the tiny sizes on a GPU too (a
quick check that everything runs before the full run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

FULL = {"C": 16, "layers": 2, "batch": 64, "steps": 20, "warmup": 3, "train_steps": 50}
TINY = {"C": 4, "layers": 1, "batch": 4, "steps": 3, "warmup": 1, "train_steps": 2}
BF16_TOLERANCE = 0.05  # largest relative difference of a bf16 row's first loss from fp32's
NCCL_TOLERANCE = 1e-4  # the same steps with and without a one-process NCCL group
NEEDS_CUDA = "skipped: needs CUDA"


class AcceptanceError(ValueError):
    """A row ran but its result is wrong (losses that disagree, a run that did not finish)."""


# ----------------------------------------------------------------------------------- rows


def plan(device: str) -> list[dict[str, Any]]:
    """Every row of the run, in order, as the specs ``run_row`` takes."""
    from nas.plugins import available

    cuda = device.startswith("cuda")
    rows: list[dict[str, Any]] = []
    for strategy in available("search"):
        for compiled in ("eager", "graphs"):
            for amp in ("fp32", "bf16"):
                spec: dict[str, Any] = {"kind": "search", "strategy": strategy, "amp": amp}
                spec["mode"] = compiled
                spec["group"] = strategy
                spec["name"] = f"search {strategy} {amp} {compiled}"
                spec["skip"] = NEEDS_CUDA if compiled == "graphs" and not cuda else None
                rows.append(spec)
    rows.append({"kind": "darts_pt", "name": "darts-pt", "skip": None})
    for amp in ("bf16", "fp16"):
        skip = NEEDS_CUDA if amp == "fp16" and not cuda else None
        rows.append({"kind": "retrain", "name": f"retrain {amp}", "amp": amp, "skip": skip})
    rows.append(
        {"kind": "nccl", "name": "nccl data-parallel", "skip": None if cuda else NEEDS_CUDA}
    )
    rows.append({"kind": "deterministic", "name": "deterministic twice", "skip": None})
    return rows


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def _peak_mib(device: str) -> float | None:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**20
    return None


def search_steps(
    strategy_name: str, amp: str, mode: str, device: str, size: dict[str, int]
) -> dict[str, Any]:
    """``size["steps"]`` search steps of one strategy on the NB201 supernet: the median step
    time after the warm-up, the loss of every step and a checksum of the architecture."""
    import torch

    from nas.plugins import build_plugin
    from nas.strategies import SearchContext
    from nas.supernet import build_supernet, compile_supernet

    torch.manual_seed(0)
    net = build_supernet("nb201", C=size["C"], layers=size["layers"], num_classes=10).to(device)
    if mode == "graphs":
        compile_supernet(net, cuda_graphs=True)
    opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
    dtype = {"fp32": None, "bf16": torch.bfloat16}[amp]
    steps, batch = size["steps"], size["batch"]
    ctx = SearchContext(
        net, opt, grad_clip=5.0, autocast_dtype=dtype, epochs=1, steps_per_epoch=steps
    )
    strategy = build_plugin("search", strategy_name)
    strategy.attach(ctx)
    gen = torch.Generator().manual_seed(1)  # the same batches for every row

    def batch_() -> tuple[Any, Any]:
        x = torch.randn(batch, 3, 32, 32, generator=gen)
        y = torch.randint(0, 10, (batch,), generator=gen)
        return x.to(device), y.to(device)

    _reset_peak(device)
    times, losses = [], []
    for i in range(steps):
        tb, vb = batch_(), batch_()
        strategy.begin_step(i)
        _sync(device)
        t0 = time.perf_counter()
        metrics = strategy.step(tb, vb)
        _sync(device)
        times.append(time.perf_counter() - t0)
        losses.append(float(metrics["train_loss"]))
    timed = times[size["warmup"] :] or times
    step_s = statistics.median(timed)
    arch = sum(float(p.detach().double().sum()) for p in strategy.arch_parameters())
    return {
        "step_s": step_s,
        "first_step_s": times[0],
        "images_per_s": batch / step_s,
        "peak_device_mib": _peak_mib(device),
        "losses": losses,
        "arch_checksum": arch,
    }


def _pipeline_overrides(device: str, size: dict[str, int]) -> dict[str, Any]:
    return {"device": device, "seed": 0, "batch_size": size["batch"]}


def _timed_run(device: str, fn: Any) -> tuple[Any, float]:
    _reset_peak(device)
    _sync(device)
    t0 = time.perf_counter()
    run = fn()
    _sync(device)
    return run, time.perf_counter() - t0


def darts_pt(device: str, size: dict[str, int], work: str) -> dict[str, Any]:
    """A tiny DARTS search (one epoch), then DARTS-PT's projections with one tuning epoch
    between them, as ``nas-search selection=pt``."""
    import nas

    batch = size["batch"]
    overrides = _pipeline_overrides(device, size)
    # two splits of `steps` batches each: one epoch of `steps` search steps
    overrides.update({"epochs": 1, "data.max_items": 2 * batch * size["steps"], "eval": False})
    overrides["figures"] = False
    overrides.update({"space.C": size["C"], "space.layers": size["layers"]})
    overrides.update({"selection.proj_intv": 1, "selection.num_val_batches": 1})
    run, wall = _timed_run(
        device,
        lambda: nas.search(
            "nb201",
            "darts",
            "pt",
            data="cifar10-mini",
            overrides=overrides,
            run_dir=os.path.join(work, "darts-pt"),
        ),
    )
    if not run.finished or run.genotype is None:
        raise AcceptanceError(f"the DARTS-PT run in {run.path} wrote no genotype")
    return _pipeline_result(run, wall, device, batch) | {"genotype": str(run.genotype)}


def retrain(amp: str, device: str, size: dict[str, int], work: str) -> dict[str, Any]:
    """``train_steps`` steps of ``nas.train`` on DARTS_V2 (C=8, 5 cells) under ``amp``."""
    import nas

    batch = size["batch"]
    overrides = _pipeline_overrides(device, size)
    overrides.update({"epochs": 1, "data.max_items": batch * size["train_steps"], "amp": amp})
    overrides["log_every"] = 1  # a step event per step: the count is checked below
    overrides.update({"model.darts.C": 8, "model.darts.layers": 5})
    run, wall = _timed_run(
        device,
        lambda: nas.train(
            "DARTS_V2", data="cifar10-mini", overrides=overrides, run_dir=os.path.join(work, amp)
        ),
    )
    if not run.finished:
        raise AcceptanceError(f"the training in {run.path} wrote no results.json")
    steps = [e for e in run.events if e.get("event") == "step"]
    if len(steps) != size["train_steps"]:
        raise AcceptanceError(
            f"the training logged {len(steps)} steps, expected {size['train_steps']}"
        )
    result = _pipeline_result(run, wall, device, batch)
    result["losses"] = [float(e["train_loss"]) for e in steps]
    if not all(math.isfinite(x) for x in result["losses"]):
        raise AcceptanceError(f"the training under amp={amp} logged a non-finite loss")
    return result


def _pipeline_result(run: Any, wall: float, device: str, batch: int) -> dict[str, Any]:
    """What a pipeline row reports: the images/s its loop logged, the step time that rate
    means, the whole run's time and the peak device memory."""
    rates = [e["images_per_s"] for e in run.epochs if "images_per_s" in e]
    if not rates:
        raise AcceptanceError(f"the run in {run.path} logged no epoch with images_per_s")
    losses = [e[k] for e in run.epochs for k in ("train_loss",) if k in e]
    rate = statistics.median(rates)
    return {
        "step_s": batch / rate,
        "images_per_s": rate,
        "run_s": wall,
        "peak_device_mib": _peak_mib(device),
        "losses": losses,
    }


def nccl_steps(device: str, size: dict[str, int]) -> dict[str, Any]:
    """The DARTS fp32 eager row inside a one-process NCCL group: every all-reduce of the
    weight and architecture gradients runs through NCCL (the toolkit starts no group for one
    process, so the group is made here, as ``nas.distributed.init_distributed`` makes it)."""
    import torch
    import torch.distributed as dist

    from nas import distributed as D

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dev = torch.device(device)
    torch.cuda.set_device(dev)
    dist.init_process_group(backend="nccl", rank=0, world_size=1, device_id=dev)
    try:
        if dist.get_backend() != "nccl" or not D.is_initialized():
            raise AcceptanceError(f"the process group runs {dist.get_backend()}, expected nccl")
        return search_steps("darts", "fp32", "eager", device, size)
    finally:
        dist.destroy_process_group()


def deterministic_twice(device: str, size: dict[str, int]) -> dict[str, Any]:
    """The DARTS fp32 eager row twice with deterministic algorithms: equal losses and
    architecture, or an ``AcceptanceError`` naming the first difference."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    try:
        first = search_steps("darts", "fp32", "eager", device, size)
        second = search_steps("darts", "fp32", "eager", device, size)
    finally:
        torch.use_deterministic_algorithms(False)
    if first["losses"] != second["losses"]:
        i = next(i for i, (a, b) in enumerate(zip(first["losses"], second["losses"])) if a != b)
        raise AcceptanceError(
            f"deterministic runs differ at step {i}: loss {first['losses'][i]!r} vs "
            f"{second['losses'][i]!r}"
        )
    if first["arch_checksum"] != second["arch_checksum"]:
        raise AcceptanceError(
            f"deterministic runs end with different architectures: checksum "
            f"{first['arch_checksum']!r} vs {second['arch_checksum']!r}"
        )
    return second | {"equal": True}


def run_row(spec: dict[str, Any], device: str, size: dict[str, int], work: str) -> dict[str, Any]:
    """One row's measurements (raises on failure)."""
    kind = spec["kind"]
    if kind == "search":
        return search_steps(spec["strategy"], spec["amp"], spec["mode"], device, size)
    if kind == "darts_pt":
        return darts_pt(device, size, work)
    if kind == "retrain":
        return retrain(spec["amp"], device, size, work)
    if kind == "nccl":
        return nccl_steps(device, size)
    if kind == "deterministic":
        return deterministic_twice(device, size)
    raise ValueError(f"row kind {kind!r}: expected search, darts_pt, retrain, nccl, deterministic")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{type(exc).__name__}: {text}"[:300]


def row_in_process(
    spec: dict[str, Any], device: str, size: dict[str, int], work: str
) -> dict[str, Any]:
    """A row's record: its spec, ``status`` ``ok`` / ``failed`` / ``skipped`` and the results
    or the one-line error."""
    record = {k: v for k, v in spec.items() if k not in ("skip", "group")}
    if spec.get("skip"):
        return record | {"status": "skipped", "reason": spec["skip"]}
    try:
        return record | {"status": "ok"} | run_row(spec, device, size, work)
    except Exception as exc:  # a row's failure is its record; the next row runs
        traceback.print_exc(file=sys.stderr)
        return record | {"status": "failed", "error": _one_line(exc)}


ROW_MARK = "gpu_acceptance row: "  # a child's result lines, among the runs' own output


def rows_in_child(
    specs: list[dict[str, Any]], device: str, size: dict[str, int], work: str, timeout: float
) -> list[dict[str, Any]]:
    """A group of rows in a fresh process (a device fault or a hang stays in it): each row's
    record as the child prints it; the rows it did not reach fail with its last line."""
    payload = json.dumps({"specs": specs, "device": device, "size": size, "work": work})
    cmd = [sys.executable, os.path.abspath(__file__), "--child", payload]
    limit = timeout * max(1, sum(not s.get("skip") for s in specs))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
        out, err, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err, code = f"timed out after {limit:.0f} s", None
    done = [
        json.loads(line[len(ROW_MARK) :]) for line in out.splitlines() if line.startswith(ROW_MARK)
    ]
    if len(done) < len(specs):
        last = (err or out).strip().splitlines() or [f"exit {code}"]
        for spec in specs[len(done) :]:
            record = {k: v for k, v in spec.items() if k not in ("skip", "group")}
            done.append(record | {"status": "failed", "error": last[-1][:300]})
    return done


def groups(specs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The rows in runs of the same ``group`` (one process each on a CUDA device: the four
    rows of a strategy share a process and the compile caches; the others run alone)."""
    out: list[list[dict[str, Any]]] = []
    for spec in specs:
        if out and spec.get("group") is not None and out[-1][-1].get("group") == spec["group"]:
            out[-1].append(spec)
        else:
            out.append([spec])
    return out


# ------------------------------------------------------------------------------ checks


def compare_precisions(rows: list[dict[str, Any]]) -> None:
    """Give every bf16 search row its loss agreement with the fp32 row of the same strategy
    and mode, and the NCCL row its agreement with the plain DARTS row; a disagreement beyond
    the tolerance turns the row into a failure."""
    by_name = {r["name"]: r for r in rows}
    for r in rows:
        if r["status"] != "ok":
            continue
        if r["kind"] == "search" and r["amp"] == "bf16":
            ref = by_name.get(f"search {r['strategy']} fp32 {r['mode']}")
            tolerance, what = BF16_TOLERANCE, "bf16 vs fp32"
        elif r["kind"] == "nccl":
            ref = by_name.get("search darts fp32 eager")
            tolerance, what = NCCL_TOLERANCE, "nccl vs single process"
        else:
            continue
        if ref is None or ref["status"] != "ok":
            r["agreement"] = "no fp32 row to compare with"
            continue
        rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(r["losses"], ref["losses"])]
        r["loss_rel_diff_first"], r["loss_rel_diff_max"] = rel[0], max(rel)
        r["agreement"] = f"{what}: first loss {rel[0]:.2e}, max {max(rel):.2e}"
        if rel[0] > tolerance:
            r["status"] = "failed"
            r["error"] = (
                f"{what}: first-step loss differs by {rel[0]:.2e} (relative), "
                f"expected at most {tolerance:g}"
            )


# ----------------------------------------------------------------------------- output


def _fmt(value: Any, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(header: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The Markdown report: the device, torch and sizes, then one line per row."""
    lines = [
        "# GPU acceptance run",
        "",
        f"- device: {header['device_name']} ({header['device']})",
        f"- torch: {header['torch']} (CUDA {header['cuda']})",
        f"- mode: {header['mode']}; sizes: {json.dumps(header['size'])}",
        f"- rows: {header['ok']} ok, {header['failed']} failed, {header['skipped']} skipped",
        "",
        "| row | status | step s | images/s | peak device MiB | loss agreement | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        note = r.get("error") or r.get("reason") or ""
        if r["status"] == "ok" and "run_s" in r:
            note = f"whole run {r['run_s']:.1f} s; step time from the loop's images/s"
        if r["status"] == "ok" and r.get("equal"):
            note = "two runs: equal losses and architecture"
        lines.append(
            f"| {r['name']} | {r['status']} | {_fmt(r.get('step_s'), 4)} | "
            f"{_fmt(r.get('images_per_s'), 1)} | {_fmt(r.get('peak_device_mib'), 0)} | "
            f"{r.get('agreement', '')} | {note.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for the JSON and Markdown report (required)")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    parser.add_argument(
        "--dry-run", action="store_true", help="the CPU at a tiny size (what the tests run)"
    )
    parser.add_argument("--tiny", action="store_true", help="the tiny sizes on any device")
    parser.add_argument(
        "--row-timeout", type=float, default=240.0, help="seconds per row (CUDA, default 240)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        job = json.loads(args.child)
        for spec in job["specs"]:
            record = row_in_process(spec, job["device"], job["size"], job["work"])
            print(ROW_MARK + json.dumps(record), flush=True)
        return 0
    if not args.out:
        parser.error("--out is missing: expected the folder for the JSON and Markdown report")
    device = "cpu" if args.dry_run else args.device
    if device != "cpu" and not device.startswith("cuda"):
        parser.error(f"--device {device}: expected cuda, cuda:N or cpu")
    if args.row_timeout <= 0:
        parser.error(f"--row-timeout {args.row_timeout}: expected a positive number of seconds")
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(
            f"--device {device}: no CUDA device here (torch {torch.__version__}); run it on a "
            "GPU machine, or --dry-run for the CPU"
        )
    size = TINY if args.dry_run or args.tiny else FULL
    os.makedirs(args.out, exist_ok=True)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU"
    header: dict[str, Any] = {
        "device": device,
        "device_name": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "mode": "dry run (CPU, tiny)" if args.dry_run else ("tiny" if args.tiny else "full"),
        "size": size,
    }
    print(f"{name}, torch {torch.__version__}", flush=True)
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_acceptance_") as work:
        for group in groups(plan(device)):
            if device.startswith("cuda"):
                done = rows_in_child(group, device, size, work, args.row_timeout)
            else:
                done = [row_in_process(spec, device, size, work) for spec in group]
            for r in done:
                rows.append(r)
                print(f"{r['name']}: {r['status']} {r.get('error') or r.get('reason') or ''}")
    compare_precisions(rows)
    for status in ("ok", "failed", "skipped"):
        header[status] = sum(r["status"] == status for r in rows)
    header["total_s"] = time.perf_counter() - started
    with open(os.path.join(args.out, "gpu_acceptance.json"), "w") as f:
        json.dump({**header, "rows": rows}, f, indent=1)
    report = table(header, rows)
    with open(os.path.join(args.out, "gpu_acceptance.md"), "w") as f:
        f.write(report)
    print(report, flush=True)
    return 1 if header["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
