"""nas.hardware: latency tables measured on the user's device, cost objectives, budgets.

Hardware-aware differentiable NAS (ProxylessNAS, Cai et al., ICLR 2019; FBNet, Wu et al., CVPR
2019; NNI's profiler penalties): ``parts`` cuts a discrete network into the pieces a latency
table holds, ``profiler`` measures them (``lut`` imports a reference lookup table of them),
``table`` stores them keyed by device and software, ``cost`` turns a table into the expected
cost of a supernet's mixing weights (a term of the architecture loss) and into
budget-constrained selection.
"""

from nas.hardware.cost import CostModel, CostObjective, budget_argmax_genotype
from nas.hardware.lut import import_lookup_table
from nas.hardware.parts import NetworkLayout, Part, network_layout
from nas.hardware.table import LatencyTable, environment, load_table

__all__ = [
    "CostModel",
    "CostObjective",
    "LatencyTable",
    "NetworkLayout",
    "Part",
    "budget_argmax_genotype",
    "environment",
    "import_lookup_table",
    "load_table",
    "network_layout",
]
