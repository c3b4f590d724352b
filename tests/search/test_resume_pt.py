"""DARTS-PT resume: a selection interrupted between projections ends with the same genotype."""

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import SearchRun

OVERRIDES = [
    "selection=pt",
    "selection.proj_intv=1",
    "selection.num_val_batches=1",
    "space.C=4",
    "space.layers=1",
    "batch_size=16",
    "data.max_items=32",
    "epochs=1",
    "eval=false",
]


def _cfg(*extra, base=OVERRIDES):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=list(base) + list(extra))


def _decisions(run_dir: Path):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [
        {k: v for k, v in json.loads(line).items() if k not in ("step",)}
        for line in lines
        if json.loads(line)["event"] == "pt_decision"
    ]


class Crash(Exception):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["darts", "drnas"])
def test_interrupted_selection_resumes_to_the_same_genotype(tmp_path, monkeypatch, strategy):
    full = tmp_path / "full"
    SearchRun(_cfg(f"search={strategy}"), full).run()
    state = torch.load(full / "checkpoints" / "last.pt", weights_only=False)
    assert state["phase"] == "done" and len(state["selector"]["decisions"]) == 6

    crashed = tmp_path / "crashed"
    real = SearchRun._checkpoint

    def checkpoint_then_crash(self):
        real(self)
        if (
            self.phase == "select"
            and self.selector.projections_done == 3
            and self.step_in_epoch == 0
        ):
            raise Crash

    monkeypatch.setattr(SearchRun, "_checkpoint", checkpoint_then_crash)
    with pytest.raises(Crash):
        SearchRun(_cfg(f"search={strategy}"), crashed).run()
    monkeypatch.setattr(SearchRun, "_checkpoint", real)
    mid = torch.load(crashed / "checkpoints" / "last.pt", weights_only=False)
    assert mid["phase"] == "select" and len(mid["selector"]["decisions"]) == 3
    SearchRun(_cfg(f"search={strategy}", "resume=true"), crashed).run()
    assert (crashed / "genotype.json").read_text() == (full / "genotype.json").read_text()
    assert _decisions(crashed) == _decisions(full)


def test_fix_alpha_keeps_the_architecture_at_its_initialisation(tmp_path):
    run_dir = tmp_path / "fixed"
    SearchRun(_cfg("search.fix_alpha=true"), run_dir).run()
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    alpha = state["strategy"]["module"]["arch_params.cell"]
    init = 1e-3 * torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(alpha, init)


def test_selection_on_a_finished_search(tmp_path):
    searched = tmp_path / "argmax"
    argmax = [o for o in OVERRIDES if not o.startswith("selection")]
    SearchRun(_cfg(base=argmax), searched).run()
    selected = tmp_path / "pt"
    result = SearchRun(_cfg(f"from_run={searched}", "selection.proj_intv=0"), selected).run()
    record = json.loads((selected / "genotype.json").read_text())
    assert record["selector"] == "pt" and record["arch"] == str(result.genotype)
    events = [json.loads(line) for line in (selected / "metrics.jsonl").read_text().splitlines()]
    assert not any(e["event"] in ("step", "epoch") for e in events)  # no search again
    assert sum(e["event"] == "pt_decision" for e in events) == 6
