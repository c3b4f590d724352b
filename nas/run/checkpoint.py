"""Checkpoints of a whole run: the checkpointer, atomic saves, and the RNG states of a resume.

Run skeleton (``nas.run``), shared by the search and the training loop (as torchtitan's
``CheckpointManager`` and timm's ``CheckpointSaver``, reduced to what a run here needs). A loop
registers its stateful objects (model, optimisers, schedule, strategy, selector, EMA, ...) with
a ``Checkpointer`` under the keys of the checkpoint; ``save`` gathers every rank's RNG states,
and rank 0 writes the state of every object plus the run's counters through
``nas.run.disk.atomic_write`` (a temporary file renamed over the old one), so a run killed at
any moment leaves the old or the new checkpoint, never a torn one; ``load`` gives each object
its part back, in the order of registration, and turns a part that does not fit into one line.
Loading a file names the file and what was wrong in one line.

Two checkpoints, each with a checksum: before ``last.pt`` is replaced, the one it held becomes
``previous.pt`` (a hard link, so ``last.pt`` exists at every instant), and each holds the
SHA-256 of its own contents (``checksum``: every tensor's bytes, shape and dtype, every value
and key). A newest checkpoint that is damaged (unreadable, truncated, or its contents no longer
match its checksum) is moved aside to ``last.pt.damaged`` and ``resume=true`` continues from
``previous.pt``, with one line saying so (``load_resume``); the metrics log is rewound to that
checkpoint's step, so the resumed run still equals an uninterrupted one.

No file the toolkit reads can run code: a checkpoint holds tensors, numbers, strings and plain
containers only (the RNG states as tensors and numbers), and every file is read with
``torch.load(weights_only=True)`` (``safe_load``). A file that needs Python's full unpickler
(a checkpoint of an older version, a file made elsewhere, a malicious one) is refused in one
line before anything in it runs, naming the switch that trusts that one file
(``trust_pickle=true`` for the runs, ``--trust-pickle`` for the commands that read files).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import re
import struct
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nas import distributed as D
from nas.run.disk import atomic_write

# 2: the run skeleton's layout (one RNG entry per rank; projections with the selector)
CHECKPOINT_VERSION = 2


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable, or of another kind of run."""


class DamagedCheckpointError(CheckpointError):
    """A checkpoint that cannot be read whole or fails its checksum (not one of another kind)."""


class UnsafeFileError(ValueError):
    """A file whose unpickling could run code (it needs more than tensors and plain values)."""


def needs_full_unpickler(error: BaseException) -> bool:
    """Whether ``torch.load(weights_only=True)`` refused the file for what it holds (classes,
    functions, NumPy objects), not because it is corrupt."""
    return isinstance(error, pickle.UnpicklingError) and "GLOBAL " in str(error)


def safe_load(
    path: str | Path, *, trust_pickle: bool = False, switch: str, mmap: bool = False
) -> Any:
    """``torch.load`` of ``path`` on the CPU with ``weights_only=True``. A file that needs the
    full unpickler raises ``UnsafeFileError`` naming ``switch`` (the flag that trusts it);
    with ``trust_pickle`` such a file is read with the full unpickler (it can run code: for
    files the user trusts). Other errors are ``torch.load``'s (``LOAD_ERRORS``)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        if not needs_full_unpickler(e):
            raise
        if not trust_pickle:
            found = re.search(r"GLOBAL ([\w.]+)", str(e))
            what = f" ({found.group(1)})" if found else ""
            raise UnsafeFileError(
                f"{path} holds Python objects{what} that only the full unpickler reads, which "
                f"can run code; if you trust this file, pass {switch}"
            ) from None
    return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)


def atomic_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` to ``path`` through ``nas.run.disk.atomic_write``."""
    atomic_write(path, lambda f: torch.save(obj, f))


# what torch.load raises on a file that is not a torch file (random bytes, a truncated zip, a
# pickle of classes this toolkit does not have): bad input, not a bug
LOAD_ERRORS: tuple[type[BaseException], ...] = (
    RuntimeError,
    EOFError,
    OSError,
    zipfile.BadZipFile,
    ValueError,
    TypeError,
    pickle.UnpicklingError,
    AttributeError,
    ImportError,
    IndexError,
    KeyError,
)


