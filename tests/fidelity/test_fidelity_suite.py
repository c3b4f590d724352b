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


@pytest.mark.slow
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


RECORDED = [n for n in SCRIPTS if F.golden_path(n).exists()]


@pytest.mark.slow
@pytest.mark.parametrize("name", RECORDED)
def test_recorded(name):
    """Every row our code produces against the references' recorded outputs, at the rows' own
    tolerances: a change that moves any row fails here, naming it."""
    module = run_all.importlib.import_module(f"experiments.fidelity.{name}")
    table = F.replay(module)
    assert any(r.reference.endswith(", recorded") for r in table.rows)
    assert not table.failed, "\n" + table.markdown()


def test_recordings_are_small_and_safe():
    """All recordings together stay under 4 MB, load with ``weights_only=True`` and name the
    reference commit (40 hex digits, or ``pypi:NAME==VERSION``) and the command that made them."""
    files = sorted(F.GOLDEN.glob("*.pt"))
    assert sum(f.stat().st_size for f in files) < 4_000_000
    for f in files:
        rec = F.Recorded.load(f)
        assert rec.meta["command"].startswith(f"python experiments/fidelity/{f.stem}.py --record")
        for ref in rec.meta["references"].values():
            commit = ref["commit"]  # a git commit, or the release of a reference on PyPI only
            assert commit.startswith("pypi:") or (len(commit) == 40 and int(commit, 16) >= 0), f
        assert rec.rows and all(
            set(e) <= {"value", "reference", "sketch"} for e in rec.rows.values()
        )


def test_a_recorded_value_that_moves_fails_its_row(tmp_path):
    refs = {"r": F.Reference("o/r", "m.py")}
    rec = F.Recording()
    rec.put("small", torch.ones(3, dtype=torch.float64), "o/r@x")
    rec.put("long", torch.arange(10_000, dtype=torch.float64), "o/r@x")
    rec.put("genotype", [("a", 0)], "o/r@x", exact=True)
    with pytest.raises(SystemExit):  # one row per quantity
        rec.put("small", torch.ones(3), "o/r@x")
    assert rec.rows["long"]["sketch"] and rec.rows["long"]["value"]["values"].numel() == 4096
    meta = {"references": {"r": {"repo": "o/r", "commit": "0" * 40}}, "command": "c"}
    rec.save(tmp_path / "x.pt", meta)
    recorded = F.Recorded.load(tmp_path / "x.pt")
    table = F.Table(refs=F.Refs(refs, {}, recorded))
    label = recorded.label("r")
    assert label == "o/r@000000000000, recorded"

    def never():
        raise AssertionError("a replayed reference is not run")

    long = torch.arange(10_000, dtype=torch.float64)
    table.add("M", "small", torch.ones(3), never, label)
    table.add("M", "long", long, never, label)
    table.add_equal("M", "genotype", [["a", 0]], never, label)
    assert not table.failed
    moved = long.clone()
    moved[4321] += 1e-3  # one value of a sketched row, not at a sampled position
    table.add("M", "long", moved, never, label)
    table.add("M", "small", torch.ones(3) * 2, never, label)
    table.add("M", "not recorded", torch.ones(3), never, label)
    assert [r.quantity for r in table.failed] == ["long", "small", "not recorded"]


def test_recording_refuses_without_every_checkout(capsys):
    from experiments.fidelity import darts

    with pytest.raises(SystemExit) as e:
        F.main(darts.METHOD, darts.REFERENCES, darts.known_answers, darts.compare, ["--record"])
    assert "--reference-root" in str(e.value) and "\n" not in str(e.value)


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


def test_copy_weights_matches_base_kinds():
    """A subclass of a copied kind (our NHWC narrow batch norm is one of ``BatchNorm2d``) is
    copied as its base kind, on either side."""

    class NarrowBN(torch.nn.BatchNorm2d):
        pass

    a = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), NarrowBN(4), torch.nn.Linear(4, 2))
    b = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Linear(4, 2)
    )
    with torch.no_grad():
        a[1].weight.uniform_()
        a[1].running_mean.uniform_()
    F.copy_weights(a, b)
    assert torch.equal(a[1].weight, b[1].weight) and torch.equal(
        a[1].running_mean, b[1].running_mean
    )
    assert torch.equal(a[2].weight, b[2].weight)
    F.copy_weights(b, a)


def test_run_all_refuses_a_reference_no_script_uses(tmp_path):
    with pytest.raises(SystemExit) as e:
        run_all.main(["--only", "darts", "--reference-root", f"nope={tmp_path}"])
    assert "nope" in str(e.value)


@pytest.mark.slow
def test_run_all_writes_the_table(tmp_path):
    out = tmp_path / "table.md"
    assert run_all.main(["--only", "darts", "--known-answers-only", "--out", str(out)]) == 0
    text = out.read_text()
    assert "## DARTS" in text and "| DARTS |" in text and "known answer" in text
