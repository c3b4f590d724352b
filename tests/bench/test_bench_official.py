"""Official NAS-Bench-201 files: read through the nas-bench-201 package, converted, round-tripped."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
from official_file import CELLS, EVAL_SETS, write_tiny_official

from nas.bench import NB201, convert_official
from nas.bench.official import load_official
from nas.cli.bench import main

HP_PARTS = {"200": "full", "12": "less"}


@pytest.fixture(scope="module")
def converted(tiny_official, tmp_path_factory):
    return convert_official(
        tiny_official, tmp_path_factory.mktemp("conv") / "tiny.nbt", trust_pickle=True
    )


@pytest.fixture(scope="module")
def package_results(tiny_official):
    """The package's own view: ArchResults per (cell, hp), built as its API builds them."""
    from nas_201_api import ArchResults

    raw = load_official(tiny_official, trust_pickle=True)
    return {
        (index, hp): ArchResults.create_from_state_dict(raw["arch2infos"][index][part])
        for index in CELLS
        for hp, part in HP_PARTS.items()
    }


def test_the_weights_only_trap_is_real(tiny_official):
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(tiny_official)  # torch >= 2.6 default; the package's loader does this
    assert sorted(load_official(tiny_official, trust_pickle=True)["arch2infos"]) == sorted(CELLS)


@pytest.mark.parametrize("which", ["converted", "official"])
def test_values_are_the_packages(which, converted, tiny_official, package_results):
    bench = NB201(path=converted if which == "converted" else tiny_official, trust_pickle=True)
    assert len(bench) == len(CELLS)
    for (index, hp), results in package_results.items():
        for dataset, evals in EVAL_SETS.items():
            seeds = results.get_dataset_seeds(dataset)
            assert bench.seeds(index, dataset=dataset, hp=hp) == tuple(seeds)
            for split in ("train", *evals):
                mean = results.get_metrics(dataset, split, iepoch=None, is_random=False)
                assert bench.query(index, dataset=dataset, split=split, hp=hp) == pytest.approx(
                    mean["accuracy"], abs=1e-12
                )
                runs = bench.per_seed(index, dataset=dataset, split=split, hp=hp)
                expected = [
                    results.get_metrics(dataset, split, is_random=s)["accuracy"] for s in seeds
                ]
                assert runs == pytest.approx(expected, abs=1e-12)
                for seed in seeds:
                    run = results.query(dataset, seed)
                    get = (
                        run.get_train
                        if split == "train"
                        else lambda e, s=split, r=run: r.get_eval(s, e)
                    )
                    epochs = range(run.get_total_epoch())
                    curve = bench.curve(index, dataset=dataset, split=split, hp=hp, seed=seed)
                    assert curve == pytest.approx([get(e)["accuracy"] for e in epochs], abs=1e-4)
                    loss = bench.curve(
                        index, dataset=dataset, split=split, hp=hp, seed=seed, metric="loss"
                    )
                    assert loss == pytest.approx([get(e)["loss"] for e in epochs], abs=1e-5)
            costs = results.get_compute_costs(dataset)
            assert bench.runtime(index, dataset=dataset, hp=hp) == pytest.approx(
                costs["T-train@total"]
            )
    reference = NB201()
    for index in CELLS:
        for dataset in EVAL_SETS:
            assert bench.params(index, dataset=dataset) == reference.params(index, dataset=dataset)


def test_the_official_api_agrees_with_hp_200(tiny_official, converted):
    from nas_201_api import NASBench201API

    api = NASBench201API(load_official(tiny_official, trust_pickle=True), verbose=False)
    bench = NB201(path=converted)
    for index in CELLS:
        info = api.get_more_info(index, "cifar10-valid", hp="200", is_random=False)
        assert bench.query(index, dataset="cifar10-valid", split="valid") == pytest.approx(
            info["valid-accuracy"]
        )
        info = api.get_more_info(index, "cifar10", hp="200", is_random=False)
        assert bench.query(index, dataset="cifar10", split="test") == pytest.approx(
            info["test-accuracy"]
        )
        info = api.get_more_info(index, "cifar100", hp="200", is_random=False)
        assert bench.query(index, dataset="cifar100", split="test") == pytest.approx(
            info["test-accuracy"]
        )
        assert bench.query(index, dataset="cifar100", split="ori-test") == pytest.approx(
            info["valtest-accuracy"]
        )
        # the API's default schedule is 12 epochs: ours is not
        twelve = api.get_more_info(index, "cifar100", is_random=False)["test-accuracy"]
        assert bench.query(index, dataset="cifar100", split="test") != pytest.approx(twelve)
        assert bench.query(index, dataset="cifar100", split="test", hp="12") == pytest.approx(
            twelve
        )


