"""train_step.py --reference-root darts=PATH: quark0/darts's own train.py step (a fake checkout
in its layout and PyTorch 0.3 idioms), imported with the shims in a fresh process."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from experiments.benchmarks import train_step

BENCH = Path(train_step.__file__).parent

FAKE = {
    "cnn/model_search.py": "# the marker parse_roots checks\n",
    "cnn/genotypes.py": "DARTS_V2 = 'darts-v2'\n",
    "cnn/model.py": """
        import torch
        import torch.nn as nn
        from torch.autograd import Variable

        class NetworkCIFAR(nn.Module):
          def __init__(self, C, num_classes, layers, auxiliary, genotype):
            super(NetworkCIFAR, self).__init__()
            assert auxiliary and genotype == 'darts-v2'
            self.drop_path_prob = 0.0
            self.conv = nn.Conv2d(3, C, 3, padding=1, bias=False)
            self.classifier = nn.Linear(C, num_classes)
            self.aux = nn.Linear(C, num_classes)

          def forward(self, x):
            x = self.conv(x)
            mask = Variable(torch.cuda.FloatTensor(x.size(0), 1, 1, 1).bernoulli_(0.8))
            x = x * mask
            f = x.mean((2, 3))
            return self.classifier(f), self.aux(f)
        """,
}


@pytest.fixture
def fake_darts(tmp_path):
    for rel, text in FAKE.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("config", ["reference-code", "reference-code-nhwc"])
def test_the_reference_codes_own_step_runs_from_a_checkout(fake_darts, config):
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import train_step as t; "
        "t.C, t.LAYERS, t.BATCH = 4, 2, 3; "
        "print(json.dumps(t.run_one(sys.argv[2], 2, 1, 1, sys.argv[3])))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(BENCH), config, str(fake_darts)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    r = json.loads(out.strip().splitlines()[-1])
    assert r["config"] == config and len(r["times"]) == 2


def test_a_checkout_that_is_not_darts_is_rejected(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH / "train_step.py"), "--reference-root", f"darts={tmp_path}"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "expected a checkout of github.com/quark0/darts" in proc.stderr


def _ours(batch: int) -> dict:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import train_step as t; "
        f"t.C, t.LAYERS, t.BATCH = 4, 3, {batch}; "
        "print(json.dumps(t.run_one('ours', 1, 0, 1)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(BENCH)], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_our_step_carries_its_flop_count_which_grows_with_the_batch():
    small, large = _ours(2), _ours(4)
    assert small["step_gflop"] > 0
    # the convolutions and products scale with the batch (the classifier's too)
    assert large["step_gflop"] == pytest.approx(2 * small["step_gflop"], rel=1e-6)
