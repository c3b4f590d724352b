"""The pieces of the retraining stage, in process: genotype references, samplers, EMA, batches."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.data import TensorDataset

from nas import distributed as D
from nas.run.schedules import drop_path_prob, train_lr_factor
from nas.training import EMA, TrainError, build_network, resolve_train_genotype
from nas.training.data import ResumableDistributedSampler, ShardSampler
from nas.training.loop import per_rank_batch
from nas.training.model import unused_parameters
from search_spaces import published_genotype
from search_spaces.nb201 import arch_to_index

ARCH = "|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def test_genotype_from_every_form(tmp_path):
    v2 = published_genotype("DARTS_V2")
    assert resolve_train_genotype("DARTS_V2") == v2
    assert resolve_train_genotype(str(v2)) == v2  # the reference's Genotype(...) text
    assert str(resolve_train_genotype(ARCH)) == ARCH
    assert str(resolve_train_genotype(arch_to_index(ARCH))) == ARCH  # an int from Hydra
    assert str(resolve_train_genotype(str(arch_to_index(ARCH)))) == ARCH
    # a search run folder and its genotype.json; a bare genotype JSON file
    (tmp_path / "genotype.json").write_text(
        json.dumps({"space": "darts", "genotype": v2.to_json(), "text": str(v2)})
    )
    assert resolve_train_genotype(str(tmp_path)) == v2
    assert resolve_train_genotype(str(tmp_path / "genotype.json")) == v2
    (tmp_path / "bare.json").write_text(json.dumps(v2.to_json()))
    assert resolve_train_genotype(str(tmp_path / "bare.json")) == v2


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        (None, ValueError, "genotype is required"),
        ("DARTS_V9", ValueError, "unknown published genotype 'DARTS_V9'"),
        ("15625", ValueError, "NB201 index 15625 is out of range"),
        (
            "|nor_conv_3x3~0|+|bad~0|none~1|+|none~0|none~1|none~2|",
            ValueError,
            "unknown operation 'bad'",
        ),
        ("runs/nothing/genotype.json", FileNotFoundError, "no genotype file at"),
    ],
)
def test_bad_genotype_references(spec, error, message):
    with pytest.raises(error, match=message):
        resolve_train_genotype(spec)


def test_folder_without_genotype_and_malformed_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no genotype.json; expected the run folder"):
        resolve_train_genotype(str(tmp_path))
    (tmp_path / "genotype.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        resolve_train_genotype(str(tmp_path))
    (tmp_path / "genotype.json").write_text(json.dumps({"space": "darts", "genotype": {}}))
    with pytest.raises(ValueError, match="malformed genotype JSON"):
        resolve_train_genotype(str(tmp_path))


def test_world_size_must_divide_the_global_batch():
    assert per_rank_batch(96, 1) == 96 and per_rank_batch(768, 8) == 96
    with pytest.raises(TrainError, match="batch_size=96 does not split over 5 processes"):
        per_rank_batch(96, 5)


def test_rank_batches_together_are_the_single_process_batch():
    data = TensorDataset(torch.arange(100))
    single = ResumableDistributedSampler(data, num_replicas=1, rank=0, seed=3, batch_size=32)
    ranks = [
        ResumableDistributedSampler(data, num_replicas=2, rank=r, seed=3, batch_size=16)
        for r in range(2)
    ]
    for epoch in (0, 1):
        single.set_epoch(epoch)
        order = list(single)
        shares = []
        for sampler in ranks:
            sampler.set_epoch(epoch)
            shares.append(list(sampler))
        for k in range(4):  # batches of 32, 32, 32, 4
            together = shares[0][16 * k : 16 * (k + 1)] + shares[1][16 * k : 16 * (k + 1)]
            assert sorted(together) == sorted(order[32 * k : 32 * (k + 1)])
    # a resumed epoch starts at its batch k with the same indices
    ranks[1].set_epoch(1, start_batch=2)
    ranks[0].set_epoch(1)
    full = list(ranks[0])
    ranks[0].set_epoch(1, start_batch=2)
    assert list(ranks[0]) == full[32:] and len(ranks[0]) == len(full) - 32


def test_test_set_shards_count_every_image_once():
    shards = [list(ShardSampler(10, num_replicas=3, rank=r)) for r in range(3)]
    assert sorted(sum(shards, [])) == list(range(10))


def test_schedules_and_drop_path_ramp():
    f = train_lr_factor(schedule="cosine", epochs=4, lr=0.1, lr_min=0.0, warmup_epochs=2)
    # warm-up (e + 1) / 2 replaces the first two epochs, then the cosine at epochs 2 and 3
    assert [f(e) for e in range(4)] == pytest.approx([0.5, 1.0, 0.5, (1 - 2**-0.5) / 2])
    assert [drop_path_prob(0.2, e, 600) for e in (0, 300, 599)] == pytest.approx(
        [0, 0.1, 0.2 * 599 / 600]
    )
    with pytest.raises(ValueError, match="optimizer.schedule must be one of"):
        train_lr_factor(schedule="exp", epochs=3, lr=0.1)


def test_ema_follows_the_weights():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    ema = EMA(model, decay=0.5)
    start = model[0].weight.detach().clone()
    with torch.no_grad():
        model[0].weight.add_(2.0)
        model[1].running_mean.fill_(7.0)
    ema.update(model)
    assert torch.allclose(ema.module[0].weight, start + 1.0)  # half-way
    assert torch.equal(ema.module[1].running_mean, model[1].running_mean)  # buffers copied
    assert not any(p.requires_grad for p in ema.module.parameters())
    other = EMA(model, decay=0.5)
    other.load_state_dict(ema.state_dict())
    assert torch.equal(other.module[0].weight, ema.module[0].weight) and other.num_updates == 1
    with pytest.raises(ValueError, match=r"ema.decay must be a number in \(0, 1\)"):
        EMA(model, decay=1.0)


def test_unused_parameters_of_a_cut_off_nb201_cell():
    kwargs = dict(num_classes=10, image_size=32, C=4, layers=1, auxiliary=True)
    net, spec = build_network(resolve_train_genotype(ARCH), **kwargs)
    assert spec.family == "TinyNetwork" and not spec.auxiliary
    assert unused_parameters(net, spec, torch.device("cpu")) == []
    # node 3 takes only node 0: the convolutions into nodes 1 and 2 never reach the output
    cut = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|none~1|none~2|"
    net, spec = build_network(resolve_train_genotype(cut), **kwargs)
    unused = unused_parameters(net, spec, torch.device("cpu"))
    assert unused and all(n.split(".")[1] in ("0", "2", "4") for n in unused)  # the cells


def test_auxiliary_head_needs_32x32_images():
    with pytest.raises(ValueError, match="model.auxiliary=true needs 32x32 images"):
        build_network(published_genotype("DARTS_V2"), num_classes=120, image_size=16, C=4,
                      layers=3, auxiliary=True)  # fmt: skip


def test_single_process_collectives_are_no_ops(monkeypatch):
    for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    env = D.env_from_torchrun()
    assert (env.rank, env.world_size, env.is_main, env.distributed) == (0, 1, True, False)
    assert D.select_device("cpu", env) == torch.device("cpu")
    t = torch.ones(3)
    assert D.all_reduce_sum(t) is t and D.broadcast_object({"a": 1}) == {"a": 1}
    assert D.all_gather_object(5) == [5] and D.any_rank(True, torch.device("cpu"))
    model = torch.nn.Linear(2, 2)
    assert D.wrap_ddp(model, torch.device("cpu")) is model and D.unwrap(model) is model
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="launch with torchrun"):
        D.env_from_torchrun()
    with pytest.raises(ValueError, match="device must be auto, cpu, cuda or cuda:N"):
        D.select_device("tpu", env)
