"""The embedded quickstart dataset ``cifar10-mini``: real CIFAR-10 images shipped in the package.

Data stage (``nas.data``): the default data of the quickstart search, so that the main job runs
on a fresh machine with no network and no dataset folder. It holds the first 4,000 CIFAR-10
training images and the first 1,000 test images with their labels (Krizhevsky, 2009, "Learning
Multiple Layers of Features from Tiny Images"), pixel-exact copies taken from the MIT-licensed
karpathy/convnetjs demo via ``../shared/data/cifar10-subset``; ``nas/data/make_embedded.py``
regenerates the file from that folder.

The file ``embedded/cifar10-mini.npz`` must stay lossless yet small, so it stores the pixels with
a small predictive codec (numpy + the standard library's ``lzma``; 4.1 bits per value against
8.0 raw, 4.5 for lossless WebP and 5.6 for PNG of the same images):

* colour decorrelation: planes G, R-G, B-G (the reversible transform of lossless WebP/JPEG-LS);
* per plane, the median edge detector (MED) predictor of LOCO-I / JPEG-LS on the causal
  neighbours a (left), b (up), c (up-left); residuals modulo 256, zigzag-mapped to bytes;
* each residual goes to one of 13 streams per plane chosen by the local activity
  ``|a-c| + |b-c| + |d-b|`` (d: up-right) plus the residual magnitudes at a, b, d, so each
  stream has a narrow distribution; the 39 streams are concatenated and compressed by lzma (xz).

Decoding follows the dependencies in wavefronts ``x + 2y = t`` (every causal neighbour of a pixel
lies on an earlier wavefront), all images at once, so it takes ~1 s in numpy. A SHA-256 of
the decoded pixels, stored in the file, is checked at every load.
"""

from __future__ import annotations

import hashlib
import lzma
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded"
CIFAR10_MINI_FILE = EMBEDDED_DIR / "cifar10-mini.npz"
FORMAT_VERSION = 1

# Activity thresholds of the context streams: roughly geometric, as LOCO-I's gradient quantiser.
_EDGES = np.array([1, 3, 5, 8, 12, 17, 24, 34, 48, 68, 96, 136], dtype=np.int16)
_NUM_CONTEXTS = len(_EDGES) + 1
_NUM_PLANES = 3
# Decoding order of the planes (G first: it is the base of the two chroma planes) and where
# each one lives in an RGB pixel.
_PLANE_CHANNELS = (1, 0, 2)


def _neighbour_tables(height: int, width: int) -> dict[str, np.ndarray]:
    """Raster indices of each pixel's causal neighbours, shared by encoder and decoder.

    Index ``height * width`` is a zero slot for neighbours outside the image. Borders follow
    LOCO-I's spirit: on the first row every neighbour is the left pixel; on the first column the
    missing left / up-left / up-right neighbours are the pixel above.
    """
    zero = height * width
    tables = {key: np.empty(zero, np.int64) for key in ("a", "b", "c", "d", "ma", "mb", "md")}
    for y in range(height):
        for x in range(width):
            p = y * width + x
            if y == 0:
                a = p - 1 if x > 0 else zero
                b = c = d = a
                mb = md = zero
            else:
                b = mb = p - width
                a = p - 1 if x > 0 else b
                c = p - width - 1 if x > 0 else b
                d = p - width + 1 if x < width - 1 else b
                md = p - width + 1 if x < width - 1 else zero
            ma = p - 1 if x > 0 else zero
            for key, value in zip(("a", "b", "c", "d", "ma", "mb", "md"), (a, b, c, d, ma, mb, md)):
                tables[key][p] = value
    return tables


def _wavefronts(height: int, width: int) -> list[np.ndarray]:
    """Pixels grouped by ``x + 2y``: each group depends only on earlier groups."""
    ys, xs = np.divmod(np.arange(height * width), width)
    t = xs + 2 * ys
    return [np.flatnonzero(t == k) for k in range(int(t.max()) + 1)]


