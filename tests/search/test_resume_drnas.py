"""DrNAS resume: in the middle of a stage and across a stage boundary equals no interruption.

The run is interrupted in-process right after a checkpoint was written (what a kill -9 at that
moment leaves on disk; tests/cli kills real processes for DARTS) or by a preemption request in
the middle of an epoch (what SIGTERM does), then resumed from the run folder.
"""

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import Preempted, SearchRun
from nas.strategies.base import SearchStrategy

OVERRIDES = [
    "search=drnas",
    "space.C=4",
    "space.layers=1",
    "batch_size=16",
    "data.max_items=96",
    "epochs=4",
    "search.stages=[{epochs:2,partial_channels:4,keep:5},{epochs:2,partial_channels:2,keep:3}]",
    "search.arch_start_epoch=1",
    "eval=false",
]


def _cfg(*extra):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=OVERRIDES + list(extra))


class Crash(Exception):
    pass


def _final_state(run_dir: Path):
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    arch = {k: v for k, v in state["strategy"]["module"].items() if k.startswith("arch_params")}
    return arch, state["supernet"], (run_dir / "genotype.json").read_text()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("drnas") / "full"
    SearchRun(_cfg(), run_dir).run()
    return _final_state(run_dir)


def _assert_same(a, b):
    arch_a, net_a, geno_a = a
    arch_b, net_b, geno_b = b
    assert all(torch.equal(arch_a[k], arch_b[k]) for k in arch_a)
    assert net_a.keys() == net_b.keys()
    assert all(torch.equal(net_a[k], net_b[k]) for k in net_a)
    assert geno_a == geno_b


@pytest.mark.parametrize(
    "crash_after_epochs", [1, 2, 3]
)  # mid stage 0, at the boundary, mid stage 1
def test_crash_and_resume_equals_uninterrupted(
    tmp_path, monkeypatch, uninterrupted, crash_after_epochs
):
    run_dir = tmp_path / "crashed"
    real_checkpoint = SearchRun._checkpoint

    def checkpoint_then_crash(self):
        real_checkpoint(self)
        if self.epoch == crash_after_epochs and self.step_in_epoch == 0:
            raise Crash

    monkeypatch.setattr(SearchRun, "_checkpoint", checkpoint_then_crash)
    with pytest.raises(Crash):
        SearchRun(_cfg(), run_dir).run()
    monkeypatch.setattr(SearchRun, "_checkpoint", real_checkpoint)
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert state["epoch"] == crash_after_epochs
    assert state["strategy"]["partial_channels"] == (4 if crash_after_epochs < 2 else 2)
    SearchRun(_cfg("resume=true"), run_dir).run()
    _assert_same(uninterrupted, _final_state(run_dir))


def test_preempted_mid_epoch_in_the_second_stage_resumes_exactly(
    tmp_path, monkeypatch, uninterrupted
):
    run_dir = tmp_path / "preempted"
    real_step = SearchStrategy.step
    calls = {"n": 0}

    def step_then_request_stop(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 8:  # epoch 3 (stage 1), second step: 3 steps per epoch
            run.stop.request()
        return out

    run = SearchRun(_cfg(), run_dir)
    monkeypatch.setattr(SearchStrategy, "step", step_then_request_stop)
    with pytest.raises(Preempted):
        run.run()
    monkeypatch.undo()
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert (state["epoch"], state["step_in_epoch"]) == (2, 2)
    SearchRun(_cfg("resume=true"), run_dir).run()
    _assert_same(uninterrupted, _final_state(run_dir))
