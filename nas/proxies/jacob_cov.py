"""jacob_cov: the correlation of input Jacobians over a batch (NASWOT v1, Mellor et al. 2020).

Zero-cost proxy (``nas.proxies``), as SamsungLabs/zero-cost-nas ``measures/jacob_cov.py``
computes it: J = d(sum of logits)/dx per image (batch 64, BN in batch-statistics mode),
C = the correlation matrix of the rows of J, v its eigenvalues, score
``-sum(log(v + k) + 1/(v + k))`` with k = 1e-5. A failure gives NaN, as in the reference (the
correlation tables omit NaN). C is symmetric, so its eigenvalues come from ``eigvalsh`` (real,
the values ``np.linalg.eig`` returns up to rounding).
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

from nas.proxies.base import PROXIES, Proxy, Scorable
from nas.proxies.gradients import GradientPass, gradient_pass

K = 1e-5


def jacobian_score(jacob: np.ndarray) -> float:
    """``-sum(log(v + k) + 1/(v + k))`` of the eigenvalues of corrcoef(rows of ``jacob``)."""
    with np.errstate(all="ignore"):
        corrs = np.corrcoef(jacob)
        if not np.all(np.isfinite(corrs)):
            return float("nan")
        v = np.linalg.eigvalsh(corrs)
        return float(-np.sum(np.log(v + K) + 1.0 / (v + K)))


@PROXIES.register("jacob_cov")
class JacobCov(Proxy):
    name = "jacob_cov"
    shared_pass = "gradients"

    def score(self, net: Scorable, x: Tensor, y: Tensor | None) -> float:
        return self.from_pass(gradient_pass(net, x, y, proxy=self.name, jacobian=True))

    @staticmethod
    def from_pass(p: GradientPass) -> float:
        assert p.input_jacobian is not None
        j = p.input_jacobian
        return jacobian_score(j.reshape(j.shape[0], -1).double().cpu().numpy())
