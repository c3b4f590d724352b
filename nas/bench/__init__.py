"""nas.bench: NAS-Bench-201 lookup, the last stage of the pipeline.

Dong & Yang, "NAS-Bench-201", ICLR 2020. ``NB201()`` answers from the real results of all
15,625 cells embedded in the package (read on the first query; importing this package reads
nothing and imports neither numpy nor torch); ``NB201(path=...)`` from a file converted by
``nas-bench convert`` or an official ``.pth``. ``search_log_entry`` / ``format_result_line``
are what an NB201 search logs every epoch and prints at the end (keys under
``SEARCH_LOG_PREFIX``). Which genotypes it holds (``is_benchmark_cell``) and its space
(``BENCHMARK_SPACE``) are answered here, so that the stages that look a genotype up name no
space family.
"""

from nas.bench.layout import BENCHMARK_SPACE
from nas.bench.nb201 import (
    DATASETS,
    HPS,
    NB201,
    NUM_CELLS,
    SPLIT_ALIASES,
    BestCell,
    is_benchmark_cell,
)
from nas.bench.official import convert_official
from nas.bench.search_log import (
    SEARCH_LOG_KEYS,
    SEARCH_LOG_PREFIX,
    format_result_line,
    search_log_entry,
)

__all__ = [
    "BENCHMARK_SPACE",
    "DATASETS",
    "HPS",
    "NB201",
    "NUM_CELLS",
    "SEARCH_LOG_KEYS",
    "SEARCH_LOG_PREFIX",
    "SPLIT_ALIASES",
    "BestCell",
    "convert_official",
    "format_result_line",
    "is_benchmark_cell",
    "search_log_entry",
]
