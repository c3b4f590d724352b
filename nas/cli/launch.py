"""What ``nas-search`` and ``nas-train`` share about their processes: exit codes, which process
prints, the one-line error exit, and the run around the loop: the locked run folder, stop
requests, a folder that cannot be written (``run_guarded``, which the Python API uses too,
raising; ``run_in_folder``, which turns its endings into a line and an exit code). Read from
torchrun's environment variables, so that it works before any process group exists (a config
error stops every process the same way). Imports no torch.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from hydra.core.hydra_config import HydraConfig

from nas.cli.errors import EXIT_BAD_INPUT
from nas.run.disk import is_write_error, write_error_message
from nas.run.folder import RunFolder, remove_new_empty_dirs
from nas.run.lock import RunFolderBusy
from nas.run.signals import Preempted

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_PREEMPTED = 143  # 128 + SIGTERM, what a job killed by SIGTERM reports

# Folders this command is about to create (Hydra creates the run folder before the run starts):
# filled by nas.cli.config_check before Hydra runs, emptied again by a refused run.
NEW_DIRS: set[Path] = set()

T = TypeVar("T")


# how long a silent process waits for the printing one to exit first (torchrun then stops it)
_SILENT_EXIT_DELAY_S = 15.0


def reports_errors() -> bool:
    """Whether this process prints errors: the first process of each machine (errors about
    data are per machine), or the only process."""
    return os.environ.get("LOCAL_RANK", "0") == "0"


def is_rank0() -> bool:
    """Whether this process prints results (rank 0, or the only process)."""
    return os.environ.get("RANK", "0") == "0"


def leave_if_worker() -> None:
    """On a torchrun process other than rank 0, after its run ended normally: flush and exit 0
    without the interpreter's teardown. Rank 0 writes every file and prints the results; the
    others have nothing left to do, and the C++ teardown of a gloo worker after
    ``destroy_process_group`` aborts now and then under torch 2.14 ("terminate called without
    an active exception", no Python frame: 1 in 8-20 runs of a two-process resume on this
    2-core machine), which turned a finished run into a failed launch."""
    if is_rank0():
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def fail(program: str, message: str) -> NoReturn:
    """``<program>: error: <message>`` on stderr (once per machine) and exit code 2.

    The other processes of a machine meet the same error (the checks read the same command
    line, config and disk) but stay silent. They wait a moment before exiting: torchrun stops
    every process of a machine as soon as one of them exits, so a silent process that exited
    first would kill the one that prints before it has said anything."""
    if reports_errors():
        print(f"{program}: error: {message}", file=sys.stderr, flush=True)
    else:
        time.sleep(_SILENT_EXIT_DELAY_S)
    sys.exit(EXIT_BAD_INPUT)


def resume_command(program: str, run_dir: Path) -> str:
    """The command line that continues this run: the same overrides plus ``resume=true``."""
    overrides = [
        o
        for o in HydraConfig.get().overrides.task
        if not o.startswith(("resume=", "hydra.run.dir=", "hydra.searchpath="))
    ]
    return " ".join([program, *overrides, f"hydra.run.dir={run_dir}", "resume=true"])


def exit_preempted(
    program: str, checkpoint: Path, run_dir: Path, signum: int = signal.SIGTERM
) -> NoReturn:
    """After SIGTERM or Ctrl-C: say where the checkpoint is and how to resume (rank 0), exit
    with 128 + the signal (143, 130)."""
    if is_rank0():
        what = "interrupted" if signum == signal.SIGINT else "preempted"
        print(
            f"{program}: {what}; checkpoint written to {checkpoint}. Resume with: "
            f"{resume_command(program, run_dir)}",
            file=sys.stderr,
            flush=True,
        )
    sys.exit(128 + signum)


class RunRefused(ValueError):
    """A run refused before or while it ran: bad input, a busy run folder, a folder that cannot
    be written. The message is the one line ``<program>: error:`` prints."""


class RunStopped(Exception):
    """A stop request ended the run: SIGTERM or a first Ctrl-C after writing a checkpoint at the
    next step (``at_once`` False), or a second Ctrl-C at once (``at_once`` True; ``checkpoint``
    is the last one written, None if there is none)."""

    def __init__(
        self, checkpoint: Path | None, run_dir: Path, signum: int, *, at_once: bool = False
    ) -> None:
        super().__init__(str(checkpoint))
        self.checkpoint = checkpoint
        self.run_dir = run_dir
        self.signum = signum
        self.at_once = at_once


def run_guarded(
    program: str,
    run_dir: Path,
    body: Callable[[], T],
    bad_input: tuple[type[BaseException], ...],
) -> T:
    """``body()`` (the run) in the locked run folder, every way it can end but success turned
    into ``RunRefused`` (bad input, a busy folder, a folder that cannot be written: one line)
    or ``RunStopped`` (a stop request). The command lines (``run_in_folder``) and the Python
    API (``nas.api``) both run through here."""
    checkpoint = run_dir / "checkpoints" / "last.pt"
    try:
        with RunFolder(run_dir, program=program, new_dirs=NEW_DIRS):
            return body()
    except Preempted as p:
        raise RunStopped(p.checkpoint, run_dir, p.signum) from None
    except KeyboardInterrupt:
        kept = checkpoint if checkpoint.is_file() else None
        raise RunStopped(kept, run_dir, signal.SIGINT, at_once=True) from None
    except RunFolderBusy as e:
        raise RunRefused(str(e)) from None
    except OSError as e:
        if not is_write_error(e):
            if isinstance(e, bad_input):
                _discard_refused(run_dir, checkpoint)
                raise RunRefused(_first_line(e)) from None
            raise
        raise RunRefused(write_error_message(e, run_dir, checkpoint)) from None
    except bad_input as e:
        _discard_refused(run_dir, checkpoint)
        raise RunRefused(_first_line(e)) from None


def run_in_folder(
    program: str,
    run_dir: Path,
    body: Callable[[], T],
    bad_input: tuple[type[BaseException], ...],
) -> T:
    """``run_guarded`` for a command line: a refusal is one line and exit code 2, a stop
    request exit code 143 / 130 with the resume line, a second Ctrl-C 130."""
    try:
        return run_guarded(program, run_dir, body, bad_input)
    except RunRefused as e:
        fail(program, str(e))
    except RunStopped as s:
        if not s.at_once:
            exit_preempted(program, s.checkpoint or run_dir, run_dir, s.signum)
        if is_rank0():
            kept = (
                f"the last checkpoint {s.checkpoint} is intact; resume with: "
                f"{resume_command(program, run_dir)}"
                if s.checkpoint is not None
                else "no checkpoint had been written yet"
            )
            print(f"{program}: stopped at once (Ctrl-C); {kept}", file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)


def _discard_refused(run_dir: Path, checkpoint: Path) -> None:
    """A run refused for bad input before its first checkpoint, in a folder this command
    created, leaves nothing: the folder (its config, empty logs, event file) is removed. A
    folder that existed before, or one holding a checkpoint, is kept as it is."""
    if not is_rank0() or checkpoint.is_file():
        return
    created = {Path(p).absolute() for p in NEW_DIRS}
    if run_dir.absolute() not in created:
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    remove_new_empty_dirs(run_dir.parent, NEW_DIRS)


def _first_line(e: BaseException) -> str:
    """The first line of the message; for an error re-raised from a DataLoader worker
    ("Caught X in DataLoader worker process 0." and the worker's traceback), the original
    message, its last line."""
    text = str(e).strip()
    if not text:
        return type(e).__name__
    lines = text.splitlines()
    if lines[0].startswith("Caught ") and "DataLoader worker" in lines[0]:
        last = lines[-1].strip()
        prefix = f"{type(e).__name__}: "
        return last[len(prefix) :] if last.startswith(prefix) else last
    return lines[0]
