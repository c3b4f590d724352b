"""``nas-export``: the discrete network of a genotype as ONNX and/or TorchScript, verified.

Deployment (``nas.hardware.export``). The genotype is any form ``nas-train`` accepts (a search's
``genotype.json`` or run folder, a published name, genotype text, an NB201 arch string or
index); the weights are a nas-train checkpoint or run folder (``--weights``), else a seeded
initialisation (for latency measurements). Each file is run at once (onnxruntime /
``torch.jit.load``) and its logits compared with PyTorch's:

* ``nas-export DARTS_V2 --onnx darts_v2.onnx``  (NetworkCIFAR, C=36, 20 cells)
* ``nas-export 1462 --onnx cell.onnx --torchscript cell.pt``  (NB201 TinyNetwork, C=16, N=5)
* ``nas-export DARTS_V2 --weights outputs/train-darts_cifar10-DARTS_V2/seed0 --onnx net.onnx``
  (a nas-train run folder: its checkpoint's weights)

ONNX needs ``pip install "nas-toolkit[export]"`` (onnx, onnxscript, onnxruntime). A network
under 1 GB of weights is one self-contained ``.onnx`` file; a larger one also writes
``<file>.onnx.data`` beside it (ONNX's 2 GB limit), which must travel with it. Each file is
written under a temporary name and renamed once checked, so a failed export leaves nothing and
an earlier file as it was. Bad input (an option out of range, an output path that is a folder,
under a file or not writable) prints one line and exits with status 2, before any work.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nas.cli.errors import one_line_errors
from nas.run.disk import check_output_file


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="nas-export", description=__doc__.split("\n\n")[0])
    p.add_argument("genotype", help="genotype.json, run folder, name, text, NB201 arch or index")
    p.add_argument("--onnx", help="the ONNX file to write")
    p.add_argument("--torchscript", help="the TorchScript file to write")
    p.add_argument("--C", type=int, help="initial channels (NB201: 16, DARTS: 36)")
    p.add_argument("--layers", type=int, help="NB201: cells per stage N (5); DARTS: cells (20)")
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--image-size", type=int, default=32, help="32 (CIFAR), 16, or 224 (ImageNet)")
    p.add_argument("--weights", help="a nas-train checkpoint or run folder, or a state dict")
    p.add_argument("--seed", type=int, default=0, help="initialisation seed without --weights")
    p.add_argument(
        "--trust-pickle",
        action="store_true",
        help="read a --weights file that needs Python's full unpickler (it can run code: only "
        "for a file you trust)",
    )
    p.add_argument("--batch", type=int, default=1, help="batch of the example input (1)")
    p.add_argument("--opset", type=int, default=18, help="ONNX opset (18)")
    p.add_argument("--tol", type=float, default=1e-4, help="largest logit difference (1e-4)")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    if not args.onnx and not args.torchscript:
        raise ValueError("nothing to write: give --onnx FILE and/or --torchscript FILE")
    for flag, value in (("--batch", args.batch), ("--num-classes", args.num_classes),
                        ("--image-size", args.image_size), ("--C", args.C),
                        ("--layers", args.layers)):  # fmt: skip
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if (
        args.onnx
        and args.torchscript
        and Path(args.onnx).resolve() == Path(args.torchscript).resolve()
    ):
        raise ValueError("--onnx and --torchscript name the same file; expected two paths")
    if not (args.tol > 0 and args.tol != float("inf")):  # nan and inf fail too
        raise ValueError(
            f"--tol must be a positive number (largest logit difference), got {args.tol}"
        )
    if args.opset < 7:
        raise ValueError(
            f"--opset must be >= 7 (an ONNX opset the exporter writes), got {args.opset}"
        )
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    for flag, value in (("--onnx", args.onnx), ("--torchscript", args.torchscript)):
        if value:
            check_output_file(value, flag)  # before the network is built and traced
    # torch loads after argument parsing: --help and bad options stay instant
    from nas.hardware.export import build_for_export, export_onnx, export_torchscript

    model, spec, input_size = build_for_export(
        args.genotype,
        C=args.C,
        layers=args.layers,
        num_classes=args.num_classes,
        image_size=args.image_size,
        weights=args.weights,
        trust_pickle=args.trust_pickle,
        seed=args.seed,
    )
    what = f"{model.family}(C={spec.C}, layers={spec.layers}) of {spec.genotype}"
    if args.onnx:
        err = export_onnx(model, input_size, args.onnx, batch=args.batch, opset=args.opset,
                          tol=args.tol)  # fmt: skip
        print(f"wrote {args.onnx}: {what}; onnxruntime logits within {err:.2g} of PyTorch")
    if args.torchscript:
        err = export_torchscript(model, input_size, args.torchscript, batch=args.batch,
                                 tol=args.tol)  # fmt: skip
        print(f"wrote {args.torchscript}: {what}; TorchScript logits within {err:.2g} of PyTorch")
    return 0


@one_line_errors("nas-export")
def main(argv: list[str] | None = None) -> int:
    return run(_parse(argv))


if __name__ == "__main__":
    sys.exit(main())
