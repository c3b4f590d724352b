"""Data parallelism across processes and machines: the only ``torch.distributed`` code.

Shared by the search loop (``nas.strategies``) and retraining (``nas.training``). Launch is
``torchrun`` (one process per GPU, or per CPU slot), which sets ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``; without those
variables everything here degrades to a single process and every collective is a no-op, so a
loop written against this module runs unchanged with ``python -m ...``.

Parallelism is applied from outside the model (as torchtitan does): the loop builds the plain
network, then ``wrap_ddp`` (optionally after ``convert_sync_batchnorm``) wraps it in
``DistributedDataParallel``: NCCL on GPUs (one device per process, ``cuda:LOCAL_RANK``), gloo on
CPU. Gradients are averaged over the ranks, so with per-rank batch = global batch / world size
a step equals the single-process step on the global batch, up to batch-norm statistics, which
DDP computes per rank unless SyncBatchNorm is used (CUDA only in PyTorch).

The search does not use DDP (its architecture step differentiates with respect to the mixing
weights only, its second-order step calls ``torch.autograd.grad``, and pruned ops leave
parameters without gradients, none of which DDP's reducer handles without
``find_unused_parameters``); it sums its gradients with ``sum_over_ranks``, one flat
buffer per call, and checks with ``spread`` that the ranks still hold the same parameters.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

T = TypeVar("T")

_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits: global ``rank`` of ``world_size``, ``local_rank`` on its machine."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def env_from_torchrun() -> DistEnv:
    """The process's place from torchrun's environment variables (nothing is initialised).

    Without torchrun (no ``WORLD_SIZE``), a single process: rank 0 of 1.
    """
    if "WORLD_SIZE" not in os.environ:
        return DistEnv()
    missing = [v for v in _TORCHRUN_VARS if v not in os.environ]
    if missing:
        raise ValueError(
            f"WORLD_SIZE is set but {', '.join(missing)} is not; launch with torchrun, which "
            "sets all of RANK, LOCAL_RANK and WORLD_SIZE"
        )
    env = DistEnv(
        rank=_env_int("RANK", 0),
        local_rank=_env_int("LOCAL_RANK", 0),
        world_size=_env_int("WORLD_SIZE", 1),
        local_world_size=_env_int("LOCAL_WORLD_SIZE", _env_int("WORLD_SIZE", 1)),
    )
    if env.world_size < 1 or not 0 <= env.rank < env.world_size:
        raise ValueError(f"RANK={env.rank} is not in [0, WORLD_SIZE={env.world_size})")
    return env


def select_device(name: str, env: DistEnv) -> torch.device:
    """The device of this process: ``auto`` / ``cuda`` mean ``cuda:LOCAL_RANK`` where CUDA
    exists (one GPU per process, torchrun's convention), else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if name != "cuda" and not name.startswith("cuda:"):
        raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {name!r}")
    if not torch.cuda.is_available():
        raise ValueError(f"device={name} asked for, but CUDA is not available here")
    if name == "cuda":
        index = env.local_rank
    else:
        if env.distributed:
            raise ValueError(
                f"device={name} under torchrun: use device=cuda, which gives each process "
                "cuda:LOCAL_RANK"
            )
        try:
            index = int(name.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {name!r}") from None
    count = torch.cuda.device_count()
    if not 0 <= index < count:
        raise ValueError(
            f"process {env.rank} needs cuda:{index}, but this machine has {count} GPU(s); "
            "start at most one process per GPU (torchrun --nproc_per_node)"
        )
    return torch.device("cuda", index)


def init_distributed(env: DistEnv, device: torch.device, *, timeout_s: float = 1800.0) -> None:
    """Join the process group of a torchrun launch (NCCL for CUDA devices, gloo for the CPU).

    A single process (``world_size == 1``) starts no process group.
    """
    if not env.distributed or dist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)  # collectives of pickled objects use the current device
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend=backend,
        rank=env.rank,
        world_size=env.world_size,
        timeout=timedelta(seconds=timeout_s),
        device_id=device if device.type == "cuda" else None,
    )


