"""A stop request (SIGTERM, Ctrl-C) during a selection is honoured after the unit of work being
done (an architecture scored, a projection, a projection run), with a whole checkpoint, and the
resumed run ends with the uninterrupted run's genotype."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import SearchRun
from nas.run.signals import Preempted

TINY = ["space.C=4", "space.layers=1", "batch_size=8", "data.max_items=32", "epochs=1",
        "eval=false", "figures=false"]  # fmt: skip

CASES = {
    # (selection overrides, how many units to let through before the request)
    "rsws": (
        [
            "selection=rsws",
            "selection.rounds=2",
            "selection.archs=6",
            "selection.batches_per_arch=1",
            "selection.top_k=2",
        ],
        4,
    ),  # fmt: skip
    "pt": (["selection=pt", "selection.proj_intv=0", "selection.num_val_batches=1"], 2),
    "zc": (
        [
            "selection=zc",
            "selection.proxy=synflow",
            "selection.pool_size=3",
            "selection.batch_size=8",
            "selection.validate_rounds=1",
        ],
        1,
    ),  # fmt: skip
}


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=[*TINY, *overrides])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_stop_during_selection_is_prompt_and_resumes_to_the_same_genotype(
    tmp_path: Path, monkeypatch, name
):
    overrides, units = CASES[name]
    full = tmp_path / "full"
    SearchRun(_cfg(*overrides), full).run()

    from nas.pipeline import selection_context

    real = selection_context.RunSelectionContext.stop_point
    seen = {"units": 0, "after_request": 0}

    def stop_point(self):
        seen["units"] += 1
        if seen["units"] == units:
            self.run.stop.request()  # as SIGTERM does
        elif seen["units"] > units:
            seen["after_request"] += 1
        real(self)

    monkeypatch.setattr(selection_context.RunSelectionContext, "stop_point", stop_point)
    stopped = tmp_path / "stopped"
    with pytest.raises(Preempted):
        SearchRun(_cfg(*overrides), stopped).run()
    assert seen["after_request"] == 0  # honoured at the unit where it arrived
    state = torch.load(stopped / "checkpoints" / "last.pt", weights_only=False)
    assert state["phase"] == "select"
    assert not (stopped / "genotype.json").exists()
    monkeypatch.setattr(selection_context.RunSelectionContext, "stop_point", real)

    SearchRun(_cfg(*overrides, "resume=true"), stopped).run()
    assert (stopped / "genotype.json").read_text() == (full / "genotype.json").read_text()


def test_rsws_selection_shows_its_progress_with_an_eta(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("NAS_PROGRESS", "lines")
    overrides, _ = CASES["rsws"]
    SearchRun(_cfg(*overrides), tmp_path / "run").run()
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("rsws round 2/2")]
    assert lines and all("ETA" in line for line in lines)
    assert "img/s" not in lines[-1]  # architectures, not images
