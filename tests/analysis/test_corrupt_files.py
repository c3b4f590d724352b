"""A run's files that cannot be read are one line naming the file and the line; nothing is
drawn from a guess (a corrupt genotype.json must not become another cell's figure)."""

from __future__ import annotations

import json

import pytest

from nas.analysis.run import load_run, read_events
from nas.cli import plot
from nas.cli.proxy import _read_scores


def test_a_torn_last_event_is_skipped_a_bad_middle_line_is_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"event": "a"}\n{"event": "b"}\n{"event": "c", "ep')
    assert [e["event"] for e in read_events(path)] == ["a", "b"]
    path.write_text('{"event": "a"}\nnot json\n{"event": "c"}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl, line 2: not a JSON event"):
        read_events(path)


def test_a_corrupt_genotype_json_is_refused_and_no_cell_is_drawn(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"event": "epoch", "epoch": 0}\n')
    (run / "genotype.json").write_text("{broken")
    with pytest.raises(ValueError, match="genotype.json is not JSON"):
        load_run(run)
    assert plot.main([str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if "error" in line]) == 1
    assert not (run / "figures").exists() or not any((run / "figures").iterdir())


def test_scores_lines_are_checked_with_their_line(tmp_path):
    path = tmp_path / "scores.jsonl"
    row = {"index": 1, "scores": {"synflow": 1.0}}
    path.write_text(json.dumps(row) + "\n" + json.dumps(row)[:9])
    assert _read_scores(path) == [row]  # the torn last line
    path.write_text("oops\n" + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"scores.jsonl, line 1: not a JSON row"):
        _read_scores(path)
    path.write_text(json.dumps({"x": 1}) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=r"line 1: expected a scored cell"):
        _read_scores(path)
