"""pt_selection.py --reference-root: a fake darts-pt checkout (sota/cnn + nasbench201 layout,
an un-importable train_search.py whose infer() is loaded alone), run in a fresh process."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from experiments.benchmarks import pt_selection

BENCH = Path(pt_selection.__file__).parent

FAKE_DARTS_PT = {
    "nasbench201/utils.py": """
        class AvgrageMeter(object):
          def __init__(self):
            self.sum, self.cnt, self.avg = 0, 0, 0
          def update(self, val, n=1):
            self.sum += val * n; self.cnt += n; self.avg = self.sum / self.cnt

        def accuracy(output, target, topk=(1,)):
          _, pred = output.topk(max(topk), 1, True, True)
          correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
          return [correct[:k].view(-1).float().sum(0).mul_(100.0 / target.size(0)) for k in topk]
        """,
    "sota/cnn/spaces.py": "spaces_dict = {'s5': ['none', 'skip_connect']}\n",
    "sota/cnn/model_search_darts_proj.py": """
        import os, sys
        import torch
        import torch.nn as nn
        sys.path.insert(0, '../../')
        from nasbench201.utils import accuracy

        class DartsNetworkProj(nn.Module):
          def __init__(self, C, num_classes, layers, criterion, primitives, args):
            super(DartsNetworkProj, self).__init__()
            with open(os.environ['FAKE_REF_LOG'], 'a') as f:
              f.write('%s %d %d\\n' % (os.getcwd(), C, layers))
            self._criterion = criterion
            self.num_edges, self.num_ops = 2, len(primitives)
            self.nid2eids = {0: [0, 1]}
            self.conv = nn.Conv2d(3, num_classes, 3, padding=1)
            self.projected = []

          def forward(self, x, weights_dict=None):
            return self.conv(x).mean((2, 3))

          def project_op(self, eid, opid, cell_type):
            self.projected.append(('op', eid, opid, cell_type))

          def project_edge(self, nid, eids, cell_type):
            self.projected.append(('edge', nid, cell_type))
            with open(os.environ['FAKE_REF_LOG'], 'a') as f:
              f.write('%r\\n' % (self.projected,))
        """,
    "sota/cnn/projection.py": """
        import sys
        sys.path.insert(0, '../../')
        import nasbench201.utils as ig_utils

        def project_op(model, proj_queue, args, infer, cell_type, selected_eid=None):
          accs = [infer(proj_queue, model, log=False, _eval=False, weights_dict={})[0]
                  for opid in range(model.num_ops)]
          return len(model.projected) // 2, accs.index(max(accs))

        def project_edge(model, proj_queue, args, infer, cell_type):
          infer(proj_queue, model, log=False, _eval=False, weights_dict={})
          return 0, [0, 1]
        """,
    "sota/cnn/train_search.py": """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument('--method', required=True)
        args = parser.parse_args()

        def infer(valid_queue, model, log=True, _eval=True, weights_dict=None):
          top1 = ig_utils.AvgrageMeter()
          model.eval() if _eval else model.train()
          with torch.no_grad():
            for step, (input, target) in enumerate(valid_queue):
              input = input.cuda()
              target = target.cuda(async=True)
              logits = model(input, weights_dict=weights_dict)
              prec1, = ig_utils.accuracy(logits, target, topk=(1,))
              top1.update(prec1.data[0], input.size(0))
              if args.fast:
                break
          return top1.avg, 0.0
        """,
}


def test_reference_projections_run_from_a_fake_checkout(tmp_path):
    root = tmp_path / "darts-pt"
    for rel, text in FAKE_DARTS_PT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    log = tmp_path / "log"
    cmd = [sys.executable, str(BENCH / "pt_selection.py"), "--reference-child", "full", "normal"]
    cmd += ["--child-root", str(root), "--child-nhwc", "1", "--num-val-batches", "2"]
    env = {**os.environ, "FAKE_REF_LOG": str(log), "PYTHONPATH": os.getcwd()}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["seconds"] > 0
    lines = log.read_text().splitlines()
    assert lines[0] == f"{root / 'sota' / 'cnn'} 16 8"
    # every edge's op projection for both cell types, then every node's topology projection
    decisions = eval(lines[-1])
    assert [d[0] for d in decisions] == ["op"] * 4 + ["edge"] * 2
    assert [d[-1] for d in decisions] == ["normal", "reduce"] * 3


@pytest.mark.slow
def test_our_full_selection_runs_with_the_selection_context_it_needs():
    # the benchmark's stand-in for nas-search's selection context must offer what DARTS-PT
    # calls (stop_point, progress, ...): a full selection at a tiny size, every projection
    result = pt_selection.run_child("full", True, 1, "normal", threads=1, C=4, layers=3)
    assert result["seconds"] > 0 and result["peak_rss_mib"] > 0


@pytest.mark.slow
def test_our_full_selection_runs_batched_in_nchw():
    # the --batch-candidates rows' child: candidates as one batch, NCHW
    result = pt_selection.run_child(
        "full", True, 1, "normal", threads=1, C=4, layers=3, batched=True, channels_last=False
    )
    assert result["seconds"] > 0 and result["peak_rss_mib"] > 0


@pytest.mark.slow
def test_our_flop_count_is_of_the_evaluations_run():
    # without prefix reuse every candidate recomputes the cells before the first reduction
    # cell, so the count of one reduce-edge projection grows; the time is not what is tested
    kw = dict(threads=1, C=4, layers=3, flops=True)
    reuse = pt_selection.run_child("op", True, 1, "reduce", **kw)
    again = pt_selection.run_child("op", True, 1, "reduce", **kw)
    no_reuse = pt_selection.run_child("op", False, 1, "reduce", **kw)
    assert reuse["gflop"] > 0 and again["gflop"] == reuse["gflop"]
    assert no_reuse["gflop"] > 1.2 * reuse["gflop"]
