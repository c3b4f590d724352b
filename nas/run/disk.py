"""A run folder that cannot be written (full disk, read-only file system, no permission).

Every file of a run is written so that a failed write leaves the earlier state intact:
checkpoints and the small result files through a temporary file and an atomic rename (the
temporary file removed on failure), logs by appending whole lines (a torn last line is dropped
on resume). So a write that fails is reported in one line that says what failed and what is
still there, and the run stops with exit code 2; ``resume=true`` continues once there is room.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

# errno values that mean "this location cannot be written", not a bug
WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}
)


def is_write_error(error: BaseException) -> bool:
    """Whether ``error`` is a failed write to storage (full, read-only, not permitted)."""
    return isinstance(error, OSError) and error.errno in WRITE_ERRNOS


def write_error_message(error: OSError, run_dir: Path, checkpoint: Path) -> str:
    """One line: what could not be written, why, and what the run folder still holds."""
    reason = os.strerror(error.errno) if error.errno else str(error)
    target = Path(error.filename) if error.filename else run_dir
    if not _inside(target, run_dir):
        return f"cannot write {target} ({reason})"
    if checkpoint.is_file():
        kept = f"the last complete checkpoint {checkpoint} is intact"
    else:
        kept = "no checkpoint had been written yet"
    return (
        f"cannot write {target} ({reason}); {kept}; make room or choose a writable "
        "hydra.run.dir, then run again (resume=true continues from the checkpoint)"
    )


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.absolute().relative_to(folder.absolute())
    except ValueError:
        return folder.absolute().is_relative_to(path.absolute())  # a parent of the run folder
    return True


def check_output_file(path: str | Path, what: str) -> Path:
    """Refuse, before any work, an output file that cannot be written: a folder, a path under
    a file, or a folder without write permission (``ValueError``, one line naming ``what``,
    e.g. ``--onnx``). Returns the path."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path}: is a folder; expected the path of a file to write")
    _check_writable_ancestor(path.parent, path, what)
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{what} {path}: the file is read-only")
    return path


def check_output_folder(path: str | Path, what: str) -> Path:
    """As ``check_output_file`` for a folder to create or write into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {path}: is a file; expected a folder")
    _check_writable_ancestor(path, path, what)
    return path


def _check_writable_ancestor(folder: Path, path: Path, what: str) -> None:
    """The nearest existing folder at or above ``folder`` must be a writable folder."""
    ancestor = folder
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"{what} {path}: {ancestor} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {path}: the folder {ancestor} is not writable")


def atomic_write(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through a temporary file in the same folder, flushed to disk, then renamed
    over the old file (``os.replace`` is atomic on POSIX): a run killed at any moment, or a write
    that fails (a full disk), leaves the old file as it was or the new one whole, never a torn
    one, and no temporary file behind. ``write`` fills the open binary file. The one atomic
    write of the toolkit: checkpoints (``nas.run.checkpoint.atomic_save``) and the small text
    files of a run folder (``atomic_write_text``) go through it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would hide the file from other users
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        cause = _write_error_behind(e)
        if cause is not None and cause is not e:
            # torch's zip writer can hide a full disk behind the RuntimeError of its cleanup
            # ("unexpected pos"): report the write error itself
            raise cause from None
        raise


def _write_error_behind(error: BaseException) -> OSError | None:
    """The write error (``is_write_error``) in ``error``'s chain of causes and contexts."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if is_write_error(current):
            assert isinstance(current, OSError)
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def atomic_write_text(path: str | Path, text: str) -> None:
    """``atomic_write`` of ``text`` (UTF-8)."""
    atomic_write(path, lambda f: f.write(text.encode()))
