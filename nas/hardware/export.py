"""Export a discrete network to ONNX or TorchScript, checked against PyTorch.

Deployment (after ``nas.training``): the network a genotype compiles to (any form ``nas-train``
accepts: a search's ``genotype.json`` or run folder, a published name, genotype text, an NB201
arch string or index) is written as a file another runtime runs, and that file is run at once
(ONNX: onnxruntime on the CPU; TorchScript: ``torch.jit.load``) on a fresh input of another
batch size, its logits compared with PyTorch's (default tolerance 1e-4, absolute). The export
is refused in one line if they differ.

ONNX goes through ``torch.onnx.export(dynamo=True)`` (``torch.export``), which handles the
networks' custom autograd Functions (fused ReLU-concatenation, even/odd pixel picking) by their
forward. TorchScript's tracer cannot save Python Functions, so they are swapped for their plain
tensor equivalents while tracing (``traceable_ops``); the check against the unswapped network
then shows that the swap computes the same thing.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from nas.run.checkpoint import LOAD_ERRORS, UnsafeFileError, safe_load
from nas.training.model import build_network, logits_of, resolve_train_genotype
from search_spaces import ops as ops_mod
from search_spaces.families import family_of
from search_spaces.genotype import AnyGenotype


class Logits(nn.Module):
    """The network's logits only (a deployed network has no auxiliary head or features)."""

    def __init__(self, net: nn.Module, family: str) -> None:
        super().__init__()
        self.net = net
        self.family = family

    def forward(self, x: Tensor) -> Tensor:
        return logits_of(self.net(x), self.family)[0]


@dataclass(frozen=True)
class ExportSpec:
    genotype: AnyGenotype
    C: int
    layers: int
    num_classes: int
    image_size: int


def build_for_export(
    genotype_spec: Any,
    *,
    C: int | None = None,
    layers: int | None = None,
    num_classes: int = 10,
    image_size: int = 32,
    weights: str | None = None,
    seed: int = 0,
    trust_pickle: bool = False,
) -> tuple[Logits, ExportSpec, tuple[int, int, int]]:
    """The eval-mode network of ``genotype_spec`` (NB201 default C=16, N=5; DARTS C=36, 20
    cells), with ``weights`` (a state dict or a nas-train checkpoint / run folder, read safely:
    ``trust_pickle`` for a file that needs the full unpickler) or a seeded initialisation."""
    genotype = resolve_train_genotype(genotype_spec)
    paper_C, paper_layers = family_of(genotype).paper_size
    C = C if C is not None else paper_C
    layers = layers if layers is not None else paper_layers
    torch.manual_seed(seed)
    net, spec = build_network(
        genotype,
        num_classes=num_classes,
        image_size=image_size,
        C=C,
        layers=layers,
        auxiliary=False,
    )
    if weights is not None:
        _load_weights(net, weights, trust_pickle)
    model = Logits(net, spec.family).eval()
    return model, ExportSpec(genotype, C, layers, num_classes, image_size), spec.input_size


def _load_weights(net: nn.Module, weights: str, trust_pickle: bool = False) -> None:
    path = Path(weights).expanduser()
    if path.is_dir():
        for name in ("checkpoints/best.pt", "checkpoints/last.pt"):
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise FileNotFoundError(f"{path} holds no checkpoints/best.pt or checkpoints/last.pt")
    if not path.is_file():
        raise FileNotFoundError(f"no weights file at {path.absolute()}")
    try:
        state = safe_load(path, trust_pickle=trust_pickle, switch="--trust-pickle")
    except UnsafeFileError:
        raise
    except LOAD_ERRORS as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(
            f"{path} is not a weights file ({reason}); expected a nas-train checkpoint or a "
            "state dict saved with torch.save"
        ) from None
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]  # a nas-train checkpoint
    if not isinstance(state, dict):
        raise ValueError(f"{path} is neither a state dict nor a nas-train checkpoint")
    # the auxiliary head trains only; the exported network has none
    state = {k: v for k, v in state.items() if not k.startswith("auxiliary_head.")}
    try:
        net.load_state_dict(state)
    except RuntimeError as e:
        raise ValueError(
            f"{path} does not fit this network (genotype, C or layers differ): "
            f"{str(e).splitlines()[0]}"
        ) from None


