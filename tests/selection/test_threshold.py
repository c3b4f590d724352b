"""FairDARTS's threshold genotype: sparse cells (0-2 inputs a node), their network and selector.

Known answers from the reference (xiaomi-automl/FairDARTS 270cfc9, ``fairdarts/``): the published
FairDARTS_a / FairDARTS_b networks' parameter counts as its ``NetworkCIFAR(parse_method=
'threshold_sparse')`` builds them (the README's 2.83M / 3.88M), and ``parse``'s
``threshold_sparse`` rule on hand-set weights.
"""

from __future__ import annotations

import json

import pytest
import torch
from hydra import compose, initialize_config_dir

from nas.choices import config_dir
from nas.plugins import build_components, build_selector, build_strategy
from nas.selection.threshold import Threshold, threshold_cell
from nas.strategies.base import SearchContext
from nas.supernet import build_supernet
from search_spaces import get_space
from search_spaces.darts import NetworkCIFAR
from search_spaces.genotype import DartsGenotype, genotype_from_json, parse_genotype
from search_spaces.published import PUBLISHED_TEXT, published_genotype
from search_spaces.reference_forward import reference_forward


def test_sparse_text_round_trips_as_the_reference_prints_it():
    for name in ("FairDARTS_a", "FairDARTS_b"):
        text = PUBLISHED_TEXT[name]
        g = parse_genotype(text, space="darts")
        assert g.sparse and str(g) == text
        assert genotype_from_json(json.dumps(g.to_json())) == g
    a = published_genotype("FairDARTS_a")
    # the normal cell has no node 3: nodes 2, 4, 5 make its output (multiplier 3)
    assert a.edges("normal") == [
        ("sep_conv_3x3", 0, 2), ("sep_conv_5x5", 1, 2), ("max_pool_3x3", 0, 4), ("sep_conv_3x3", 0, 5)
    ]  # fmt: skip
    assert a.output_nodes("normal") == (2, 4, 5) and a.output_nodes("reduce") == (2, 3, 4, 5)
    assert a != published_genotype("DARTS_V2") and not published_genotype("DARTS_V2").sparse


@pytest.mark.parametrize(
    ("normal", "message"),
    [
        ("[('sep_conv_3x3', 3, 2)]", "input 2 is a node without inputs"),
        ("[('sep_conv_3x3', 2, 0), ('skip_connect', 2, 0)]", "input 0 given twice"),
        (
            "[('sep_conv_3x3', 2, 0), ('sep_conv_3x3', 2, 1), ('skip_connect', 3, 0)][:0]",
            "no node has an input",
        ),
        ("[('sep_conv_3x3', 3, 0), ('sep_conv_3x3', 2, 0)]", "out of order"),
        ("[('sep_conv_3x3', 6, 0)]", "beyond the 4 intermediate nodes"),
        ("[('sep_conv_3x3', 2, 0), ('sep_conv_3x3', 0)]", "mixes (op, input) pairs"),
        ("[('sep_conv_3x3', 2, 5)]", "input index 5 out of range"),
    ],
)
def test_bad_sparse_genotypes_are_one_line_errors(normal, message):
    text = (
        f"Genotype(normal={normal}, normal_concat=range(2, 6), "
        "reduce=[('max_pool_3x3', 2, 0)], reduce_concat=range(2, 6))"
    )
    if normal.endswith("[:0]"):
        text = text.replace(normal, "[]")
    with pytest.raises(ValueError) as e:
        parse_genotype(text, space="darts")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_published_fairdarts_networks_have_the_reference_parameter_counts():
    # counted on the reference's NetworkCIFAR(36, 10, 20, auxiliary, g, 'threshold_sparse')
    expected = {"FairDARTS_a": (2_360_782, 2_837_208), "FairDARTS_b": (3_407_878, 3_884_304)}
    for name, (plain, with_aux) in expected.items():
        for aux, count in ((False, plain), (True, with_aux)):
            net = NetworkCIFAR(36, 10, 20, aux, name)
            assert sum(p.numel() for p in net.parameters()) == count
    net = NetworkCIFAR(36, 10, 20, False, "FairDARTS_a")
    # DCOCell's multiplier: the nodes with inputs (3 in FairDARTS_a's normal cell, 4 in reduce)
    assert [c.multiplier for c in net.cells[:8]] == [3, 3, 3, 3, 3, 3, 4, 3]


def test_sparse_network_equals_the_reference_forward():
    """The fused forward against DCOCell's arithmetic (node = sum of its ops, drop-path on the
    node's sum, output = the nodes with inputs), float64, eval and training with drop-path."""
    torch.manual_seed(0)
    net = NetworkCIFAR(8, 10, 5, True, "FairDARTS_a").double()
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    net.eval()
    torch.testing.assert_close(net(x)[0], reference_forward(net, x)[0], rtol=0, atol=1e-12)
    net.train()
    net.drop_path_prob = 0.3
    torch.manual_seed(1)
    ours = net(x)
    torch.manual_seed(1)
    ref = reference_forward(net, x)
    torch.testing.assert_close(ours[0], ref[0], rtol=0, atol=1e-10)
    torch.testing.assert_close(ours[1], ref[1], rtol=0, atol=1e-10)


def _weights(cell, values):
    """A [edges, ops] weight tensor of ``cell``: 0.5 everywhere but ``values[(src, dst, op)]``."""
    w = torch.full((len(cell.edges), len(cell.edges[0].ops)), 0.5, dtype=torch.float64)
    for (src, dst, op), v in values.items():
        e = cell.edge(src, dst)
        w[e.index, e.ops.index(op)] = v
    return w


