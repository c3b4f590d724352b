"""The reference implementations' search steps and DARTS-PT projections, for side-by-side runs.

Each builder runs in a fresh benchmark process: it moves into the reference's script folder (the
references are run from there and some add ``../`` to ``sys.path``), imports the reference's
own modules from the user's checkout through :mod:`reference_shims`, builds the supernet and
optimisers with the defaults of the reference's ``train_search.py`` and returns the two halves
of one step of that script's ``train()`` loop (data loading and accuracy bookkeeping left out,
as on our side):

- DARTS (quark0/darts ``cnn/``): ``architect.step(...)`` (first or second order), then
  ``zero_grad``, forward, loss, backward, gradient clipping at 5, SGD step;
- DARTS on NAS-Bench-201 (ruocwang/darts-pt ``nasbench201/``, ``--method darts``): both
  ``zero_grad``, ``architect.step(...)``, both ``zero_grad``, ``model.step(...)``;
- DrNAS (xiangning-chen/DrNAS ``DARTS-space/`` and ``201-space/``, Dirichlet, ``reg_type=l2``):
  ``architect.step(...)``, both ``zero_grad``, forward, loss, backward, clipping, SGD step, both
  ``zero_grad``.

- confopt (automl/ConfigurableOptimizer ``src/confopt``; DARTS and DrNAS samplers on its NB201 and
  DARTS search spaces): the statements of one step of ``ConfigurableTrainer._train_epoch``
  (``train/configurable_trainer.py``) after its epoch start, without its bookkeeping (meters,
  gradient statistics, layer-alignment scores): ``model.new_step()``, then
  ``arch_optimizer.zero_grad()``, forward, loss, backward, ``arch_optimizer.step()``, then
  ``w_optimizer.zero_grad()``, forward, loss, backward, clipping of
  ``model_weight_parameters()`` at 5, SGD step. confopt has no second-order step.

DARTS-PT's selection (ruocwang/darts-pt ``sota/cnn``, ``--method darts-proj``, space ``s5``)
runs the reference's ``projection.project_op`` / ``project_edge`` with the ``infer`` function of
its ``train_search.py`` (loaded alone: that script parses the command line at import).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

try:  # imported as experiments.benchmarks.reference_runs (tests) or from the script's folder
    from . import reference_shims
except ImportError:
    import reference_shims  # type: ignore[no-redef]

# reference name -> (repository, a file that must exist in the checkout)
REFERENCES = {
    "darts": ("quark0/darts", "cnn/model_search.py"),
    "drnas": ("xiangning-chen/DrNAS", "DARTS-space/model_search.py"),
    "darts-pt": ("ruocwang/darts-pt", "sota/cnn/projection.py"),
    "confopt": ("automl/ConfigurableOptimizer", "src/confopt/train/configurable_trainer.py"),
}

# packages of confopt whose ``__init__`` is not run: ``confopt.searchspace``'s imports all seven
# spaces (NAS-Bench-1Shot1's needs ``nasbench``, a git-only package with TensorFlow, and
# ConfigSpace) and ``confopt.train``'s the trainer (fvcore's checkpointer). The step's own modules
# are imported from the checkout; of the package namespaces they need only
# ``confopt.searchspace.DARTSSearchSpace`` (``train/search_space_handler.py``'s import).
CONFOPT_BARE_PACKAGES = ("confopt.searchspace", "confopt.train")


def parse_roots(items: list[str] | None) -> dict[str, str]:
    """``NAME=PATH`` items of ``--reference-root`` -> {name: absolute path}; one-line errors."""
    roots: dict[str, str] = {}
    for item in items or []:
        name, sep, path = item.partition("=")
        if not sep or name not in REFERENCES:
            raise SystemExit(
                f"--reference-root: got {item!r}, expected NAME=PATH with NAME one of "
                f"{', '.join(REFERENCES)} (checkouts of "
                f"{', '.join(r[0] for r in REFERENCES.values())})"
            )
        repo, marker = REFERENCES[name]
        path = os.path.abspath(os.path.expanduser(path))
        if not os.path.isfile(os.path.join(path, marker)):
            raise SystemExit(
                f"--reference-root {name}={path}: no {marker} there; expected a checkout of "
                f"github.com/{repo}"
            )
        roots[name] = path
    return roots


def _enter(root: str, script_dir: str, source_dirs: list[str]) -> None:
    """cd into the reference's script folder and import from the checkout with the shims."""
    os.chdir(os.path.join(root, script_dir))
    reference_shims.install(root, source_dirs)


# (arch_step(train_batch, val_batch), weight_step(train_batch), RSS MiB before the build)
StepFns = tuple[Callable[[Any, Any], None], Callable[[Any], None], float]


