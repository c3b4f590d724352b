"""An exclusive lock on a run folder for the life of a run.

Two runs writing one folder destroy each other's results (one run's metrics deleted, the other's
checkpoint and genotype left behind), so a run holds ``<run folder>/.lock`` with ``flock`` from
before it reads the folder until it ends. The kernel releases the lock when the process dies,
however it dies (``kill -9`` included), so a dead run never leaves a stale lock: the next run
finds the file, takes the lock and goes on. The file holds the holder's pid, host and start
time, which a refused run names. Under ``torchrun`` only rank 0 locks (it alone writes the
folder; the other ranks would otherwise refuse their own rank 0).

A lock file is deleted when its run ends. A run that opened the file just before it was deleted
would lock a file no one else can find, so a run that got the lock checks that the path still
names the file it locked, and tries again if not (the usual pattern for ``flock`` on files that
are removed).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from pathlib import Path

LOCK_NAME = ".lock"


class RunFolderBusy(ValueError):
    """Another live process holds the run folder's lock."""


def holder_of(path: Path) -> str:
    """The holder recorded in a lock file, in words ("pid 123 on host h since ...")."""
    try:
        fields = dict(item.split("=", 1) for item in path.read_text().split() if "=" in item)
    except OSError:
        fields = {}
    if "pid" not in fields:
        return "another process (it has not recorded its pid yet)"
    where = f"pid {fields['pid']} on host {fields.get('host', '?')}"
    if "since" in fields:
        where += f", running since {fields['since'].replace('T', ' ')}"
    return where


class RunLock:
    """``flock`` on ``run_dir/.lock``; ``acquire()`` raises ``RunFolderBusy`` naming the holder.

    The folder must exist. ``release()`` deletes the file and drops the lock; a process that
    dies drops it without deleting the file, which the next run reuses."""

    def __init__(self, run_dir: str | Path, *, program: str) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.program = program
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                raise RunFolderBusy(
                    f"run folder {self.run_dir} is in use by another run ({holder_of(self.path)}); "
                    "wait for it to end, or choose another hydra.run.dir"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the file was removed by the run that just ended: take the new one
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
        record = f"pid={os.getpid()} host={socket.gethostname()} since={since} {self.program}\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode(), 0)
        except OSError:
            # a full disk: the lock holds without the record (a refused run says "another process")
            pass
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        # a read-only folder: the file stays, the lock goes with the descriptor
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
