"""The search's weight schedule per step and with a cosine warm-up (``nas.run.schedules``).

``optimizer.lr_per_step`` evaluates the schedule at every step (the fractional epoch), and
``optimizer.warmup_lr`` makes the warm-up a cosine of its own before the cosine restarts:
ProxylessNAS's weights (``nas_manager.py`` ``warm_up`` and ``run_manager.py``
``_calc_learning_rate``, written out here). A tiny search logs each step's rate.
"""

from __future__ import annotations

import json
import math

import pytest
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import SearchError, SearchRun
from nas.run.schedules import search_lr_factor


def _reference_rates(warmup_epochs: int, epochs: int, n: int, lr_max: float, lr: float):
    """ProxylessNAS's rate of every batch: its warm-up epochs, then its search epochs."""
    rates = []
    for epoch in range(warmup_epochs):
        for i in range(n):
            t_cur, t_total = epoch * n + i, warmup_epochs * n
            rates.append(0.5 * lr_max * (1 + math.cos(math.pi * t_cur / t_total)))
    for epoch in range(epochs - warmup_epochs):
        for i in range(n):
            t_cur, t_total = epoch * n + i, (epochs - warmup_epochs) * n
            rates.append(0.5 * lr * (1 + math.cos(math.pi * t_cur / t_total)))
    return rates


def test_the_cosine_warm_up_and_restart_per_step_are_proxylessnas_s():
    factor = search_lr_factor(epochs=12, lr=0.025, lr_min=0.0, warmup_epochs=4,
                              warmup_lr=0.05, steps_per_epoch=7)  # fmt: skip
    ours = [0.025 * factor(s) for s in range(12 * 7)]
    assert ours == pytest.approx(_reference_rates(4, 12, 7, 0.05, 0.025), rel=1e-14, abs=0)
    # per epoch, without warm-up: the cosine of every other search, unchanged
    plain = search_lr_factor(epochs=5, lr=0.1, lr_min=0.001)
    expected = [0.001 + 0.099 * (1 + math.cos(math.pi * e / 5)) / 2 for e in range(5)]
    assert [0.1 * plain(e) for e in range(5)] == pytest.approx(expected, rel=1e-15)
    # a linear warm-up per step rises every step
    linear = search_lr_factor(epochs=4, lr=0.1, lr_min=0.0, warmup_epochs=1, steps_per_epoch=4)
    assert [linear(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]


def _cfg(overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="nas_search", overrides=overrides)


TINY = ["space.C=4", "space.layers=1", "batch_size=16", "data.max_items=64", "epochs=3",
        "eval=false", "figures=false", "log_every=1", "optimizer.lr_min=0"]  # fmt: skip


def test_a_search_sets_the_rate_of_every_step(tmp_path):
    run = SearchRun(_cfg([*TINY, "optimizer.warmup_epochs=1", "optimizer.warmup_lr=0.05",
                          "optimizer.lr_per_step=true"]), tmp_path / "run")  # fmt: skip
    run.run()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    logged = [e["lr"] for e in map(json.loads, lines) if e["event"] == "step"]
    n = len(logged) // 3
    assert n >= 2 and logged == pytest.approx(_reference_rates(1, 3, n, 0.05, 0.025), rel=1e-14)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["optimizer.warmup_lr=0.05"], "starts a cosine warm-up of optimizer.warmup_epochs=0"),
        (["optimizer.warmup_lr=0.05", "optimizer.warmup_epochs=3"], "0 < warmup_epochs < epochs"),
        (["optimizer.nesterov=true", "optimizer.momentum=0"], "needs optimizer.momentum > 0"),
        (["label_smoothing=1.0"], "label_smoothing must be a number in [0, 1)"),
    ],
)
def test_bad_schedule_values_are_one_line(tmp_path, overrides, message):
    with pytest.raises(SearchError, match=r".*") as e:
        SearchRun(_cfg([*TINY, *overrides]), tmp_path / "run")
    assert message in str(e.value) and "\n" not in str(e.value)
