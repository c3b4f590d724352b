"""A tiny official-format NAS-Bench-201 file, written with the package's own classes.

Same structure as ``NAS-Bench-201-v1_[01]-*.pth``: ``meta_archs`` (all 15,625 arch strings),
``arch2infos`` (index -> {"less": 12-epoch, "full": 200-epoch ``ArchResults.state_dict()``}),
``evaluated_indexes``; legacy (non-zip) torch serialisation as in 2020; numpy scalars inside,
which torch >= 2.6's default ``weights_only=True`` refuses. A few cells, a few epochs, random
but seeded curves.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from nas.bench import NB201

CELLS = (0, 1835, 6111)
EVAL_SETS = {
    "cifar10-valid": ("x-valid", "ori-test"),
    "cifar10": ("ori-test",),
    "cifar100": ("x-valid", "x-test", "ori-test"),
    "ImageNet16-120": ("x-valid", "x-test", "ori-test"),
}
EPOCHS = {"full": 4, "less": 2}


def _run(rng, dataset, arch, seed, epochs, params_mb, recorded=None):
    """One training run; ``recorded``: the epochs its curves hold (default: all of them)."""
    from nas_201_api import ResultsCount

    train_acc = OrderedDict((e, float(rng.uniform(10, 100))) for e in range(epochs))
    train_loss = OrderedDict((e, float(rng.uniform(0, 3))) for e in range(epochs))
    run = ResultsCount(
        dataset,
        OrderedDict(weight=torch.zeros(3)),
        train_acc,
        train_loss,
        np.float64(params_mb),
        np.float64(rng.uniform(10, 200)),
        {"name": "infer.tiny", "C": 16, "N": 5, "arch_str": arch, "class_num": 10},
        seed,
        epochs,
        [float(rng.uniform(0.005, 0.02))],
    )
    run.update_train_info(
        train_acc,
        None,
        train_loss,
        OrderedDict((e, float(rng.uniform(5, 9))) for e in range(epochs)),
    )
    accs, losses, times = {}, {}, {}
    for name in EVAL_SETS[dataset]:
        for e in range(epochs):
            accs[f"{name}@{e}"] = float(rng.uniform(10, 100))
            losses[f"{name}@{e}"] = float(rng.uniform(0, 3))
            times[f"{name}@{e}"] = float(rng.uniform(0.5, 1.0))
    run.update_eval(accs, losses, times)
    if recorded is not None:  # as if only some epochs had been logged
        for curve in (run.train_acc1es, run.train_acc5es, run.train_losses, run.train_times):
            if curve is not None:
                for e in [e for e in curve if e not in recorded]:
                    del curve[e]
        for curve in (run.eval_acc1es, run.eval_losses, run.eval_times):
            for key in [k for k in curve if int(k.split("@")[1]) not in recorded]:
                del curve[key]
    return run


def write_tiny_official(path: Path, cells=CELLS, recorded=None) -> Path:
    """The file; ``recorded``: the epochs that every 200-epoch ("full") run's curves hold, as
    in a file where only some epochs were logged (default: all)."""
    from nas_201_api import ArchResults

    bench = NB201()
    rng = np.random.default_rng(201)
    arch2infos = {}
    for index in cells:
        arch = bench.arch(index)
        entry = {}
        for part, epochs in EPOCHS.items():
            results = ArchResults(index, arch)
            for dataset in EVAL_SETS:
                # two runs for cell 0 (as for 7,456 real cells), three for the others
                seeds = (777, 888) if index == 0 else (777, 888, 999)
                if part == "less":
                    seeds = seeds[:1]
                for seed in seeds:
                    mb = bench.params(index, dataset=dataset) / 1e6
                    kept = recorded if part == "full" else None
                    run = _run(rng, dataset, arch, seed, epochs, mb, kept)
                    results.update(dataset, seed, run)
            entry[part] = results.state_dict()
        arch2infos[index] = entry
    data = {
        "meta_archs": [bench.arch(i) for i in range(15625)],
        "arch2infos": arch2infos,
        "evaluated_indexes": list(cells),
    }
    torch.save(data, path, _use_new_zipfile_serialization=False)
    return path
