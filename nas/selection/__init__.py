"""nas.selection: selectors that turn a trained supernet into a genotype."""

from nas.selection.argmax import Argmax, argmax_genotype
from nas.selection.base import SELECTORS, Selector

__all__ = ["SELECTORS", "Argmax", "Selector", "argmax_genotype"]
