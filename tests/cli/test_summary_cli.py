import subprocess
import sys

import pytest

from nas.cli.summary import main


def test_summary_of_a_published_network(capsys):
    assert main(["DARTS_V2"]) == 0
    out = capsys.readouterr().out
    assert "NetworkCIFAR on 32x32 input: params 3.349M (3,349,342;" in out
    assert out.startswith("genotype: Genotype(normal=[('sep_conv_3x3', 0)")


def test_summary_of_an_nb201_index(capsys):
    assert main(["1835"]) == 0
    out = capsys.readouterr().out
    assert "skip_connect~0|+|skip_connect~0|skip_connect~1|" in out and "TinyNetwork" in out


@pytest.mark.slow
def test_bad_genotype_is_one_line_and_nonzero():
    proc = subprocess.run(
        [sys.executable, "-m", "nas.cli.summary", "DARTS_V9"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "unknown published genotype 'DARTS_V9'" in proc.stderr
