"""--reference-root: a fake reference checkout in the layout of the real ones, imported with the
shims in fresh processes, alternating with ours."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from experiments.benchmarks import search_step
from experiments.benchmarks.reference_runs import parse_roots

BENCH = Path(search_step.__file__).parent

# quark0/darts's layout (cnn/model_search.py, cnn/architect.py) and its PyTorch 0.3 idioms
FAKE_DARTS = {
    "cnn/model_search.py": """
        import os
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.autograd import Variable

        class Network(nn.Module):
          def __init__(self, C, num_classes, layers, criterion):
            super(Network, self).__init__()
            with open(os.environ['FAKE_REF_LOG'], 'a') as f:
              f.write('%d %s %d %d\\n' % (os.getpid(), os.getcwd(), C, layers))
            self._C, self._num_classes, self._layers = C, num_classes, layers
            self._criterion = criterion
            self.conv = nn.Conv2d(3, C, 3, padding=1, bias=False)
            self.convs = nn.ModuleList(nn.Conv2d(C, C, 3, padding=1) for _ in range(2))
            self.classifier = nn.Linear(C, num_classes)
            self.alphas = Variable(1e-3 * torch.randn(2).cuda(), requires_grad=True)

          def new(self):
            model_new = Network(self._C, self._num_classes, self._layers, self._criterion).cuda()
            model_new.alphas.data.copy_(self.alphas.data)
            return model_new

          def forward(self, x):
            w = F.softmax(self.alphas, dim=-1)
            x = self.conv(x)
            x = sum(wi * conv(x) for wi, conv in zip(w, self.convs))
            return self.classifier(x.mean((2, 3)))

          def _loss(self, input, target):
            return self._criterion(self(input), target)

          def arch_parameters(self):
            return [self.alphas]
        """,
    "cnn/architect.py": """
        import torch
        from torch.autograd import Variable

        class Architect(object):
          def __init__(self, model, args):
            self.model = model
            self.optimizer = torch.optim.Adam(model.arch_parameters(),
                lr=args.arch_learning_rate, betas=(0.5, 0.999), weight_decay=args.arch_weight_decay)

          def step(self, input_train, target_train, input_valid, target_valid, eta, network_optimizer, unrolled):
            self.optimizer.zero_grad()
            loss = self.model._loss(input_valid, target_valid)
            loss.backward()
            if unrolled:  # the deprecated overloads the real architect uses
              for p in self.model.parameters():
                p.data.add_(0.0, p.data)
            self.optimizer.step()
        """,
}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def run_bench(args, log, cwd=None):
    env = {**os.environ, "FAKE_REF_LOG": str(log), "PYTHONPATH": os.getcwd()}
    return subprocess.run(
        [sys.executable, str(BENCH / "search_step.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd or os.getcwd(),
    )


@pytest.mark.slow
def test_reference_child_runs_the_fake_darts_from_its_folder(tmp_path):
    root = write_tree(tmp_path / "darts", FAKE_DARTS)
    log = tmp_path / "log"
    args = [
        "--reference-child",
        "darts-darts2",
        "--child-root",
        str(root),
        "--channels-last",
        "false",
    ]
    proc = run_bench([*args, "--C", "4", "--layers", "3", "--batch", "4", "--steps", "1"], log)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["search_step_s"] > 0 and result["peak_rss_delta_mib"] >= 0
    pid, cwd, C, layers = log.read_text().split("\n")[0].split()
    # run from the reference's script folder (its own sys.path.insert('../') needs that)
    assert (cwd, C, layers) == (str(root / "cnn"), "4", "3")
    assert int(pid) != os.getpid()
    assert not list(root.rglob("*.pyc"))


def test_side_by_side_alternates_fresh_processes(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_child(cmd):
        calls.append(cmd)
        ours = "--child" in cmd
        step = 1.0 if ours else 3.0
        return {"search_step_s": step, "peak_rss_delta_mib": 50.0 if ours else 100.0}

    monkeypatch.setattr(search_step, "_child", fake_child)
    args = search_step.argparse.Namespace(
        only=["nb201-darts1"],
        steps=2,
        warmup=1,
        threads=2,
        rounds=3,
        channels_last="auto",
        reference_channels_last=True,
        C=None,
        layers=None,
        batch=None,
    )
    search_step.side_by_side(args, {"darts-pt": str(tmp_path)})
    kinds = ["ours" if "--child" in c else ("nhwc" if c[-1] == "true" else "ref") for c in calls]
    # round 1 ours first, round 2 reversed, round 3 ours first again
    assert kinds == ["ours", "ref", "nhwc", "nhwc", "ref", "ours", "ours", "ref", "nhwc"]
    assert all(c[0] == sys.executable for c in calls)
    out = capsys.readouterr().out
    ref_row = next(line for line in out.splitlines() if "| reference (darts-pt) |" in line)
    # speed: the reference's median over ours; memory: ours over the reference's
    assert ref_row.rstrip().endswith("| 3.00x | 0.50x | - | - | - |")  # no rate for the reference


def test_a_row_without_its_reference_root_is_skipped(monkeypatch, capsys):
    monkeypatch.setattr(search_step, "_child", lambda cmd: pytest.fail("no run expected"))
    args = search_step.argparse.Namespace(
        only=["darts-darts1"], steps=1, warmup=0, threads=2, rounds=1, channels_last="auto",
        reference_channels_last=False, C=None, layers=None, batch=None,
    )  # fmt: skip
    search_step.side_by_side(args, {"drnas": "/x"})
    assert "skipped: no --reference-root darts=PATH" in capsys.readouterr().out


def test_parse_roots(tmp_path):
    root = write_tree(tmp_path / "darts", FAKE_DARTS)
    assert parse_roots([f"darts={root}"]) == {"darts": str(root)}
    assert parse_roots(None) == {}
    with pytest.raises(SystemExit, match="expected NAME=PATH with NAME one of darts, drnas"):
        parse_roots([str(root)])
    with pytest.raises(SystemExit, match="no DARTS-space/model_search.py there"):
        parse_roots([f"drnas={root}"])


def test_a_failing_reference_is_reported_in_one_line(tmp_path):
    root = write_tree(tmp_path / "darts", {**FAKE_DARTS, "cnn/architect.py": "import nope\n"})
    cmd = [sys.executable, str(BENCH / "search_step.py"), "--reference-child", "darts-darts1"]
    cmd += ["--child-root", str(root), "--C", "4", "--layers", "3", "--batch", "4"]
    assert search_step._child(cmd) == {"error": "ModuleNotFoundError: No module named 'nope'"}
    assert search_step._child([sys.executable, "-c", "print(1 + 1)"]) == 2
