"""The architecture batch of each step: ``arch_batch=sequential`` or ``random``.

DrNAS (``201-space/train_search.py:260``, ``DARTS-space/train_search.py:178``) and PC-DARTS
(``train_search.py:147``) take ``next(iter(valid_queue))`` of a shuffled loader: a fresh random
batch every step. ``arch_batch=random`` draws it from the run's seed streams
(``nas.run.seeds.ARCH_DRAWS``: seed, epoch, step), so two runs of a seed draw the same batches
and a resumed run draws what the uninterrupted one did; ``sequential`` (the default) walks the
split's shuffled epoch, restarting it where it is shorter than the weight split.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import Preempted, SearchError, SearchRun
from nas.strategies.base import SearchStrategy
from nas.strategies.data import EpochSampler, RandomBatchSampler

OVERRIDES = ["space.C=4", "space.layers=1", "batch_size=8", "data.max_items=96", "epochs=2",
             "eval=false", "figures=false", "data.train_portion=0.75"]  # fmt: skip


def _cfg(*extra):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=OVERRIDES + list(extra))


def _draws(sampler, epoch, start=0):
    sampler.set_epoch(epoch, start)
    return [[i for i, _ in batch] for batch in sampler]


def test_random_draws_are_fresh_batches_fixed_by_seed_epoch_and_step():
    def make(**kw):
        args = {"seed": 0, "batch_size": 8, "stream": 6, **kw}
        return RandomBatchSampler(24, num_batches=9, **args)

    a = _draws(make(), epoch=0)
    assert len(a) == 9 and all(len(b) == 8 and len(set(b)) == 8 for b in a)
    assert all(0 <= i < 24 for b in a for i in b)
    assert _draws(make(), epoch=0) == a  # the same seed: the same batches
    assert len({tuple(b) for b in a}) == 9  # a fresh draw every step, not a walk of the split
    assert _draws(make(), epoch=1) != a and _draws(make(seed=1), epoch=0) != a
    assert _draws(make(), epoch=0, start=5) == a[5:]  # a resumed pass draws the same tail
    # two processes take contiguous shares of the same global draws
    shares = [_draws(make(rank=r, world_size=2), epoch=0) for r in range(2)]
    assert [s0 + s1 for s0, s1 in zip(*shares)] == a
    # the sequential sampler walks the split once: three disjoint batches of 24 images
    walk = _draws(EpochSampler(24, seed=0, batch_size=8, stream=1), epoch=0)
    assert sorted(i for b in walk for i in b) == list(range(24))


class _Record:
    """The labels and pixel sums of every architecture batch the strategy's steps receive."""

    def __init__(self, monkeypatch):
        self.batches: list[list[tuple[int, float]]] = []
        real = SearchStrategy.step

        def step(strategy, train_batch, val_batch, **kwargs):
            self.batches.append(
                [
                    (int(y), float(x.double().sum()))
                    for xs, ys in val_batch.parts
                    for x, y in zip(xs, ys)
                ]  # fmt: skip
            )
            return real(strategy, train_batch, val_batch, **kwargs)

        monkeypatch.setattr(SearchStrategy, "step", step)


def _final_state(run_dir: Path):
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    arch = {k: v for k, v in state["strategy"]["module"].items() if k.startswith("arch_params")}
    return arch, state["supernet"], (run_dir / "genotype.json").read_text()


def _assert_same(a, b):
    assert a[0].keys() == b[0].keys() and all(torch.equal(a[0][k], b[0][k]) for k in a[0])
    assert a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])
    assert a[2] == b[2]


@pytest.fixture(scope="module")
def random_runs(tmp_path_factory):
    """Two uninterrupted runs of seed 0 with random architecture batches, and their batches."""
    out = []
    for i in range(2):
        run_dir = tmp_path_factory.mktemp("random") / f"run{i}"
        with pytest.MonkeyPatch.context() as mp:
            record = _Record(mp)
            SearchRun(_cfg("arch_batch=random"), run_dir).run()
        out.append((record.batches, _final_state(run_dir)))
    return out


@pytest.mark.slow
def test_random_batches_repeat_with_the_seed_and_differ_from_the_walk(random_runs, tmp_path):
    (batches, state), (again, state_again) = random_runs
    assert len(batches) == 18  # 72 weight images / 8, two epochs
    assert batches == again
    _assert_same(state, state_again)
    with pytest.MonkeyPatch.context() as mp:
        record = _Record(mp)
        SearchRun(_cfg(), tmp_path / "walk").run()
    assert record.batches != batches


@pytest.mark.parametrize("arch_batch", ["random", "sequential"])
def test_preempted_mid_epoch_resumes_exactly(tmp_path, monkeypatch, random_runs, arch_batch):
    """Stopped at step 5 of the second epoch: for the walk, after its restart (the 24-image
    architecture split gives 3 batches a pass, the weight split 9), so the resumed pass must
    take the restarted order, not the first one."""
    extra = [f"arch_batch={arch_batch}"]
    if arch_batch == "random":
        uninterrupted = random_runs[0][1]
    else:
        SearchRun(_cfg(*extra), tmp_path / "full").run()
        uninterrupted = _final_state(tmp_path / "full")
    run_dir = tmp_path / "preempted"
    real_step = SearchStrategy.step
    calls = {"n": 0}

    def step_then_request_stop(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 9 + 5:
            run.stop.request()
        return out

    run = SearchRun(_cfg(*extra), run_dir)
    monkeypatch.setattr(SearchStrategy, "step", step_then_request_stop)
    with pytest.raises(Preempted):
        run.run()
    monkeypatch.undo()
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert (state["epoch"], state["step_in_epoch"]) == (1, 5)
    SearchRun(_cfg(*extra, "resume=true"), run_dir).run()
    _assert_same(uninterrupted, _final_state(run_dir))


def test_random_batches_in_the_reference_experiments_and_bad_values():
    on = ["drnas_darts_cifar10", "drnas_nb201", "drnas_nb201_progressive", "drnas_pt_nb201",
          "drnas_pt_darts_cifar10", "pc_darts_cifar10",
          # SmoothDARTS sota/cnn/train_search.py:209 and Beta-DARTS (a fork of it) do the same
          "sdarts_rs_darts_cifar10", "sdarts_adv_darts_cifar10", "beta_darts_darts_cifar10",
          "beta_darts_nb201"]  # fmt: skip
    # their ImageNet scripts walk the split (try: next(it) / except: it = iter(...))
    off = ["drnas_imagenet", "pc_darts_imagenet"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for name in on + off:
            cfg = compose(config_name="nas_search", overrides=[f"experiment={name}"])
            assert cfg.arch_batch == ("random" if name in on else "sequential"), name
            if name.startswith("sdarts"):  # SmoothDARTS's DARTS space: s5 (spaces.py:80-99)
                assert cfg.space.name == "s5", name
    with pytest.raises(SearchError, match="arch_batch must be 'sequential' or 'random'"):
        SearchRun(_cfg("arch_batch=shuffled"), "unused")
