"""Fault injection: a whole pipeline killed with SIGKILL at random instants, resumed each time,
ends exactly where an uninterrupted run ends.

The pipeline is tiny and fixed-seed: a search with a component (DARTS + beta-DARTS on
NAS-Bench-201) and DARTS-PT's selection (projections with tuning between them), then ``nas-train``
of the genotype it found. Each stage first runs once uninterrupted (the reference). Then
``--kills`` instants are drawn uniformly over the reference's whole duration (search and
selection, then retraining; so they fall between steps, inside steps, inside checkpoint writes,
inside the selection and the retraining alike); at each, the running command is killed with
SIGKILL (no handler runs) and started again: with ``resume=true`` where a checkpoint exists,
else afresh, as a user would. When the kills are spent, each stage runs to its end.

Checked: the search's genotype and config, every step and epoch record of both stages (wall-
clock figures aside), and the retraining's final results equal the reference's to the last bit.

    python experiments/reliability/fault_injection.py --kills 8 --out /tmp/fi
    python experiments/reliability/fault_injection.py --kills 100 --seed 1 --out /tmp/soak

Writes ``fault_injection.json`` in ``--out``: the kills drawn, the kills that landed (the
process was still running), the restarts, the durations, and ``equal`` (exit code 1 if not).
``tests/run/test_fault_injection.py`` runs it with 8 kills.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", NAS_PROGRESS="none")
SEARCH = [
    "space=nb201", "search=darts", "components=[beta_darts]", "selection=pt",
    "selection.proj_intv=1", "selection.num_val_batches=1", "epochs=2", "data.max_items=64",
    "batch_size=16", "figures=false",
]  # fmt: skip
TRAIN = [
    "model.nb201.C=4", "model.nb201.N=1", "epochs=2", "data.max_items=64",
    "batch_size=16",
]  # fmt: skip
# what differs between two runs of the same settings: wall-clock figures
TIMING = ("images_per_s", "epoch_time_s", "train_seconds", "seconds", "time_s", "eta_s")


def _argv(stage: str, folder: Path, genotype_of: Path | None) -> list[str]:
    if stage == "search":
        return [sys.executable, "-m", "nas.cli.search", *SEARCH, f"hydra.run.dir={folder}"]
    assert genotype_of is not None
    return [
        sys.executable, "-m", "nas.cli.train", f"genotype={genotype_of}", *TRAIN,
        f"hydra.run.dir={folder}",
    ]  # fmt: skip


def _start(stage: str, folder: Path, genotype_of: Path | None) -> subprocess.Popen[str]:
    cmd = _argv(stage, folder, genotype_of)
    if (folder / "checkpoints" / "last.pt").is_file():
        cmd.append("resume=true")
    return subprocess.Popen(
        cmd, env=ENV, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def _finish(process: subprocess.Popen[str], what: str) -> None:
    _, err = process.communicate(timeout=1800)
    if process.returncode != 0:
        raise SystemExit(f"{what} failed ({process.returncode}): {err.strip()}")


def _without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def _events(folder: Path) -> list[Any]:
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [_without_timing(json.loads(line)) for line in lines if line.strip()]


def _results(folder: Path) -> Any:
    return _without_timing(json.loads((folder / "results.json").read_text()))


def reference(out: Path) -> dict[str, float]:
    """The uninterrupted pipeline in ``out/reference``; each stage's duration in seconds."""
    durations = {}
    search, train = out / "reference" / "search", out / "reference" / "train"
    for stage, folder, genotype_of in (("search", search, None), ("train", train, search)):
        t0 = time.perf_counter()
        _finish(_start(stage, folder, genotype_of), f"reference {stage}")
        durations[stage] = time.perf_counter() - t0
    return durations


def faulted(out: Path, durations: dict[str, float], kills: int, seed: int) -> dict[str, Any]:
    """The pipeline in ``out/faulted`` killed at ``kills`` random instants; what happened."""
    rng = random.Random(seed)
    total = sum(durations.values())
    instants = sorted(rng.uniform(0.0, total) for _ in range(kills))
    per_stage: dict[str, list[float]] = {"search": [], "train": []}
    for t in instants:  # an instant of the reference's time line: its stage and the delay in it
        if t < durations["search"]:
            per_stage["search"].append(t)
        else:
            per_stage["train"].append(t - durations["search"])
    search, train = out / "faulted" / "search", out / "faulted" / "train"
    report: dict[str, Any] = {"drawn": instants, "landed": {}, "restarts": {}}
    for stage, folder, genotype_of in (("search", search, None), ("train", train, search)):
        landed = restarts = 0
        for delay in per_stage[stage]:
            # each kill interrupts a fresh start (resumed where a checkpoint exists) after
            # ``delay`` seconds of its own: a random point of the work still to do
            process = _start(stage, folder, genotype_of)
            restarts += 1
            try:
                process.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.wait()
                landed += 1
                continue
            if process.returncode != 0:
                err = process.stderr.read().strip() if process.stderr else ""
                raise SystemExit(f"{stage} failed after a kill ({process.returncode}): {err}")
        if not (folder / ("results.json" if stage == "train" else "genotype.json")).is_file():
            _finish(_start(stage, folder, genotype_of), f"faulted {stage}")
            restarts += 1
        report["landed"][stage] = landed
        report["restarts"][stage] = restarts
    return report


def _config(folder: Path, root: Path) -> str:
    """The run's config.yaml without its folder and its ``resume`` flag (a resumed run's)."""
    lines = (folder / "config.yaml").read_text().replace(str(root), "").splitlines()
    return "\n".join(line for line in lines if not line.startswith("resume:"))


def compare(out: Path) -> dict[str, bool]:
    ref, got = out / "reference", out / "faulted"
    return {
        "genotype": (ref / "search" / "genotype.json").read_text()
        == (got / "search" / "genotype.json").read_text(),
        "search config": _config(ref / "search", ref) == _config(got / "search", got),
        "search records": _events(ref / "search") == _events(got / "search"),
        "train records": _events(ref / "train") == _events(got / "train"),
        "train results": _results(ref / "train") == _results(got / "train"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="draws the kill instants")
    parser.add_argument("--out", required=True, help="a new folder for the runs and the JSON")
    args = parser.parse_args(argv)
    out = Path(args.out).absolute()
    if out.exists() and any(out.iterdir()):
        parser.error(f"--out {out} is not empty; expected a new folder")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    durations = reference(out)
    report = faulted(out, durations, args.kills, args.seed)
    checks = compare(out)
    result = {
        "kills": args.kills,
        "seed": args.seed,
        "reference_s": durations,
        **report,
        "checks": checks,
        "equal": all(checks.values()),
        "wall_s": time.perf_counter() - t0,
    }
    (out / "fault_injection.json").write_text(json.dumps(result, indent=1) + "\n")
    landed = sum(report["landed"].values())
    print(
        f"{args.kills} kills drawn, {landed} landed (search {report['landed']['search']}, "
        f"train {report['landed']['train']}); "
        + ("equal to the uninterrupted run" if result["equal"] else f"DIFFERS: {checks}")
    )
    return 0 if result["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
