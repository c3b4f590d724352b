"""``nas-summary``: build a discrete network from a genotype and print what it costs.

``nas-summary DARTS_V2`` builds the published DARTS_V2 cell into ``NetworkCIFAR`` (C=36, 20
layers, 10 classes, as in the DARTS paper) and prints its parameters and multiply-adds;
``--network imagenet`` builds ``NetworkImageNet`` (C=48, 14 layers, 1000 classes); an NB201
arch string or benchmark index builds NAS-Bench-201's ``TinyNetwork`` (C=16, N=5); a search's
run folder or ``genotype.json`` builds the cell it found (the forms ``nas-train`` takes).
"""

from __future__ import annotations

import argparse
import sys

from nas.cli.errors import one_line_errors
from nas.summary import summarize
from search_spaces.families import family_of


@one_line_errors("nas-summary")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nas-summary", description=__doc__.splitlines()[0])
    parser.add_argument(
        "genotype",
        help="genotype.json, run folder, published name, genotype text, NB201 arch or index",
    )
    parser.add_argument("--network", choices=["cifar", "imagenet"], default="cifar")
    parser.add_argument("--C", type=int, default=None, help="initial channels")
    parser.add_argument(
        "--layers", type=int, default=None, help="cells (DARTS) / cells per stage N (NB201)"
    )
    parser.add_argument("--num-classes", type=int, default=None)
    parser.add_argument("--no-auxiliary", action="store_true")
    args = parser.parse_args(argv)
    for flag, value in (("--C", args.C), ("--layers", args.layers),
                        ("--num-classes", args.num_classes)):  # fmt: skip
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    # the forms nas-train and nas-export take (a search's run folder or genotype.json too)
    from nas.training.model import resolve_train_genotype

    genotype = resolve_train_genotype(args.genotype)
    family = family_of(genotype)
    imagenet = args.network == "imagenet" and family.imagenet_size is not None
    C, layers = family.imagenet_size if imagenet and family.imagenet_size else family.paper_size
    model, net = family.network(
        genotype,
        C=args.C if args.C is not None else C,
        layers=args.layers if args.layers is not None else layers,
        num_classes=args.num_classes
        if args.num_classes is not None
        else (1000 if imagenet else 10),
        image_size=224 if imagenet else 32,
        auxiliary=not args.no_auxiliary,
    )
    input_size, kind = net.input_size, net.family
    print(f"genotype: {genotype}")
    print(f"{kind} on {input_size[1]}x{input_size[2]} input: {summarize(model, input_size)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
