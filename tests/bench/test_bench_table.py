"""The embedded NAS-Bench-201 table: real values, exact semantics, one-line errors, lazy load."""

from __future__ import annotations

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from nas.bench import NB201, NUM_CELLS
from nas.bench.container import Container
from nas.bench.make_embedded import COLUMNS, RUNTIME_COLUMNS, SEED_COLUMNS, build_table
from nas.bench.nb201 import EMBEDDED_FILE
from search_spaces.genotype import DartsGenotype, parse_nb201_arch
from search_spaces.nb201 import arch_to_index, index_to_arch
from search_spaces.published import published_genotype

ALL_SKIP = "|skip_connect~0|+|skip_connect~0|skip_connect~1|+|skip_connect~0|skip_connect~1|skip_connect~2|"


@pytest.fixture(scope="module")
def bench() -> NB201:
    return NB201()


@pytest.fixture(scope="module")
def rows(shared_data) -> list[dict[str, str]]:
    with open(shared_data / "nb201" / "nb201_all.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_published_anchors(bench):
    best = bench.best(dataset="cifar10", split="test")
    assert (best.index, best.ties, round(best.accuracy, 4)) == (6111, (6111, 13714), 94.3733)
    assert (best.dataset, best.split, best.hp) == ("cifar10", "ori-test", "200")
    best100 = bench.best(dataset="cifar100", split="test")
    assert (best100.index, round(best100.accuracy, 4), best100.split) == (9930, 73.5133, "x-test")
    best_in = bench.best(dataset="ImageNet16-120", split="x-test")
    assert (best_in.index, round(best_in.accuracy, 4)) == (857, 47.3111)
    assert bench.index(ALL_SKIP) == 1835
    assert round(bench.query(ALL_SKIP, dataset="cifar10", split="test"), 2) == 54.30
    assert round(bench.query(ALL_SKIP, dataset="cifar100", split="test"), 2) == 15.61
    assert round(bench.query(ALL_SKIP, dataset="ImageNet16-120", split="test"), 2) == 16.32


def test_every_value_equals_the_csv(bench, rows, shared_data):
    for name, column in COLUMNS.items():
        _, hp, dataset, *split = name.split("/")
        seed_set = split[1] if len(split) == 2 else None
        for i in range(0, NUM_CELLS, 7):  # a seventh of the cells, every column
            got = bench.query(i, dataset=dataset, split=split[0], hp=hp, seed_set=seed_set)
            assert got == float(rows[i][column]), (name, i)
    for name, column in RUNTIME_COLUMNS.items():
        dataset = name.split("/")[2]
        assert bench.runtime(1835, dataset=dataset) == float(rows[1835][column])
    with open(shared_data / "nb201" / "nb201_params_official.csv", newline="") as f:
        params = [int(r["params_cifar10"]) for r in csv.DictReader(f)]
    assert [bench.params(i) for i in range(NUM_CELLS)] == params
    assert bench.params(1835, dataset="cifar10-valid") == params[1835] == 73306
    assert bench.params(1835, dataset="cifar100") == params[1835] + 90 * 65
    assert bench.params(1835, dataset="ImageNet16-120") == params[1835] + 110 * 65


def test_regenerating_gives_the_shipped_table(shared_data):
    shipped = Container(EMBEDDED_FILE)
    rebuilt = Container(build_table(shared_data / "nb201"))
    assert rebuilt.meta == shipped.meta
    assert list(rebuilt.arrays) == list(shipped.arrays)
    for name in shipped.arrays:
        assert rebuilt.raw(name) == shipped.raw(name), name
    assert EMBEDDED_FILE.stat().st_size < 3_000_000


def test_per_seed_values_agree_with_the_means(bench, rows):
    for name in SEED_COLUMNS:
        _, hp, dataset, *split = name.split("/")
        seed_set = split[1] if len(split) == 2 else None
        for i in range(NUM_CELLS):
            runs = bench.per_seed(i, dataset=dataset, split=split[0], seed_set=seed_set)
            assert len(runs) == int(rows[i]["n_seeds_200ep"])
            mean = bench.query(i, dataset=dataset, split=split[0], seed_set=seed_set)
            assert abs(sum(runs) / len(runs) - mean) < 1e-4, (name, i)
    assert bench.per_seed(1835, dataset="cifar100", split="x-test") == (15.48, 15.62, 15.72)
    assert bench.n_seeds(0, dataset="ImageNet16-120", split="valid") == 3
    # The per-seed cifar10-valid runs are NATS-Bench's; the default mean is v1.0's, and they differ.
    differs = [
        i
        for i in range(NUM_CELLS)
        if abs(
            bench.query(i, dataset="cifar10-valid", split="x-valid")
            - bench.query(i, dataset="cifar10-valid", split="x-valid", seed_set="nats")
        )
        > 1e-3
    ]
    assert len(differs) > 1000
    with pytest.raises(ValueError, match="only from the NATS-Bench seed set; pass seed_set='nats'"):
        bench.per_seed(1835, dataset="cifar10-valid", split="x-valid")
    with pytest.raises(ValueError, match="no 200-epoch per-seed accuracies for cifar10"):
        bench.per_seed(1835, dataset="cifar10", split="test")


def test_twelve_epochs_only_when_asked(bench, rows):
    assert bench.query(6111) == float(rows[6111]["cifar10_test_acc"])
    assert (
        bench.query(6111, hp="12")
        == bench.query(6111, hp=12)
        == float(rows[6111]["cifar10_test_acc_12ep"])
    )
    assert bench.query(6111, dataset="cifar100", split="valid", hp="12") == float(
        rows[6111]["cifar100_valid_acc_12ep"]
    )
    with pytest.raises(ValueError, match=r"it has: x-valid \('valid'\), x-test \('test'\)$"):
        bench.query(6111, dataset="cifar100", split="ori-test", hp="12")


def test_arch_string_index_and_genotype_agree(bench):
    arch = index_to_arch(6111)
    genotype = parse_nb201_arch(arch)
    values = {
        bench.query(a, dataset="cifar100", split="x-valid")
        for a in (arch, 6111, genotype, f"  {arch}\n")
    }
    assert values == {72.746667}
    assert bench.arch(genotype) == arch and bench.index(arch) == 6111


def test_index_map_is_the_official_one(bench):
    for i in range(NUM_CELLS):
        arch = bench.arch(i)
        assert arch == index_to_arch(i)
        assert arch_to_index(arch) == bench.index(arch) == i


def test_rank_and_percentile(bench, rows):
    assert bench.rank(6111) == bench.rank(13714) == 1
    assert bench.percentile(6111) == 100.0
    values = [float(r["cifar100_test_acc"]) for r in rows]
    better = sum(v > values[1835] for v in values)
    assert bench.rank(1835, dataset="cifar100", split="x-test") == better + 1
    at_most = sum(v <= values[1835] for v in values)
    assert bench.percentile(1835, dataset="cifar100", split="test") == pytest.approx(
        100 * at_most / NUM_CELLS
    )


def test_missing_values_are_nan(bench, rows):
    empty = next(i for i, r in enumerate(rows) if r["naswot_score_v1"] == "")
    record = bench.record(empty)
    assert math.isnan(record["extra/naswot_score_v1"])
    assert record["acc/200/cifar10/ori-test"] == float(rows[empty]["cifar10_test_acc"])
    assert record["extra/n_seeds_200ep"] == int(rows[empty]["n_seeds_200ep"])


@pytest.mark.parametrize(
    "text",
    [
        "|nor_conv_3x3~0|+|nor_conv_3x3~0|",
        "|conv_7x7~0|+|none~0|none~1|+|none~0|none~1|none~2|",
        "nor_conv_3x3~0",
        "|nor_conv_3x3~1|+|none~0|none~1|+|none~0|none~1|none~2|",
    ],
)
def test_bad_arch_strings_give_the_genotype_modules_errors(bench, text):
    with pytest.raises(ValueError) as expected:
        parse_nb201_arch(text)
    with pytest.raises(ValueError) as got:
        bench.query(text)
    assert str(got.value) == str(expected.value)
    assert "\n" not in str(got.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"dataset": "cifar10", "split": "x-valid"},
            "cifar10 has no split 'x-valid' in the 200-epoch accuracies of the embedded NB201 "
            "table; it has: ori-test ('test'); CIFAR-10 validation accuracy comes from another "
            "training run: dataset='cifar10-valid', split='x-valid'",
        ),
        (
            {"dataset": "cifar10-valid", "split": "x-test"},
            "cifar10-valid has no split 'x-test' in the 200-epoch accuracies of the embedded "
            "NB201 table; it has: x-valid ('valid'), ori-test ('test')",
        ),
        (
            {"dataset": "cifar100", "split": "train"},
            "cifar100 has no split 'train' in the 200-epoch accuracies of the embedded NB201 "
            "table; it has: x-valid ('valid'), x-test ('test'), ori-test",
        ),
        (
            {"dataset": "imagenet"},
            "unknown NB201 dataset 'imagenet'; expected one of cifar10-valid, cifar10, "
            "cifar100, ImageNet16-120",
        ),
        (
            {"hp": "90"},
            "unknown NB201 schedule hp='90'; expected '200' (200 epochs, the default) or '12' (the 12-epoch schedule)",
        ),
        ({"seed_set": "v2"}, "unknown seed_set 'v2'; expected None (the table's column) or 'nats'"),
    ],
)
def test_bad_dataset_split_or_schedule(bench, kwargs, message):
    with pytest.raises(ValueError) as e:
        bench.query(1835, **kwargs)
    assert str(e.value) == message


