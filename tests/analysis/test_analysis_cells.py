"""Analysis without a run: cell diagrams of genotypes (graphviz and the matplotlib fallback),
figures from synthetic logs, genotype statistics, ``nas-plot`` on genotypes and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from matplotlib.image import imread

from nas.analysis import (
    cell_graph,
    distance_matrix,
    format_table,
    genotype_distance,
    graphviz_available,
    nb201_position,
    op_counts,
    param_count,
    plot_concentrations,
    plot_decisions,
    plot_weight_trajectories,
    plot_weights_heatmap,
    render_cell,
    to_dot,
    topology_stats,
    write_cell_figures,
)
from nas.analysis import cells as cells_module
from nas.analysis.plots import argmax_shares, selected_ops
from nas.analysis.run import RunData
from nas.cli.plot import main as nas_plot
from search_spaces import get_space, parse_genotype, published_genotype

NB201_ARCH = (
    "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|none~1|skip_connect~2|"
)


def assert_real_image(path, min_bytes: int = 5_000) -> None:
    """A readable PNG of some size that is not one flat colour."""
    assert path.is_file(), path
    assert path.stat().st_size > min_bytes, (path, path.stat().st_size)
    image = imread(str(path))
    assert image.ndim in (2, 3) and image.shape[0] > 100 and image.shape[1] > 100
    assert float(np.asarray(image, dtype=float).std()) > 0.02, f"{path} is a flat image"


@pytest.fixture
def no_graphviz(monkeypatch):
    """Pretend ``dot`` is not installed: the fallback CI exercises."""
    which = cells_module.shutil.which
    monkeypatch.setattr(
        cells_module.shutil, "which", lambda name, *a, **k: None if name == "dot" else which(name)
    )


def test_darts_cell_graph_follows_the_genotype():
    g = published_genotype("DARTS_V2")
    graph = cell_graph(g, "normal")
    names = [n for n, _ in graph.nodes]
    assert names == ["c_{k-2}", "c_{k-1}", "0", "1", "2", "3", "c_{k}"]
    labelled = [e for e in graph.edges if e[2] is not None]
    assert len(labelled) == 8 and ("c_{k-2}", "0", "sep_conv_3x3") in labelled
    assert ("0", "3", "dil_conv_3x3") in labelled  # genotype input 2 = intermediate node 0
    assert sum(e[2] is None for e in graph.edges) == 4  # concat into c_{k}
    dot = to_dot(graph)
    assert dot.startswith("digraph") and '"c_{k-2}" -> "0"' in dot and "sep_conv_3x3" in dot


def test_nb201_cell_graph_has_six_edges():
    graph = cell_graph(parse_genotype(NB201_ARCH))
    assert [n for n, _ in graph.nodes] == ["0", "1", "2", "3"]
    assert len(graph.edges) == 6 and ("1", "3", "none") in graph.edges


def test_fallback_diagrams_without_graphviz(tmp_path, no_graphviz):
    assert not graphviz_available()
    path, engine = render_cell(published_genotype("DrNAS_cifar10"), "reduce", tmp_path / "r.png")
    assert engine == "matplotlib"
    assert_real_image(path)
    path, engine = render_cell(parse_genotype(NB201_ARCH), None, tmp_path / "nb.png")
    assert engine == "matplotlib"
    assert_real_image(path)
    with pytest.raises(FileNotFoundError, match="graphviz"):
        render_cell(parse_genotype(NB201_ARCH), None, tmp_path / "x.png", engine="graphviz")


@pytest.mark.skipif(not graphviz_available(), reason="graphviz's dot is not installed here")
def test_graphviz_diagrams(tmp_path):
    paths = write_cell_figures(published_genotype("DARTS_V2"), tmp_path, engine="graphviz")
    assert [p.name for p in paths] == ["cell_normal.png", "cell_reduce.png"]
    for p in paths:
        assert_real_image(p)
    svg = write_cell_figures(parse_genotype(NB201_ARCH), tmp_path, engine="graphviz", fmt="svg")
    assert svg[0].read_text().lstrip().startswith(("<?xml", "<svg"))


def test_heatmap_and_trajectories_from_synthetic_weights(tmp_path):
    space = get_space("darts")
    rng = np.random.default_rng(0)
    w = rng.dirichlet(np.ones(8), size=(5, 14))  # [epochs, edges, ops]
    g = published_genotype("DARTS_V2")
    marks = selected_ops(g, space.cells["normal"], "normal")
    assert len(marks) == 8 and marks[0] == space.cells["normal"].edges[0].ops.index("sep_conv_3x3")
    fig = plot_weights_heatmap({"normal": w[-1], "reduce": w[-1]}, space, genotype=g)
    fig.savefig(tmp_path / "h.png")
    assert_real_image(tmp_path / "h.png")
    fig = plot_weight_trajectories(w, space.cells["normal"], genotype=g, cell_type="normal")
    fig.savefig(tmp_path / "t.png")
    assert_real_image(tmp_path / "t.png")
    # per-edge op lists (S1) and a space that does not fit the weights both draw
    s1 = get_space("s1")
    plot_weights_heatmap({"normal": rng.dirichlet(np.ones(2), size=14)}, s1).savefig(
        tmp_path / "s1.png"
    )
    plot_weights_heatmap({"normal": w[-1][:, :5]}, space).savefig(tmp_path / "misfit.png")
    assert_real_image(tmp_path / "s1.png")


def test_argmax_shares_skip_none_in_darts_spaces():
    cell = get_space("darts").cells["normal"]
    w = np.full((2, 14, 8), 0.1)
    w[:, :, 0] = 0.5  # `none` strongest everywhere: DARTS derivation ignores it
    w[1, :, 3] = 0.3  # skip_connect next at epoch 2
    shares = argmax_shares(w, cell, family="darts")
    assert shares["none"].sum() == 0
    assert shares["skip_connect"].tolist() == [0.0, 1.0]
    assert math.isclose(sum(s[0] for s in shares.values()), 1.0)
    nb201 = argmax_shares(w[:, :6, :5], get_space("nb201").cells["cell"], family="nb201")
    assert nb201["none"].tolist() == [1.0, 1.0]  # NB201 keeps `none` as an op like the others


def test_a_run_folder_without_a_known_space_takes_its_family_from_its_artefacts(tmp_path):
    def weights(*cell_types: str) -> list[dict]:
        return [{"event": "arch_weights", "epoch": 0, **{ct: [[0.2] * 5] * 6 for ct in cell_types}}]

    run = RunData(path=tmp_path, events=weights("cell"))
    assert (run.family, run.space_name) == ("nb201", "nb201")
    run = RunData(path=tmp_path, events=weights("normal", "reduce"))
    assert (run.family, run.space_name) == ("darts", "darts")
    cell = parse_genotype("|nor_conv_3x3~0|+|none~0|skip_connect~1|+|none~0|none~1|none~2|")
    run = RunData(path=tmp_path, config={"space": {"name": "mine"}}, genotype=cell)
    assert run.space is None and run.space_name == "mine" and run.family == "nb201"
    assert RunData(path=tmp_path, config={"space": {"name": "s3"}}).family == "darts"


def test_decision_trace_and_concentrations_from_synthetic_data(tmp_path):
    space = get_space("darts")
    decisions = [
        {
            "kind": "op",
            "cell_type": "normal",
            "edge": 0,
            "src": 0,
            "dst": 2,
            "candidates": list(space.cells["normal"].edges[0].ops[1:]),
            "acc": [0.5, 0.4, 0.2, 0.6, 0.6, 0.55, 0.5],
            "loss": [1.0] * 7,
            "chosen": "skip_connect",
            "projection": 0,
        },
        {
            "kind": "edge",
            "cell_type": "normal",
            "node": 4,
            "kept": [5, 6],
            "rounds": [
                {"edges": [5, 6, 7, 8], "acc": [0.3, 0.3, 0.5, 0.4], "loss": [1] * 4, "removed": 7},
                {"edges": [5, 6, 8], "acc": [0.3, 0.3, 0.45], "loss": [1] * 3, "removed": 8},
            ],
            "projection": 14,
        },
    ]
    plot_decisions(decisions, space).savefig(tmp_path / "pt.png")
    assert_real_image(tmp_path / "pt.png")
    with pytest.raises(ValueError, match="no op or edge decisions"):
        plot_decisions([], space)
    conc = np.exp(np.random.default_rng(1).normal(size=(14, 8)))
    conc[:, 0] = np.nan  # pruned
    plot_concentrations({"normal": conc, "reduce": conc}, space).savefig(tmp_path / "c.png")
    assert_real_image(tmp_path / "c.png")


def test_genotype_statistics():
    v1, v2 = published_genotype("DARTS_V1"), published_genotype("DARTS_V2")
    assert op_counts(v2, "normal") == {"sep_conv_3x3": 5, "skip_connect": 2, "dil_conv_3x3": 1}
    stats = topology_stats(v2)["normal"]
    assert stats["from_inputs"] == 7 and stats["depth"] == 2 and stats["parameter_free"] == 2
    assert genotype_distance(v2, v2) == 0 and genotype_distance(v1, v2) > 0
    assert (distance_matrix([v1, v2]) == distance_matrix([v1, v2]).T).all()
    assert param_count(v2) == 3_349_342  # the DARTS paper's network, auxiliary head excluded
    nb = parse_genotype(NB201_ARCH)
    assert topology_stats(nb)["cell"]["connected"]
    cut = parse_genotype("|none~0|+|none~0|none~1|+|none~0|none~1|skip_connect~2|")
    assert not topology_stats(cut)["cell"]["connected"]
    pos = nb201_position(nb)
    assert 1 <= pos["cifar10/rank"] <= 15_625 and 0 < pos["cifar10/percentile"] <= 100
    with pytest.raises(ValueError):
        genotype_distance(nb, v2)
    table = format_table([{"a": 1.234, "b": "x|y"}, {"a": 2}])
    assert table.splitlines()[0] == "| a | b |" and "x\\|y" in table and "1.23" in table


def test_nas_plot_a_published_genotype(tmp_path, capsys, no_graphviz):
    assert nas_plot(["DARTS_V2", "-o", str(tmp_path / "d")]) == 0
    out = capsys.readouterr()
    assert "cell_normal.png" in out.out and "graphviz" in out.err  # says it fell back
    for name in ("cell_normal.png", "cell_reduce.png"):
        assert_real_image(tmp_path / "d" / name)
    assert nas_plot(["6111", "-o", str(tmp_path / "n"), "--engine", "matplotlib"]) == 0
    assert_real_image(tmp_path / "n" / "cell.png")
    record = {"space": "nb201", "genotype": parse_genotype(NB201_ARCH).to_json()}
    (tmp_path / "genotype.json").write_text(json.dumps(record))
    assert nas_plot([str(tmp_path / "genotype.json"), "-o", str(tmp_path / "j")]) == 0
    assert_real_image(tmp_path / "j" / "cell.png")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["NO_SUCH_CELL"], "unknown published genotype"),
        (["|foo~0|+|foo~0|foo~1|+|foo~0|foo~1|foo~2|"], "unknown operation"),
        (["missing.json"], "does not exist"),
        (["."], "not a run folder"),
        (["outputs/nb201-darts/seed0"], "no such run folder outputs/nb201-darts/seed0; expected"),
    ],
)
def test_nas_plot_bad_input_is_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert nas_plot(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nas-plot: error:") and message in err and "\n" not in err
