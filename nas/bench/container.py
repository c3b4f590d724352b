"""The ``.nbt`` container: named, typed, compressed arrays behind a JSON header.

Last stage of the pipeline (``nas.bench``): the storage under the NAS-Bench-201 lookup (Dong &
Yang, ICLR 2020). Both the embedded table (``nas/bench/embedded/nb201.nbt``) and the files that
``nas-bench convert`` writes from an official ``.pth`` use it. It is read with the standard
library alone (``zlib``, ``array``, ``json``), so a first query costs no numpy or torch import;
numpy is needed only to write a container or to read a multi-dimensional array as an ndarray.

Layout (little-endian)::

    8 bytes   magic b"NASBENCH"
    8 bytes   uint64: length H of the header
    H bytes   UTF-8 JSON: {"format": str, "version": int, "meta": {...},
                           "arrays": {name: {"dtype", "shape", "codec", "offset", "nbytes",
                                             ["scale", "missing"]}}}
    blobs     one per array, at header end + offset, nbytes long, codec "zlib" or "raw"

``dtype`` is a numpy-style little-endian code (``<i4``, ``<i8``, ``<f4``, ``<f8``, ``|u1``) or
``text`` (UTF-8 lines joined by ``\\n``). Arrays are C-ordered. An integer array with ``scale``
stores ``round(value * scale)``, and ``missing`` is the integer that stands for NaN: this keeps
decimal table values exact (``94.373333`` reads back as the nearest double to ``94.373333``).
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import tempfile
import zlib
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

MAGIC = b"NASBENCH"
_TYPECODES = {"<i4": "i", "<i8": "q", "<f4": "f", "<f8": "d", "|u1": "B", "<u2": "H"}


def _typecode(dtype: str) -> str:
    code = _TYPECODES.get(dtype)
    if code is None:
        raise ValueError(
            f"unsupported container dtype {dtype!r}; expected one of {list(_TYPECODES)}"
        )
    if array(code).itemsize != int(dtype[2:]):  # 'i' is 4 bytes on every platform numpy supports
        raise RuntimeError(f"array({code!r}) is not {dtype[2:]} bytes on this platform")
    return code


class Container:
    """Read-only view of an ``.nbt`` file (or its bytes). Arrays are decoded on first request."""

    def __init__(self, source: str | Path | bytes, *, name: str | None = None) -> None:
        if isinstance(source, bytes):
            self._data: bytes | None = source
            self._path: Path | None = None
            self.name = name or "<in-memory table>"
            head = source[:16]
        else:
            self._path = Path(source)
            self._data = None
            self.name = name or str(source)
            if not self._path.is_file():
                raise FileNotFoundError(f"benchmark table {self.name} not found")
            with open(self._path, "rb") as f:
                head = f.read(16)
        if len(head) < 16 or head[:8] != MAGIC:
            raise ValueError(f"{self.name} is not an .nbt benchmark table (no {MAGIC!r} magic)")
        (size,) = struct.unpack("<Q", head[8:16])
        header_bytes = self._read(16, size)
        try:
            header = json.loads(header_bytes.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ValueError(f"{self.name}: corrupt .nbt header") from None
        self.format: str = header["format"]
        self.version: int = header["version"]
        self.meta: dict[str, Any] = header.get("meta", {})
        self.arrays: dict[str, dict[str, Any]] = header["arrays"]
        self._base = 16 + size

    def _read(self, offset: int, nbytes: int) -> bytes:
        if self._data is not None:
            out = self._data[offset : offset + nbytes]
        else:
            assert self._path is not None
            with open(self._path, "rb") as f:
                f.seek(offset)
                out = f.read(nbytes)
        if len(out) != nbytes:
            raise ValueError(f"{self.name}: truncated .nbt file")
        return out

    def __contains__(self, name: object) -> bool:
        return name in self.arrays

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entry(name)["shape"])

    def _entry(self, name: str) -> dict[str, Any]:
        try:
            return self.arrays[name]
        except KeyError:
            raise ValueError(f"{self.name} has no array {name!r}") from None

    def raw(self, name: str) -> bytes:
        """The decompressed bytes of array ``name``."""
        e = self._entry(name)
        blob = self._read(self._base + e["offset"], e["nbytes"])
        return zlib.decompress(blob) if e["codec"] == "zlib" else blob

    def numbers(self, name: str) -> array:
        """Array ``name`` flattened, in its stored type (no scaling)."""
        e = self._entry(name)
        out = array(_typecode(e["dtype"]))
        out.frombytes(self.raw(name))
        if sys.byteorder == "big" and out.itemsize > 1:
            out.byteswap()
        return out

    def floats(self, name: str) -> array:
        """Array ``name`` flattened as float64 values, scaled back, ``missing`` as NaN."""
        e = self._entry(name)
        values = self.numbers(name)
        if values.typecode == "d":
            return values
        scale = e.get("scale", 1)
        missing = e.get("missing")
        nan = math.nan
        return array("d", [nan if v == missing else v / scale for v in values])

    def texts(self, name: str) -> list[str]:
        e = self._entry(name)
        if e["dtype"] != "text":
            raise ValueError(f"{self.name}: array {name!r} is {e['dtype']}, not text")
        return self.raw(name).decode("utf-8").split("\n")

    def ndarray(self, name: str) -> np.ndarray:
        """Array ``name`` as a numpy array of its shape (float64 when scaled)."""
        import numpy as np  # on first use: importing nas.bench stays instant (no numpy)

        e = self._entry(name)
        out = np.frombuffer(self.raw(name), dtype=np.dtype(e["dtype"])).reshape(e["shape"])
        if "scale" in e:
            scaled = out / e["scale"]
            if "missing" in e:
                scaled[out == e["missing"]] = np.nan
            return scaled
        return out


@dataclass(frozen=True)
class Scaled:
    """Store float ``values`` as ``round(values * scale)`` in an int array; NaN -> ``missing``."""

    values: np.ndarray
    scale: int
    dtype: str = "<i4"
    missing: int = -(2**31)


def encode_container(
    *,
    format: str,
    version: int,
    meta: Mapping[str, Any],
    arrays: Mapping[str, Any],
    codec: str = "zlib",
    level: int = 9,
) -> bytes:
    """The bytes of an ``.nbt`` container of ``arrays`` (ndarrays, ``Scaled``, text lists)."""
    import numpy as np  # on first use: importing nas.bench stays instant (no numpy)

    if codec not in ("zlib", "raw"):
        raise ValueError(f"unknown codec {codec!r}; expected 'zlib' or 'raw'")
    entries: dict[str, dict[str, Any]] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, value in arrays.items():
        entry: dict[str, Any]
        if isinstance(value, list):
            if any("\n" in s for s in value):
                raise ValueError(f"text array {name!r} holds a newline")
            payload = "\n".join(value).encode("utf-8")
            entry = {"dtype": "text", "shape": [len(value)]}
        elif isinstance(value, Scaled):
            v = np.asarray(value.values, dtype=np.float64)
            ints = np.where(np.isnan(v), value.missing, np.round(v * value.scale))
            info = np.iinfo(np.dtype(value.dtype))
            if ints.min(initial=0) < info.min or ints.max(initial=0) > info.max:
                raise ValueError(f"array {name!r} overflows {value.dtype} at scale {value.scale}")
            payload = ints.astype(value.dtype).tobytes()
            entry = {"dtype": value.dtype, "shape": list(v.shape), "scale": value.scale}
            entry["missing"] = value.missing
        else:
            arr = np.ascontiguousarray(value)
            dtype = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
            code = dtype.str
            _typecode(code)
            payload = arr.astype(dtype).tobytes()
            entry = {"dtype": code, "shape": list(arr.shape)}
        blob = zlib.compress(payload, level) if codec == "zlib" else payload
        entry.update(codec=codec, offset=offset, nbytes=len(blob))
        entries[name] = entry
        blobs.append(blob)
        offset += len(blob)
    header = json.dumps(
        {"format": format, "version": version, "meta": dict(meta), "arrays": entries},
        sort_keys=False,
        allow_nan=False,
    ).encode("utf-8")
    return b"".join([MAGIC, struct.pack("<Q", len(header)), header, *blobs])


def write_container(path: str | Path, data: bytes) -> None:
    """Write container bytes atomically (a temporary file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would hide a shipped table from others
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
