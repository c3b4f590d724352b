"""The proxies' inputs from the embedded data, and scoring one network with many proxies.

Part of ``nas.proxies``. Each proxy's reference feeds it a particular input (``DataSpec``):
64 augmented CIFAR-10 training images for the ZC proxies (Abdelfattah et al., ICLR 2021:
``dataload=random``, one batch, the training transform: random crop with 4 pixels of padding
and a horizontal flip), 128 plain training images for naswot (Mellor et al.: no
augmentation), one all-ones image for synflow, Gaussian noise for zen (drawn by the proxy).
``proxy_inputs`` draws them once, from a seed, out of the embedded ``cifar10-mini`` training
images, so every cell of a benchmark sample is scored on the same batch (the reference's
``iter(loader)`` per cell draws a new one; a common batch removes that noise from the ranking
and lets the harness build the batch once). ``score_many`` runs one forward and backward for
all proxies of the shared gradient pass (grad_norm, snip, fisher, jacob_cov: the same batch and
BN mode in their reference) and reseeds torch before each proxy, so a score does not depend
on which other proxies ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nas.data import load_cifar10_mini
from nas.data.datasets import CIFAR10_MEAN, CIFAR10_STD
from nas.proxies.base import Proxy, Scorable, as_scorable, get_proxy
from nas.proxies.fisher import Fisher
from nas.proxies.grad_norm import GradNorm
from nas.proxies.gradients import GradientPass, gradient_pass
from nas.proxies.jacob_cov import JacobCov
from nas.proxies.snip import Snip


@dataclass
class ProxyInputs:
    """Per proxy name: the input ``x`` and labels ``y`` (None where the proxy needs none)."""

    batches: dict[str, tuple[Tensor, Tensor | None]]

    def __getitem__(self, name: str) -> tuple[Tensor, Tensor | None]:
        return self.batches[name]


def _augment(images: Tensor, generator: torch.Generator) -> Tensor:
    """RandomCrop(32, padding=4) and RandomHorizontalFlip, one draw per image."""
    n, _, h, w = images.shape
    padded = torch.nn.functional.pad(images, (4, 4, 4, 4))
    out = torch.empty_like(images)
    offsets = torch.randint(0, 9, (n, 2), generator=generator).tolist()
    flips = (torch.rand(n, generator=generator) < 0.5).tolist()
    for i, ((dy, dx), flip) in enumerate(zip(offsets, flips)):
        crop = padded[i, :, dy : dy + h, dx : dx + w]
        out[i] = crop.flip(-1) if flip else crop
    return out


def training_images(
    batch_size: int, *, augment: bool, seed: int, device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """``batch_size`` normalised cifar10-mini training images and labels, chosen by ``seed``.

    The same seed picks the same images whatever ``batch_size`` (a prefix of one permutation).
    """
    images, labels, _ = load_cifar10_mini(train=True)
    if not 1 <= batch_size <= len(images):
        raise ValueError(
            f"batch size {batch_size} out of range: the embedded cifar10-mini training set "
            f"holds {len(images)} images"
        )
    generator = torch.Generator().manual_seed(seed)
    index = torch.randperm(len(images), generator=generator)[:batch_size].numpy()
    x = torch.from_numpy(np.ascontiguousarray(images[index])).permute(0, 3, 1, 2).float() / 255.0
    if augment:
        x = _augment(x, generator)
    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    x = ((x - mean) / std).contiguous()
    y = torch.tensor([labels[i] for i in index], dtype=torch.long)
    return x.to(device), y.to(device)


def proxy_inputs(
    names: list[str],
    *,
    seed: int = 0,
    batch_size: int | None = None,
    device: torch.device | str = "cpu",
) -> ProxyInputs:
    """Each proxy's reference input (``batch_size`` overrides the data batches' size).

    Proxies that read the same kind of batch get the very same tensor (so ``score_many`` can
    share their forward)."""
    cache: dict[tuple[str, int, bool], tuple[Tensor, Tensor | None]] = {}
    out: dict[str, tuple[Tensor, Tensor | None]] = {}
    for name in names:
        spec = get_proxy(name).data
        size = spec.batch_size if batch_size is None or spec.kind != "data" else batch_size
        if spec.kind == "gaussian" and batch_size is not None:
            size = min(batch_size, spec.batch_size)
        key = (spec.kind, size, spec.augment)
        if key not in cache:
            if spec.kind == "data":
                cache[key] = training_images(size, augment=spec.augment, seed=seed, device=device)
            elif spec.kind == "ones":
                cache[key] = (torch.ones(size, 3, 32, 32, device=device), None)
            else:  # gaussian: the proxy draws its own noise; this gives shape and device
                cache[key] = (torch.zeros(size, 3, 32, 32, device=device), None)
        out[name] = cache[key]
    return ProxyInputs(out)


_SHARED: dict[str, Callable[[GradientPass], float]] = {
    "grad_norm": GradNorm.from_pass,
    "snip": Snip.from_pass,
    "fisher": Fisher.from_pass,
    "jacob_cov": JacobCov.from_pass,
}


def score_many(
    net: torch.nn.Module | Scorable,
    names: list[str],
    inputs: ProxyInputs,
    *,
    seed: int = 0,
    weights: dict[str, Tensor] | None = None,
    timings: dict[str, float] | None = None,
    options: dict[str, dict[str, Any]] | None = None,
) -> dict[str, float]:
    """The score of ``net`` under each proxy in ``names`` (reseeding torch with ``seed``
    before each). ``timings``, if given, receives seconds per proxy; the shared gradient
    pass is charged to ``gradients`` and each of its proxies gets only its own reduction.
    ``options``: keyword options per proxy name (``{"zen": {"repeat": 8}}``)."""
    target = as_scorable(net, weights)
    opts = options or {}
    proxies: dict[str, Proxy] = {name: get_proxy(name, **opts.get(name, {})) for name in names}
    scores: dict[str, float] = {}
    shared = [n for n in names if n in _SHARED]
    groups: dict[int, list[str]] = {}
    for n in shared:
        groups.setdefault(id(inputs[n][0]), []).append(n)
    for group in groups.values():
        if len(group) < 2:
            continue
        x, y = inputs[group[0]]
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        p = gradient_pass(
            target,
            x,
            y,
            proxy="+".join(group),
            fisher="fisher" in group,
            jacobian="jacob_cov" in group,
        )
        if timings is not None:
            timings["gradients"] = timings.get("gradients", 0.0) + time.perf_counter() - t0
        for n in group:
            t0 = time.perf_counter()
            scores[n] = _SHARED[n](p)
            if timings is not None:
                timings[n] = time.perf_counter() - t0
    for n in names:
        if n in scores:
            continue
        x, y = inputs[n]
        torch.manual_seed(seed)
        t0 = time.perf_counter()
        scores[n] = proxies[n].score(target, x, y)
        if timings is not None:
            timings[n] = time.perf_counter() - t0
    return {n: scores[n] for n in names}


__all__ = ["ProxyInputs", "proxy_inputs", "score_many", "training_images"]
