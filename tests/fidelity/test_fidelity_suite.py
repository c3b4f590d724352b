"""The fidelity suite (``experiments/fidelity``): every script's known answers pass, here, with
no reference checkout; with ``NAS_REFERENCE_ROOTS="darts=/path,drnas=/path,..."`` the scripts
whose references are given also run beside them. The harness's own pieces are checked too."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from experiments.fidelity import common as F
from experiments.fidelity import run_all

SCRIPTS = run_all.scripts()


def test_there_is_a_script_per_method():
    assert "darts" in SCRIPTS
    for name in SCRIPTS:
        module = run_all.importlib.import_module(f"experiments.fidelity.{name}")
        assert isinstance(module.METHOD, str) and module.METHOD
        assert callable(module.known_answers)
        assert module.__doc__ and "Known answers" in module.__doc__, name


@pytest.mark.parametrize("name", SCRIPTS)
def test_known_answers(name):
    module = run_all.importlib.import_module(f"experiments.fidelity.{name}")
    table = F.Table()
    with F.float64():
        module.known_answers(table)
    assert table.rows, f"{name}: no known answer checked"
    assert not table.failed, "\n" + table.markdown()


def _given_roots() -> dict[str, str]:
    items = [i for i in os.environ.get("NAS_REFERENCE_ROOTS", "").split(",") if i.strip()]
    return dict(item.split("=", 1) for item in items)


@pytest.mark.parametrize("name", SCRIPTS)
def test_beside_the_reference(name, tmp_path):
    module = run_all.importlib.import_module(f"experiments.fidelity.{name}")
    roots = {k: v for k, v in _given_roots().items() if k in module.REFERENCES}
    if not roots:
        pytest.skip(f"no reference checkout given for {name} (NAS_REFERENCE_ROOTS)")
    out = tmp_path / "rows.jsonl"
    cmd = [sys.executable, os.path.join(run_all.HERE, f"{name}.py"), "--json", str(out)]
    cmd += [f"--reference-root={k}={v}" for k, v in roots.items()]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=run_all.ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = F.Table.load(out).rows
    assert any(r.reference != F.KNOWN for r in rows)


def test_max_rel_diff():
    a = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert F.max_rel_diff(a, a.clone()) == 0.0
    assert F.max_rel_diff(a, a + torch.tensor([0.0, 1e-3], dtype=torch.float64)) == pytest.approx(
        1e-3 / 2.001
    )
    assert F.max_rel_diff([a], [a, a]) == math.inf
    assert F.max_rel_diff({"x": a}, {"x": a[:1]}) == math.inf
    assert F.max_rel_diff(torch.zeros(2), torch.zeros(2)) == 0.0


def test_a_row_above_tolerance_fails():
    table = F.Table()
    table.add("M", "q", torch.ones(2), torch.ones(2) * (1 + 1e-6))
    table.add_equal("M", "genotype", ["a"], ["b"])
    assert [r.quantity for r in table.failed] == ["q", "genotype"]
    assert "above" in table.markdown()


def test_reference_roots_are_checked_in_one_line(tmp_path):
    refs = {"darts": F.Reference("quark0/darts", "cnn/model_search.py")}
    with pytest.raises(SystemExit) as e:
        F.parse_roots(["darts"], refs)
    assert "NAME=PATH" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SystemExit) as e:
        F.parse_roots([f"darts={tmp_path}"], refs)
    assert "cnn/model_search.py" in str(e.value) and "quark0/darts" in str(e.value)
    with pytest.raises(SystemExit) as e:
        F.parse_roots([f"other={tmp_path}"], refs)
    assert "darts" in str(e.value)
    (tmp_path / "cnn").mkdir()
    (tmp_path / "cnn" / "model_search.py").write_text("")
    assert F.parse_roots([f"darts={tmp_path}"], refs) == {"darts": str(tmp_path)}


def test_script_defaults_are_read_without_running_the_script(tmp_path):
    script = tmp_path / "train_search.py"
    script.write_text(
        textwrap.dedent(
            """
            import argparse
            raise SystemExit("never run")
            parser = argparse.ArgumentParser()
            parser.add_argument('--learning_rate', type=float, default=0.025)
            parser.add_argument('--unrolled', action='store_true', default=False)
            parser.add_argument('--cutout', action='store_true')
            parser.add_argument('--data', default=os.path.join('a', 'b'))
            parser.add_argument('--init-channels', type=int, default=16)
            """
        )
    )
    assert F.script_defaults(str(script)) == {
        "learning_rate": 0.025,
        "unrolled": False,
        "cutout": False,
        "init_channels": 16,
    }


def test_copy_weights_refuses_another_layout():
    a = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    b = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    F.copy_weights(a, b)
    assert torch.equal(a[0].weight, b[0].weight)
    with pytest.raises(SystemExit):
        F.copy_weights(a, torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3), torch.nn.BatchNorm2d(5)))
    with pytest.raises(SystemExit):
        F.copy_weights(a, torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3)))


def test_run_all_refuses_a_reference_no_script_uses(tmp_path):
    with pytest.raises(SystemExit) as e:
        run_all.main(["--only", "darts", "--reference-root", f"nope={tmp_path}"])
    assert "nope" in str(e.value)


def test_run_all_writes_the_table(tmp_path):
    out = tmp_path / "table.md"
    assert run_all.main(["--only", "darts", "--known-answers-only", "--out", str(out)]) == 0
    text = out.read_text()
    assert "## DARTS" in text and "| DARTS |" in text and "known answer" in text
