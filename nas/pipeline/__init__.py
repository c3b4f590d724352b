"""nas.pipeline: the runs that drive the stages, above all of them.

``run_search`` (``nas.pipeline.search``) drives a search strategy (``nas.strategies``) over the
search data and then a selector (``nas.selection``); it is the only module that knows both,
so neither stage imports the other's run, and nothing below imports this package. The
retraining run lives with its stage (``nas.training.loop``): it needs only a genotype.
"""

from nas.pipeline.search import SearchError, SearchResult, SearchRun, run_search

__all__ = ["SearchError", "SearchResult", "SearchRun", "run_search"]
