"""Weight entanglement: the ops of one kind at several kernel sizes share the largest's kernel.

Third stage of the pipeline (``nas.strategies``), a component. Sukthanker et al.,
"Weight-Entanglement Meets Gradient-Based Neural Architecture Search" (AutoML-Conf 2024), as
confopt implements it (automl/ConfigurableOptimizer, ``src/confopt/oneshot/weightentangler.py``:
``WeightEntangler``, switched on by the profiles' ``entangle_op_weights``), the toolkit's peer:
on every edge, the candidates that differ only in a kernel size (which ones is the space
family's knowledge: ``Family.op_kernel`` / ``entangle_groups``) share the largest op's weights,
a smaller kernel being the centre crop of the largest, and a group runs as one op on the
alpha-weighted sum of the crops (``nas.supernet.entangle``). Set on the supernet before the
weight optimiser is built (``prepare_supernet``), so the smaller ops' removed parameters are
never optimised; the architecture parameters, the derivation and the discrete networks are the
strategy's and the family's as without it (the genotype names the same ops).

A space with no such group on any edge (one conv kind at one size) is refused in one line,
as are the supernet options that compute ops outside the group's forward
(``fuse``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nas.strategies.components.base import Component
from nas.supernet.entangle import entangle_supernet
from search_spaces.families import family_of

if TYPE_CHECKING:
    from nas.supernet import Supernet


class WeightEntangle(Component):
    """Entangle the weights of the ops of one kind at several kernel sizes (no settings)."""

    name = "weight_entangle"

    def __init__(self) -> None:
        super().__init__()
        self.groups = 0

    def prepare_supernet(self, supernet: Supernet) -> None:
        space = supernet.space
        if supernet.fuse:
            raise ValueError(
                "component weight_entangle needs the supernet's fuse off (fused chains run "
                "every op on its own kernel); set fuse=false or drop weight_entangle"
            )
        self.groups = entangle_supernet(supernet, family_of(space).entangle_groups)
        if self.groups == 0:
            raise ValueError(
                f"component weight_entangle needs ops of one kind at several kernel sizes on an "
                f"edge (the family's op_kernel), and space {space.name} offers none; "
                "choose another space or drop weight_entangle"
            )

    def log_state(self) -> dict[str, Any]:
        return {}
