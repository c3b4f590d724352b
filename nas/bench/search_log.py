"""What an NB201 search logs: the benchmark accuracy of the current genotype, every epoch.

Last stage of the pipeline (``nas.bench``), called by the search loop. The papers' NB201 search
curves (DARTS-PT, DrNAS: Dong & Yang, ICLR 2020, Table 5 layout) plot, per epoch, the genotype's
200-epoch mean accuracy: "CIFAR-10 valid" = ``cifar10-valid`` / ``x-valid`` and "CIFAR-10 test"
= ``cifar10`` / ``ori-test`` (two different training runs), CIFAR-100 and ImageNet16-120
``x-valid`` / ``x-test``. ``SEARCH_LOG_KEYS`` is that mapping, under flat TensorBoard-style keys.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from nas.bench.nb201 import NB201

if TYPE_CHECKING:
    from nas.bench.nb201 import Arch

SEARCH_LOG_PREFIX = "nb201/"  # every key the search logs from the benchmark starts so
SEARCH_LOG_KEYS: dict[str, tuple[str, str]] = {
    f"{SEARCH_LOG_PREFIX}cifar10/valid": ("cifar10-valid", "x-valid"),
    f"{SEARCH_LOG_PREFIX}cifar10/test": ("cifar10", "ori-test"),
    f"{SEARCH_LOG_PREFIX}cifar100/valid": ("cifar100", "x-valid"),
    f"{SEARCH_LOG_PREFIX}cifar100/test": ("cifar100", "x-test"),
    f"{SEARCH_LOG_PREFIX}ImageNet16-120/valid": ("ImageNet16-120", "x-valid"),
    f"{SEARCH_LOG_PREFIX}ImageNet16-120/test": ("ImageNet16-120", "x-test"),
}


@cache
def default_bench() -> NB201:
    """The process-wide embedded table (loaded on its first query)."""
    return NB201()


def search_log_entry(genotype: Arch, *, bench: NB201 | None = None) -> dict[str, float]:
    """The genotype's 200-epoch mean accuracies (%) under ``SEARCH_LOG_KEYS``'s flat keys."""
    b = default_bench() if bench is None else bench
    return {
        key: b.query(genotype, dataset=dataset, split=split, hp="200")
        for key, (dataset, split) in SEARCH_LOG_KEYS.items()
    }


def format_result_line(genotype: Arch, *, bench: NB201 | None = None) -> str:
    """One human line: 'NB201 cell 1835: CIFAR-10 valid 39.77 test 54.30 | CIFAR-100 ...'."""
    b = default_bench() if bench is None else bench
    e = search_log_entry(genotype, bench=b)
    groups = [
        f"{label} valid {e[f'{SEARCH_LOG_PREFIX}{key}/valid']:.2f} "
        f"test {e[f'{SEARCH_LOG_PREFIX}{key}/test']:.2f}"
        for label, key in (
            ("CIFAR-10", "cifar10"),
            ("CIFAR-100", "cifar100"),
            ("ImageNet16-120", "ImageNet16-120"),
        )
    ]
    return (
        f"NB201 cell {b.index(genotype)}: {' | '.join(groups)} "
        "(top-1 %, mean of the 200-epoch runs)"
    )


__all__ = ["SEARCH_LOG_KEYS", "default_bench", "format_result_line", "search_log_entry"]
