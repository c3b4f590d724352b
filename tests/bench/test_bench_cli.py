"""``nas-bench``: query, best, convert; bad input is one line on stderr and exit status 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from nas.bench import NB201
from nas.cli.bench import main
from search_spaces.genotype import parse_nb201_arch
from search_spaces.nb201 import index_to_arch

NB201_6111 = index_to_arch(6111)


def test_query_prints_every_dataset(capsys):
    assert main(["query", index_to_arch(6111)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"NB201 cell 6111  {index_to_arch(6111)}"
    assert out[2].split() == ["dataset", "x-valid", "x-test", "ori-test", "params"]
    assert out[3].split() == ["cifar10-valid", "91.61", "-", "91.09", "1,073,466"]
    assert out[4].split() == ["cifar10", "-", "-", "94.37", "1,073,466"]
    assert out[5].split() == ["cifar100", "72.75", "73.22", "72.98", "1,079,316"]
    assert out[6].split() == ["ImageNet16-120", "45.56", "46.71", "46.13", "1,080,616"]
    assert out[7].endswith("cifar10 1, cifar100 3, ImageNet16-120 8")
    assert main(["query", "6111"]) == 0
    assert capsys.readouterr().out.splitlines() == out


def test_query_twelve_epochs(capsys):
    assert main(["query", "1835", "--hp", "12"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "after 12 epochs" in out[1]
    assert out[4].split() == ["cifar10", "-", "-", "36.84", "73,306"]


def test_best(capsys):
    assert main(["best", "--dataset", "cifar100"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"best cifar100 x-test (200-epoch mean): 73.51 %  NB201 cell 9930  {index_to_arch(9930)}"
    ]
    assert main(["best"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "94.37 %  NB201 cell 6111" in out[0] and out[1] == "tied with: 13714"


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "nas.cli.bench", *args], capture_output=True, text=True
    )


def test_bad_arch_string_is_the_genotype_modules_one_line_error():
    bad = "|nor_conv_3x3~0|+|nor_conv_9x9~0|none~1|+|none~0|none~1|none~2|"
    try:
        parse_nb201_arch(bad)
    except ValueError as e:
        expected = str(e)
    proc = _run("query", bad)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"nas-bench: error: {expected}\n"


def test_the_lookup_path_never_imports_torch(tmp_path):
    """A query, good or malformed, with a ``torch`` on the path that fails when imported."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('nas-bench query imported torch')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd(),
                                                       os.environ.get("PYTHONPATH", "")]))  # fmt: skip
    for args, code in [(("query", "6111"), 0), (("query", NB201_6111), 0),
                       (("query", "|nor_conv_3x3~0|+|bad~0|none~1|+|none~0|none~1|none~2|"), 2)]:  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "nas.cli.bench", *args], capture_output=True,
                              text=True, env=env)  # fmt: skip
        assert proc.returncode == code, proc.stderr
        assert "torch" not in proc.stderr
        if code:
            assert (
                proc.stderr.count("\n") == 1 and "input 0: unknown operation 'bad'" in proc.stderr
            )


def test_bad_dataset_split_index_and_file_are_one_line():
    for args, text in [
        (("best", "--dataset", "cifar10", "--split", "x-valid"), "cifar10 has no split 'x-valid'"),
        (("best", "--dataset", "mnist"), "unknown NB201 dataset 'mnist'"),
        (("query", "15625"), "NB201 index 15625 out of range"),
        (("query", "0", "--file", "/nonexistent/nb.nbt"), "/nonexistent/nb.nbt not found"),
    ]:
        proc = _run(*args)
        assert proc.returncode == 2, args
        assert proc.stderr.count("\n") == 1 and text in proc.stderr, proc.stderr


def test_convert_then_query(tiny_official, tmp_path, capsys):
    out = tmp_path / "tiny.nbt"
    assert main(["convert", str(tiny_official), str(out), "--trust-pickle"]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: 3 cells, datasets cifar10-valid")
    assert main(["query", "1835", "--file", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split() == ["dataset", "train", "x-valid", "x-test", "ori-test", "params"]
    value = NB201(path=out).query(1835, dataset="cifar100", split="x-test")
    assert lines[5].split()[3] == f"{value:.2f}"
    assert main(["convert", str(tmp_path / "none.pth"), str(out), "--trust-pickle"]) == 2
    assert "none.pth not found" in capsys.readouterr().err


def test_console_script():
    exe = shutil.which("nas-bench")
    if exe is None:
        pytest.skip("nas-bench is not installed (pip install -e .)")
    proc = subprocess.run(
        [exe, "best", "--dataset", "ImageNet16-120"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "47.31 %  NB201 cell 857" in proc.stdout
