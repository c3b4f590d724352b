"""Outputs and options of nas-profile, nas-export, nas-proxy and nas-summary are checked before
any work, in one line, exit 2; exports are written whole or not at all."""

from __future__ import annotations

import json

import pytest

from nas.cli import export, profile, proxy, summary
from nas.cli.errors import error_line
from nas.run.disk import check_output_file, check_output_folder

ARCH = "|nor_conv_3x3~0|+|nor_conv_3x3~0|skip_connect~1|+|skip_connect~0|skip_connect~1|skip_connect~2|"


def _one_line(capsys, program):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{program}: error: "), err
    return err


@pytest.mark.parametrize("device", ["gpu", "meta", "cuda:x", ""])
def test_profile_refuses_a_device_that_is_not_one(capsys, tmp_path, device):
    assert profile.main(["--device", device, "-o", str(tmp_path / "t.json")]) == 2
    assert "expected cpu, cuda or cuda:N" in _one_line(capsys, "nas-profile")


def test_profile_refuses_an_output_it_cannot_write_before_profiling(capsys, tmp_path):
    (tmp_path / "afile").write_text("")
    # --repeats 10**9 would take hours: the refusal must come first
    for out, words in ((tmp_path / "afile" / "t.json", "is a file, not a folder"),
                       (tmp_path, "is a folder")):  # fmt: skip
        assert profile.main(["--repeats", str(10**9), "-o", str(out)]) == 2
        assert words in _one_line(capsys, "nas-profile")
    for flag in ("--threads", "--batch", "--repeats"):
        assert profile.main([flag, "0", "-o", str(tmp_path / "t.json")]) == 2
        assert f"{flag} must be >= 1" in _one_line(capsys, "nas-profile")


