"""Every selector on the supernet of every strategy, on a space of every family, with every component.

The pairings come from the registries (the config groups ``search``, ``selection`` and
``components``, the space families of ``search_spaces.families``), so a new strategy, selector,
component or family is tested here without a line added: each pairing runs a tiny search end
to end (``run_search``) and must leave a genotype of the space and the plug-ins' names in
``genotype.json``, or be refused in one line before the run starts.

Two tiers: the fast one runs a pairwise covering array of (family, strategy, selector,
component) (``tests/covering.py``: every value of each factor meets every value of every
other in some row, about 75 runs where the product is thousands); the full tier (marked
``slow``) adds the whole product of family, strategy and selector without components.
"""

from __future__ import annotations

import json
from itertools import combinations, product
from pathlib import Path

import pytest
from covering import pairwise
from hydra import compose, initialize_config_dir

from nas.choices import config_dir
from nas.hardware import network_layout
from nas.hardware.profiler import profile
from nas.pipeline import run_search
from nas.pipeline.search import SearchError
from nas.plugins import available, build_strategy
from search_spaces import SPACE_NAMES, get_space, parse_genotype
from search_spaces.families import FAMILIES


def _candidates(name: str) -> int:
    return sum(c.num_edges * c.num_ops for c in get_space(name).cells.values())


# one space per family, its smallest (fewest candidate ops: s1 of the DARTS-style spaces, where
# the full DARTS space takes minutes of zero-cost scoring on 2 CPU cores)
SPACES = [
    min((n for n in SPACE_NAMES if get_space(n).family == f), key=_candidates) for f in FAMILIES
]
# the smallest supernet of each family, as the family declares it (DARTS-style: two reduction
# cells and a normal one need 3 cells; the chains: one block a stage)
LAYERS = {name: family.smallest_layers for name, family in FAMILIES.items()}
# settings that keep the known selectors to seconds; a new selector runs with its defaults
FAST = {
    "pt": ["selection.proj_intv=0", "selection.num_val_batches=1"],
    "rsws": ["selection.archs=4", "selection.batches_per_arch=1", "selection.top_k=2"],
    # FairDARTS's 0.85 is for its sigmoids; a one-epoch softmax of any strategy reaches 0.1
    "threshold": ["selection.threshold=0.1"],
    "zc": [
        "selection.pool_size=1", "selection.batch_size=8", "selection.validate_rounds=1",
        "selection.post_C=4", "selection.post_layers=3",
    ],
}  # fmt: skip


def _reads_weights(selector: str) -> bool:
    from hydra.utils import get_class

    from nas.plugins import plugin_config

    return bool(get_class(str(plugin_config("selection", selector)._target_)).selects_from_weights)


def _required(selector: str, space: str, tmp_path: Path) -> list[str]:
    """What a selector cannot run without: the budget selector needs a cost table of the
    supernet's space (FLOPs: no timing) and a budget."""
    if selector != "budget":
        return []
    layers = LAYERS[get_space(space).family]
    layout = network_layout(space, C=4, layers=layers, image_size=32, num_classes=10)
    table = profile(layout, timed=False).save(tmp_path / "table.json")
    return [f"selection.table={table}", "selection.budget=1000", "selection.metric=flops"]


#: no component, then each registered one
COMPONENTS = ["none", *available("components")]
#: the fast tier's rows: every pair of values of any two factors meets in one of them
ROWS = pairwise([SPACES, available("search"), available("selection"), COMPONENTS])


@pytest.mark.slow
@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("strategy", available("search"))
@pytest.mark.parametrize("selector", available("selection"))
def test_selector_on_strategy_on_space(tmp_path: Path, space: str, strategy: str, selector: str):
    _pairing(tmp_path, space, strategy, selector, "none")


@pytest.mark.parametrize(
    "space,strategy,selector,component", [pytest.param(*r, id="-".join(r)) for r in ROWS]
)
def test_pairwise_pairings(
    tmp_path: Path, space: str, strategy: str, selector: str, component: str
):
    _pairing(tmp_path, space, strategy, selector, component)


def test_rows_cover_every_pair():
    """The covering array's promise, on the factors it is given."""
    factors = [SPACES, available("search"), available("selection"), COMPONENTS]
    for i, j in combinations(range(len(factors)), 2):
        assert {(r[i], r[j]) for r in ROWS} == set(product(factors[i], factors[j]))
    assert len(ROWS) < len(list(product(*factors))) // 10


def _pairing(tmp_path: Path, space: str, strategy: str, selector: str, component: str) -> None:
    overrides = [
        f"space={space}", f"search={strategy}", f"selection={selector}", "space.C=4",
        f"space.layers={LAYERS[get_space(space).family]}", "batch_size=8", "data.max_items=16",
        "epochs=1", "eval=false", "figures=false", *FAST.get(selector, []),
        *_required(selector, space, tmp_path),
        *([] if component == "none" else [f"components=[{component}]"]),
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name="nas_search", overrides=overrides)
    learns_none = _reads_weights(selector) and not build_strategy(cfg).has("arch_params")
    try:
        result = run_search(cfg, tmp_path / "run")
    except SearchError as e:
        # refused in one line before the run starts: a component the strategy or the space
        # cannot take (naming it), or a selector that derives from architecture weights on a
        # strategy that learns none (uniform weights: the first op of every edge)
        assert "\n" not in str(e) and not (tmp_path / "run" / "checkpoints").exists(), str(e)
        if component != "none" and component in str(e):
            return
        assert learns_none and "learns none" in str(e), str(e)
        return
    assert not learns_none, f"{selector} on {strategy} ran: it should be refused"
    result.genotype.validate(get_space(space))
    record = json.loads((tmp_path / "run" / "genotype.json").read_text())
    assert (record["strategy"], record["selector"], record["space"]) == (strategy, selector, space)
    assert parse_genotype(record["text"]) == result.genotype
