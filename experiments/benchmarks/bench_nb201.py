"""Benchmark of the NAS-Bench-201 lookup (``nas.bench.NB201``).

Figures: time from ``import nas.bench`` to the first answer in a fresh process (targets: under
0.5 s), time per query once loaded (under 50 us), resident memory (under 100 MB). Each fresh-
process figure is the median over ``--repeats`` new interpreters; per-query times are medians of
``--rounds`` rounds over ``--queries`` random cells. RSS is the process peak (``ru_maxrss``),
reported with the bare interpreter's peak for reference. These machines are shared and noisy:
compare medians, not single runs.

    python experiments/benchmarks/bench_nb201.py [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter: first query, then per-query timings, then the peak memory after
# every column has been touched (best / rank over all datasets and splits).
_CHILD = r"""
import json, random, resource, sys, time
t0 = time.perf_counter()
from nas.bench import NB201
bench = NB201()
best = "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|" \
    "nor_conv_1x1~2|"
value = bench.query(best, dataset="cifar10", split="test")
first = time.perf_counter() - t0
assert round(value, 2) == 94.37
rss_first = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
n, rounds = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(0)
indices = [rng.randrange(15625) for _ in range(n)]
archs = [bench.arch(i) for i in indices]
kinds = {"arch string": archs, "index": indices}
per_query = {}
for name, cells in kinds.items():
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for a in cells:
            bench.query(a, dataset="cifar100", split="test")
        samples.append((time.perf_counter() - t) / len(cells))
    per_query[name] = sorted(samples)[len(samples) // 2]
t = time.perf_counter()
for a in archs:
    bench.per_seed(a, dataset="cifar100", split="x-test")
per_query["per_seed"] = (time.perf_counter() - t) / n
t = time.perf_counter()
for ds in bench.datasets():
    for split in bench.splits(ds):
        bench.best(dataset=ds, split=split)
        bench.rank(archs[0], dataset=ds, split=split)
for hp in ("12",):
    for ds in bench.datasets(hp=hp):
        for split in bench.splits(ds, hp=hp):
            bench.best(dataset=ds, split=split, hp=hp)
all_columns = time.perf_counter() - t
rss_all = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
for a in archs[:200]:
    bench.rank(a, dataset="cifar100", split="x-test")
per_query["rank"] = (time.perf_counter() - t) / 200
print(json.dumps({
    "first_query_s": first, "rss_first_mib": rss_first, "rss_all_mib": rss_all,
    "all_columns_s": all_columns, "per_query_s": per_query,
    "torch_imported": "torch" in sys.modules, "numpy_imported": "numpy" in sys.modules,
}))
"""

# Genotype queries: the genotype module imports torch, so they are timed in their own process.
_CHILD_GENOTYPE = r"""
import json, random, sys, time
from search_spaces.genotype import parse_nb201_arch
from nas.bench import NB201
bench = NB201()
rng = random.Random(0)
genotypes = [parse_nb201_arch(bench.arch(rng.randrange(15625))) for _ in range(int(sys.argv[1]))]
samples = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    for g in genotypes:
        bench.query(g, dataset="cifar100", split="test")
    samples.append((time.perf_counter() - t) / len(genotypes))
print(json.dumps({"genotype": sorted(samples)[len(samples) // 2]}))
"""


def _child(code: str, *args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def _wall(*cmd: str) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, capture_output=True, check=True)
    return time.perf_counter() - t


def run(repeats: int, queries: int, rounds: int) -> dict:
    """All figures, as a dict (medians over ``repeats`` fresh processes)."""
    runs = [_child(_CHILD, str(queries), str(rounds)) for _ in range(repeats)]
    median = statistics.median
    bare_code = (
        "import json, resource\n"
        "print(json.dumps({'rss': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))"
    )
    bare = [_child(bare_code)["rss"] for _ in range(repeats)]
    cli = [_wall(sys.executable, "-m", "nas.cli.bench", "query", "1835") for _ in range(repeats)]
    startup = [_wall(sys.executable, "-c", "pass") for _ in range(repeats)]
    genotype = _child(_CHILD_GENOTYPE, str(queries), str(rounds))["genotype"]
    per_query = {k: median(r["per_query_s"][k] for r in runs) for k in runs[0]["per_query_s"]}
    per_query["NB201Genotype"] = genotype
    return {
        "first_query_s": median(r["first_query_s"] for r in runs),
        "first_query_s_range": [
            min(r["first_query_s"] for r in runs),
            max(r["first_query_s"] for r in runs),
        ],
        "interpreter_startup_s": median(startup),
        "cli_query_wall_s": median(cli),
        "per_query_s": per_query,
        "all_columns_s": median(r["all_columns_s"] for r in runs),
        "rss_first_query_mib": median(r["rss_first_mib"] for r in runs),
        "rss_all_columns_mib": median(r["rss_all_mib"] for r in runs),
        "rss_bare_interpreter_mib": median(bare),
        "torch_imported": any(r["torch_imported"] for r in runs),
        "numpy_imported": any(r["numpy_imported"] for r in runs),
        "embedded_file_mb": (REPO / "nas/bench/embedded/nb201.nbt").stat().st_size / 1e6,
        "repeats": repeats,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per figure")
    parser.add_argument("--queries", type=int, default=2000, help="random cells per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    r = run(args.repeats, args.queries, args.rounds)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    ms, us = 1e3, 1e6
    lo, hi = r["first_query_s_range"]
    rows = [
        (
            "import + first query (fresh process)",
            f"{r['first_query_s'] * ms:.0f} ms ({lo * ms:.0f}-{hi * ms:.0f})",
            "< 500 ms",
        ),
        (
            f"`nas-bench query 1835`, wall (interpreter start: "
            f"{r['interpreter_startup_s'] * ms:.0f} ms)",
            f"{r['cli_query_wall_s'] * ms:.0f} ms",
            "",
        ),
    ]
    labels = {
        "arch string": "`query(arch string)`",
        "index": "`query(index)`",
        "NB201Genotype": "`query(NB201Genotype)`",
        "per_seed": "`per_seed(arch string)`",
        "rank": "`rank(arch string)`",
    }
    for kind, seconds in r["per_query_s"].items():
        target = "< 50 us" if kind.startswith(("arch", "index", "NB201")) else ""
        rows.append((labels[kind], f"{seconds * us:.2f} us", target))
    rows += [
        ("best + rank over every column, first time", f"{r['all_columns_s'] * ms:.0f} ms", ""),
        ("peak RSS after the first query", f"{r['rss_first_query_mib']:.1f} MiB", "< 100 MB"),
        ("peak RSS after every column", f"{r['rss_all_columns_mib']:.1f} MiB", "< 100 MB"),
        ("peak RSS of a bare interpreter", f"{r['rss_bare_interpreter_mib']:.1f} MiB", ""),
        ("embedded table", f"{r['embedded_file_mb']:.2f} MB", "< 3 MB"),
    ]
    print(f"NAS-Bench-201 lookup, median of {r['repeats']} fresh processes")
    print("| figure | value | target |\n| --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print(f"torch imported: {r['torch_imported']}, numpy imported: {r['numpy_imported']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
