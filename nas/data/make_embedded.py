"""Regenerate the embedded quickstart dataset ``nas/data/embedded/cifar10-mini.npz``.

Data stage (``nas.data``), provenance of ``cifar10-mini``: reads the real CIFAR-10 subset of
``../shared/data/cifar10-subset`` (``data_batch_1``: training images 0..3999; ``test_batch``:
test images 0..999; pixel-exact copies of Krizhevsky's CIFAR-10 from the MIT-licensed
karpathy/convnetjs demo) and writes it with the lossless codec of ``nas/data/embedded.py``,
checking the round trip pixel for pixel before writing. The pixels and labels are what must
not change; the compressed bytes may differ between xz library versions.

    python -m nas.data.make_embedded [--source PATH] [--out PATH]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from nas.data.embedded import CIFAR10_MINI_FILE, load_cifar10_mini, write_embedded
from nas.data.formats import read_cifar_folder

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "cifar10-subset"
SOURCE_NOTE = (
    "CIFAR-10 (A. Krizhevsky, 2009, 'Learning Multiple Layers of Features from Tiny Images'): "
    "training images 0..3999 and test images 0..999, pixel-exact copies from the MIT-licensed "
    "karpathy/convnetjs demo (demo/cifar10)"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="CIFAR-10 folder")
    parser.add_argument("--out", type=Path, default=CIFAR10_MINI_FILE, help="file to write")
    args = parser.parse_args(argv)

    try:
        train_images, train_labels, classes, folder = read_cifar_folder(args.source, train=True)
        test_images, test_labels, _, _ = read_cifar_folder(args.source, train=False)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    start = time.perf_counter()
    write_embedded(
        args.out,
        train=(train_images, train_labels),
        test=(test_images, test_labels),
        classes=classes,
        source=SOURCE_NOTE,
    )
    print(
        f"wrote {args.out} ({args.out.stat().st_size:,} bytes) from {folder.resolve()}: "
        f"{len(train_labels)} training + {len(test_labels)} test images, "
        f"encoded in {time.perf_counter() - start:.1f} s"
    )
    if args.out.resolve() == CIFAR10_MINI_FILE.resolve():
        start = time.perf_counter()
        load_cifar10_mini(train=True)
        print(f"decoded in {time.perf_counter() - start:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
