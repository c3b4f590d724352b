"""The paths that only run on a GPU, checked here against PyTorch's documented rules.

Mixed precision (``torch.amp``): float16 needs loss scaling (``GradScaler``) and bfloat16 does
not; the losses are taken in float32 from low-precision logits. Data: ``pin_memory`` only where
CUDA is, batches copied with ``non_blocking``. Distributed: NCCL for CUDA devices, gloo for
the CPU, the current device set before the process group. Timings: CUDA work is asynchronous,
so a timing synchronises before it starts and before it reads its events. What these tests
cannot show (kernels, NCCL on hardware) is left to ``experiments/benchmarks/gpu_acceptance.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from nas import distributed as D
from nas.data.loaders import make_loader
from nas.hardware import profiler
from nas.plugins import build_plugin
from nas.run.config import validate_search_config
from nas.run.skeleton import autocast_dtype, grad_scaler, to_device
from nas.strategies import SearchContext
from nas.supernet import build_supernet


def test_loss_scaling_for_float16_only(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # GradScaler's own check
    cuda = torch.device("cuda")
    assert grad_scaler(cuda, torch.float16).is_enabled()
    assert not grad_scaler(cuda, torch.bfloat16).is_enabled()
    assert not grad_scaler(cuda, None).is_enabled()


def test_amp_words():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert autocast_dtype("bf16", cpu) is torch.bfloat16
    assert autocast_dtype("fp16", cuda) is torch.float16
    assert autocast_dtype(None, cuda) is None
    with pytest.raises(ValueError, match="amp=fp16 needs CUDA"):
        autocast_dtype("fp16", cpu)


def test_the_search_refuses_float16_without_loss_scaling():
    from nas.api import search_config

    cfg = search_config(
        space="nb201", strategy="darts", overrides={"space.C": 4, "space.layers": 1}
    )
    cfg = OmegaConf.merge(cfg, {"amp": "fp16", "device": "cuda"})
    with pytest.raises(ValueError, match="amp=fp16: the search has no loss scaling"):
        validate_search_config(cfg)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_the_search_loss_is_at_least_float32_under_autocast(dtype):
    torch.manual_seed(0)
    net = build_supernet("nb201", C=4, layers=1, num_classes=10)
    amp = dtype if dtype == torch.bfloat16 else None
    if dtype == torch.float64:
        net = net.double()
    strategy = build_plugin("search", "darts")
    ctx = SearchContext(net, torch.optim.SGD(net.parameters(), lr=0.1), 5.0, autocast_dtype=amp)
    strategy.attach(ctx)
    x = torch.randn(4, 3, 8, 8, dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    loss, logits = strategy.loss(
        (x, torch.randint(0, 10, (4,))), strategy.arch_weights(sample=False)
    )
    assert logits.dtype == (torch.bfloat16 if amp else x.dtype)
    assert loss.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)


def test_pinned_memory_only_where_cuda_is(monkeypatch):
    data = torch.utils.data.TensorDataset(torch.zeros(8, 3), torch.zeros(8))
    assert not make_loader(data, batch_size=4, shuffle=False, seed=0, pin_memory=True).pin_memory
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert make_loader(data, batch_size=4, shuffle=False, seed=0, pin_memory=True).pin_memory


def test_batches_are_copied_without_blocking(monkeypatch):
    seen: list[dict[str, Any]] = []
    real_to = torch.Tensor.to

    def spy(self, *args, **kwargs):
        seen.append(kwargs)
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", spy)
    to_device(torch.zeros(2, 3, 4, 4), torch.zeros(2), torch.device("cpu"), channels_last=False)
    assert len(seen) == 2 and all(k.get("non_blocking") is True for k in seen)


@pytest.mark.parametrize("device,backend", [("cuda:1", "nccl"), ("cpu", "gloo")])
def test_the_process_group_backend_follows_the_device(monkeypatch, device, backend):
    calls: dict[str, Any] = {}
    monkeypatch.setattr(D.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(D.dist, "init_process_group", lambda **kw: calls.update(kw))
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.setdefault("set_device", d))
    env = D.DistEnv(rank=1, world_size=2, local_rank=1)
    D.init_distributed(env, torch.device(device))
    assert calls["backend"] == backend
    assert calls["device_id"] == (torch.device(device) if backend == "nccl" else None)
    # NCCL: the process's GPU is current before the group exists (collectives use it)
    assert calls.get("set_device") == (torch.device(device) if backend == "nccl" else None)


def test_cuda_timings_synchronise_around_the_timed_calls(monkeypatch):
    log: list[str] = []

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            assert enable_timing

        def record(self) -> None:
            log.append("record")

        def elapsed_time(self, other: Event) -> float:
            return 1.0

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    timing = profiler.time_call(
        lambda: log.append("call"), torch.device("cuda"), warmup=1, repeats=2
    )
    assert log == ["call", "sync", "record", "call", "record", "record", "call", "record", "sync"]
    assert timing.n == 2 and timing.median_ms == 1.0
