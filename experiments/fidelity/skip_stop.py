"""Fidelity of early stopping on skip connections against confopt.

DARTS+ (Liang et al., arXiv 1909.06035) ends a DARTS search once the normal cell collects skip
connections; confopt (automl/ConfigurableOptimizer) has the rule as
``SkipConnectionEarlyStopper`` (``src/confopt/oneshot/early_stopper.py``), asked after every
epoch by ``train/configurable_trainer.py``. Ours is ``components=[skip_stop]``
(``nas/strategies/components/skip_stop.py``).

Known answers (no checkout): on DARTS-space weights made to keep 0 to 8 skip connections per
cell, the count of our component equals the count of ``skip_connect`` in the genotype the run
derives, and the decision is the rule written out.

With ``--reference-root confopt=PATH`` (a checkout of github.com/automl/ConfigurableOptimizer;
``early_stopper.py`` is loaded alone, its two imports from the package given as the stand-ins
it asks for: a model class whose ``get_num_skip_ops`` answers, and the metrics tuple):
confopt's ``check_stop`` beside our ``stop_reason`` over a grid of epochs (0-6), settings
(``max_skip_normal`` 0-2, ``max_skip_reduce`` none or 1, ``min_epochs`` 0-3) and the skip
counts of our derived genotypes: the same decision in every case. The counts themselves come
from our derivation on both sides (confopt's DARTS supernet, which derives its own genotype,
is not run).

    python experiments/fidelity/skip_stop.py --reference-root confopt=~/src/ConfigurableOptimizer

Without a checkout, the decisions are compared with confopt's recorded in
``tests/fidelity/golden/skip_stop.pt`` (``--record`` with the checkout writes them).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import os
import sys
import types
from collections import namedtuple
from typing import Any

try:
    from experiments.fidelity import common as F
except ImportError:  # run as a script
    sys.path.insert(0, __file__.rsplit("/", 3)[0])
    from experiments.fidelity import common as F

import torch

from nas.plugins import build_plugin
from nas.selection.base import derived_genotype
from nas.strategies.base import SearchContext
from nas.strategies.components.skip_stop import SkipConnectionStop
from nas.supernet import build_supernet

METHOD = "skip-connection early stopping"
REFERENCES = {
    "confopt": F.Reference("automl/ConfigurableOptimizer", "src/confopt/oneshot/early_stopper.py")
}
SETTINGS = [(n, r, m) for n in (0, 1, 2) for r in (None, 1) for m in (0, 1, 3)]
EPOCHS = range(7)
SKIP_ROWS = (0, 2, 5, 9, 14)  # edges of each cell whose skip_connect leads


def strategy_with(stopper: SkipConnectionStop, skip_rows: int) -> Any:
    torch.manual_seed(0)
    net = build_supernet("darts", C=4, layers=3, num_classes=10).double()
    s = build_plugin("search", "darts")
    s.add_components([stopper])
    s.prepare_supernet(net)
    s.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), grad_clip=None),
             generator=torch.Generator().manual_seed(0))  # fmt: skip
    with torch.no_grad():
        g = torch.Generator().manual_seed(skip_rows)
        for ct, alpha in s.arch_params.items():
            ops = s.supernet.space.cells[ct].edges[0].ops
            alpha.copy_(0.1 * torch.randn(alpha.shape, generator=g, dtype=alpha.dtype))
            alpha[:, ops.index("sep_conv_3x3")] += 1.0
            alpha[: skip_rows if ct == "normal" else max(skip_rows - 2, 0),
                  ops.index("skip_connect")] += 2.0  # fmt: skip
    return s


def _counts() -> list[dict[str, int]]:
    return [SkipConnectionStop().counts(strategy_with(SkipConnectionStop(), k)) for k in SKIP_ROWS]


def _ours() -> list[bool]:
    """Our decision for every (skip rows, settings, epoch), one supernet per skip rows."""
    out = []
    for k in SKIP_ROWS:
        stopper = SkipConnectionStop()
        s = strategy_with(stopper, k)
        for n, r, m in SETTINGS:
            stopper.max_skip_normal, stopper.max_skip_reduce, stopper.min_epochs = n, r, m
            out += [s.stop_reason(e) is not None for e in EPOCHS]
    return out


def known_answers(table: F.Table) -> None:
    counts = _counts()
    derived = []
    for k in SKIP_ROWS:
        s = strategy_with(SkipConnectionStop(), k)
        genotype: Any = derived_genotype(s)
        derived.append({ct: sum(op == "skip_connect" for op, _ in genotype.cell(ct))
                        for ct in ("normal", "reduce")})  # fmt: skip
    table.add_equal(METHOD, "skip counts = skip_connect ops of the logged genotype", counts,
                    derived)  # fmt: skip
    assert len({c["normal"] for c in counts}) > 2, "the weights must give several counts"
    expected = []
    for c, (n, r, m) in itertools.product(counts, SETTINGS):
        for e in EPOCHS:
            expected.append(e > m and (c["normal"] > n or (r is not None and c["reduce"] > r)))
    table.add_equal(METHOD, "decision = e > min_epochs and (normal > max or reduce > max)",
                    _ours(), expected)  # fmt: skip


def _reference_stopper(root: str) -> Any:
    """confopt's ``SkipConnectionEarlyStopper``, its file loaded alone with the two names it
    imports from the package."""

    class OperationStatisticsSupport:  # the base confopt asks the model to be
        pass

    stand_ins = {
        "confopt": types.ModuleType("confopt"),
        "confopt.searchspace": types.ModuleType("confopt.searchspace"),
        "confopt.searchspace.common": types.ModuleType("confopt.searchspace.common"),
        "confopt.searchspace.common.base_search": types.ModuleType("base_search"),
        "confopt.utils": types.ModuleType("confopt.utils"),
    }
    stand_ins["confopt.searchspace.common.base_search"].OperationStatisticsSupport = (  # type: ignore[attr-defined]
        OperationStatisticsSupport
    )
    stand_ins["confopt.utils"].TrainingMetrics = namedtuple(  # type: ignore[attr-defined]
        "TrainingMetrics", ["loss", "acc_top1", "acc_top5"]
    )
    saved = {k: sys.modules.get(k) for k in stand_ins}
    try:
        sys.modules.update(stand_ins)
        path = os.path.join(root, REFERENCES["confopt"].marker)
        spec = importlib.util.spec_from_file_location("confopt_early_stopper", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module.SkipConnectionEarlyStopper, OperationStatisticsSupport


def compare(table: F.Table, refs: F.Refs) -> None:
    live = refs.live("confopt")
    ref_label = refs.label("confopt")
    decisions: list[bool] = []
    if live:
        Stopper, Base = _reference_stopper(refs.root("confopt"))
        metrics = (0.0, 0.0, 0.0)
        for c, (n, r, m) in itertools.product(_counts(), SETTINGS):

            class Model(Base):  # type: ignore[misc, valid-type]
                arch_parameters = [torch.zeros(1), torch.zeros(1)]

                def get_num_skip_ops(self, c: dict[str, int] = c) -> dict[str, int]:
                    return {"op_counts/normal/skip_connect": c["normal"],
                            "op_counts/reduce/skip_connect": c["reduce"]}  # fmt: skip

            stopper = Stopper(max_skip_normal=n, max_skip_reduce=r, min_epochs=m)
            with contextlib.redirect_stdout(io.StringIO()):  # it prints the counts
                decisions += [bool(stopper.check_stop(e, Model(), metrics, metrics))
                              for e in EPOCHS]  # fmt: skip
    table.add_equal(METHOD, "decision after each epoch (SkipConnectionEarlyStopper.check_stop)",
                    _ours(), lambda: decisions, ref_label)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(F.main(METHOD, REFERENCES, known_answers, compare, doc=__doc__))
