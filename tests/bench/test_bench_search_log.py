"""What an NB201 search logs per epoch and prints at the end."""

from __future__ import annotations

import pytest

from nas.bench import NB201, SEARCH_LOG_KEYS, format_result_line, search_log_entry
from search_spaces.genotype import parse_nb201_arch
from search_spaces.nb201 import index_to_arch
from search_spaces.published import published_genotype


def test_entry_holds_the_papers_columns():
    entry = search_log_entry(parse_nb201_arch(index_to_arch(6111)))
    assert entry == {
        "nb201/cifar10/valid": 91.606667,  # cifar10-valid, x-valid
        "nb201/cifar10/test": 94.373333,  # cifar10, ori-test: another training run
        "nb201/cifar100/valid": 72.746667,
        "nb201/cifar100/test": 73.22,
        "nb201/ImageNet16-120/valid": 45.555555,
        "nb201/ImageNet16-120/test": 46.711111,
    }
    assert list(entry) == list(SEARCH_LOG_KEYS)
    assert all(isinstance(v, float) for v in entry.values())
    assert search_log_entry(6111) == search_log_entry(index_to_arch(6111)) == entry


def test_result_line():
    line = format_result_line(1835)
    assert line == (
        "NB201 cell 1835: CIFAR-10 valid 39.77 test 54.30 | CIFAR-100 valid 15.03 test 15.61 | "
        "ImageNet16-120 valid 16.43 test 16.32 (top-1 %, mean of the 200-epoch runs)"
    )
    assert "\n" not in line


def test_other_tables_and_bad_genotypes(tiny_official):
    bench = NB201(path=tiny_official, trust_pickle=True)
    assert search_log_entry(6111, bench=bench)["nb201/cifar100/test"] == bench.query(
        6111, dataset="cifar100", split="x-test"
    )
    with pytest.raises(ValueError, match="DARTS-space genotype has no NAS-Bench-201 entry"):
        search_log_entry(published_genotype("DARTS_V2"))