def search_step(
    reference: str,
    root: str,
    space: str,
    C: int,
    layers: int,
    order: int,
    k: int,
    channels_last: bool,
    strategy: str = "darts",
) -> StepFns:
    """The reference's step halves, and the process's RSS after its imports (the memory
    baseline: the peak is measured against it, as on our side). ``strategy`` picks the method
    where a reference has several (confopt: ``darts`` or ``drnas``)."""
    import torch
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss()
    clip = nn.utils.clip_grad_norm_
    if reference == "confopt":
        return confopt_step(root, space, C, layers, order, k, channels_last, strategy)
    if reference == "darts" and space == "darts":
        _enter(root, "cnn", ["cnn"])
        from architect import Architect  # type: ignore[import-not-found]
        from model_search import Network  # type: ignore[import-not-found]

        # quark0/darts cnn/train_search.py defaults
        args = SimpleNamespace(
            momentum=0.9, weight_decay=3e-4, arch_learning_rate=3e-4, arch_weight_decay=1e-3
        )
        lr = 0.025
        base = rss_mib()
        model = Network(C, 10, layers, criterion)
        model = _memory_format(model, channels_last)
        optimizer = torch.optim.SGD(
            model.parameters(), lr, momentum=args.momentum, weight_decay=args.weight_decay
        )
        architect = Architect(model, args)

        def arch_step(tb: Any, vb: Any) -> None:
            architect.step(*tb, *vb, lr, optimizer, unrolled=order == 2)

        def weight_step(tb: Any) -> None:
            optimizer.zero_grad()
            loss = criterion(model(tb[0]), tb[1])
            loss.backward()
            clip(model.parameters(), 5.0)
            optimizer.step()

        return arch_step, weight_step, base

    if reference == "darts-pt" and space == "nb201":
        if order != 1:
            raise SystemExit("darts-pt's NB201 code is first order only (architect_ig.py)")
        _enter(root, "nasbench201", [""])
        from nasbench201.architect_ig import Architect  # type: ignore[import-not-found]
        from nasbench201.cell_operations import (  # type: ignore[import-not-found]
            SearchSpaceNames,
        )
        from nasbench201.search_model_darts import (  # type: ignore[import-not-found]
            TinyNetworkDarts,
        )

        # darts-pt nasbench201/train_search.py defaults, --method darts
        args = SimpleNamespace(
            learning_rate=0.025,
            momentum=0.9,
            weight_decay=3e-4,
            arch_learning_rate=3e-4,
            arch_weight_decay=1e-3,
            grad_clip=5.0,
            method="darts",
        )
        base = rss_mib()
        model = TinyNetworkDarts(
            C=C,
            N=layers,
            max_nodes=4,
            num_classes=10,
            criterion=criterion,
            search_space=SearchSpaceNames["nas-bench-201"],
            args=args,
        )
        model = _memory_format(model, channels_last)
        architect = Architect(model, args)

        def arch_step(tb: Any, vb: Any) -> None:
            model.optimizer.zero_grad()
            architect.optimizer.zero_grad()
            architect.step(*tb, *vb, eta=args.learning_rate, network_optimizer=model.optimizer)

        def weight_step(tb: Any) -> None:
            model.optimizer.zero_grad()
            architect.optimizer.zero_grad()
            model.step(tb[0], tb[1], args)

        return arch_step, weight_step, base

    if reference == "drnas" and space in ("s5", "nb201"):
        if space == "s5":
            _enter(root, "DARTS-space", ["DARTS-space", ""])
            from architect import Architect  # type: ignore[import-not-found]
            from model_search import Network  # type: ignore[import-not-found]

            base = rss_mib()
            model = Network(C, 10, layers, criterion, k=k, reg_type="l2", reg_scale=1e-3)
            # DrNAS DARTS-space/train_search.py defaults
            lr, arch_lr = 0.1, 6e-4
            weights = list(model.parameters())
        else:
            _enter(root, "201-space", ["201-space", ""])
            from architect import Architect  # type: ignore[import-not-found]
            from cell_operations import NAS_BENCH_201  # type: ignore[import-not-found]
            from search_model import TinyNetwork  # type: ignore[import-not-found]

            base = rss_mib()
            model = TinyNetwork(
                C=C,
                N=layers,
                max_nodes=4,
                num_classes=10,
                criterion=criterion,
                search_space=NAS_BENCH_201,
                k=k,
                species="dirichlet",
                reg_type="l2",
                reg_scale=1e-3,
            )
            # DrNAS 201-space/train_search.py defaults; SGD on get_weights(), clipping on
            # model.parameters() (the architecture parameter included), as there
            lr, arch_lr = 0.025, 3e-4
            weights = model.get_weights()

        model = _memory_format(model, channels_last)
        args = SimpleNamespace(
            momentum=0.9,
            weight_decay=3e-4,
            arch_learning_rate=arch_lr,
            reg_type="l2",
            reg_scale=1e-3,
        )
        optimizer = torch.optim.SGD(
            weights, lr, momentum=args.momentum, weight_decay=args.weight_decay
        )
        architect = Architect(model, args)

        def arch_step(tb: Any, vb: Any) -> None:
            architect.step(*tb, *vb, lr, optimizer, unrolled=order == 2)

        def weight_step(tb: Any) -> None:
            optimizer.zero_grad()
            architect.optimizer.zero_grad()
            loss = criterion(model(tb[0]), tb[1])
            loss.backward()
            clip(model.parameters(), 5.0)
            optimizer.step()
            optimizer.zero_grad()
            architect.optimizer.zero_grad()

        return arch_step, weight_step, base

    raise SystemExit(f"no reference row for {reference} on space {space}")