def load_checkpoint(path: str | Path, *, kind: str, trust_pickle: bool = False) -> dict[str, Any]:
    """Load a checkpoint written by this toolkit for a run of ``kind`` ("search", "train"),
    safely (``safe_load``; ``trust_pickle``: the full unpickler for a file the user trusts)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; expected a file written by nas-{kind}")
    try:
        state = safe_load(path, trust_pickle=trust_pickle, switch="trust_pickle=true")
    except UnsafeFileError as e:
        raise CheckpointError(f"checkpoint {e}") from None
    except LOAD_ERRORS as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DamagedCheckpointError(
            f"checkpoint {path} is corrupt or truncated ({reason}); expected a file written "
            f"by nas-{kind}"
        ) from None
    if not isinstance(state, dict) or state.get("kind") != kind:
        found = state.get("kind") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"checkpoint {path} is not a nas-{kind} checkpoint (found {found!r})")
    if state.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {state.get('version')!r}; this toolkit "
            f"reads version {CHECKPOINT_VERSION}"
        )
    stored = state.get("checksum")  # None: written before checkpoints carried one
    if stored is not None and stored != checksum(state):
        raise DamagedCheckpointError(
            f"checkpoint {path} fails its checksum: its contents changed after it was written "
            "(a damaged disk or copy)"
        )
    return state


PREVIOUS = "previous.pt"  # the checkpoint before ``last.pt``, beside it
DAMAGED_SUFFIX = ".damaged"  # a damaged newest checkpoint, moved aside by ``load_resume``


def load_resume(
    path: Path, *, kind: str, trust_pickle: bool = False
) -> tuple[dict[str, Any], str | None]:
    """The checkpoint ``resume=true`` continues: ``path``, or where it is damaged
    (``DamagedCheckpointError``) and ``previous.pt`` beside it loads, that one. Then the damaged
    file is moved to ``<path>.damaged`` and ``previous.pt`` linked as ``path`` (the next save
    keeps it as the previous one), and the second value is the line that says so (None when
    ``path`` itself loaded). A file refused for what it holds (another kind, an unsafe
    pickle) is not skipped: its error stands."""
    try:
        return load_checkpoint(path, kind=kind, trust_pickle=trust_pickle), None
    except DamagedCheckpointError as damaged:
        previous = path.with_name(PREVIOUS)
        if not previous.is_file():
            raise
        try:
            state = load_checkpoint(previous, kind=kind, trust_pickle=trust_pickle)
        except CheckpointError as e:
            raise DamagedCheckpointError(f"{damaged}; the one before it too: {e}") from None
        aside = path.with_name(path.name + DAMAGED_SUFFIX)
        os.replace(path, aside)
        _link_or_copy(previous, path)
        line = (
            f"{damaged}; moved it to {aside.name} and resuming from the checkpoint before it "
            f"({PREVIOUS}: epoch {state['epoch']}, step {state['global_step']})"
        )
        return state, line


def _link_or_copy(source: Path, target: Path) -> None:
    """``target`` becomes a file with ``source``'s contents, atomically: a hard link where the
    file system has them, else a copy (both through a temporary name and a rename)."""
    tmp = target.with_name(f".{target.name}.link")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        atomic_write(target, lambda f: f.write(source.read_bytes()))
        return
    os.replace(tmp, target)


def checksum(state: dict[str, Any]) -> str:
    """SHA-256 of a checkpoint's contents (but its ``checksum`` key): every tensor's dtype,
    shape and bytes, every plain value and key, in a fixed order. The same before the save
    and after the load (``torch.save`` keeps values and bytes)."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in state.items() if k != "checksum"})
    return h.hexdigest()


def _feed(h: Any, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)};".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, dict):
        h.update(b"{%d;" % len(obj))
        for key in sorted(obj, key=repr):
            _feed(h, key)
            _feed(h, obj[key])
    elif isinstance(obj, (list, tuple)):
        h.update(b"[%d;" % len(obj) if isinstance(obj, list) else b"(%d;" % len(obj))
        for item in obj:
            _feed(h, item)
    elif isinstance(obj, str):
        data = obj.encode()
        h.update(b"s%d;" % len(data) + data)
    elif isinstance(obj, bytes):
        h.update(b"b%d;" % len(obj) + obj)
    elif isinstance(obj, float):
        h.update(b"f" + struct.pack("<d", obj))
    else:  # bool, int, None (and what else a trusted older file holds)
        h.update(f"{type(obj).__name__}:{obj!r};".encode())


