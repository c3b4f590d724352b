"""The run folder for the life of a run: locked, and left as it was found by a refused run.

``RunFolder`` is what ``nas-search`` and ``nas-train`` wrap around a run (``nas.cli.launch``):
on entry it creates the folder if needed and takes its lock (``nas.run.lock``; under
``torchrun`` on rank 0 only); on exit it drops the lock, and if the run was refused before it
wrote anything (a busy folder, a checkpoint of another run, missing data), it removes the
folders that this command created, so a refused run leaves no trace. Folders that already
existed are never removed, and only empty folders are.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from nas.run.lock import RunLock


def missing_dirs(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first (absolute)."""
    out = []
    for p in (path.absolute(), *path.absolute().parents):
        if p.exists():
            break
        out.append(p)
    return out


def remove_new_empty_dirs(run_dir: Path, new_dirs: Iterable[Path]) -> None:
    """Remove ``run_dir`` and its parents that are in ``new_dirs`` (created by this command),
    deepest first, while they are empty: a run that wrote anything keeps its folder."""
    created = {Path(p).absolute() for p in new_dirs}
    for d in (run_dir.absolute(), *run_dir.absolute().parents):
        if d not in created:
            return
        try:
            d.rmdir()
        except OSError:
            return


class RunFolder:
    """Context manager: the locked run folder ``run_dir`` of ``program``.

    ``new_dirs``: folders that this command created before entering (Hydra creates the run
    folder before the run starts), removed with the ones created here if the run is refused.
    ``lock``: whether this process locks (default: rank 0 of ``torchrun``, or the only one)."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        program: str,
        new_dirs: Iterable[Path] = (),
        lock: bool | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.new_dirs = {Path(p).absolute() for p in new_dirs}
        self.locks = os.environ.get("RANK", "0") == "0" if lock is None else lock
        self.lock = RunLock(self.run_dir, program=program)

    def __enter__(self) -> RunFolder:
        if not self.locks:
            return self
        self.new_dirs.update(missing_dirs(self.run_dir))
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.lock.acquire()
        except BaseException:
            self._remove_new_empty_dirs()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.locks:
            return
        self.lock.release()
        if exc is not None:
            self._remove_new_empty_dirs()

    def _remove_new_empty_dirs(self) -> None:
        remove_new_empty_dirs(self.run_dir, self.new_dirs)
