"""``nas-summary``: build a discrete network from a genotype and print what it costs.

``nas-summary DARTS_V2`` builds the published DARTS_V2 cell into ``NetworkCIFAR`` (C=36, 20
layers, 10 classes, as in the DARTS paper) and prints its parameters and multiply-adds;
``--network imagenet`` builds ``NetworkImageNet`` (C=48, 14 layers, 1000 classes); an NB201
arch string or benchmark index builds NAS-Bench-201's ``TinyNetwork`` (C=16, N=5).
"""

from __future__ import annotations

import argparse
import sys

from torch import nn

from nas.summary import summarize
from search_spaces.darts import NetworkCIFAR, NetworkImageNet
from search_spaces.genotype import NB201Genotype
from search_spaces.nb201 import TinyNetwork, index_to_arch
from search_spaces.published import resolve_genotype


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
    model: nn.Module
    try:
        spec = args.genotype.strip()
        genotype = resolve_genotype(index_to_arch(int(spec)) if spec.isdigit() else spec)
        if isinstance(genotype, NB201Genotype):
            model = TinyNetwork(args.C or 16, args.layers or 5, genotype, args.num_classes or 10)
            input_size = (3, 32, 32)
            kind = "TinyNetwork"
        elif args.network == "imagenet":
            model = NetworkImageNet(
                args.C or 48,
                args.num_classes or 1000,
                args.layers or 14,
                not args.no_auxiliary,
                genotype,
            )
            input_size = (3, 224, 224)
            kind = "NetworkImageNet"
        else:
            model = NetworkCIFAR(
                args.C or 36,
                args.num_classes or 10,
                args.layers or 20,
                not args.no_auxiliary,
                genotype,
            )
            input_size = (3, 32, 32)
            kind = "NetworkCIFAR"
    except ValueError as e:
        print(f"nas-summary: error: {e}", file=sys.stderr)
        return 2
    print(f"genotype: {genotype}")
    print(f"{kind} on {input_size[1]}x{input_size[2]} input: {summarize(model, input_size)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
