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


def _conv_step(conv: torch.nn.Conv2d, x: torch.Tensor):
    def step() -> None:
        conv(x).sum().backward()

    return step


def test_a_grouped_convolution_backward_costs_what_its_forward_costs_per_gradient():
    x = torch.randn(2, 12, 8, 8, requires_grad=True)
    for groups in (1, 3, 12):  # plain, grouped, depthwise
        conv = torch.nn.Conv2d(12, 24, 3, padding=1, groups=groups, bias=False)
        forward = 2 * (2 * 24 * 8 * 8) * (12 // groups) * 9
        # forward, then the input and the weight gradient, each the forward's cost
        assert throughput.step_flops(_conv_step(conv, x)) == 3 * forward
    # only the weight gradient where the input needs none
    conv = torch.nn.Conv2d(12, 12, 3, padding=1, groups=12, bias=False)
    assert throughput.step_flops(_conv_step(conv, x.detach())) == 2 * (2 * (2 * 12 * 64) * 9)


def test_an_ungrouped_convolution_is_counted_as_torch_counts_it():
    from torch.utils.flop_counter import FlopCounterMode

    conv = torch.nn.Conv2d(6, 10, 5, stride=2, padding=2, bias=False)
    x = torch.randn(3, 6, 16, 16, requires_grad=True)
    with FlopCounterMode(display=False) as theirs:
        conv(x).sum().backward()
    assert throughput.step_flops(_conv_step(conv, x)) == theirs.get_total_flops()
