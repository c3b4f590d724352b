"""Runs side by side: two ``nas.search`` calls in two processes at the same time each give what
the same call gives alone (genotype, config and every step and epoch record), in their own run
folders, with their own locks and logs. Within one process a second call is refused
(``tests/api/test_api_inputs.py``): the global generators and Hydra's job config are shared
by a process's threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.api.test_api import ENV, TINY_SEARCH, _events

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    f"""
    import sys
    import nas

    run_dir, seed = sys.argv[1], int(sys.argv[2])
    overrides = {{**{TINY_SEARCH!r}, "seed": seed}}
    nas.search(space="nb201", strategy="gdas", overrides=overrides, run_dir=run_dir)
    """
)


def _start(run_dir: Path, seed: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", SCRIPT, str(run_dir), str(seed)]
    return subprocess.Popen(cmd, env=ENV, text=True, stderr=subprocess.PIPE)


def _finish(process: subprocess.Popen[str]) -> None:
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err


def test_two_runs_at_once_each_equal_their_lone_run(tmp_path):
    lone = {seed: tmp_path / f"lone{seed}" for seed in (0, 1)}
    for seed, folder in lone.items():  # one after the other
        _finish(_start(folder, seed))
    together = {seed: tmp_path / f"together{seed}" for seed in (0, 1)}
    started = [_start(folder, seed) for seed, folder in together.items()]  # at the same time
    for process in started:
        _finish(process)
    for seed in (0, 1):
        a, b = lone[seed], together[seed]
        assert (a / "genotype.json").read_text() == (b / "genotype.json").read_text()
        assert _events(a) == _events(b)  # every step and epoch record, every weight
    # and the two seeds did give two runs (the comparison above can tell runs apart)
    assert _events(lone[0]) != _events(lone[1])