def test_bad_cells(bench):
    for index in (NUM_CELLS, -1, True):
        with pytest.raises(ValueError, match="out of range|expected an NB201 arch string"):
            bench.query(index)
    with pytest.raises(ValueError, match=r"got DartsGenotype \(a DARTS-space genotype has no NAS"):
        bench.query(published_genotype("DARTS_V2"))
    assert isinstance(published_genotype("DARTS_V2"), DartsGenotype)
    with pytest.raises(
        ValueError,
        match="has no 200-epoch training time for cifar10; it has: cifar10-valid, cifar100, ImageNet16-120",
    ):
        bench.runtime(1835, dataset="cifar10")
    with pytest.raises(ValueError, match="has no per-epoch curves; convert an official"):
        bench.curve(1835, dataset="cifar10", split="test")
    with pytest.raises(ValueError, match="does not record seed ids"):
        bench.seeds(1835, dataset="cifar100")
    assert bench.datasets() == ("cifar10-valid", "cifar10", "cifar100", "ImageNet16-120")
    assert bench.splits("cifar10-valid") == ("x-valid", "ori-test")
    assert bench.splits("ImageNet16-120", hp="12") == ("x-valid", "x-test")


def test_nothing_is_loaded_at_import_and_queries_need_no_torch():
    code = (
        "import sys\n"
        "import nas.bench\n"
        "b = nas.bench.NB201()\n"
        "assert b._table is None and 'numpy' not in sys.modules and 'torch' not in sys.modules\n"
        "print(round(b.query(1835), 2), b.best(dataset='cifar100').index, b.rank(1835))\n"
        "print('torch' in sys.modules, 'numpy' in sys.modules)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0].split()[:2] == ["54.3", "9930"]
    assert out[1] == "False False"


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="NB201 results file .*nope.nbt not found"):
        NB201(path=tmp_path / "nope.nbt").query(0)
    junk = tmp_path / "junk.nbt"
    junk.write_bytes(b"NASBENCH" + b"\x05\x00\x00\x00\x00\x00\x00\x00{oops")
    with pytest.raises(ValueError, match="corrupt .nbt header"):
        NB201(path=junk).query(0)
