"""Planted bugs in DARTS-PT's perturbation-based selection (applied in memory: one line of
``PerturbationSelection``'s source changed and the method recompiled; no file is edited) make
its comparison with the recorded outputs of the reference fail, naming the rows they move: the
suite catches what it claims to."""

from __future__ import annotations

import inspect
import textwrap

import pytest

from experiments.fidelity import common as F
from experiments.fidelity import darts_pt as script
from nas.selection import perturbation
from nas.selection.perturbation import PerturbationSelection

pytestmark = pytest.mark.slow


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def plant(monkeypatch, method: str, line: str, bug: str) -> None:
    """``PerturbationSelection.<method>`` with its one ``line`` replaced by ``bug``."""
    source = textwrap.dedent(inspect.getsource(getattr(PerturbationSelection, method)))
    assert source.count(line) == 1, f"{method}: {line!r} is not one line of it"
    namespace: dict = {}
    exec(compile(source.replace(line, bug), perturbation.__file__, "exec"),  # noqa: S102
         vars(perturbation), namespace)  # fmt: skip
    monkeypatch.setattr(PerturbationSelection, method, namespace[method])


def test_op_kept_is_the_removal_that_hurts_least(monkeypatch):
    plant(monkeypatch, "project_op",
          "best = min(feasible, key=lambda i: (scores[i][0], i))",
          "best = max(feasible, key=lambda i: (scores[i][0], i))")  # fmt: skip
    failed = failed_rows()
    assert "acc: op chosen per edge, edges kept per node" in failed
    assert "acc: genotype after the full projection" in failed
    # the projections after the first wrong one score another supernet
    assert "acc: every op score (accuracy %, loss), 28 edges" in failed
    assert not any(q.startswith("loss:") or q.startswith("setting:") for q in failed)


def test_masked_edge_renormalised(monkeypatch):
    # the bug: the edge's other weights renormalised after removing op k (the paper leaves them)
    plant(monkeypatch, "project_op",
          "w[cell_type][edge, k] = 0.0",
          "w[cell_type][edge, k] = 0.0; w[cell_type][edge] /= w[cell_type][edge].sum()")  # fmt: skip
    failed = failed_rows()
    assert "acc: every op score (accuracy %, loss), 28 edges" in failed
    assert "loss: every op score (accuracy %, loss), 28 edges" in failed
    assert not any(q.startswith("setting:") for q in failed)


def test_edges_kept_are_the_removals_that_hurt_least(monkeypatch):
    plant(monkeypatch, "project_topology",
          "i = max(feasible, key=lambda i: (scores[i][0], i))",
          "i = min(feasible, key=lambda i: (scores[i][0], i))")  # fmt: skip
    failed = failed_rows()
    assert "acc: op chosen per edge, edges kept per node" in failed
    assert "acc: genotype after the full projection" in failed
    assert not any(q.startswith("loss:") or q.startswith("setting:") for q in failed)
