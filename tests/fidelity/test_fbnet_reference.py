"""FBNet's relaxed forward beside the standard Gumbel-softmax, at float64.

FBNet's search code was not released, so the reference is the formula itself as PyTorch ships
it: ``torch.nn.functional.gumbel_softmax(logits, tau, hard=False)`` (Jang et al., ICLR 2017),
which draws its noise ``-log(Exp(1))`` from the global generator. Ours draws the same noise,
in the same way, from the step's generator: seeding the global generator with the seed of the
step's draw makes the two noises equal, so the samples (every cell type, in order), their
gradient with respect to theta, and the supernet's output and architecture gradient under
them are compared without a tolerance beyond float64 rounding. Also the paper's eq. 5 written
out and its temperature schedule (tau0 = 5.0, exp(-0.045) per epoch).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn import functional as Fn

from experiments.fidelity import common as F
from nas.strategies import SearchContext
from nas.strategies.fbnet import FBNet
from nas.supernet import build_supernet

TOL = 1e-12


def _strategy(space: str, epochs: int = 10) -> FBNet:
    torch.manual_seed(0)
    net = build_supernet(space, C=4, layers=1 if space == "nb201" else 3, num_classes=10)
    net.double()
    s = FBNet()
    s.prepare_supernet(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.025)
    s.attach(SearchContext(net, opt, grad_clip=5.0, epochs=epochs),
             generator=torch.Generator().manual_seed(0))  # fmt: skip
    with torch.no_grad():
        for p in s.arch_params.values():
            p.copy_(torch.randn(p.shape, dtype=p.dtype, generator=torch.Generator().manual_seed(3)))
    return s


def _reference_samples(s: FBNet, seed: int) -> dict[str, torch.Tensor]:
    """``F.gumbel_softmax`` of every cell type's theta, in order, with the global generator
    seeded as our step's generator is."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return {ct: Fn.gumbel_softmax(theta, tau=s.tau, hard=False)
                for ct, theta in s.arch_params.items()}  # fmt: skip


@pytest.mark.parametrize("space", ["nb201", "darts"])
@pytest.mark.parametrize("epoch", [0, 7])
def test_relaxed_sample_and_its_gradient_equal_torchs_gumbel_softmax(space, epoch):
    with F.float64():
        s = _strategy(space)
        for e in range(epoch):
            s.on_epoch_end(e)
        assert s.tau == pytest.approx(5.0 * math.exp(-0.045 * epoch), rel=1e-12)
        s.begin_step(11)
        seed = s.draw_seed()
        s.begin_step(11)
        ours = s.arch_weights(sample=True)
        ref = _reference_samples(s, seed)
        upstream = {ct: torch.randn(w.shape, dtype=w.dtype) for ct, w in ours.items()}
        params = list(s.arch_params.values())
        g_ours = torch.autograd.grad(sum((ours[ct] * upstream[ct]).sum() for ct in ours), params)
        g_ref = torch.autograd.grad(sum((ref[ct] * upstream[ct]).sum() for ct in ref), params)
    for ct in ours:
        assert ours[ct].dtype == torch.float64
        assert F.max_rel_diff(ours[ct], ref[ct]) < TOL
    assert F.max_rel_diff(list(g_ours), list(g_ref)) < TOL


def test_architecture_gradient_through_the_supernet_equals_the_reference_sample():
    """The supernet's validation loss under our sample and under torch's (same noise): the
    loss and theta's gradient (the first-order architecture gradient FBNet takes)."""
    with F.float64():
        s = _strategy("nb201")
        g = torch.Generator().manual_seed(5)
        x, y = torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 10, (4,), generator=g)
        s.supernet.eval()
        s.begin_step(2)
        seed = s.draw_seed()
        s.begin_step(2)
        out = {}
        for name, weights in (("ours", s.arch_weights(sample=True)),
                              ("ref", _reference_samples(s, seed))):  # fmt: skip
            loss = Fn.cross_entropy(s.supernet(x, weights), y)
            out[name] = (loss, torch.autograd.grad(loss, list(s.arch_params.values())))
    assert F.max_rel_diff(out["ours"][0], out["ref"][0]) < TOL
    assert F.max_rel_diff(list(out["ours"][1]), list(out["ref"][1])) < TOL


def test_the_papers_equation_written_out():
    """Eq. 5: ``m_i = exp((theta_i + g_i) / tau) / sum_j exp((theta_j + g_j) / tau)`` with
    ``g_i = -log(-log(u_i))``, u uniform: our noise is that of ``u = exp(-E)``."""
    with F.float64():
        s = _strategy("nb201")
        s.begin_step(0)
        seed = s.draw_seed()
        s.begin_step(0)
        ours = s.arch_weights(sample=True)["cell"]
        e = torch.empty(6, 5).exponential_(generator=torch.Generator().manual_seed(seed))
        u = torch.exp(-e)
        gnoise = -torch.log(-torch.log(u))
        theta = s.arch_params["cell"].detach()
        num = torch.exp((theta + gnoise) / 5.0)
        expected = num / num.sum(-1, keepdim=True)
    assert F.max_rel_diff(ours, expected) < 1e-10
