"""Data-parallel search: 2 CPU processes with gloo, launched through torchrun as users do.

What the tests compare, and why the tolerance is what it is. A 2-process search of global
batch 16 normalises batch norm over each process's 8 images; the single-process search it is
compared with runs the same global batch as ``micro_batches=2``, i.e. the same two groups of 8,
one after the other. Every loss, gradient and update is then the same arithmetic on the same
numbers (the same images with the same augmentation, the same DrNAS samples) except for the
order of a few additions: the 2-process run sums the two halves' gradients in the all-reduce,
the single process accumulates them, and the architecture gradient of each half is carried
through the softmax before the sum instead of after. Measured here: first-order DARTS, weights
bit-identical and architecture parameters within 3e-10 (values ~4e-3); second order, weights
within 2e-8 and architecture parameters within 1e-9. The bound is 1e-6 (and 1e-5 for weights
after a stage transition's widening): two orders and more above rounding,
and far below what the errors this guards against produce: a rank that sees the other's images,
a gradient summed instead of averaged (a doubled SGD step moves the weights by ~1e-3 per step),
or a Dirichlet sample that differs between ranks (architecture gradients of another sample).
Genotypes and PT decisions must be equal exactly. ``sync_check_every=1`` makes every step of the
2-process runs check that both ranks hold the same architecture and weights.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import Preempted, SearchError, SearchRun
from nas.plugins import available
from nas.strategies.base import SearchStrategy
from nas.strategies.data import EpochSampler, SeededItems

WORKER = Path(__file__).with_name("dist_worker.py")
HOOKED = Path(__file__).parents[1] / "hooked_cli.py"

# NB201 at C=4, one cell per stage; 128 images: 4 steps of 16 per epoch
TINY = [
    "space.C=4",
    "space.layers=1",
    "batch_size=16",
    "data.max_items=128",
    "log_every=1",
    "figures=false",
]
DARTS2 = [*TINY, "search.order=2", "epochs=3"]
DRNAS = [
    *TINY,
    "search=drnas",
    "epochs=3",
    "search.stages=[{epochs:1,partial_channels:4,keep:5},{epochs:2,partial_channels:2,keep:3}]",
    "eval=false",
]
PT = [
    *TINY,
    "selection=pt",
    "selection.proj_intv=1",
    "selection.num_val_batches=2",
    "data.max_items=64",
    "epochs=1",
    "eval=false",
]


def _cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=overrides)


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node=2", *args]  # fmt: skip


def search_2proc(run_dir: Path, overrides: list[str], *, wait: bool = True):
    cmd = _torchrun("-m", "nas.cli.search", *overrides, "sync_check_every=1",
                    f"hydra.run.dir={run_dir}")  # fmt: skip
    if not wait:
        return subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
        )
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)


def search_1proc(run_dir: Path, overrides: list[str]) -> None:
    """The same search in this process, the global batch in two micro-batches."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each torchrun worker
    try:
        SearchRun(_cfg([*overrides, "micro_batches=2"]), run_dir).run()
    finally:
        torch.set_num_threads(threads)


def final_state(run_dir: Path) -> dict:
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    return {
        # the strategy's architecture parameters and its components' (PC-DARTS's edge betas)
        "arch": {
            k: v
            for k, v in state["strategy"]["module"].items()
            if k.startswith(("arch", "components"))
        },
        "weights": {
            k: v
            for k, v in state["supernet"].items()
            if "running" not in k and "num_batches" not in k  # BN statistics: per-rank groups
        },
        "genotype": json.loads((run_dir / "genotype.json").read_text())["text"],
        "state": state,
    }


