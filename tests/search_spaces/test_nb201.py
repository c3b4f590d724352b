import csv
import random

import pytest
import torch

from search_spaces.nb201 import (
    INDEX_FILE,
    NUM_ARCHS,
    TinyNetwork,
    arch_to_index,
    index_to_arch,
    write_index_table,
)


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_index_map_covers_all_cells_both_ways(shared_data):
    rows = _rows(shared_data / "nb201" / "nb201_all.csv")
    assert len(rows) == NUM_ARCHS
    for row in rows:
        i = int(row["index"])
        assert index_to_arch(i) == row["arch_str"]
        assert arch_to_index(row["arch_str"]) == i


def test_shipped_table_is_regenerated_exactly(shared_data, tmp_path):
    out = tmp_path / "archs.bin"
    write_index_table(shared_data / "nb201" / "nb201_all.csv", out)
    assert out.read_bytes() == INDEX_FILE.read_bytes()


def test_known_cells():
    assert (
        arch_to_index(
            "|skip_connect~0|+|skip_connect~0|skip_connect~1|+|skip_connect~0|skip_connect~1|skip_connect~2|"
        )
        == 1835
    )
    assert index_to_arch(6111).startswith("|nor_conv_3x3~0|")
    for bad in (-1, NUM_ARCHS, "3", True):
        with pytest.raises(
            ValueError, match=r"NB201 index .* out of range; expected an int in 0\.\.15624"
        ):
            index_to_arch(bad)


def _param_rows(shared_data):
    return _rows(shared_data / "nb201" / "nb201_params_official.csv")


def _check_params(rows):
    for row in rows:
        model = TinyNetwork(16, 5, row["arch_str"], 10)
        assert sum(p.numel() for p in model.parameters()) == int(row["params_cifar10"]), row[
            "arch_str"
        ]


def test_parameter_counts_of_a_random_sample(shared_data):
    rows = _param_rows(shared_data)
    _check_params(random.Random(0).sample(rows, 400))


def test_class_count_adds_65_parameters_each():
    a = TinyNetwork(16, 5, 0, 10)
    b = TinyNetwork(16, 5, 0, 100)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(b) - count(a) == 90 * 65


def test_parameter_counts_of_all_cells(shared_data):
    """Every one of the 15,625 official counts, from an additive model whose terms are read off
    real networks: the all-`none` network's parameters plus, per edge, what its op adds (the
    all-op network's extra over all-`none`, over 6 edges; every edge of a stage has the same
    shape). The random-sample test above builds 400 networks for real, so the model is checked
    against the networks themselves; building all 15,625 took over 20 minutes."""

    def count(arch: str) -> int:
        return sum(p.numel() for p in TinyNetwork(16, 5, arch, 10).parameters())

    ops = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
    uniform = {op: count(f"|{op}~0|+|{op}~0|{op}~1|+|{op}~0|{op}~1|{op}~2|") for op in ops}
    base = uniform["none"]
    per_edge = {op: (uniform[op] - base) // 6 for op in ops}
    assert all((uniform[op] - base) % 6 == 0 for op in ops)
    rows = _param_rows(shared_data)
    assert len(rows) == NUM_ARCHS
    for row in rows:
        edges = [
            token.split("~")[0]
            for token in row["arch_str"].strip("|").replace("|+|", "|").split("|")
        ]
        predicted = base + sum(per_edge[op] for op in edges)
        assert predicted == int(row["params_cifar10"]), row["arch_str"]


def test_tiny_network_forward_and_none_cells():
    torch.manual_seed(0)
    model = TinyNetwork(
        4, 1, "|nor_conv_3x3~0|+|none~0|avg_pool_3x3~1|+|skip_connect~0|none~1|nor_conv_1x1~2|", 10
    )
    features, logits = model(torch.randn(2, 3, 32, 32))
    assert features.shape == (2, 16) and logits.shape == (2, 10)
    logits.sum().backward()
    # a cell whose output node gets only `none` edges outputs zeros
    zero = TinyNetwork(4, 1, "|nor_conv_3x3~0|+|none~0|none~1|+|none~0|none~1|none~2|", 10)
    out = zero.cells[0](torch.randn(2, 4, 8, 8))
    assert out.shape == (2, 4, 8, 8) and torch.count_nonzero(out) == 0
