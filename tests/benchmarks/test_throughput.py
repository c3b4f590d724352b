"""The throughput figure of search_step.py: FLOPs counted by torch's formulas (forward and
backward, through ``autograd.grad`` too) and a nominal peak reckoned from /proc/cpuinfo."""

import torch

from experiments.benchmarks import throughput


def test_step_flops_counts_forward_and_backward_through_autograd_grad():
    lin = torch.nn.Linear(16, 8, bias=False)
    x = torch.randn(4, 16, requires_grad=True)

    def step() -> None:
        y = lin(x).sum()
        torch.autograd.grad(y, [x, lin.weight])  # as an architecture step takes its gradient

    # forward 2*4*16*8, and two products of the same size backward (input and weight gradient)
    assert throughput.step_flops(step) == 3 * 2 * 4 * 16 * 8


def test_nominal_peak_is_reckoned_or_explained():
    peak, how = throughput.nominal_peak_gflops(2)
    assert (peak is None and "--peak-gflops" in how) or (peak > 0 and "FLOP/cycle" in how)
