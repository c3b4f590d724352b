"""nas.selection: selectors that turn a trained supernet into a genotype."""

from nas.selection.argmax import Argmax, argmax_genotype
from nas.selection.base import Selector
from nas.selection.budget import BudgetArgmax
from nas.selection.gdas_topk import GDASTopK
from nas.selection.perturbation import PerturbationSelection, evaluate_variants
from nas.selection.rsws import RandomWeightSharingSelection
from nas.selection.threshold import Threshold
from nas.selection.zero_cost import ZeroCostSelection

__all__ = [
    "Argmax",
    "BudgetArgmax",
    "GDASTopK",
    "PerturbationSelection",
    "RandomWeightSharingSelection",
    "Selector",
    "Threshold",
    "argmax_genotype",
    "evaluate_variants",
    "ZeroCostSelection",
]