def test_a_table_of_another_device_kind_is_refused(capsys, tmp_path):
    assert profile.main(["--no-time", "--C", "4", "--layers", "1", "-q",
                         "-o", str(tmp_path / "t.json")]) == 0  # fmt: skip
    data = json.loads((tmp_path / "t.json").read_text())
    data["environment"]["device_type"] = "meta"
    (tmp_path / "meta.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert profile.main(["--show", str(tmp_path / "meta.json"), "--check"]) == 2
    assert "device_type 'meta'" in _one_line(capsys, "nas-profile")


def test_export_refuses_bad_outputs_before_building(capsys, tmp_path):
    (tmp_path / "afile").write_text("")
    cases = [
        (["--onnx", str(tmp_path / "afile" / "x.onnx")], "is a file, not a folder"),
        (["--torchscript", str(tmp_path)], "is a folder"),
        (["--onnx", str(tmp_path / "x"), "--torchscript", str(tmp_path / "x")], "the same file"),
        (["--onnx", str(tmp_path / "x.onnx"), "--batch", "0"], "--batch must be >= 1"),
        (["--onnx", str(tmp_path / "x.onnx"), "--tol", "nan"], "--tol must be a positive"),
        (["--onnx", str(tmp_path / "x.onnx"), "--opset", "3"], "--opset must be >= 7"),
        (["--onnx", str(tmp_path / "x.onnx"), "--seed", "-1"], "--seed must be >= 0"),
    ]
    for extra, words in cases:
        assert export.main([ARCH, *extra]) == 2
        assert words in _one_line(capsys, "nas-export")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.slow
def test_export_writes_one_self_contained_onnx_file(tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime

    out = tmp_path / "net.onnx"
    assert export.main([ARCH, "--C", "4", "--layers", "1", "--onnx", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.onnx"]  # no .data, no temp
    onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])


def test_a_failed_export_leaves_the_earlier_file(tmp_path, monkeypatch):
    from nas.hardware import export as hw

    out = tmp_path / "net.pt"
    out.write_text("earlier")

    def differs(*args, **kwargs):
        raise ValueError("TorchScript logits differ")

    monkeypatch.setattr(hw, "_check", differs)
    assert export.main([ARCH, "--C", "4", "--layers", "1", "--torchscript", str(out)]) == 2
    assert out.read_text() == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.pt"]


def test_proxy_refuses_bad_threads_and_outputs(capsys, tmp_path):
    (tmp_path / "afile").write_text("")
    for args, words in ((["--threads", "0"], "--threads must be >= 1"),
                        (["--threads", "-1"], "--threads must be >= 1"),
                        (["--sample", "0"], "--sample must be >= 1"),
                        (["--out", str(tmp_path / "afile")], "is a file; expected a folder"),
                        (["--out", str(tmp_path / "afile" / "sub")], "is a file, not a folder")):  # fmt: skip
        assert proxy.main(args) == 2
        assert words in _one_line(capsys, "nas-proxy")


def test_summary_refuses_sizes_below_one_and_takes_run_folders(capsys, tmp_path):
    for flag, value in (("--C", "0"), ("--layers", "-1"), ("--num-classes", "0")):
        assert summary.main(["DARTS_V2", flag, value]) == 2
        assert f"{flag} must be >= 1" in _one_line(capsys, "nas-summary")
    from search_spaces.genotype import parse_nb201_arch

    (tmp_path / "genotype.json").write_text(
        json.dumps({"genotype": parse_nb201_arch(ARCH).to_json()})
    )
    for spec in (str(tmp_path), str(tmp_path / "genotype.json")):
        assert summary.main([spec, "--C", "4", "--layers", "1"]) == 0
        assert ARCH in capsys.readouterr().out


def test_os_errors_are_one_line_with_the_file():
    e = PermissionError(13, "Permission denied", "/x/y")
    assert error_line(e) == "/x/y: Permission denied"
    assert error_line(FileNotFoundError("no table at /t; run nas-profile first")).startswith(
        "no table"
    )


def test_output_checks(tmp_path):
    (tmp_path / "f").write_text("")
    assert (
        check_output_file(tmp_path / "new" / "deeper" / "x", "-o")
        == tmp_path / "new" / "deeper" / "x"
    )
    assert check_output_folder(tmp_path / "new" / "d", "--out") == tmp_path / "new" / "d"
    with pytest.raises(ValueError, match="is a folder"):
        check_output_file(tmp_path, "-o")
    with pytest.raises(ValueError, match="is a file"):
        check_output_folder(tmp_path / "f", "--out")


@pytest.mark.slow
def test_profile_sigterm_stops_after_the_part_and_the_same_command_continues(tmp_path):
    """A real process signalled while it times parts: exit 143 within a part, the parts timed
    so far kept; the same command then measures only the rest and keeps those as they were."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "t.json"
    partial = tmp_path / "t.json.partial.json"
    cmd = [sys.executable, "-m", "nas.cli.profile", "--C", "4", "--layers", "1",
           "--repeats", "3000", "--warmup", "5", "--threads", "1", "-q", "-o", str(out)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if len(json.loads(partial.read_text())["entries"]) >= 2:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    assert time.monotonic() - sent < 60
    assert "run the same command again to continue" in err and not out.exists()
    kept = json.loads(partial.read_text())["entries"]
    assert 2 <= len(kept) < 19

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    table = json.loads(out.read_text())
    assert len(table["entries"]) == 19 and not partial.exists()
    for key, entry in kept.items():
        assert table["entries"][key] == entry


def test_calibration_networks_measured_before_a_stop_are_taken_as_they_are(tmp_path):
    import numpy as np

    from nas.hardware import network_layout
    from nas.hardware.cost import CostModel
    from nas.hardware.profiler import profile as profile_parts
    from nas.hardware.validate import calibrate, fit_calibration, random_genotypes

    layout = network_layout("nb201", C=4, layers=1, image_size=32, num_classes=10)
    table = profile_parts(layout, warmup=1, repeats=2)
    medians = [1.0, 2.0, 3.5]
    cal = calibrate(table, 3, seed=5, warmup=1, repeats=2, done=medians)  # nothing measured
    raw = CostModel.from_table(table, "latency", calibrated=False)
    summed = [raw.of_genotype(g) for g in random_genotypes("nb201", 3, 5)]
    want = fit_calibration(np.array(medians), np.array(summed), 1.0)
    assert cal["a"] == want["a"] and cal["b_ms"] == want["b_ms"]
