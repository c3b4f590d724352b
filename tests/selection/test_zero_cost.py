"""Zero-cost operation scoring (Zero-Cost-PT) on tiny supernets, and from nas-search."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nas.plugins import build_plugin
from nas.proxies import Scorable
from nas.proxies.naswot import naswot_kernel
from nas.selection import ZeroCostSelection
from nas.strategies import SearchContext
from nas.supernet import build_supernet
from search_spaces.genotype import DartsGenotype, NB201Genotype


class FakeContext:
    """The loop's services a zero-cost selector uses: seeded batches, a log, no training."""

    def __init__(self, hw=8, batch=8):
        self.hw, self.batch = hw, batch
        self.events: list[dict] = []
        self.checkpoints = 0

    def val_batches(self, *, key, limit):
        g = torch.Generator().manual_seed(key)
        while True:
            x = torch.randn(self.batch, 3, self.hw, self.hw, generator=g)
            yield x, torch.randint(0, 10, (self.batch,), generator=g)

    def checkpoint(self):
        self.checkpoints += 1

    def stop_point(self):  # no stop is ever requested here
        pass

    def log(self, event, **values):
        self.events.append({"event": event, **values})

    def broadcast(self, obj):
        return obj


def _strategy(space):
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    strategy = build_plugin("search", "darts")
    strategy.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0))
    return strategy


def test_selection_zc_builds_it():
    # seed: ${seed} in the YAML is the run's seed, given here as nas-search gives it
    assert type(build_plugin("selection", "zc", seed=0)) is ZeroCostSelection


# s1 (RobustDARTS): the DARTS cell with two candidates per edge, topology projection included;
# the full DARTS space takes minutes on 2 CPU cores (98 candidates per cell type and run)
@pytest.mark.parametrize(
    ("space", "proxy"), [("nb201", "naswot"), ("nb201", "synflow"), ("s1", "naswot")]
)
def test_returns_a_valid_genotype(space, proxy):
    strategy = _strategy(space)
    before = {k: v.clone() for k, v in strategy.supernet.state_dict().items()}
    selector = ZeroCostSelection(
        proxy=proxy,
        pool_size=2 if space == "nb201" else 1,
        batch_size=8,
        validate_rounds=1,
        post_C=4,
        post_layers=1 if space == "nb201" else 3,
    )
    ctx = FakeContext()
    genotype = selector.select(strategy, context=ctx)
    runs = [e for e in ctx.events if e["event"] == "zc_run"]
    assert len(runs) == selector.pool_size and ctx.checkpoints == selector.pool_size
    if space == "nb201":
        assert isinstance(genotype, NB201Genotype)
        assert all(len([d for d in r["decisions"]]) == 6 for r in runs)
    else:
        assert isinstance(genotype, DartsGenotype)
        for ct in ("normal", "reduce"):
            pairs = genotype.cell(ct)
            assert len(pairs) == 8 and all(op != "none" for op, _ in pairs)
            edges = strategy.supernet.space.cells[ct].edges
            assert all(any(op in e.ops for e in edges) for op, _ in pairs)
            for node in range(4):  # two distinct inputs per node
                assert len({src for _, src in pairs[2 * node : 2 * node + 2]}) == 2
        # every op of an edge is a candidate, `none` included, as in the reference (project_op)
        cells = strategy.supernet.space.cells
        op_decisions = [d for r in runs for d in r["decisions"] if "candidates" in d]
        assert op_decisions and all(
            d["candidates"] == list(cells[d["cell_type"]].edges[d["edge"]].ops)
            for d in op_decisions
        )
    post = [e for e in ctx.events if e["event"] == "zc_post_validation"]
    assert len(post) == 1 and str(genotype) in post[0]["genotypes"]
    after = strategy.supernet.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # never trained, untouched


@pytest.mark.slow
def test_seeded_selection_reproduces_and_resumes():
    def selector():
        return ZeroCostSelection(
            pool_size=3, batch_size=8, validate_rounds=1, post_C=4, post_layers=1
        )

    first = selector()
    g1 = first.select(_strategy("nb201"), context=FakeContext())
    assert selector().select(_strategy("nb201"), context=FakeContext()) == g1
    # the checkpoint taken after the first pool run, restored into a new selector (and a new
    # process's supernet), finishes with the same pool and genotype
    interrupted = selector()
    states = []
    ctx = FakeContext()
    ctx.checkpoint = lambda: states.append(interrupted.state_dict())
    interrupted.select(_strategy("nb201"), context=ctx)
    resumed = selector()
    resumed.load_state_dict(states[0])
    assert len(resumed.pool) == 1
    assert resumed.select(_strategy("nb201"), context=FakeContext()) == g1
    assert [e["text"] for e in resumed.pool] == [e["text"] for e in first.pool]


def test_naswot_counts_the_relus_of_zero_weight_ops_as_the_reference_runs_them():
    # ZPT runs an op of weight 0 as op(x, block_input=True): the hook on the ReLUConvBN itself
    # reads x, the ReLU inside reads zeros and adds its units to every entry of K. Edge 0's
    # nor_conv_3x3 zeroed in the three cells of a C=4, N=1 supernet on 8x8 images:
    # 4*8*8 + 8*4*4 + 16*2*2 units, plus the codes of the three cell inputs.
    strategy = _strategy("nb201")
    net = strategy.supernet
    ops = net.space.cells["cell"].edges[0].ops
    w = {"cell": torch.full((6, 5), 0.2)}
    w["cell"][0, ops.index("nor_conv_3x3")] = 0.0
    x = torch.randn(6, 3, 8, 8)
    inputs = []
    handles = [
        cell.register_forward_pre_hook(lambda m, a: inputs.append(a[0]))
        for cell in net.cells
        if hasattr(cell, "edges_into")
    ]
    with_zero_ops = naswot_kernel(Scorable(net, w), x, bn="eval", zero_ops_run=True)
    for h in handles:
        h.remove()
    without = naswot_kernel(Scorable(net, w), x, bn="eval", zero_ops_run=False)
    codes = 0
    for s in inputs:
        c = (s.reshape(6, -1) > 0).double()
        codes = codes + c @ c.T + (1 - c) @ (1 - c).T
    expected = codes.numpy() + (4 * 64 + 8 * 16 + 16 * 4)
    assert (with_zero_ops - without == expected).all()


def test_bad_settings_are_one_line():
    with pytest.raises(ValueError, match="selection.proxy: unknown proxy 'nope'"):
        ZeroCostSelection(proxy="nope")
    with pytest.raises(ValueError, match="selection.pool_size must be a positive int"):
        ZeroCostSelection(pool_size=0)


@pytest.mark.slow
def test_nas_search_runs_it_without_training(tmp_path: Path):
    run_dir = tmp_path / "zc"
    cmd = [
        sys.executable,
        "-m",
        "nas.cli.search",
        "space=nb201",
        "space.C=4",
        "space.layers=1",
        "batch_size=16",
        "data.max_items=96",
        "selection=zc",
        "selection.proxy=naswot",
        "selection.pool_size=2",
        "selection.validate_rounds=1",
        "selection.batch_size=16",
        "selection.post_C=4",
        "selection.post_layers=1",
        "epochs=0",
        "figures=false",
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONUNBUFFERED="1")
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads((run_dir / "genotype.json").read_text())
    assert record["selector"] == "zc" and 0 <= record["index"] < 15625
    events = [
        json.loads(line)["event"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert events.count("zc_run") == 2 and "zc_post_validation" in events
