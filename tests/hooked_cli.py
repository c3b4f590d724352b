"""``nas-search`` / ``nas-train`` with test hooks: the tests interrupt, kill and race real
processes at exact points, without sleeps.

``python tests/hooked_cli.py search|train [--pause-at-step N] [--pause-in-save K]
[--enospc-in-save K] -- <overrides>`` runs the command-line program with:

* ``--pause-at-step N``: after the N-th training step (search: bi-level step), print
  ``PAUSED <pid>`` on stdout and wait for a line on stdin; the test acts (a signal, a second
  run, ``kill -9``) and then writes the line. A stop requested during the pause is seen at the
  boundary of this very step.
* ``--pause-in-save K``: the same inside the K-th checkpoint write, after the temporary file is
  complete and before it is renamed over the checkpoint.
* ``--enospc-in-save K``: the K-th checkpoint write fails as on a full disk, after half of its
  bytes (``OSError(ENOSPC)``, what ``write`` raises then).
* ``--sigterm-at-step N [--sigterm-rank R]``: after the N-th step the process sends itself
  SIGTERM, under ``torchrun`` only the process of rank R (default 0): a preemption at an exact
  step, where no test can reach a pause (torchrun's workers read no stdin).
"""

from __future__ import annotations

import argparse
import errno
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

HOOK = Path(__file__).resolve()


def start(
    program: str,
    *args: str,
    pause_at_step: int = 0,
    pause_in_save: int = 0,
    enospc_in_save: int = 0,
) -> subprocess.Popen[str]:
    """The hooked program running with command-line ``args`` (stdin, stdout, stderr piped)."""
    cmd = [sys.executable, str(HOOK), program, f"--pause-at-step={pause_at_step}",
           f"--pause-in-save={pause_in_save}", f"--enospc-in-save={enospc_in_save}", "--",
           *args]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_paused(proc: subprocess.Popen[str]) -> str:
    """Block until ``proc`` reports its pause; its stdout up to then. Fails if it ended first."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        if line.startswith("PAUSED "):
            return "".join(seen)
        seen.append(line)
    _, err = proc.communicate()
    raise AssertionError(f"exited with {proc.returncode} before its pause: {''.join(seen)}{err}")


def release(proc: subprocess.Popen[str], timeout: float = 600) -> tuple[str, str]:
    """Let a paused ``proc`` go on; its remaining stdout and its stderr once it has ended."""
    assert proc.stdin is not None
    try:
        proc.stdin.write("\n")
        proc.stdin.flush()
    except BrokenPipeError:  # it already ended (a second Ctrl-C, kill -9)
        pass
    return proc.communicate(timeout=timeout)


def _pause(what: str) -> None:
    print(f"PAUSED {what} {os.getpid()}", flush=True)
    sys.stdin.readline()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("program", choices=["search", "train"])
    parser.add_argument("--pause-at-step", type=int, default=0)
    parser.add_argument("--pause-in-save", type=int, default=0)
    parser.add_argument("--enospc-in-save", type=int, default=0)
    parser.add_argument("--sigterm-at-step", type=int, default=0)
    parser.add_argument("--sigterm-rank", type=int, default=0)
    split = sys.argv.index("--")
    args = parser.parse_args(sys.argv[1:split])
    overrides = sys.argv[split + 1 :]

    import torch

    saves = {"n": 0}
    real_save = torch.save

    def save(obj, f, *a, **k):  # type: ignore[no-untyped-def]
        saves["n"] += 1
        if saves["n"] == args.enospc_in_save:
            buffer = io.BytesIO()
            real_save(obj, buffer, *a, **k)
            f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_save(obj, f, *a, **k)
        if saves["n"] == args.pause_in_save:
            f.flush()
            _pause("in-save")

    torch.save = save  # nas.run.disk.atomic_write writes every checkpoint through it

    steps = {"n": 0}
    if args.program == "search":
        from nas.cli.search import main as cli_main
        from nas.strategies.base import SearchStrategy as Owner

        name = "step"
    else:
        from nas.cli.train import main as cli_main
        from nas.training.loop import TrainRun as Owner  # type: ignore[assignment]

        name = "_train_step"
    # a strategy may define its own step (GDAS: weight step first): hook every class that does,
    # counting a step once however many of them it passes through
    owners = [Owner]
    if args.program == "search":
        import nas.strategies  # noqa: F401  (the toolkit's strategies)

        todo = list(Owner.__subclasses__())
        while todo:
            cls = todo.pop()
            todo.extend(cls.__subclasses__())
            if name in vars(cls):
                owners.append(cls)
    depth = {"n": 0}

    def hooked(real_step):  # type: ignore[no-untyped-def]
        def step(self, *a, **k):  # type: ignore[no-untyped-def]
            depth["n"] += 1
            try:
                out = real_step(self, *a, **k)
            finally:
                depth["n"] -= 1
            if depth["n"]:
                return out
            steps["n"] += 1
            if steps["n"] == args.pause_at_step:
                _pause("at-step")
            rank = int(os.environ.get("RANK", "0"))
            if steps["n"] == args.sigterm_at_step and rank == args.sigterm_rank:
                os.kill(os.getpid(), signal.SIGTERM)  # handled before the step's boundary
            return out

        return step

    for owner in owners:
        setattr(owner, name, hooked(vars(owner)[name]))
    sys.argv = [f"nas-{args.program}", *overrides]
    cli_main()


if __name__ == "__main__":
    main()
