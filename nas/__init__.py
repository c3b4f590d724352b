"""nas: the search, selection, training and benchmark stages of the toolkit.

Pipeline: ``search_spaces`` (what is searched) -> ``nas.supernet`` -> ``nas.search`` ->
``nas.selection`` -> genotype -> ``nas.train`` -> ``nas.bench``.
"""

__version__ = "0.1.0"