def shutdown() -> None:
    """Leave the process group, if one was started."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    return dist.get_rank() if is_initialized() else 0


def get_world_size() -> int:
    return dist.get_world_size() if is_initialized() else 1


def is_main() -> bool:
    """True on the process that writes files and prints (rank 0)."""
    return get_rank() == 0


def barrier() -> None:
    if is_initialized():
        dist.barrier()


def all_reduce_sum(tensor: Tensor) -> Tensor:
    """Sum ``tensor`` over the ranks, in place; returns it (unchanged in a single process)."""
    if is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def sum_over_ranks(values: Sequence[Tensor | None], like: Sequence[Tensor]) -> list[Tensor | None]:
    """The sums over the ranks of ``values[i]`` (each shaped as ``like[i]``; ``None``: nothing
    from this rank), in one flat all-reduce. An entry is ``None`` in the result only if it was
    ``None`` on every rank, so that all ranks agree on which parameters have a gradient (SGD
    skips those without one). In a single process ``values`` comes back unchanged."""
    if not is_initialized() or not like:
        return list(values)
    ref = like[0]
    flat = torch.cat(
        [
            v.detach().reshape(-1).to(ref.dtype) if v is not None else ref.new_zeros(p.numel())
            for v, p in zip(values, like, strict=True)
        ]
        + [ref.new_tensor([0.0 if v is None else 1.0 for v in values])]
    )
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    seen = flat[-len(values) :].tolist()
    out: list[Tensor | None] = []
    offset = 0
    for p, flag in zip(like, seen):
        chunk = flat[offset : offset + p.numel()]
        offset += p.numel()
        out.append(chunk.view_as(p) if flag > 0 else None)
    return out


def all_reduce_grads(params: Sequence[Tensor]) -> None:
    """Sum the ``.grad`` of ``params`` over the ranks, in place (a no-op in a single process)."""
    if not is_initialized():
        return
    for p, g in zip(params, sum_over_ranks([p.grad for p in params], params)):
        p.grad = g


def spread(tensors: Sequence[Tensor]) -> float:
    """The largest difference between ranks of any element of ``tensors`` (0.0: identical on
    every rank; always 0.0 in a single process). One all-reduce of twice their size."""
    if not is_initialized() or not tensors:
        return 0.0
    flat = torch.cat([t.detach().reshape(-1).double() for t in tensors])
    both = torch.cat([flat, -flat])
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    n = flat.numel()
    return float((both[:n] + both[n:]).max())  # max - min per element


def per_rank_batch(batch_size: int, world_size: int, what: str = "batch_size") -> int:
    """The per-process share of a global batch; the global batch holds for any world size, so
    it must split evenly."""
    if batch_size % world_size:
        raise ValueError(
            f"{what}={batch_size} does not split over {world_size} processes; expected a "
            f"multiple of the world size (each process takes {what} / {world_size})"
        )
    return batch_size // world_size


def main_then_broadcast(
    fn: Callable[[], T], errors: tuple[type[BaseException], ...], error: type[Exception]
) -> T:
    """Run ``fn`` on rank 0 (the only rank that reads the run folder) and hand its value, or
    its one-line error as ``error``, to every rank, so that all ranks go on or stop together."""
    outcome: tuple[str, Any] = ("ok", None)
    if is_main():
        try:
            outcome = ("ok", fn())
        except errors as e:
            outcome = ("error", str(e).splitlines()[0] if str(e) else type(e).__name__)
    outcome = broadcast_object(outcome)
    if outcome[0] == "error":
        raise error(outcome[1])
    value: T = outcome[1]
    return value


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank if ``flag`` is true on any rank (e.g. a SIGTERM seen by one rank)."""
    if not is_initialized():
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def broadcast_object(obj: T, src: int = 0) -> T:
    """``obj`` of rank ``src`` on every rank (pickled; tensors arrive on the CPU they left)."""
    if not is_initialized():
        return obj
    box: list[Any] = [obj]
    dist.broadcast_object_list(box, src=src)
    result: T = box[0]
    return result


def all_gather_object(obj: T) -> list[T]:
    """The ``obj`` of every rank, in rank order, on every rank."""
    if not is_initialized():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_buffers(module: nn.Module, src: int = 0) -> None:
    """Copy ``src``'s buffers (batch-norm running statistics) to every rank, so that all ranks
    evaluate one model; DDP keeps them in step only at the start of each training forward."""
    if not is_initialized():
        return
    for buffer in module.buffers():
        dist.broadcast(buffer.data, src=src)


def convert_sync_batchnorm(model: nn.Module, device: torch.device) -> nn.Module:
    """Batch norm over the global batch instead of each rank's share (CUDA only in PyTorch)."""
    if device.type != "cuda":
        raise ValueError(
            f"sync_bn=true needs CUDA devices (PyTorch's SyncBatchNorm has no CPU kernel); "
            f"this process runs on {device}"
        )
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


def wrap_ddp(
    model: nn.Module, device: torch.device, *, find_unused_parameters: bool = False
) -> nn.Module:
    """``model`` wrapped in DistributedDataParallel; the model itself in a single process.

    Keep a reference to the plain model for ``state_dict``, evaluation and attributes such as
    ``drop_path_prob`` (torchvision's ``model_without_ddp``).
    """
    if not is_initialized():
        return model
    return DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=find_unused_parameters,
    )


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside a DDP and / or ``torch.compile`` wrapper."""
    inner = getattr(model, "_orig_mod", model)
    inner = inner.module if isinstance(inner, DistributedDataParallel) else inner
    inner = getattr(inner, "_orig_mod", inner)
    assert isinstance(inner, nn.Module)
    return inner