@contextmanager
def traceable_ops() -> Iterator[None]:
    """Swap the custom autograd Functions of ``search_spaces`` for plain tensor code (the
    networks read them from ``search_spaces.ops`` at each call)."""

    def concat_channels(xs: list[Tensor]) -> Tensor:
        return torch.cat(xs, dim=1)

    def concat_relu(xs: list[Tensor]) -> Tensor:
        return torch.relu(torch.cat(xs, dim=1))

    class EvenOddPixels:
        @staticmethod
        def apply(x: Tensor) -> tuple[Tensor, Tensor]:
            return x[:, :, ::2, ::2], x[:, :, 1::2, 1::2]

    saved = [
        (ops_mod, "concat_channels", ops_mod.concat_channels),
        (ops_mod, "concat_relu", ops_mod.concat_relu),
        (ops_mod, "_EvenOddPixels", ops_mod._EvenOddPixels),
    ]
    ops_mod.concat_channels = concat_channels
    ops_mod.concat_relu = concat_relu
    ops_mod._EvenOddPixels = EvenOddPixels  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


def _check(name: str, got: Tensor, want: Tensor, tol: float) -> float:
    err = float((got.float() - want.float()).abs().max())
    if not err <= tol:
        raise ValueError(
            f"the exported {name} file's logits differ from PyTorch's by {err:.3g} "
            f"(tolerance {tol:g}); the export is wrong"
        )
    return err


# ONNX keeps a model in one protobuf file up to 2 GB; larger ones need external data
ONE_FILE_BYTES = 1 << 30


def _temporary(path: Path) -> Path:
    """A fresh name beside ``path`` for a file written, checked, then renamed over it."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _discard(tmp: Path) -> None:
    for p in (tmp, tmp.with_name(tmp.name + ".data")):
        p.unlink(missing_ok=True)


def export_onnx(
    model: Logits,
    input_size: tuple[int, int, int],
    path: str | Path,
    *,
    batch: int = 1,
    opset: int = 18,
    tol: float = 1e-4,
) -> float:
    """Write ``model`` as ONNX (dynamic batch) and check it with onnxruntime; returns the
    largest absolute logit difference. A network under 1 GB of weights is one self-contained
    file; a larger one is ``path`` plus ``path.data`` (ONNX's 2 GB limit), both needed to load
    it. The file is written under a temporary name, checked, then renamed: a failed export or
    check leaves no file and an earlier file of that name as it was."""
    try:
        import onnxruntime as ort  # optional extra (export): loaded only to check a file
    except ImportError:
        raise ValueError(
            'ONNX export needs onnx, onnxscript and onnxruntime: pip install "nas-toolkit[export]"'
        ) from None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    external = size >= ONE_FILE_BYTES
    tmp = _temporary(path)
    # torch.export specialises a dimension of size 1: trace with 2 so the batch stays dynamic
    x = torch.randn(max(batch, 2), *input_size, generator=torch.Generator().manual_seed(1))
    try:
        with torch.no_grad():
            torch.onnx.export(
                model,
                (x,),
                str(tmp),
                input_names=["images"],
                output_names=["logits"],
                opset_version=opset,
                dynamo=True,
                external_data=external,
                dynamic_shapes=({0: torch.export.Dim("batch")},),
                verbose=False,
            )
        session = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
        check = torch.randn(batch + 1, *input_size, generator=torch.Generator().manual_seed(2))
        got = torch.from_numpy(session.run(None, {"images": check.numpy()})[0])
        with torch.no_grad():
            want = model(check)
        err = _check("ONNX", got, want, tol)
        if external:  # the model names its data file: keep the name, move the file
            os.replace(tmp.with_name(tmp.name + ".data"), path.with_name(path.name + ".data"))
        os.replace(tmp, path)
        return err
    finally:
        _discard(tmp)


def export_torchscript(
    model: Logits,
    input_size: tuple[int, int, int],
    path: str | Path,
    *,
    batch: int = 1,
    tol: float = 1e-4,
) -> float:
    """Write ``model`` as a traced TorchScript file and check it after loading it back (under
    a temporary name, renamed once checked, as ``export_onnx``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    x = torch.randn(batch, *input_size, generator=torch.Generator().manual_seed(1))
    try:
        with warnings.catch_warnings():
            # TorchScript is deprecated in favour of torch.export, but still what many C++
            # and mobile runtimes load
            warnings.simplefilter("ignore", FutureWarning)
            with torch.no_grad(), traceable_ops():
                traced = torch.jit.trace(model, x)
            traced.save(str(tmp))
            loaded = torch.jit.load(str(tmp), map_location="cpu")
        check = torch.randn(batch + 1, *input_size, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            got, want = loaded(check), model(check)
        err = _check("TorchScript", got, want, tol)
        os.replace(tmp, path)
        return err
    finally:
        _discard(tmp)
