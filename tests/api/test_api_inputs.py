"""What ``nas.search`` / ``nas.train`` refuse before running: values of the wrong type (one
line naming the parameter and the types it takes), bad names (before torch loads), a second
run in the same process; and override values that reach the config exactly as given."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import nas
from nas import api
from nas.api import RunError


@pytest.mark.parametrize(
    "function, kwargs, expected",
    [
        ("search", {"overrides": 42}, r"overrides=42 is an int; expected a list of key=value"),
        ("search", {"overrides": {1: 2}}, r"overrides key 1 is an int; expected a dotted"),
        ("search", {"overrides": ["epochs=1", 3]}, r"overrides=.* is a list; expected a list"),
        ("search", {"components": "pc_darts"}, r"components='pc_darts' is one string"),
        ("search", {"components": [1]}, r"components=\[1\] is a list; expected a list of comp"),
        ("search", {"space": 3}, r"space=3 is an int; expected a config name \(str\) or None"),
        ("search", {"strategy": ["darts"]}, r"strategy=\['darts'\] is a list; expected a conf"),
        ("search", {"resume": "yes"}, r"resume='yes' is a str; expected True or False"),
        ("search", {"run_dir": 1}, r"run_dir=1 is an int; expected a str, a Path or None"),
        ("search", {"config_dirs": "c"}, r"config_dirs='c' is a str; expected a list of fold"),
        ("train", {"genotype": 3.5}, r"genotype=3.5 is a float; expected a Run, a genotype"),
        ("train", {"genotype": True}, r"genotype=True is a bool; expected a Run"),
        ("train", {"experiment": 1}, r"experiment=1 is an int; expected a config name"),
        ("train_config", {"data": 2.0}, r"data=2.0 is a float; expected a config name"),
    ],
)
def test_wrong_types_are_refused_naming_the_parameter(function, kwargs, expected):
    with pytest.raises(RunError, match=expected):
        getattr(api, function)(**kwargs)


def test_a_value_with_a_comma_or_equals_sign_reaches_the_config_unchanged():
    cfg = api.search_config(overrides={"data.root": "/tmp/a,b=c", "name": "x y'z"})
    assert cfg.data.root == "/tmp/a,b=c"
    assert cfg.name == "x y'z"


def test_bad_input_is_refused_before_torch_loads(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        import nas
        try:
            nas.search(space="nope")
        except nas.RunError as e:
            print("refused:", e)
        print("torch loaded:", "torch" in sys.modules)
        """
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", NAS_PROGRESS="none")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: unknown space 'nope'; expected one of "), lines
    assert lines[1] == "torch loaded: False"
    assert not (Path(tmp_path) / "outputs").exists()


def test_a_second_run_in_the_same_process_is_refused_with_one_line():
    refusals: list[str] = []

    def other_thread() -> None:
        try:
            nas.search(space="nb201")
        except RunError as e:
            refusals.append(str(e))

    with api._ONE_RUN:  # as a run in progress holds it
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(timeout=60)
        with pytest.raises(RunError, match="another nas.search / nas.train is running"):
            api.train_config()
    assert len(refusals) == 1
    assert refusals[0].startswith("nas.search: another nas.search / nas.train is running in ")
    assert "separate processes" in refusals[0]
    # released after a refused call and after a finished one: the next call goes through
    with pytest.raises(RunError, match="unknown space"):
        api.search_config(space="nope")
    assert api.search_config(space="nb201").space is not None
