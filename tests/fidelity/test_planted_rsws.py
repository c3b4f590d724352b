"""Planted bugs in RS-WS (applied in memory) make its comparison with the recorded outputs of
the reference fail, naming the rows they move: the suite catches what it claims to."""

from __future__ import annotations

import torch

import nas.strategies.rsws as rsws_module
from experiments.fidelity import common as F
from experiments.fidelity import rsws as script
from nas.strategies.rsws import RSWS, Arch

DRAWS = f"our frequencies / its frequencies ({script.DRAWS} draws each)"
LR = (
    "lr of its first step = our cosine of epoch 1 (current PyTorch's scheduler constructor "
    "steps once)"
)
STEP = "weight step with one drawn architecture (its train_batch; ours at cosine of epoch 1)"


def failed_rows() -> set[str]:
    return {r.quantity for r in F.replay(script).failed}


def test_none_never_drawn(monkeypatch):
    def sample_arch(supernet, generator: torch.Generator) -> Arch:
        arch: Arch = {}
        for ct, cell in supernet.space.cells.items():
            mask = supernet.op_mask(ct).cpu().tolist()
            picks: list[tuple[int, int]] = []
            for node in cell.intermediate_nodes:
                edges = sorted(cell.edges_into(node), key=lambda e: e.src)
                if cell.inputs_per_node is not None:
                    order = torch.randperm(len(edges), generator=generator)
                    edges = [edges[int(i)] for i in order[: cell.inputs_per_node]]
                for e in edges:
                    # the bug: 'none' (op 0) left out of the draw, as a derivation would
                    allowed = [k for k in range(1, len(e.ops)) if mask[e.index][k]]
                    k = allowed[int(torch.randint(len(allowed), (1,), generator=generator))]
                    picks.append((e.index, k))
            arch[ct] = picks
        return arch

    monkeypatch.setattr(rsws_module, "sample_arch", sample_arch)  # what the step draws
    monkeypatch.setattr(script, "sample_arch", sample_arch)  # what the frequency rows draw
    failed = failed_rows()
    assert DRAWS in failed
    assert "one-hot weights of 20 of our draws (get_weights_from_arch)" in failed
    assert "the step's mixing weights (get_weights_from_arch of our draw)" in failed
    assert LR not in failed
    assert not any(q.startswith("setting:") for q in failed)


def test_search_grad_clip_not_applied(monkeypatch):
    attach = RSWS.attach

    def unclipped(self, ctx, *, generator=None):
        attach(self, ctx, generator=generator)
        self._ctx = ctx  # the bug: the run's clip (5) kept, search.grad_clip (0.25) dropped

    monkeypatch.setattr(RSWS, "attach", unclipped)
    failed = failed_rows()
    assert STEP in failed
    # the draws, their weights and the scoring do not read the clip
    assert DRAWS not in failed
    assert "the step's mixing weights (get_weights_from_arch of our draw)" not in failed
    assert "evaluate(arch, split='valid'): accuracy %" not in failed
    assert not any(q.startswith("setting:") for q in failed)
