"""Stop requests: SIGTERM (how clusters preempt jobs) and Ctrl-C, the same way.

The first SIGTERM or SIGINT only sets a flag: the loop finishes the step it is in, writes a
checkpoint at that step boundary and raises ``Preempted``, and the command-line wrapper says how
to resume and exits with 128 + the signal (143 for SIGTERM, 130 for Ctrl-C). A second SIGINT
(the user insists) raises ``KeyboardInterrupt`` at once; checkpoints are written through a
temporary file and an atomic rename (``nas.run.disk.atomic_write``), so whatever the moment,
the folder holds the previous checkpoint or the new one, never a torn one.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(Exception):
    """A stop was requested (SIGTERM or Ctrl-C); a checkpoint was written and the run stopped."""

    def __init__(self, checkpoint: Path, signum: int = signal.SIGTERM) -> None:
        super().__init__(str(checkpoint))
        self.checkpoint = checkpoint
        self.signum = signum


class StopSignals:
    """While entered, the first SIGTERM / SIGINT sets ``signum``; a second SIGINT interrupts.

    ``program`` prefixes the note printed on the first Ctrl-C. Handlers can only be installed
    from the main thread; elsewhere (a run started from a worker thread) this does nothing."""

    def __init__(self, program: str) -> None:
        self.program = program
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
            if signum == signal.SIGINT and os.environ.get("RANK", "0") == "0":
                # once under torchrun (a terminal's Ctrl-C reaches every process);
                # os.write: print() is not safe inside a handler (it may interrupt a print)
                os.write(
                    2,
                    f"{self.program}: interrupted; writing a checkpoint at the end of this "
                    "step (Ctrl-C again to stop at once)\n".encode(),
                )
            return
        if signum == signal.SIGINT:
            raise KeyboardInterrupt

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                self._previous[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, previous in self._previous.items():
            signal.signal(s, previous)
        self._previous.clear()
