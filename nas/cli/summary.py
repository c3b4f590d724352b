"""``nas-summary``: build a discrete network from a genotype and print what it costs.

``nas-summary DARTS_V2`` builds the published DARTS_V2 cell into ``NetworkCIFAR`` (C=36, 20
layers, 10 classes, as in the DARTS paper) and prints its parameters and multiply-adds;
``--network imagenet`` builds ``NetworkImageNet`` (C=48, 14 layers, 1000 classes); an NB201
arch string or benchmark index builds NAS-Bench-201's ``TinyNetwork`` (C=16, N=5).
"""

from __future__ import annotations

import argparse
import sys

from nas.cli.errors import one_line_errors
from nas.summary import summarize
from search_spaces.families import family_of
from search_spaces.nb201 import index_to_arch
from search_spaces.published import resolve_genotype


@one_line_errors("nas-summary", (ValueError,))
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nas-summary", description=__doc__.splitlines()[0])
    parser.add_argument(
        "genotype", help="published name, genotype text, NB201 arch string or index"
    )
    parser.add_argument("--network", choices=["cifar", "imagenet"], default="cifar")
    parser.add_argument("--C", type=int, default=None, help="initial channels")
    parser.add_argument(
        "--layers", type=int, default=None, help="cells (DARTS) / cells per stage N (NB201)"
    )
    parser.add_argument("--num-classes", type=int, default=None)
    parser.add_argument("--no-auxiliary", action="store_true")
    args = parser.parse_args(argv)
    spec = args.genotype.strip()
    genotype = resolve_genotype(index_to_arch(int(spec)) if spec.isdigit() else spec)
    family = family_of(genotype)
    imagenet = args.network == "imagenet" and family.imagenet_size is not None
    C, layers = family.imagenet_size if imagenet and family.imagenet_size else family.paper_size
    model, net = family.network(
        genotype,
        C=args.C or C,
        layers=args.layers or layers,
        num_classes=args.num_classes or (1000 if imagenet else 10),
        image_size=224 if imagenet else 32,
        auxiliary=not args.no_auxiliary,
    )
    input_size, kind = net.input_size, net.family
    print(f"genotype: {genotype}")
    print(f"{kind} on {input_size[1]}x{input_size[2]} input: {summarize(model, input_size)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