def rng_state() -> dict[str, Any]:
    """Every global RNG state that a step can consume: Python, NumPy, torch (CPU and CUDA)."""
    state: dict[str, Any] = {
        "python": random.getstate(),  # (version, 625 ints, gauss_next): plain values
        "numpy": _numpy_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _numpy_state() -> dict[str, Any]:
    """NumPy's global RNG state as tensors and numbers (``weights_only`` reads them)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "kind": str(kind),
        "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def _set_numpy_state(state: Any) -> None:
    if isinstance(state, dict):
        keys = state["keys"].numpy().astype(np.uint32)
        np.random.set_state(
            (state["kind"], keys, state["pos"], state["has_gauss"], state["cached_gaussian"])
        )
    else:  # a trusted checkpoint of an earlier version: NumPy's own tuple
        np.random.set_state(state)


def set_rng_state(state: dict[str, Any]) -> None:
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    _set_numpy_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch from one integer."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class _Entry:
    save: Callable[[], Any]
    load: Callable[[Any], None]


class Checkpointer:
    """The checkpoint of one run at ``path``: registered stateful objects plus counters.

    ``register(key, obj)`` adds an object with ``state_dict`` / ``load_state_dict`` (or a
    ``save`` / ``load`` pair of functions) under ``key``; ``save(counters)`` writes them all
    (every rank calls it: the RNG states of all ranks travel to rank 0, which alone writes;
    ``copies`` are further files that get the same state, e.g. ``best.pt``); ``load(state)``
    gives each object its part back in the order of registration (which matters: DrNAS's
    strategy reshapes the supernet before the supernet's weights can load). A part that does
    not fit (shapes, missing keys) raises ``error`` with one line naming the checkpoint and
    ``what`` it had to fit."""

    def __init__(
        self,
        path: Path,
        *,
        kind: str,
        env: D.DistEnv,
        error: type[Exception],
        what: str,
    ) -> None:
        self.path = path
        self.kind = kind
        self.env = env
        self.error = error
        self.what = what
        self._entries: dict[str, _Entry] = {}

    def register(
        self,
        key: str,
        obj: Any = None,
        *,
        save: Callable[[], Any] | None = None,
        load: Callable[[Any], None] | None = None,
    ) -> None:
        if key in self._entries:
            raise ValueError(f"checkpoint key {key!r} is registered twice")
        if obj is not None:
            save, load = obj.state_dict, obj.load_state_dict
        assert save is not None and load is not None, "register an object or save and load"
        self._entries[key] = _Entry(save, load)

    def save(self, counters: dict[str, Any], *, copies: Sequence[Path] = ()) -> None:
        """Write the checkpoint (all ranks call this; rank 0 writes; all wait for the file)."""
        rngs = D.all_gather_object(rng_state()) if self.env.distributed else [rng_state()]
        if self.env.is_main:
            state: dict[str, Any] = {
                "kind": self.kind,
                "version": CHECKPOINT_VERSION,
                **counters,
                **{key: entry.save() for key, entry in self._entries.items()},
                "rng": rngs,  # one entry per rank
                "world_size": self.env.world_size,
            }
            state["checksum"] = checksum(state)
            if self.path.is_file():  # the one before stays, for a damaged newest
                _link_or_copy(self.path, self.path.with_name(PREVIOUS))
            for path in (self.path, *copies):
                atomic_save(state, path)
        D.barrier()  # the file is complete before any rank goes on (or exits)

    def load(self, state: dict[str, Any], *, skip: Sequence[str] = ()) -> None:
        """Give every registered object (but those in ``skip``) its part of ``state``."""
        try:
            for key, entry in self._entries.items():
                if key not in skip:
                    entry.load(state[key])
        except (RuntimeError, KeyError, ValueError) as e:
            reason = str(e).splitlines()[0]
            raise self.error(
                f"checkpoint {self.path} does not fit {self.what} ({reason}); resume with the "
                "run's own config"
            ) from None

    def rank_rng(self, state: dict[str, Any]) -> dict[str, Any]:
        """The RNG states this rank continues a mid-epoch checkpoint with: its own at the world
        size of the checkpoint; at another world size rank 0's for every rank (the data order,
        the augmentation of the search and DrNAS's samples have seeds of their own; what reads
        the global generators then draws other numbers than an uninterrupted run of either
        world size would: a search refuses that where its supernet draws, e.g. S4's noise,
        and training's augmentation continues as the new world size draws it)."""
        per_rank: list[dict[str, Any]] = state["rng"]
        return per_rank[self.env.rank] if len(per_rank) == self.env.world_size else per_rank[0]