def test_conversion_round_trips(tiny_official, converted):
    direct, reread = NB201(path=tiny_official, trust_pickle=True), NB201(path=converted)
    for index in CELLS:
        a, b = direct.record(index), reread.record(index)
        assert a.keys() == b.keys() and len(a) > 40
        for key in a:
            assert a[key] == b[key] or (math.isnan(a[key]) and math.isnan(b[key])), key
        for dataset in EVAL_SETS:
            assert np.array_equal(
                direct.curve(index, dataset=dataset, split="train"),
                reread.curve(index, dataset=dataset, split="train"),
            )
    # Seed means of curves: two runs for cell 0, three for the others.
    assert (
        len(reread.seeds(0, dataset="cifar10")) == 2
        and len(reread.seeds(6111, dataset="cifar10")) == 3
    )
    assert converted.stat().st_size < tiny_official.stat().st_size


def test_errors_name_what_exists(converted, tiny_official):
    bench = NB201(path=converted)
    with pytest.raises(
        ValueError, match=r"^NB201 cell 1 is not in .*tiny.nbt, which holds 3 of the 15625 cells$"
    ):
        bench.query(1)
    with pytest.raises(
        ValueError,
        match=r"cifar10 has no split 'x-valid' .* it has: train, ori-test \('test'\); CIFAR-10 validation",
    ):
        bench.query(0, dataset="cifar10", split="x-valid")
    with pytest.raises(ValueError, match="has no cifar100 run with seed 999; its seeds: 777, 888"):
        bench.curve(0, dataset="cifar100", split="test", seed=999)
    with pytest.raises(ValueError, match="seed_set='nats': .* has no such"):
        bench.query(0, dataset="cifar10-valid", split="x-valid", seed_set="nats")


def test_bad_official_files(tmp_path):
    not_a_dict = tmp_path / "list.pth"
    torch.save([1, 2, 3], not_a_dict)
    with pytest.raises(ValueError, match="is not an official NAS-Bench-201 file; expected a dict"):
        NB201(path=not_a_dict).query(0)
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a pickle at all")
    with pytest.raises(
        ValueError, match=r"cannot be read as an official NAS-Bench-201 .pth file \(Unpickling"
    ):
        convert_official(garbage, tmp_path / "out.nbt", trust_pickle=True)
    with pytest.raises(
        FileNotFoundError, match="official NAS-Bench-201 file .*missing.pth not found"
    ):
        convert_official(tmp_path / "missing.pth", tmp_path / "out.nbt", trust_pickle=True)
    wrong_map = write_tiny_official(tmp_path / "wrong.pth", cells=(0,))
    data = torch.load(wrong_map, weights_only=False)
    data["meta_archs"][5], data["meta_archs"][6] = data["meta_archs"][6], data["meta_archs"][5]
    torch.save(data, wrong_map)
    with pytest.raises(ValueError, match="architecture 5 is .*; NAS-Bench-201 index 5 is"):
        convert_official(wrong_map, tmp_path / "out.nbt", trust_pickle=True)


def test_curves_holding_some_epochs_only_convert_with_missing_values(tmp_path):
    """Official-format files where the 200-epoch runs logged epochs 0 and 2 of 4: the official
    API reads them; the conversion keeps what is there and marks the rest missing (NaN)."""
    from nas_201_api import ArchResults

    partial = write_tiny_official(tmp_path / "partial.pth", recorded=(0, 2))
    raw = torch.load(partial, weights_only=False)["arch2infos"][6111]["full"]
    run = ArchResults.create_from_state_dict(raw).query("cifar10", 777)  # the API reads it
    assert sorted(run.train_acc1es) == [0, 2]
    out = tmp_path / "partial.nbt"
    assert main(["convert", str(partial), str(out), "--trust-pickle"]) == 0
    bench = NB201(path=out)
    for split in ("train", "test"):
        curve = bench.curve(6111, dataset="cifar10", split=split, seed=777)
        assert len(curve) == 4 and not math.isnan(curve[0]) and not math.isnan(curve[2])
        assert math.isnan(curve[1]) and math.isnan(curve[3])
    expected = run.eval_acc1es["ori-test@2"]
    assert bench.curve(6111, dataset="cifar10", split="test", seed=777)[2] == pytest.approx(
        expected
    )
    assert math.isnan(bench.query(6111, dataset="cifar10", split="test"))  # no last epoch
    # the 12-epoch runs are whole: their numbers are there
    assert not math.isnan(bench.query(6111, dataset="cifar10", split="test", hp="12"))


def test_a_malformed_entry_is_one_line_naming_the_cell(tmp_path, capsys):
    broken = write_tiny_official(tmp_path / "broken.pth", cells=(0, 6111))
    data = torch.load(broken, weights_only=False)
    del data["arch2infos"][6111]["full"]["all_results"]
    torch.save(data, broken)
    assert main(["convert", str(broken), str(tmp_path / "out.nbt"), "--trust-pickle"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "broken.pth: the entry of cell 6111 cannot be read (KeyError: 'all_results')" in err
    assert not (tmp_path / "out.nbt").exists()