def events(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def assert_same_search(a: dict, b: dict, *, arch_atol: float = 1e-6, weight_atol: float = 1e-6):
    assert a["genotype"] == b["genotype"]
    assert a["arch"].keys() == b["arch"].keys() and a["weights"].keys() == b["weights"].keys()
    for k in a["arch"]:
        torch.testing.assert_close(a["arch"][k], b["arch"][k], atol=arch_atol, rtol=0)
    for k in a["weights"]:
        torch.testing.assert_close(
            a["weights"][k].float(), b["weights"][k].float(), atol=weight_atol, rtol=0
        )


# Every strategy of the config group ``search`` (a new one is tested without a line added):
# DARTS in its second order, RS-WS with its own (sharded) selection, the others with defaults
def _search_overrides(strategy: str) -> list[str]:
    if strategy == "darts":
        return DARTS2
    if strategy == "rsws":
        return [*TINY, "search=rsws", "epochs=3", "selection=rsws", "selection.archs=6",
                "selection.batches_per_arch=1", "selection.top_k=2", "selection.rounds=2"]  # fmt: skip
    return [*TINY, f"search={strategy}", "epochs=3"]


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """``(one-process run, two-process run, its process)`` of a strategy, made once."""
    runs: dict[str, tuple[Path, Path, subprocess.CompletedProcess[str]]] = {}

    def get(strategy: str):
        if strategy not in runs:
            root = tmp_path_factory.mktemp(strategy)
            two = search_2proc(root / "two", _search_overrides(strategy))
            assert two.returncode == 0, two.stderr
            search_1proc(root / "one", _search_overrides(strategy))
            runs[strategy] = (root / "one", root / "two", two)
        return runs[strategy]

    return get


@pytest.fixture(scope="module")
def darts2(searched):
    return searched("darts")


# ----------------------------------------------------------------------- the pieces


def test_sampler_shares_are_the_single_process_batches():
    one = EpochSampler(37, seed=3, batch_size=8, stream=1)
    ranks = [EpochSampler(37, seed=3, batch_size=8, stream=1, rank=r, world_size=3) for r in (0, 1, 2)]  # fmt: skip
    for s in (one, *ranks):
        s.set_epoch(2)
    whole = list(one)
    shares = [list(s) for s in ranks]
    assert [len(b) for b in whole] == [8, 8, 8, 8, 5]
    for b, batch in enumerate(whole):  # the ranks' shares, in rank order, are the batch
        assert sum((share[b] for share in shares), []) == batch
    assert [len(shares[r][4]) for r in range(3)] == [2, 2, 1]
    assert one.global_sizes() == [8, 8, 8, 8, 5]
    one.set_epoch(2, start_batch=3)  # a resume in the middle of the epoch
    assert list(one) == whole[3:] and one.global_sizes() == [8, 5]
    # a last batch with fewer images than processes x micro-batches is left out
    small = EpochSampler(37, seed=3, batch_size=8, stream=1, min_batch=6)
    assert small.num_batches == 4 and len(small) == 4


def test_augmentation_depends_on_the_image_seed_only():
    from nas.data import build_dataset, train_transform

    data = SeededItems(build_dataset("cifar10-mini", train=True, transform=train_transform("cifar10-mini")))  # fmt: skip
    torch.manual_seed(0)
    a, _ = data[(5, 1234)]
    torch.manual_seed(99)  # whatever the global generator holds
    torch.rand(17)
    b, _ = data[(5, 1234)]
    c, _ = data[(5, 4321)]
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_micro_batches_must_fit_the_batch(tmp_path):
    with pytest.raises(SearchError, match="micro_batches=32 need at least 32 images"):
        SearchRun(_cfg([*TINY, "micro_batches=32"]), tmp_path / "r")
    with pytest.raises(SearchError, match="micro_batches must be a positive int"):
        SearchRun(_cfg([*TINY, "micro_batches=0"]), tmp_path / "r")


@pytest.mark.slow
def test_collectives_under_torchrun():
    proc = subprocess.run(_torchrun(str(WORKER), "collectives"), capture_output=True, text=True,
                          env=_env(), timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "rank 0: ok" in proc.stdout and "rank 1: ok" in proc.stdout


@pytest.mark.slow
def test_ranks_that_drift_apart_stop_the_search(tmp_path):
    proc = subprocess.run(_torchrun(str(WORKER), "drift", str(tmp_path / "r")),
                          capture_output=True, text=True, env=_env(), timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "no longer hold the same architecture parameters" in proc.stdout
    assert "rank 0: ok" in proc.stdout and "rank 1: ok" in proc.stdout


# ----------------------------------------------------------------- whole searches


@pytest.mark.slow
@pytest.mark.parametrize("strategy", available("search"))
def test_every_strategy_on_two_processes_equals_one(searched, strategy):
    """Second-order DARTS and every other strategy: all their random draws come from the step's
    seed, so two processes draw what one does."""
    one, two, _ = searched(strategy)
    a, b = final_state(one), final_state(two)
    assert_same_search(a, b)
    assert b["state"]["world_size"] == 2 and len(b["state"]["rng"]) == 2
    # the per-step metrics are the global batch's, not rank 0's half
    steps_a, steps_b = events(one, "step"), events(two, "step")
    assert [e["step"] for e in steps_b] == list(range(1, 13))  # once each: rank 0 writes
    for ea, eb in zip(steps_a, steps_b, strict=True):
        keys = {"train_loss", "train_acc", "val_loss", "val_acc"} & set(ea)
        assert {"train_loss", "train_acc"} <= keys and keys <= set(eb)
        for key in keys:
            assert eb[key] == pytest.approx(ea[key], abs=1e-6)
    # Eval mode normalises with the BN running statistics (every NB201 cell tracks them, as
    # the references), and those are per group: rank 0's moved once per step over its 8
    # images, the single process's twice (once per micro-batch). After 12 steps from (0, 1)
    # they differ by construction, so the eval numbers are only checked to be there, per epoch.
    epochs_a, epochs_b = events(one, "epoch"), events(two, "epoch")
    assert len(epochs_a) == len(epochs_b) == 3
    for e in epochs_a + epochs_b:
        assert 0.0 <= e["eval_acc"] <= 1.0 and math.isfinite(e["eval_loss"])


@pytest.mark.slow
def test_only_rank_0_prints_and_writes(darts2):
    _, two, proc = darts2
    assert proc.stdout.count("run folder:") == 1
    assert proc.stdout.count("nas-search: run folder ") == 1  # the start line
    assert proc.stdout.count("epoch 3/3  lr ") == 1  # the epoch line (progress lines aside)
    assert proc.stdout.count("epoch 3/3  step 12 ") == 1  # rank 0's progress line only
    assert json.loads((two / "genotype.json").read_text())["world_size"] == 2
    assert not list(two.glob("*.tmp"))


@pytest.mark.slow
def test_drnas_across_a_stage_transition_on_two_processes_equals_one(tmp_path):
    two = search_2proc(tmp_path / "two", DRNAS)
    assert two.returncode == 0, two.stderr
    search_1proc(tmp_path / "one", DRNAS)
    a, b = final_state(tmp_path / "one"), final_state(tmp_path / "two")
    # widened to K=2 and pruned to 3 ops per edge, identically
    assert a["state"]["strategy"]["partial_channels"] == b["state"]["strategy"]["partial_channels"] == 2  # fmt: skip
    assert torch.equal(a["state"]["supernet"]["mask_cell"], b["state"]["supernet"]["mask_cell"])
    assert int(b["state"]["supernet"]["mask_cell"].sum(-1).max()) == 3
    assert_same_search(a, b, weight_atol=1e-5)


@pytest.mark.slow
def test_pt_with_sharded_evaluation_takes_the_decisions_of_one_process(tmp_path):
    two = search_2proc(tmp_path / "two", PT)
    assert two.returncode == 0, two.stderr
    search_1proc(tmp_path / "one", PT)
    da, db = events(tmp_path / "one", "pt_decision"), events(tmp_path / "two", "pt_decision")
    assert len(da) == len(db) == 6  # NB201: one decision per edge
    for x, y in zip(da, db, strict=True):
        assert (x["edge"], x["candidates"], x["chosen"]) == (
            y["edge"],
            y["candidates"],
            y["chosen"],
        )
        assert y["acc"] == pytest.approx(x["acc"], abs=1e-9)  # counts over all 32 images
        assert y["loss"] == pytest.approx(x["loss"], abs=1e-5)
    assert_same_search(final_state(tmp_path / "one"), final_state(tmp_path / "two"))


# ------------------------------------------------------ resume at another world size


@pytest.mark.slow
def test_two_process_search_preempted_then_resumed_on_one(tmp_path, darts2):
    """A real SIGTERM, seen by rank 1 only, at an exact step (tests/hooked_cli.py): both ranks
    stop at that step's boundary, the checkpoint resumes on one process."""
    one_ref, _, _ = darts2
    run_dir = tmp_path / "moved"
    cmd = _torchrun(str(HOOKED), "search", "--sigterm-at-step=5", "--sigterm-rank=1", "--",
                    *DARTS2, "sync_check_every=1", f"hydra.run.dir={run_dir}")  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)
    assert proc.returncode != 0, proc.stdout
    assert "nas-search: preempted; checkpoint written to" in proc.stderr, proc.stderr
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    # 4 steps per epoch: step 5 is the first of epoch 2, and both ranks stopped after it
    assert (state["epoch"], state["step_in_epoch"], state["global_step"]) == (1, 1, 5)
    assert state["phase"] == "search" and state["world_size"] == 2
    assert not (run_dir / "genotype.json").exists()
    search_1proc(run_dir, [*DARTS2, "resume=true"])
    assert_same_search(final_state(one_ref), final_state(run_dir))


@pytest.mark.slow
def test_one_process_search_preempted_then_resumed_on_two(tmp_path, monkeypatch, darts2):
    one_ref, _, _ = darts2
    run_dir = tmp_path / "moved"
    real_step = SearchStrategy.step
    calls = {"n": 0}

    def step_then_request_stop(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 6:  # epoch 2, second step
            run.stop.request()
        return out

    torch.set_num_threads(1)
    run = SearchRun(_cfg([*DARTS2, "micro_batches=2"]), run_dir)
    monkeypatch.setattr(SearchStrategy, "step", step_then_request_stop)
    with pytest.raises(Preempted):
        run.run()
    monkeypatch.undo()
    state = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)
    assert (state["epoch"], state["step_in_epoch"], state["world_size"]) == (1, 2, 1)
    resumed = search_2proc(run_dir, [*DARTS2, "resume=true"])
    assert resumed.returncode == 0, resumed.stderr
    assert_same_search(final_state(one_ref), final_state(run_dir))
    steps = [e["step"] for e in events(run_dir, "step")]
    assert steps == list(range(1, 13))  # the log reads as one run


# ------------------------------------------------------------ strategies with components

# a sample of strategy x component pairs (tests/search/test_components.py steps every pair):
# SDARTS's draws on top of DrNAS's, PC-DARTS's edge betas (architecture parameters of a
# component) after a warm-up epoch, SDARTS-ADV's attack (resume only: its eval-mode forward
# reads batch-norm running statistics, which each rank updates from its own images within an
# epoch, so two processes attack with other statistics than one; every rank still takes the
# same step, which sync_check_every=1 checks)
COMPONENT_PAIRS = {
    "drnas+sdarts_rs": [*TINY, "search=drnas", "epochs=2", "eval=false",
                        "components=[sdarts_rs]"],
    "darts+pc_darts": [*TINY, "epochs=2", "eval=false", "components=[pc_darts]",
                       "components.pc_darts.warmup_epochs=1",
                       "components.pc_darts.partial_channels=2"],
    "darts+sdarts_adv": [*TINY, "epochs=2", "eval=false", "components=[sdarts_adv]"],
    # OLES: the validation gradients of the op weights summed over the ranks; windows of 3
    # scores, checked at steps 3 and 6, on either side of the preemption
    "darts+oles": [*TINY, "epochs=2", "eval=false", "components=[oles]",
                   "components.oles.frequency=2", "components.oles.threshold=1.0"],
}  # fmt: skip
ONE_PROCESS_ONLY = {"darts+sdarts_adv"}


@pytest.mark.slow
@pytest.mark.parametrize("pair", sorted(COMPONENT_PAIRS))
def test_components_on_two_processes_equal_one_and_resume_exactly(tmp_path, monkeypatch, pair):
    overrides = COMPONENT_PAIRS[pair]
    search_1proc(tmp_path / "one", overrides)
    one = final_state(tmp_path / "one")
    assert any(k.startswith("components") for k in one["arch"]) == (pair == "darts+pc_darts")
    if pair not in ONE_PROCESS_ONLY:
        two = search_2proc(tmp_path / "two", overrides)
        assert two.returncode == 0, two.stderr
        assert_same_search(one, final_state(tmp_path / "two"))

    # preempted in the middle of epoch 2, resumed: the uninterrupted search
    run_dir = tmp_path / "resumed"
    real_step = SearchStrategy.step
    calls = {"n": 0}

    def step_then_request_stop(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 6:  # epoch 2, second step
            run.stop.request()
        return out

    torch.set_num_threads(1)
    run = SearchRun(_cfg([*overrides, "micro_batches=2"]), run_dir)
    monkeypatch.setattr(SearchStrategy, "step", step_then_request_stop)
    with pytest.raises(Preempted):
        run.run()
    monkeypatch.undo()
    search_1proc(run_dir, [*overrides, "resume=true"])
    resumed = final_state(run_dir)
    assert resumed["genotype"] == one["genotype"]
    for k in one["arch"]:
        assert torch.equal(one["arch"][k], resumed["arch"][k]), k
    for k in one["weights"]:
        assert torch.equal(one["weights"][k], resumed["weights"][k]), k


def _as_if_written_by_two_processes(path: Path) -> None:
    """The checkpoint of a 1-process search with micro_batches=2, rewritten as the same
    search's on 2 processes (the batch-norm groups agree; only the world size differs)."""
    from nas.run.checkpoint import checksum

    state = torch.load(path, weights_only=True)
    state["world_size"] = 2
    state["config"]["micro_batches"] = 1
    state["rng"] = [state["rng"][0], state["rng"][0]]
    state["checksum"] = checksum(state)
    torch.save(state, path)


def test_a_search_drawing_random_numbers_is_refused_on_another_number_of_processes(
    tmp_path, monkeypatch
):
    """S4's ``noise`` draws from the global generator, which each process seeds from its own
    stream: no other world size continues it as the stopped run would, so it is refused in
    one line (the supernets without draws resume: the tests above)."""
    overrides = ["space=s4", "space.C=4", "space.layers=3", "batch_size=16",
                 "data.max_items=64", "epochs=2", "eval=false", "figures=false"]  # fmt: skip
    run_dir = tmp_path / "s4"
    real_step = SearchStrategy.step
    calls = {"n": 0}

    def step_then_request_stop(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 1:
            run.stop.request()
        return out

    run = SearchRun(_cfg([*overrides, "micro_batches=2"]), run_dir)
    monkeypatch.setattr(SearchStrategy, "step", step_then_request_stop)
    with pytest.raises(Preempted):
        run.run()
    monkeypatch.undo()
    _as_if_written_by_two_processes(run_dir / "checkpoints" / "last.pt")
    with pytest.raises(SearchError) as refused:
        SearchRun(_cfg([*overrides, "micro_batches=2", "resume=true"]), run_dir)
    line = str(refused.value)
    assert "\n" not in line and "was written by 2 process(es)" in line
    assert ": Noise), each process from its own stream" in line
    assert line.endswith("resume on 2 process(es)")
