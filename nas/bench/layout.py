"""What a NAS-Bench-201 table holds: its cells, data sets, schedules, and the embedded copy.

Last stage of the pipeline (``nas.bench``; Dong & Yang, ICLR 2020). The constants both the
reader (``nas.bench.nb201``) and the converter of official files (``nas.bench.official``) need,
kept below both so that neither imports the other for them.
"""

from __future__ import annotations

from pathlib import Path

from nas.bench.container import Container

EMBEDDED_FILE = Path(__file__).resolve().parent / "embedded" / "nb201.nbt"
BENCHMARK_SPACE = "nb201"  # the search space whose cells the benchmark trained
NUM_CELLS = 15625
DATASETS = ("cifar10-valid", "cifar10", "cifar100", "ImageNet16-120")
HPS = ("200", "12")
SEED_SETS = ("nats",)
FORMATS = ("nb201-table", "nb201-curves")
# The papers' "valid" / "test" of each dataset (as the official API's remap, minus its silent
# switch from cifar10 to cifar10-valid for "valid").
SPLIT_ALIASES: dict[str, dict[str, str]] = {
    "cifar10-valid": {"valid": "x-valid", "test": "ori-test"},
    "cifar10": {"test": "ori-test"},
    "cifar100": {"valid": "x-valid", "test": "x-test"},
    "ImageNet16-120": {"valid": "x-valid", "test": "x-test"},
}


def embedded_archs() -> list[str]:
    """The official arch string of every NB201 index, from the embedded table."""
    return Container(EMBEDDED_FILE, name="the embedded NB201 table").texts("arch")