def test_threshold_rule_known_answer():
    cell = get_space("darts").cells["normal"]
    mask = torch.ones(len(cell.edges), len(cell.edges[0].ops), dtype=torch.bool)
    w = _weights(
        cell,
        {
            (0, 2, "sep_conv_3x3"): 0.95,  # node 2: both inputs strong
            (1, 2, "dil_conv_3x3"): 0.90,
            (0, 3, "none"): 0.99,  # node 3: `none` never counts, 0.84 is below 0.85
            (1, 3, "max_pool_3x3"): 0.84,
            (3, 4, "skip_connect"): 0.97,  # node 4: its best input is node 3, which kept none
            (2, 4, "sep_conv_5x5"): 0.96,
            (0, 5, "avg_pool_3x3"): 0.86,  # node 5: top-2 are 4->5 and 1->5; 0->5 is third
            (4, 5, "sep_conv_3x3"): 0.88,
            (1, 5, "dil_conv_5x5"): 0.87,
        },
    )
    triples = threshold_cell(cell, w, mask, 0.85)
    assert triples == [
        ("sep_conv_3x3", 2, 0),
        ("dil_conv_3x3", 2, 1),
        ("sep_conv_5x5", 4, 2),  # 3->4 (0.97) dropped: node 3 has no input
        ("sep_conv_3x3", 5, 4),  # in the order of the ranking, as the reference appends
        ("dil_conv_5x5", 5, 1),
    ]
    # a lower threshold keeps node 3's pooling, and then 3->4 comes back
    low = threshold_cell(cell, w, mask, 0.8)
    assert ("max_pool_3x3", 3, 1) in low and ("skip_connect", 4, 3) in low
    # masked ops never count
    mask[cell.edge(0, 2).index, cell.edges[0].ops.index("sep_conv_3x3")] = False
    assert ("sep_conv_3x3", 2, 0) not in threshold_cell(cell, w, mask, 0.85)


def _fair_strategy(space="darts", overrides=()):
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        cfg = compose(
            "nas_search",
            overrides=[
                "search=darts",
                "components=[fair_darts]",
                "selection=threshold",
                *overrides,
            ],
        )
    st = build_strategy(cfg)
    st.add_components(build_components(cfg))
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    st.prepare_supernet(net)
    st.attach(SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), grad_clip=5.0))
    return st, build_selector(cfg)


def test_threshold_selector_on_fairdarts_sigmoid_weights():
    st, selector = _fair_strategy()
    assert isinstance(selector, Threshold) and selector.threshold == 0.85
    with torch.no_grad():
        for a in st.arch_parameters():
            a.fill_(-3.0)  # sigmoid 0.047: nothing is on ...
        cell = st.supernet.space.cells["normal"]
        ops = cell.edges[0].ops
        st.arch_params["normal"][cell.edge(0, 2).index, ops.index("sep_conv_3x3")] = 2.0  # 0.88
        st.arch_params["reduce"][cell.edge(1, 2).index, ops.index("max_pool_3x3")] = 3.0
    g = selector.select(st)
    assert isinstance(g, DartsGenotype) and g.sparse
    assert g.edges("normal") == [("sep_conv_3x3", 0, 2)]
    assert g.edges("reduce") == [("max_pool_3x3", 1, 2)]
    NetworkCIFAR(4, 10, 3, False, g)(torch.randn(2, 3, 16, 16))  # it builds and runs
    with torch.no_grad():
        st.arch_params["normal"].fill_(-3.0)
    with pytest.raises(ValueError, match="no op of the normal cell reaches the threshold 0.85"):
        selector.select(st)


def test_threshold_selector_is_the_argmax_on_nb201():
    st, selector = _fair_strategy("nb201")
    from nas.selection.argmax import Argmax

    assert selector.select(st) == Argmax().select(st)


def test_bad_threshold_settings():
    with pytest.raises(ValueError, match=r"selection.threshold must be in \[0, 1\]"):
        Threshold(threshold=1.5)
    with pytest.raises(ValueError, match="selection.top must be 1 or 2"):
        Threshold(top=3)


@pytest.mark.slow
def test_fairdarts_search_to_retraining_from_the_command_line(tmp_path):
    """nas-search with FairDARTS and its threshold genotype, then nas-train on the run folder:
    the sparse genotype survives genotype.json and builds its network there."""
    import os
    import subprocess
    import sys

    from nas.pipeline import run_search

    overrides = [
        "space=s1", "search=darts", "components=[fair_darts]", "selection=threshold",
        "selection.threshold=0.5", "space.C=4", "space.layers=3", "batch_size=8",
        "data.max_items=16", "epochs=1", "eval=false", "figures=false",
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name="nas_search", overrides=overrides)
    result = run_search(cfg, tmp_path / "search")
    assert isinstance(result.genotype, DartsGenotype) and result.genotype.sparse
    record = json.loads((tmp_path / "search" / "genotype.json").read_text())
    assert parse_genotype(record["text"]) == result.genotype
    cmd = [
        sys.executable, "-m", "nas.cli.train", f"genotype={tmp_path / 'search'}",
        "model.darts.C=4", "model.darts.layers=3", "batch_size=8", "data.max_items=16",
        "eval.max_items=16", "epochs=1", f"hydra.run.dir={tmp_path / 'train'}",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "train").is_dir()


def test_the_fairdarts_experiment_derives_with_the_reference_threshold():
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name="nas_search", overrides=["experiment=fair_darts_cifar10"])
    selector = build_selector(cfg)
    assert isinstance(selector, Threshold) and (selector.threshold, selector.top) == (0.85, 2)