def _predict(
    values: np.ndarray, tables: dict[str, np.ndarray], pixels: Any
) -> tuple[np.ndarray, np.ndarray]:
    """MED prediction and local gradient activity of ``pixels`` ([P, N] each).

    ``values`` is pixel-major ([H*W + 1, N]) so that every neighbour gather copies whole rows.
    """
    a, b = values[tables["a"][pixels]], values[tables["b"][pixels]]
    c, d = values[tables["c"][pixels]], values[tables["d"][pixels]]
    high, low = np.maximum(a, b), np.minimum(a, b)
    prediction = np.where(c >= high, low, np.where(c <= low, high, a + b - c))
    return prediction, np.abs(a - c) + np.abs(b - c) + np.abs(d - b)


# Activity -> context stream, as a table: activity is at most 3 * 510 + 3 * 128 < 2048.
_CONTEXT_OF_ACTIVITY = np.searchsorted(_EDGES, np.arange(2048), side="right").astype(np.int16)


def _context(
    gradients: np.ndarray, magnitudes: np.ndarray, tables: dict[str, np.ndarray], pixels: Any
) -> np.ndarray:
    """Context stream (0.._NUM_CONTEXTS-1) of each pixel: gradients + neighbours' residuals."""
    activity = (
        gradients
        + magnitudes[tables["ma"][pixels]]
        + magnitudes[tables["mb"][pixels]]
        + magnitudes[tables["md"][pixels]]
    )
    return _CONTEXT_OF_ACTIVITY[activity]


def encode_images(images: np.ndarray) -> tuple[np.ndarray, bytes]:
    """Losslessly encode uint8 images [N, H, W, 3]; returns (stream lengths, xz payload)."""
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(
            f"expected uint8 images of shape [N, H, W, 3], got {images.dtype} {images.shape}"
        )
    n, height, width, _ = images.shape
    tables = _neighbour_tables(height, width)
    pixels_first = images.reshape(n, height * width, 3).transpose(1, 0, 2).astype(np.int16)
    zero_row = np.zeros((1, n), np.int16)
    green = pixels_first[:, :, 1]
    symbols, contexts = [], []
    for plane, channel in enumerate(_PLANE_CHANNELS):
        base = np.zeros_like(green) if plane == 0 else green
        plane_values = pixels_first[:, :, channel] - base
        values = np.concatenate([plane_values, zero_row])
        prediction, gradients = _predict(values, tables, slice(None))
        residual = ((plane_values - prediction + 128) & 255) - 128
        magnitudes = np.concatenate([np.abs(residual), zero_row])
        context = _context(gradients, magnitudes, tables, slice(None))
        zigzag = np.where(residual >= 0, 2 * residual, -2 * residual - 1).astype(np.uint8)
        # The decoder's consumption order: wavefront by wavefront, image-major inside one
        # (neighbouring pixels of one image stay adjacent: ~1% smaller than pixel-major).
        for pixels in _wavefronts(height, width):
            symbols.append(zigzag[pixels].T.ravel())
            contexts.append(context[pixels].T.ravel() + plane * _NUM_CONTEXTS)
    sequence, context_of = np.concatenate(symbols), np.concatenate(contexts)
    streams = sequence[np.argsort(context_of, kind="stable")]
    lengths = np.bincount(context_of, minlength=_NUM_PLANES * _NUM_CONTEXTS).astype(np.int64)
    filters = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "lc": 0, "pb": 0}]
    payload = lzma.compress(streams.tobytes(), format=lzma.FORMAT_XZ, filters=filters)
    return lengths, payload


