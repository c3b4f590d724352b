"""A torchrun worker (rank > 0) whose run ended leaves without the interpreter's teardown: its
output flushed, exit code 0, no atexit handler run; rank 0 (or a single process) exits as usual."""

import os
import subprocess
import sys

SCRIPT = """
import atexit, sys
from nas.cli.launch import leave_if_worker
atexit.register(lambda: print("teardown", flush=True))
print("run done", end="")  # no newline: only a flush writes it
leave_if_worker()
print(" and back")
"""


def _run(rank: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RANK=rank)
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


def test_a_worker_leaves_at_once_with_its_output_flushed():
    proc = _run("1")
    assert proc.returncode == 0 and proc.stdout == "run done", proc.stdout + proc.stderr


def test_rank_0_goes_on_and_tears_down():
    proc = _run("0")
    assert proc.returncode == 0 and proc.stdout == "run done and back\nteardown\n"
