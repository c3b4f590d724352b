"""Settings that a run would carry along without effect are refused in one line before the
first epoch: components acting through the architecture step under ``fix_alpha``, a partial
channel K set twice, ``arch_batch=random`` where no architecture step reads it, and the
second-order radius at first order."""

from __future__ import annotations

import pytest
import settings_matrix
from hydra import compose, initialize_config_dir

from nas.cli.search import CONFIG_DIR
from nas.pipeline.search import SearchError, SearchRun

TINY = [
    "space.C=4",
    "batch_size=8",
    "data.max_items=16",
    "epochs=2",
    "eval=false",
    "figures=false",
]


def _refusal(tmp_path, *overrides: str) -> str:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="nas_search", overrides=TINY + list(overrides))
    run_dir = tmp_path / "run"
    with pytest.raises(SearchError) as e:
        SearchRun(cfg, run_dir).run()
    message = str(e.value)
    assert "\n" not in message
    assert settings_matrix.epochs_logged(run_dir) == 0
    return message


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["search.fix_alpha=true", "components=[beta_darts]"], ["fix_alpha", "beta_darts"]),
        (["search.fix_alpha=true", "components=[fair_darts]"], ["fix_alpha", "fair_darts"]),
        (["search.fix_alpha=true", "cost=latency"], ["fix_alpha"]),
        (
            [
                "components=[pc_darts]",
                "components.pc_darts.warmup_epochs=0",
                "space.partial_channels=2",
            ],
            ["partial_channels=2", "K=4"],
        ),
        (["search=snas", "arch_batch=random"], ["arch_batch=random", "single-level"]),
        (["search.fix_alpha=true", "arch_batch=random"], ["arch_batch=random", "fix_alpha"]),
        (["search=rsws", "selection=rsws", "arch_batch=random"], ["arch_batch=random"]),
        (["search.unrolled_r=0.5"], ["unrolled_r=0.5", "order=2"]),
        (["search=drnas", "search.unrolled_r=0.5"], ["unrolled_r=0.5", "order=2"]),
    ],
)
def test_refused_before_the_run(tmp_path, overrides, words):
    message = _refusal(tmp_path, *overrides)
    for word in words:
        assert word in message, message


@pytest.mark.slow
def test_the_same_k_twice_and_the_second_order_radius_are_accepted(tmp_path):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for extra in (
            [
                "components=[pc_darts]",
                "components.pc_darts.warmup_epochs=0",
                "space.partial_channels=4",
                "epochs=1",
            ],
            ["search.order=2", "search.unrolled_r=0.02", "epochs=1"],
            ["search.fix_alpha=true", "components=[sdarts_rs]", "epochs=1"],
        ):
            cfg = compose(config_name="nas_search", overrides=TINY + extra)
            SearchRun(cfg, tmp_path / "_".join(extra).replace("/", "")).run()