def decode_images(lengths: np.ndarray, payload: bytes, *, shape: tuple[int, ...]) -> np.ndarray:
    """Invert :func:`encode_images`: uint8 images of ``shape`` = (N, H, W, 3)."""
    n, height, width, _ = shape
    streams = np.frombuffer(lzma.decompress(payload, format=lzma.FORMAT_XZ), dtype=np.uint8)
    if int(lengths.sum()) != streams.size or streams.size != n * height * width * 3:
        raise ValueError(
            f"embedded payload holds {streams.size} values; expected {n * height * width * 3}"
        )
    tables = _neighbour_tables(height, width)
    next_symbol = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    pixels_first = np.empty((height * width, n, 3), np.uint8)
    green = np.zeros((height * width + 1, n), np.int16)
    for plane, channel in enumerate(_PLANE_CHANNELS):
        base = np.zeros_like(green) if plane == 0 else green
        values = np.zeros((height * width + 1, n), np.int16)
        magnitudes = np.zeros_like(values)
        for pixels in _wavefronts(height, width):
            prediction, gradients = _predict(values, tables, pixels)
            context = _context(gradients, magnitudes, tables, pixels)
            context_of = (context + plane * _NUM_CONTEXTS).T.ravel()
            # Each context stream is read in order: rank every symbol inside its context.
            order = np.argsort(context_of, kind="stable")
            sorted_context = context_of[order]
            counts = np.bincount(context_of, minlength=_NUM_PLANES * _NUM_CONTEXTS)
            first = np.cumsum(counts) - counts
            positions = next_symbol[sorted_context] + np.arange(order.size) - first[sorted_context]
            next_symbol += counts
            zigzag = np.empty(order.size, np.int16)
            zigzag[order] = streams[positions]
            residual = np.where(zigzag & 1, -((zigzag + 1) >> 1), zigzag >> 1)
            residual = residual.reshape(prediction.shape[::-1]).T
            plane_base = base[pixels]
            values[pixels] = ((plane_base + prediction + residual) & 255) - plane_base
            magnitudes[pixels] = np.abs(residual)
        if plane == 0:
            green = values
        pixels_first[:, :, channel] = values[:-1] + base[:-1]
    return np.ascontiguousarray(pixels_first.transpose(1, 0, 2)).reshape(shape)


def pixel_digest(images: np.ndarray, labels: np.ndarray) -> str:
    """SHA-256 over the raw pixels and labels: what a lossless round trip must preserve."""
    digest = hashlib.sha256(np.ascontiguousarray(images, dtype=np.uint8).tobytes())
    digest.update(np.ascontiguousarray(labels, dtype=np.uint8).tobytes())
    return digest.hexdigest()


def write_embedded(
    path: Path,
    *,
    train: tuple[np.ndarray, list[int]],
    test: tuple[np.ndarray, list[int]],
    classes: list[str],
    source: str,
) -> None:
    """Write a ``cifar10-mini`` style file: encode, check the round trip, save (no pickle)."""
    images = np.concatenate([train[0], test[0]])
    labels = np.asarray(list(train[1]) + list(test[1]), dtype=np.uint8)
    lengths, payload = encode_images(images)
    if not np.array_equal(decode_images(lengths, payload, shape=images.shape), images):
        raise RuntimeError("the embedded codec failed its round trip; refusing to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez(
            f,
            format_version=np.array(FORMAT_VERSION),
            shape=np.array(images.shape, dtype=np.int64),
            num_train=np.array(len(train[1])),
            lengths=lengths,
            payload=np.frombuffer(payload, dtype=np.uint8),
            labels=labels,
            classes=np.array(classes),
            sha256=np.array(pixel_digest(images, labels)),
            source=np.array(source),
        )


@cache
def _load(path: Path) -> tuple[np.ndarray, np.ndarray, int, tuple[str, ...]]:
    if not path.is_file():
        raise FileNotFoundError(
            f"embedded dataset file {path} is missing; reinstall the package or regenerate it "
            "with `python -m nas.data.make_embedded`"
        )
    with np.load(path, allow_pickle=False) as f:
        if int(f["format_version"]) != FORMAT_VERSION:
            raise ValueError(
                f"{path} has format version {int(f['format_version'])}; expected {FORMAT_VERSION}"
            )
        shape = tuple(int(v) for v in f["shape"])
        images = decode_images(f["lengths"], f["payload"].tobytes(), shape=shape)
        labels = f["labels"]
        if pixel_digest(images, labels) != str(f["sha256"]):
            raise ValueError(f"{path} decodes to pixels that fail its SHA-256 check; it is corrupt")
        images.setflags(write=False)
        labels.setflags(write=False)
        return images, labels, int(f["num_train"]), tuple(str(c) for c in f["classes"])


def load_cifar10_mini(*, train: bool) -> tuple[np.ndarray, list[int], list[str]]:
    """The embedded images [N, 32, 32, 3] uint8 (read-only), labels and class names.

    ``train=True``: CIFAR-10 training images 0..3999; ``train=False``: test images 0..999.
    Decoded once per process and cached.
    """
    images, labels, num_train, classes = _load(CIFAR10_MINI_FILE)
    part = slice(0, num_train) if train else slice(num_train, None)
    return images[part], [int(v) for v in labels[part]], list(classes)
