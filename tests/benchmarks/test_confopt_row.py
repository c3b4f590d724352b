"""search_step.py's confopt rows (automl/ConfigurableOptimizer as a reference): a fake checkout
in confopt's layout (``src/confopt``; the package ``__init__`` files the step must not run raise)
built in fresh processes for each row; beside darts-pt in one side-by-side table; and, with
``NAS_REFERENCE_ROOTS="confopt=/path/to/checkout"`` (and confopt's step dependencies ``thop``,
``reinmax`` and ``wandb`` installed), the real checkout's rows at a tiny size."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from experiments.benchmarks import search_step
from experiments.benchmarks.reference_runs import parse_roots
from tests.benchmarks.test_side_by_side import BENCH, run_bench, write_tree

# the modules confopt's step imports, in its layout, logging what the step builds and calls
FAKE_CONFOPT = {
    "src/confopt/__init__.py": "",
    "src/confopt/searchspace/__init__.py": "raise ImportError('searchspace __init__ ran')\n",
    "src/confopt/train/__init__.py": "raise ImportError('train __init__ ran')\n",
    "src/confopt/train/configurable_trainer.py": "raise ImportError('trainer imported')\n",
    "src/confopt/log.py": """
        import os

        def log(*words):
            with open(os.environ['FAKE_REF_LOG'], 'a') as f:
                f.write(' '.join(str(w) for w in words) + '\\n')
        """,
    "src/confopt/searchspace/common.py": """
        import torch
        import torch.nn as nn
        from confopt.log import log

        class FakeSpace(nn.Module):
            def __init__(self, name, C, layers, k, num_ops):
                super().__init__()
                log('space', name, C, layers, k, num_ops)
                self.components = []
                self.sample = None
                self.conv = nn.Conv2d(3, C, 3, padding=1)
                self.classifier = nn.Linear(C, 10)
                self.alphas = nn.Parameter(1e-3 * torch.randn(6, num_ops))

            @property
            def arch_parameters(self):
                return [self.alphas]

            def model_weight_parameters(self):
                return [p for p in self.parameters() if p is not self.alphas]

            def new_step(self):
                for c in self.components:
                    c.new_step()

            def forward(self, x):
                w = self.sample(self.alphas)
                out = self.conv(x).mean((2, 3)) * w.sum()
                return out, self.classifier(out)
        """,
    "src/confopt/searchspace/darts/__init__.py": "",
    "src/confopt/searchspace/darts/core/__init__.py": "",
    "src/confopt/searchspace/darts/core/genotypes.py": """
        PRIMITIVES = ['none', 'max_pool_3x3', 'avg_pool_3x3', 'skip_connect', 'sep_conv_3x3',
                      'sep_conv_5x5', 'dil_conv_3x3', 'dil_conv_5x5']
        """,
    "src/confopt/searchspace/darts/supernet.py": """
        from confopt.searchspace.common import FakeSpace
        from confopt.log import log

        class DARTSSearchSpace(FakeSpace):
            def __init__(self, C, num_classes, layers, primitives, k):
                log('primitives', *primitives)
                super().__init__('darts', C, layers, k, len(primitives))
        """,
    "src/confopt/searchspace/nb201/__init__.py": "",
    "src/confopt/searchspace/nb201/supernet.py": """
        from confopt.searchspace.common import FakeSpace

        class NASBench201SearchSpace(FakeSpace):
            def __init__(self, C, N, num_classes, k):
                super().__init__('nb201', C, N, k, 5)
        """,
    "src/confopt/oneshot/__init__.py": "",
    "src/confopt/oneshot/archsampler/__init__.py": """
        import torch
        from confopt.log import log

        class _Sampler:
            def __init__(self, arch_parameters, sample_frequency):
                log('sampler', type(self).__name__, sample_frequency)
                self.steps = 0

            def new_step(self):
                self.steps += 1
                log('new_step', self.steps)

        class DARTSSampler(_Sampler):
            def sample(self, alpha):
                return torch.softmax(alpha, dim=-1)

        class DRNASSampler(_Sampler):
            def sample(self, alpha):
                return torch.distributions.Dirichlet(torch.nn.functional.elu(alpha) + 1).rsample()
        """,
    "src/confopt/oneshot/partial_connector.py": """
        from confopt.log import log

        class PartialConnector:
            def __init__(self, k):
                log('partial_connector', k)
        """,
    "src/confopt/train/search_space_handler.py": """
        from confopt.searchspace import DARTSSearchSpace  # the one name the step provides
        from confopt.log import log

        class SearchSpaceHandler:
            def __init__(self, sampler, partial_connector=None):
                self.sampler, self.partial_connector = sampler, partial_connector

            def adapt_search_space(self, space):
                log('adapt', type(space).__name__)
                space.components.append(self.sampler)

            def update_sample_function_from_sampler(self, space):
                space.sample = self.sampler.sample

            def add_reg_terms(self, space, loss):
                return loss

            def perturb_parameter(self, space):
                pass
        """,
}

TINY = ["--C", "4", "--layers", "2", "--batch", "4", "--steps", "2", "--warmup", "0"]


def run_confopt_child(root, name, log):
    args = ["--reference-child", name, "--child-root", str(root), "--child-reference", "confopt"]
    return run_bench([*args, "--channels-last", "false", *TINY], log)


@pytest.mark.parametrize(
    ("name", "space", "sampler", "k", "ops"),
    [
        ("nb201-darts1", "nb201", "DARTSSampler", 1, 5),
        ("nb201-drnas-k1", "nb201", "DRNASSampler", 1, 5),
        ("darts-darts1", "darts", "DARTSSampler", 1, 8),
        ("s5-drnas-k4-c16", "darts", "DRNASSampler", 4, 7),
    ],
)
def test_each_confopt_row_builds_its_step_in_a_fresh_process(
    tmp_path, name, space, sampler, k, ops
):
    root = write_tree(tmp_path / "confopt", FAKE_CONFOPT)
    log = tmp_path / "log"
    proc = run_confopt_child(root, name, log)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["reference"] == "confopt" and result["search_step_s"] > 0
    lines = log.read_text().splitlines()
    assert f"space {space} 4 2 {k} {ops}" in lines
    assert f"sampler {sampler} step" in lines
    assert ("partial_connector 4" in lines) == (k == 4)
    if space == "darts":  # the DARTS space with "none", S5 without it
        assert ("none" in next(x for x in lines if x.startswith("primitives"))) == (ops == 8)
    # one new_step per search step (the trainer's component step), two steps taken
    assert [x for x in lines if x.startswith("new_step")] == ["new_step 1", "new_step 2"]
    assert not list(root.rglob("*.pyc"))


def test_confopt_has_no_second_order_row(tmp_path):
    root = write_tree(tmp_path / "confopt", FAKE_CONFOPT)
    cmd = [sys.executable, str(BENCH / "search_step.py"), "--reference-child", "darts-darts2"]
    cmd += ["--child-root", str(root), "--child-reference", "confopt", *TINY]
    assert search_step._child(cmd) == {
        "error": "--child-reference confopt: expected one of darts for darts-darts2"
    }
    assert parse_roots([f"confopt={root}"]) == {"confopt": str(root)}
    with pytest.raises(SystemExit, match="no src/confopt/train/configurable_trainer.py"):
        parse_roots([f"confopt={tmp_path}"])


def test_confopt_runs_beside_the_paper_reference(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_child(cmd):
        calls.append(cmd)
        step = {"ours": 1.0, "darts-pt": 3.0, "confopt": 2.0}[_kind(cmd)]
        return {"search_step_s": step, "peak_rss_delta_mib": 50.0 * step}

    monkeypatch.setattr(search_step, "_child", fake_child)
    args = search_step.argparse.Namespace(
        only=["nb201-darts1"], steps=2, warmup=1, threads=2, rounds=2, channels_last="auto",
        reference_channels_last=False, C=None, layers=None, batch=None,
    )  # fmt: skip
    search_step.side_by_side(args, {"darts-pt": str(tmp_path / "a"), "confopt": str(tmp_path)})
    # each round ours and both references, in fresh processes, the order flipped every round
    order = ["ours", "darts-pt", "confopt"]
    assert [_kind(c) for c in calls] == order + order[::-1]
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "| reference (confopt) |" in line)
    # speed: confopt's median over ours; memory: ours over confopt's
    assert "| 2.00x | 0.50x |" in row


def _kind(cmd):
    if "--child" in cmd:
        return "ours"
    return cmd[cmd.index("--child-reference") + 1]


def _confopt_root():
    items = [i for i in os.environ.get("NAS_REFERENCE_ROOTS", "").split(",") if i.strip()]
    return dict(item.split("=", 1) for item in items).get("confopt")


@pytest.mark.parametrize(
    "name", ["nb201-darts1", "nb201-drnas-k1", "darts-darts1", "s5-drnas-k4-c16"]
)
def test_the_real_confopt_row_builds(tmp_path, name):
    root = _confopt_root()
    if root is None:
        pytest.skip("no confopt checkout given (NAS_REFERENCE_ROOTS=confopt=PATH)")
    missing = [m for m in ("thop", "reinmax", "wandb") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(
            f"confopt's step needs {' and '.join(missing)} (pip install thop reinmax wandb)"
        )
    proc = run_confopt_child(root, name, tmp_path / "log")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["reference"] == "confopt" and result["search_step_s"] > 0


def test_profile_step_profiles_the_confopt_step_and_refuses_two_references(tmp_path):
    from experiments.benchmarks import profile_step

    root = write_tree(tmp_path / "confopt", FAKE_CONFOPT)
    env = {**os.environ, "FAKE_REF_LOG": str(tmp_path / "log"), "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, profile_step.__file__, "--only", "nb201-drnas-k1", *TINY[:6]]
    cmd += ["--steps", "1", "--warmup", "0", "--threads", "1"]
    done = subprocess.run(
        [*cmd, "--reference-root", f"confopt={root}"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("nb201-drnas-k1, reference (confopt): 1 profiled steps")
    assert "sampler DRNASSampler step" in (tmp_path / "log").read_text()
    darts = write_tree(tmp_path / "drnas", {"DARTS-space/model_search.py": ""})
    both = [*cmd, "--reference-root", f"confopt={root}", f"drnas={darts}"]
    done = subprocess.run(both, capture_output=True, text=True, env=env)
    assert done.returncode != 0
    assert "profiles one reference: expected --reference-root drnas=PATH or confopt=PATH" in (
        done.stderr
    )
