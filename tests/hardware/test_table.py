"""Latency tables: the layout is the network's, part by part; the file refuses a foreign machine."""

import json
import random

import pytest
import torch

from nas.hardware.cost import CostModel
from nas.hardware.parts import Part, network_layout
from nas.hardware.profiler import profile, summarize_ms, time_call
from nas.hardware.table import environment, load_table
from nas.summary import count_macs, count_parameters
from search_spaces.darts import NetworkCIFAR
from search_spaces.genotype import DartsGenotype
from search_spaces.nb201 import TinyNetwork, index_to_arch
from search_spaces.published import resolve_genotype
from search_spaces.space import get_space


def _random_darts(space, rng):
    cells = {}
    for ct in ("normal", "reduce"):
        cell = space.cells[ct]
        pairs = []
        for node in cell.intermediate_nodes:
            for e in rng.sample(list(cell.edges_into(node)), 2):
                pairs.append((rng.choice([o for o in e.ops if o != "none"]), e.src))
        cells[ct] = tuple(pairs)
    concat = (2, 3, 4, 5)
    return DartsGenotype(cells["normal"], concat, cells["reduce"], concat, concat_as_range=True)


@pytest.fixture(scope="module")
def nb201_table():
    layout = network_layout("nb201", C=4, layers=1, image_size=16, num_classes=10)
    return profile(layout, timed=False)


@pytest.fixture(scope="module")
def darts_table():
    layout = network_layout("darts", C=4, layers=3, image_size=16, num_classes=10)
    return profile(layout, timed=False)


def test_nb201_table_adds_up_to_the_network_exactly(nb201_table):
    params = CostModel.from_table(nb201_table, "params")
    flops = CostModel.from_table(nb201_table, "flops")
    for index in [0, 1, 777, 5000, 15624] + random.Random(0).sample(range(15625), 5):
        arch = index_to_arch(index)
        net = TinyNetwork(4, 1, arch, 10)
        g = net.genotype
        assert round(params.of_genotype(g) * 1e6) == count_parameters(net)
        assert round(flops.of_genotype(g) * 1e6) == count_macs(net, (3, 16, 16))


def test_darts_table_adds_up_to_the_network_exactly(darts_table):
    params = CostModel.from_table(darts_table, "params")
    flops = CostModel.from_table(darts_table, "flops")
    rng = random.Random(0)
    genotypes = [resolve_genotype("DARTS_V2")] + [
        _random_darts(get_space("darts"), rng) for _ in range(3)
    ]
    for g in genotypes:
        net = NetworkCIFAR(4, 10, 3, False, g)
        assert round(params.of_genotype(g) * 1e6) == count_parameters(net)
        assert round(flops.of_genotype(g) * 1e6) == count_macs(net, (3, 16, 16))


def test_parts_round_trip_their_keys_and_build():
    layout = network_layout("darts", C=4, layers=3, image_size=16, num_classes=10)
    for part in layout.parts():
        assert Part.from_key(part.key) == part
        out = part.build().eval()(torch.randn(part.input_shape(2)))
        assert out.shape[0] == 2
    with pytest.raises(ValueError, match="malformed"):
        Part.from_key("conv:3:4")


def test_timed_profile_records_the_protocol_statistics(tmp_path):
    layout = network_layout("nb201", C=4, layers=1, image_size=8, num_classes=10)
    table = profile(layout, warmup=1, repeats=3)
    for key, e in table.entries.items():
        assert e["n"] == 3, key
        assert e["p10_ms"] <= e["latency_ms"] <= e["p90_ms"], key
    assert table.environment["threads"] == torch.get_num_threads()
    assert table.protocol["timer"] == "perf_counter"
    path = table.save(tmp_path / "t.json")
    again = load_table(path)  # measured here: accepted
    assert again.entries == json.loads(path.read_text())["entries"]
    lat = CostModel.from_table(again, "latency")
    assert lat.fixed > 0 and all((t >= 0).all() for t in lat.per_op.values())


def test_time_call_statistics():
    calls = []
    t = time_call(lambda: calls.append(1), torch.device("cpu"), warmup=2, repeats=5)
    assert len(calls) == 7 and t.n == 5
    s = summarize_ms([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s.median_ms, s.mean_ms, s.p10_ms, s.p90_ms) == (3.0, 3.0, 1.4, 4.6)
    with pytest.raises(ValueError, match="repeats"):
        time_call(lambda: None, torch.device("cpu"), warmup=0, repeats=0)


@pytest.mark.parametrize(
    "key,value",
    [("torch", "1.0.0"), ("threads", 999), ("device_name", "another CPU"), ("cuda", "12.1")],
)
def test_table_refuses_another_machine_unless_forced(tmp_path, nb201_table, key, value):
    data = nb201_table.to_json()
    data["environment"] = dict(environment("cpu"), **{key: value})
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as err:
        load_table(path)
    message = str(err.value)
    assert "\n" not in message and "measured elsewhere" in message and key in message
    assert "force" in message
    assert load_table(path, force=True).environment[key] == value
    assert load_table(path, expect=None).environment[key] == value


def test_table_of_another_dtype_is_refused_where_one_is_expected(tmp_path, nb201_table):
    data = nb201_table.to_json()
    data["environment"] = dict(data["environment"], dtype="bfloat16")
    path = tmp_path / "bf16.json"
    path.write_text(json.dumps(data))
    load_table(path)  # "here" means this machine at the table's own dtype
    with pytest.raises(ValueError, match="dtype 'bfloat16' != 'float32'"):
        load_table(path, expect=environment("cpu", "float32"))


def test_cuda_table_on_a_machine_without_cuda(tmp_path, nb201_table):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    data = nb201_table.to_json()
    data["environment"] = dict(data["environment"], device_type="cuda", threads=None)
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="CUDA device and this machine has none"):
        load_table(path)


def test_bad_table_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nas-profile"):
        load_table(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a latency table"):
        load_table(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        load_table(tmp_path / "y.json")


@pytest.mark.parametrize("space", ["s1", "s2", "s3", "s4", "s5"])
def test_every_darts_variant_lays_out_and_builds(space):
    layout = network_layout(space, C=4, layers=3, image_size=16, num_classes=10)
    sp = get_space(space)
    for ct, edges in layout.choices.items():
        assert len(edges) == sp.cells[ct].num_edges
        assert all(len(ops) == sp.cells[ct].num_ops for ops in edges)
    for part in layout.parts():
        assert part.build().eval()(torch.randn(part.input_shape(1))).shape[0] == 1