def _enter_confopt(root: str) -> None:
    """Import confopt from the checkout's ``src`` (through the shims' finder: no bytecode is
    written there), its packages of ``CONFOPT_BARE_PACKAGES`` without their ``__init__``."""
    import types

    _enter(root, "src", ["src"])
    for name in CONFOPT_BARE_PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = [os.path.join(root, "src", *name.split("."))]
        sys.modules[name] = package


def confopt_step(
    root: str,
    space: str,
    C: int,
    layers: int,
    order: int,
    k: int,
    channels_last: bool,
    strategy: str,
) -> StepFns:
    """confopt's DARTS or DrNAS step on its NB201 (``nb201``), DARTS (``darts``) or DARTS
    space without ``none`` (``s5``, its ``primitives`` argument) search space, built as
    ``train/experiment.py`` builds them for a DARTS / DrNAS profile: the space, the sampler
    (``sample_frequency="step"``), ``SearchSpaceHandler.adapt_search_space`` (the sampler as a
    component; at K > 1 a ``PartialConnector(k=K)`` in every ``OperationBlock``), the sampler's
    ``sample`` as the model's sample function (the trainer's epoch start), SGD on
    ``model_weight_parameters()`` and Adam on ``arch_parameters`` with the profile's settings.

    Edge normalisation stays off at K > 1, as in DrNAS's own code and ours (a confopt profile
    with partial connections turns PC-DARTS's edge normalisation on); no regulariser term
    (DrNAS's ``reg_type=l2`` is the Adam weight decay on the architecture parameters)."""
    import torch
    import torch.nn as nn

    if order != 1:
        raise SystemExit("confopt has no second-order step (configurable_trainer.py)")
    if strategy not in ("darts", "drnas") or space not in ("nb201", "darts", "s5"):
        raise SystemExit(
            f"no confopt row for {strategy} on space {space}: expected darts or drnas on "
            "nb201, darts or s5"
        )
    _enter_confopt(root)
    from confopt.searchspace.darts.supernet import (  # type: ignore[import-not-found]
        DARTSSearchSpace,
    )
    from confopt.searchspace.nb201.supernet import (  # type: ignore[import-not-found]
        NASBench201SearchSpace,
    )

    sys.modules["confopt.searchspace"].DARTSSearchSpace = DARTSSearchSpace
    from confopt.oneshot.archsampler import (  # type: ignore[import-not-found]
        DARTSSampler,
        DRNASSampler,
    )
    from confopt.oneshot.partial_connector import (  # type: ignore[import-not-found]
        PartialConnector,
    )
    from confopt.searchspace.darts.core.genotypes import (  # type: ignore[import-not-found]
        PRIMITIVES,
    )
    from confopt.train.search_space_handler import (  # type: ignore[import-not-found]
        SearchSpaceHandler,
    )

    criterion = nn.CrossEntropyLoss()
    base = rss_mib()
    if space == "nb201":
        model = NASBench201SearchSpace(C=C, N=layers, num_classes=10, k=k)
    else:
        primitives = [p for p in PRIMITIVES if space == "darts" or p != "none"]
        model = DARTSSearchSpace(C=C, num_classes=10, layers=layers, primitives=primitives, k=k)
    # profile/profiles.py (DRNASProfile) and profile/base.py (DARTSProfile): weight lr 0.025
    # (DrNAS on the DARTS space 0.1), weight decay 3e-4 (NB201 DARTS 5e-4), arch lr 3e-4
    # (DrNAS on the DARTS space 6e-4), Adam betas (0.5, 0.999), arch weight decay 1e-3
    darts_space = space != "nb201"
    lr = 0.1 if strategy == "drnas" and darts_space else 0.025
    arch_lr = 6e-4 if strategy == "drnas" and darts_space else 3e-4
    weight_decay = 5e-4 if strategy == "darts" and not darts_space else 3e-4
    sampler_class = DRNASSampler if strategy == "drnas" else DARTSSampler
    sampler = sampler_class(arch_parameters=model.arch_parameters, sample_frequency="step")
    connector = PartialConnector(k=k) if k > 1 else None
    handler = SearchSpaceHandler(sampler=sampler, partial_connector=connector)
    handler.adapt_search_space(model)
    handler.update_sample_function_from_sampler(model)
    model = _memory_format(model, channels_last)
    w_optimizer = torch.optim.SGD(
        model.model_weight_parameters(), lr, momentum=0.9, nesterov=False, weight_decay=weight_decay
    )
    arch_optimizer = torch.optim.Adam(
        model.arch_parameters, lr=arch_lr, betas=(0.5, 0.999), weight_decay=1e-3
    )
    model.train()

    def arch_step(tb: Any, vb: Any) -> None:
        model.new_step()
        arch_optimizer.zero_grad()
        _, logits = model(vb[0])
        arch_loss = handler.add_reg_terms(model, criterion(logits, vb[1]))
        arch_loss.backward()
        arch_optimizer.step()
        handler.perturb_parameter(model)

    def weight_step(tb: Any) -> None:
        w_optimizer.zero_grad()
        _, logits = model(tb[0])
        base_loss = handler.add_reg_terms(model, criterion(logits, tb[1]))
        base_loss.backward()
        nn.utils.clip_grad_norm_(model.model_weight_parameters(), 5)
        w_optimizer.step()

    return arch_step, weight_step, base


