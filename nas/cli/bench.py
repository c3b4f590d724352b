"""``nas-bench``: NAS-Bench-201 lookups from the command line.

Last stage of the pipeline (``nas.bench``; Dong & Yang, NAS-Bench-201, ICLR 2020).

* ``nas-bench query '<arch string or index>'``: every dataset's accuracies and parameters;
* ``nas-bench best --dataset cifar100 [--split test]``: the best cell of a dataset / split;
* ``nas-bench convert <official .pth> <out .nbt>``: an official file to the compact format.

Numbers are 200-epoch seed means unless ``--hp 12``; ``--file`` reads a converted or official
file instead of the embedded table. Bad input prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import math
import sys

from nas.bench.nb201 import DATASETS, NB201, canonical_hp
from nas.bench.official import convert_official
from nas.cli.errors import one_line_errors

_SPLIT_ORDER = ("train", "x-valid", "x-test", "ori-test")


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.2f}"


def _query(bench: NB201, arch: str, hp: str) -> list[str]:
    spec = arch.strip()
    index = bench.index(int(spec) if spec.lstrip("-").isdigit() else arch)
    datasets = bench.datasets(hp=hp)
    splits = [s for s in _SPLIT_ORDER if any(s in bench.splits(d, hp=hp) for d in datasets)]
    lines = [
        f"NB201 cell {index}  {bench.arch(index)}",
        f"top-1 accuracy (%) after {hp} epochs, mean over seeds; '-': split not in the benchmark",
        f"{'dataset':<16}" + "".join(f"{s:>10}" for s in splits) + f"{'params':>12}",
    ]
    for ds in datasets:
        have = bench.splits(ds, hp=hp)
        cells = [
            _fmt(bench.query(index, dataset=ds, split=s, hp=hp)) if s in have else "-"
            for s in splits
        ]
        try:
            params = f"{bench.params(index, dataset=ds):,}"
        except ValueError:
            params = "-"
        lines.append(f"{ds:<16}" + "".join(f"{c:>10}" for c in cells) + f"{params:>12}")
    ranks = [
        f"{ds} {bench.rank(index, dataset=ds, split='test', hp=hp)}"
        for ds in datasets
        if ds != "cifar10-valid"
    ]
    lines.append(f"rank by test accuracy (1 = best of {len(bench)}): {', '.join(ranks)}")
    return lines


def _best(bench: NB201, dataset: str, split: str, hp: str) -> list[str]:
    best = bench.best(dataset=dataset, split=split, hp=hp)
    lines = [
        f"best {best.dataset} {best.split} ({best.hp}-epoch mean): {best.accuracy:.2f} %  "
        f"NB201 cell {best.index}  {best.arch}"
    ]
    if len(best.ties) > 1:
        lines.append(f"tied with: {', '.join(str(i) for i in best.ties[1:])}")
    return lines


# OSError: a benchmark file that cannot be read or written
@one_line_errors("nas-bench", (ValueError, OSError))
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nas-bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    query = sub.add_parser("query", help="every dataset's accuracies and parameters of a cell")
    query.add_argument("arch", help="NB201 arch string '|op~0|+|op~0|op~1|+|...|' or index")
    best = sub.add_parser("best", help="the best cell of a dataset / split")
    best.add_argument("--dataset", default="cifar10", help=f"one of {', '.join(DATASETS)}")
    best.add_argument("--split", default="test", help="x-valid, x-test, ori-test, valid, test")
    for p in (query, best):
        p.add_argument("--hp", default="200", help="training schedule: 200 (default) or 12")
        p.add_argument("--file", default=None, help="converted .nbt or official .pth")
    convert = sub.add_parser("convert", help="official .pth -> compact .nbt with all curves")
    convert.add_argument("official", help="NAS-Bench-201-v1_0-e61699.pth or -v1_1-096897.pth")
    convert.add_argument("out", help="output .nbt file")
    convert.add_argument(
        "--trust-pickle",
        action="store_true",
        help="read the official file with Python's full unpickler, which it needs (it can run "
        "code: only for the file the authors published)",
    )
    args = parser.parse_args(argv)
    if args.command == "convert":
        out = convert_official(args.official, args.out, trust_pickle=args.trust_pickle)
        bench = NB201(path=out)
        lines = [f"wrote {out}: {len(bench)} cells, datasets {', '.join(bench.datasets())}"]
    else:
        bench = NB201(path=args.file)
        hp = canonical_hp(args.hp)
        if args.command == "query":
            lines = _query(bench, args.arch, hp)
        else:
            lines = _best(bench, args.dataset, args.split, hp)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
