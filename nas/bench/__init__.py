"""nas.bench: NAS-Bench-201 lookup, the last stage of the pipeline.

Dong & Yang, "NAS-Bench-201", ICLR 2020. ``NB201()`` answers from the real results of all
15,625 cells embedded in the package (read on the first query; importing this package reads
nothing and imports neither numpy nor torch); ``NB201(path=...)`` from a file converted by
``nas-bench convert`` or an official ``.pth``. ``search_log_entry`` / ``format_result_line``
are what an NB201 search logs every epoch and prints at the end.
"""

from nas.bench.nb201 import DATASETS, HPS, NB201, NUM_CELLS, SPLIT_ALIASES, BestCell
from nas.bench.official import convert_official
from nas.bench.search_log import SEARCH_LOG_KEYS, format_result_line, search_log_entry

__all__ = [
    "DATASETS",
    "HPS",
    "NB201",
    "NUM_CELLS",
    "SEARCH_LOG_KEYS",
    "SPLIT_ALIASES",
    "BestCell",
    "convert_official",
    "format_result_line",
    "search_log_entry",
]