def _memory_format(model: Any, channels_last: bool) -> Any:
    import torch

    return model.to(memory_format=torch.channels_last) if channels_last else model


def pt_selection(root: str, C: int, layers: int, channels_last: bool) -> SimpleNamespace:
    """DARTS-PT's projection on the DARTS space (s5): the model and the reference's functions."""
    import logging

    import torch
    import torch.nn as nn

    _enter(root, os.path.join("sota", "cnn"), [""])
    import nasbench201.utils as ig_utils  # type: ignore[import-not-found]
    from sota.cnn import projection  # type: ignore[import-not-found]
    from sota.cnn.model_search_darts_proj import (  # type: ignore[import-not-found]
        DartsNetworkProj,
    )
    from sota.cnn.spaces import spaces_dict  # type: ignore[import-not-found]

    # darts-pt sota/cnn/train_search.py defaults (--method darts-proj, --search_space s5)
    args = SimpleNamespace(
        learning_rate=0.025,
        momentum=0.9,
        weight_decay=3e-4,
        report_freq=50,
        fast=False,
        edge_decision="random",
        proj_crit={"normal": "acc", "reduce": "acc"},
    )
    criterion = nn.CrossEntropyLoss()
    model = DartsNetworkProj(C, 10, layers, criterion, spaces_dict["s5"], args)
    model = _memory_format(model, channels_last)
    namespace = {"args": args, "torch": torch, "ig_utils": ig_utils, "logging": logging}
    script = os.path.join(root, "sota", "cnn", "train_search.py")
    infer = reference_shims.load_function(script, "infer", namespace)
    return SimpleNamespace(model=model, args=args, infer=infer, projection=projection)


def pt_full_selection(ref: SimpleNamespace, queue: list[Any]) -> None:
    """The projections of the reference's ``pt_project`` without its tuning epochs: one op
    projection per edge, then one topology projection per node, normal cell then reduce."""
    model, args, infer, projection = ref.model, ref.args, ref.infer, ref.projection
    for _ in range(model.num_edges):
        for cell_type in ("normal", "reduce"):
            eid, opid = projection.project_op(model, queue, args, infer, cell_type=cell_type)
            model.project_op(eid, opid, cell_type=cell_type)
    for _ in range(len(model.nid2eids)):
        for cell_type in ("normal", "reduce"):
            nid, eids = projection.project_edge(model, queue, args, infer, cell_type=cell_type)
            model.project_edge(nid, eids, cell_type=cell_type)


def add_reference_args(parser: argparse.ArgumentParser, threads_default: int = 2) -> None:
    parser.add_argument(
        "--reference-root",
        nargs="+",
        metavar="NAME=PATH",
        help="run side by side with your own checkout(s) of the reference code: "
        "darts=PATH (quark0/darts), drnas=PATH (xiangning-chen/DrNAS), "
        "darts-pt=PATH (ruocwang/darts-pt), confopt=PATH (automl/ConfigurableOptimizer)",
    )
    parser.add_argument(
        "--reference-channels-last",
        action="store_true",
        help="also run the reference with channels_last model and inputs (a separate row)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per row")
    parser.add_argument("--threads", type=int, default=threads_default)


def rss_mib() -> float:
    """The process's resident set now (Linux /proc; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024
