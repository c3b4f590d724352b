"""A virtual CUDA device for a CPU-only machine: where every tensor would live, checked per op.

The tests' tool for proving device placement without a GPU (``tests/test_device_placement.py``).
Inside ``virtual_cuda()``, ``device="cuda"``, ``.cuda()``, ``.to("cuda")`` and ``Module.to``
run on the CPU, but each tensor carries the device it would have on a GPU; ``t.device`` and
``t.is_cuda`` report it, so code that takes its device from an input follows it. Every op that
reaches the dispatcher is checked with CUDA's rule: its tensors share one device, except 0-dim
CPU tensors (Python scalars), copies (which move data between devices) and the CPU index
tensors of advanced indexing. A draw whose generator lives on another device than the tensor it
fills is refused too, as CUDA refuses it. A violation raises ``DeviceMismatch`` naming the op
and the shapes and devices of its tensors.

Unlike ``torch._subclasses.fake_tensor.FakeTensorMode``, the values are real: ``.item()``,
data-dependent control flow and the strategies' draws run as on a GPU, the backward and the
optimiser steps are checked as well as the forward (the autograd engine's own tensors take the
device of what they meet), and no CUDA driver is touched (``torch.Generator("cuda")`` gives a
CPU generator that remembers its device; the virtual device's RNG state, ``torch.cuda``'s
``get_rng_state`` / ``set_rng_state``, is the CPU's). What it cannot show: kernels, streams,
memory; other calls to the CUDA runtime (``torch.cuda.*``) fail here as they would not on a GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakTensorKeyDictionary

CUDA, CPU, ANY = "cuda", "cpu", "any"  # ANY: made inside the autograd engine, not yet placed
COPIES = {"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize"}
INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}


class DeviceMismatch(RuntimeError):
    """An op that would mix devices on a GPU."""


def _is_cuda(device: Any) -> bool:
    if device is None:
        return False
    if isinstance(device, int):  # a CUDA ordinal
        return True
    return torch.device(device).type == CUDA


class VirtualCuda:
    """Where each tensor would live (``marks``) and each generator (``generators``)."""

    def __init__(self) -> None:
        self.marks: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        self.generators: dict[int, str] = {}  # id(generator) -> device
        self._keep: list[torch.Generator] = []  # the ids stay valid
        self.generator_type = torch.Generator

    def device(self, t: torch.Tensor) -> str:
        return self.marks.get(t, CPU)

    def new_generator(self, device: Any = CPU) -> torch.Generator:
        g = self.generator_type(CPU)
        self.generators[id(g)] = CUDA if _is_cuda(device) else CPU
        self._keep.append(g)
        return g


class _Functions(TorchFunctionMode):
    """Python-level calls: device arguments, moves, ``.device`` and generators."""

    def __init__(self, vc: VirtualCuda) -> None:
        super().__init__()
        self.vc = vc

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        vc = self.vc
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        owner = getattr(func, "__self__", None)
        if name == "__get__" and owner is torch._C.TensorBase.device:
            return torch.device(CUDA, 0) if vc.device(args[0]) == CUDA else func(*args)
        if name == "__get__" and owner is torch._C.TensorBase.is_cuda:
            return vc.device(args[0]) == CUDA
        if name == "__get__" and owner is torch._C.TensorBase.data:
            out = func(*args)
            vc.marks[out] = vc.device(args[0])
            return out
        if name == "__set__" and owner is torch._C.TensorBase.data:  # Module.to: p.data = moved
            out = func(*args)
            vc.marks[args[0]] = vc.device(args[1])
            return out
        want = None
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs["device"], want = CPU, CUDA
        if name in ("to", "cuda", "cpu") and args and isinstance(args[0], torch.Tensor):
            return self._move(func, name, args, kwargs, want)
        generator = kwargs.get("generator")
        if isinstance(generator, vc.generator_type):
            fills = want or (
                vc.device(args[0]) if args and isinstance(args[0], torch.Tensor) else CPU
            )
            has = vc.generators.get(id(generator), CPU)
            if has != fills:
                raise DeviceMismatch(f"{name}: a {has} generator draws for a {fills} tensor")
        out = func(*args, **kwargs)
        # what the dispatcher could not place (a composite op's internal factories, made with
        # the real CPU's options) is where the call's inputs are; a factory called from Python
        # is where its device argument says, else on the CPU
        inputs = {
            vc.device(a) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)
        }
        inputs -= {ANY}
        placed = want or (CUDA if CUDA in inputs else CPU)
        for o in tree_flatten(out)[0]:
            if isinstance(o, torch.Tensor) and (want or vc.device(o) == ANY):
                vc.marks[o] = placed
        return out

    def _move(self, func, name, args, kwargs, want):  # type: ignore[no-untyped-def]
        vc = self.vc
        t, rest = args[0], list(args[1:])
        target = want
        if name == "cuda":
            target, rest = CUDA, []
        elif name == "cpu":
            target = CPU
        else:
            for i, a in enumerate(rest):
                if isinstance(a, (str, torch.device, int)) and not isinstance(a, bool):
                    target = CUDA if _is_cuda(a) else CPU
                    rest[i] = CPU
            if target is None and "device" in kwargs:
                target = CPU
        out = func(t, *rest, **kwargs) if name == "to" else t
        if target is not None and target != vc.device(t) and out is t:
            out = t.clone()  # a move makes a new tensor, as on a GPU
        vc.marks[out] = target or vc.device(t)
        return out


class _Dispatch(TorchDispatchMode):
    """Every op the dispatcher sees (forward, backward, optimiser): one device per op."""

    def __init__(self, vc: VirtualCuda) -> None:
        super().__init__()
        self.vc = vc

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        vc = self.vc
        kwargs = kwargs or {}
        tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        packet = func._overloadpacket.__name__
        if packet in COPIES:
            checked = [a for a in args[:1] if isinstance(a, torch.Tensor)]
        elif packet in INDEXING:
            indices = tree_flatten(args[1:2])[0]
            checked = [a for a in tensors if not any(a is i for i in indices)]
        else:
            checked = tensors
        devices = {vc.device(a) for a in checked if not (a.dim() == 0 and vc.device(a) == CPU)}
        devices.discard(ANY)
        out = func(*args, **kwargs)
        if len(devices) > 1:
            seen = ", ".join(f"{tuple(a.shape)} on {vc.device(a)}" for a in tensors)
            raise DeviceMismatch(f"{func} mixes devices: {seen}")
        device = devices.pop() if devices else ANY
        for o in tree_flatten(out)[0]:
            if isinstance(o, torch.Tensor) and o not in vc.marks:  # in place: stays where it is
                vc.marks[o] = device
        return out


@contextlib.contextmanager
def virtual_cuda() -> Iterator[VirtualCuda]:
    """Run the block on a virtual CUDA device (see the module's docstring)."""
    vc = VirtualCuda()
    real_generator = torch.Generator
    real_make = torch.Tensor._make_subclass

    def make_subclass(cls, data, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = real_make(cls, data, *args, **kwargs)  # nn.Parameter(t): where t is
        vc.marks[out] = vc.device(data)
        return out

    # the virtual device draws from the CPU's default generator: its RNG state is the CPU's
    real_rng = torch.cuda.get_rng_state, torch.cuda.set_rng_state

    def get_rng_state(device: Any = CUDA) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(state: torch.Tensor, device: Any = CUDA) -> None:
        torch.set_rng_state(state)

    torch.Generator = vc.new_generator  # type: ignore[misc,assignment]
    torch.Tensor._make_subclass = staticmethod(make_subclass)  # type: ignore[assignment]
    torch.cuda.get_rng_state, torch.cuda.set_rng_state = get_rng_state, set_rng_state
    try:
        with _Functions(vc), _Dispatch(vc):
            yield vc
    finally:
        torch.Generator = real_generator  # type: ignore[misc]
        torch.Tensor._make_subclass = real_make  # type: ignore[method-assign]
        torch.cuda.get_rng_state, torch.cuda.set_rng_state = real_rng
