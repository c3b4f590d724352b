"""Early stopping on skip connections (``components=[skip_stop]``, DARTS+ as confopt's
``SkipConnectionEarlyStopper``): the count, the rule, a search that stops and resumes as
stopped, the refusals."""

from __future__ import annotations

import json

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import SearchError, SearchRun
from nas.plugins import build_plugin
from nas.strategies import SearchContext
from nas.strategies.components.skip_stop import SkipConnectionStop
from nas.supernet import build_supernet
from search_spaces.op_names import OP_NAMES


def _strategy(stopper: SkipConnectionStop, skip_rows: int, space: str = "darts"):
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=3 if space == "darts" else 1, num_classes=10)
    s = build_plugin("search", "darts")
    s.add_components([stopper])
    s.prepare_supernet(net)
    s.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), grad_clip=None),
             generator=torch.Generator().manual_seed(0))  # fmt: skip
    with torch.no_grad():  # skip_connect strongest on the first `skip_rows` edges of each cell
        for ct, alpha in s.arch_params.items():
            ops = s.supernet.space.cells[ct].edges[0].ops
            alpha.zero_()
            if "sep_conv_3x3" in ops:
                alpha[:, ops.index("sep_conv_3x3")] = 1.0
            alpha[:skip_rows, ops.index("skip_connect")] = 2.0
    return s


def test_the_rule_counts_the_derived_cells():
    assert "skip_connect" in OP_NAMES
    stopper = SkipConnectionStop(max_skip_normal=1, min_epochs=2)
    s = _strategy(stopper, skip_rows=5)  # nodes 0-2's edges: at least two skips kept
    counts = stopper.counts(s)
    assert counts["normal"] >= 2 and counts["reduce"] >= 2
    assert s.stop_reason(2) is None  # not after epoch e <= min_epochs (confopt's epoch > min)
    assert "normal cell holds" in s.stop_reason(3)
    assert stopper.log_state()["skip_connections_normal"] == counts["normal"]
    calm = SkipConnectionStop(max_skip_normal=8, max_skip_reduce=1)
    assert "reduce cell holds" in _strategy(calm, skip_rows=5).stop_reason(1)
    assert _strategy(SkipConnectionStop(), skip_rows=0).stop_reason(5) is None


def _cfg(overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=overrides)


TINY = ["space=darts", "space.C=4", "space.layers=3", "batch_size=16", "data.max_items=64",
        "epochs=4", "eval=false", "figures=false", "components=[skip_stop]",
        "components.skip_stop.max_skip_normal=0"]  # fmt: skip


@pytest.mark.slow
def test_a_search_stops_and_resumes_as_stopped(tmp_path, capsys):
    """max_skip_normal=0: any skip connection ends the search after epoch 2 (e=1 > 0)."""
    run_dir = tmp_path / "run"
    result = SearchRun(_cfg(TINY), run_dir).run()
    events = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    stops = [e for e in events if e["event"] == "early_stop"]
    epochs = [e["epoch"] for e in events if e["event"] == "epoch"]
    assert stops, "the tiny search (fixed seed) derives a skip connection by its second epoch"
    assert stops[0]["epoch"] == epochs[-1] >= 1 and len(epochs) < 4
    assert "the search stops after epoch" in capsys.readouterr().out
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    assert state["stopped_early"] and state["phase"] == "done"
    # resume=true on the stopped run: nothing more to search, the same genotype
    again = SearchRun(_cfg([*TINY, "resume=true"]), run_dir).run()
    assert str(again.genotype) == str(result.genotype)
    assert [json.loads(x)["event"] for x in (run_dir / "metrics.jsonl").read_text()
            .splitlines()].count("epoch") == len(epochs)  # fmt: skip
    # a stopped search is a finished one for from_run (it selects on its supernet)
    selected = SearchRun(_cfg([f"from_run={run_dir}"]), tmp_path / "selected").run()
    assert str(selected.genotype) == str(result.genotype)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"max_skip_normal": -1}, "skip_stop.max_skip_normal must be an int >= 0, got -1"),
     ({"min_epochs": 1.5}, "skip_stop.min_epochs must be an int >= 0, got 1.5")],
)  # fmt: skip
def test_bad_values_are_one_line(kwargs, message):
    with pytest.raises(ValueError, match=".*") as e:
        SkipConnectionStop(**kwargs)
    assert str(e.value) == message


def test_spaces_without_skip_connect_are_refused(tmp_path):
    with pytest.raises(SearchError) as e:
        SearchRun(_cfg(["components=[skip_stop]", "space=proxyless_cifar", "space.C=4"]),
                  tmp_path / "r")  # fmt: skip
    assert "counts skip_connect ops, and space proxyless_cifar offers none" in str(e.value)
    with pytest.raises(SearchError) as e:  # NB201 has one cell type
        SearchRun(_cfg(["components=[skip_stop]", "components.skip_stop.max_skip_reduce=1",
                        "space.C=4", "space.layers=1"]), tmp_path / "r")  # fmt: skip
    assert "bounds a second cell type" in str(e.value) and "\n" not in str(e.value)


def test_nb201_counts_its_one_cell():
    stopper = SkipConnectionStop(max_skip_normal=0)
    s = _strategy(stopper, skip_rows=2, space="nb201")
    assert stopper.counts(s) == {"cell": 2}
    assert s.stop_reason(1) == (
        "the NB201 cell holds 2 skip connections (more than skip_stop.max_skip_normal=0)"
    )
