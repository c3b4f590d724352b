"""The latency table file: measured parts keyed by the device and software they were timed on.

Hardware-aware search (``nas.hardware``). A table is only true for the machine, library
versions, thread count and dtype it was measured with (HW-NAS-Bench and nn-Meter keep one table
per device for that reason), so the file records them and ``load_table`` refuses a table whose
environment differs from the one asked for, in one line, unless forced.

JSON layout (``format: nas-latency-table/1``)::

    {"format": ..., "created": ISO time,
     "environment": {"device_type", "device_name", "torch", "cuda", "cudnn", "threads",
                     "dtype", "channels_last", "python", "platform"},
     "network": {"space", "C", "layers", "image_size", "num_classes"},
     "protocol": {"batch", "warmup", "repeats", "timer"},
     "entries": {part key: {"latency_ms" (median), "p10_ms", "p90_ms", "mean_ms", "n",
                            "flops" (MACs of one image), "params"}},
     "calibration": optional, from ``nas-profile --calibrate N``: {"a", "b_ms", ...}}

A calibration maps the plain sum of the entries to the latency of the whole network,
``a * sum + b_ms`` (``nas.hardware.validate.calibrate``): every latency prediction made from the
table (the search's cost term, the budget selector, fronts, ``nas-profile --show``) uses it.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nas.hardware.parts import NetworkLayout, Part, network_layout

FORMAT = "nas-latency-table/1"
METRICS = ("latency", "flops", "params")
# What must agree between a table and the machine that uses it.
MATCH_KEYS = ("device_type", "device_name", "torch", "cuda", "threads", "dtype", "channels_last")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(
    device: torch.device | str, dtype: str = "float32", *, channels_last: bool = False
) -> dict[str, Any]:
    """What a latency measurement on ``device`` depends on, as recorded in a table."""
    device = torch.device(device)
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; expected one of {', '.join(DTYPES)}")
    cuda = device.type == "cuda"
    return {
        "device_type": device.type,
        "device_name": torch.cuda.get_device_name(device) if cuda else _cpu_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda if cuda else None,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        # CPU kernels' speed depends on the intra-op thread count; a GPU's does not
        "threads": None if cuda else torch.get_num_threads(),
        "dtype": dtype,
        "channels_last": bool(channels_last),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }


@dataclass
class LatencyTable:
    environment: dict[str, Any]
    network: dict[str, Any]
    protocol: dict[str, Any]
    entries: dict[str, dict[str, float]]
    created: str = ""
    source: str = "<memory>"
    calibration: dict[str, Any] | None = None

    def correction(self) -> tuple[float, float]:
        """``(a, b)`` of the latency prediction ``a * sum + b`` ms: ``(1, 0)`` uncalibrated."""
        if not self.calibration:
            return 1.0, 0.0
        return float(self.calibration["a"]), float(self.calibration["b_ms"])

    def layout(self) -> NetworkLayout:
        n = self.network
        return network_layout(
            str(n["space"]),
            C=int(n["C"]),
            layers=int(n["layers"]),
            image_size=int(n["image_size"]),
            num_classes=int(n["num_classes"]),
        )

    def value(self, part: Part, metric: str) -> float:
        """``metric`` of ``part``: latency in ms (median), FLOPs in millions of MACs per image,
        parameters in millions."""
        if metric not in METRICS:
            raise ValueError(f"unknown cost metric {metric!r}; expected one of {METRICS}")
        entry = self.entries.get(part.key)
        if entry is None:
            raise ValueError(
                f"latency table {self.source} has no entry {part.key}; re-run nas-profile for "
                "this network"
            )
        if metric == "latency":
            if "latency_ms" not in entry:
                raise ValueError(
                    f"latency table {self.source} holds no timings (profiled with "
                    "time=false); expected latency_ms in its entries"
                )
            return float(entry["latency_ms"])
        return float(entry[metric]) / 1e6

    def to_json(self) -> dict[str, Any]:
        out = {
            "format": FORMAT,
            "created": self.created,
            "environment": self.environment,
            "network": self.network,
            "protocol": self.protocol,
            "entries": self.entries,
        }
        if self.calibration:
            out["calibration"] = self.calibration
        return out

    def save(self, path: str | Path) -> Path:
        from nas.run.disk import atomic_write_text  # the toolkit's one atomic write

        path = Path(path)
        atomic_write_text(path, json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")
        return path

    @staticmethod
    def from_json(data: Any, source: str = "<memory>") -> LatencyTable:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"{source} is not a latency table (format {got!r}; expected {FORMAT})")
        missing = [k for k in ("environment", "network", "protocol", "entries") if k not in data]
        if missing:
            raise ValueError(f"latency table {source} lacks {', '.join(missing)}")
        kind = (
            data["environment"].get("device_type")
            if isinstance(data["environment"], dict)
            else None
        )
        if kind not in ("cpu", "cuda"):
            raise ValueError(
                f"latency table {source}: device_type {kind!r} is not a device latencies are "
                "measured on; expected cpu or cuda (nas-profile --device)"
            )
        calibration = data.get("calibration")
        if calibration is not None:
            ok = isinstance(calibration, dict) and all(
                isinstance(calibration.get(k), (int, float)) for k in ("a", "b_ms")
            )
            if not ok or float(calibration["a"]) <= 0:
                raise ValueError(
                    f"latency table {source}: calibration {calibration!r} is malformed; "
                    "expected {'a': > 0, 'b_ms': number, ...} (nas-profile --calibrate)"
                )
        return LatencyTable(
            environment=dict(data["environment"]),
            network=dict(data["network"]),
            protocol=dict(data["protocol"]),
            entries={str(k): dict(v) for k, v in data["entries"].items()},
            created=str(data.get("created", "")),
            source=source,
            calibration=dict(calibration) if calibration is not None else None,
        )


def mismatch(table_env: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """The ``MATCH_KEYS`` on which two environments differ, as ``key: table != here``."""
    return [
        f"{k} {table_env.get(k)!r} != {expected.get(k)!r}"
        for k in MATCH_KEYS
        if table_env.get(k) != expected.get(k)
    ]


def here_for(table_env: dict[str, Any]) -> dict[str, Any] | None:
    """This machine's environment for the table's kind of device, dtype, memory format and
    thread count (None: this machine has no such device)."""
    kind = str(table_env.get("device_type", "cpu"))
    if kind == "cuda" and not torch.cuda.is_available():
        return None
    dtype = str(table_env.get("dtype", "float32"))
    here = environment(kind, dtype if dtype in DTYPES else "float32",
                       channels_last=bool(table_env.get("channels_last", False)))  # fmt: skip
    # The thread count is a setting of the deployment the table describes (as the dtype is),
    # not of the process reading it: a search may run on more threads than the target. It
    # must still be a count this machine can run.
    threads = table_env.get("threads")
    if kind == "cpu" and isinstance(threads, int) and 1 <= threads <= (os.cpu_count() or 1):
        here["threads"] = threads
    return here


def load_table(
    path: str | Path,
    *,
    expect: dict[str, Any] | str | None = "here",
    force: bool = False,
    force_hint: str = "force it with --force",
) -> LatencyTable:
    """Read a table and refuse, in one line naming the differences, one measured elsewhere
    than ``expect`` (an ``environment()``; ``"here"``: this machine, for the table's device
    kind, dtype and memory format; None: no check), unless ``force``. ``force_hint`` says how the
    caller's user gets past it (``force it with cost.force=true``, ...)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no latency table at {path.absolute()}; run nas-profile first")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"latency table {path} is not JSON ({e})") from None
    table = LatencyTable.from_json(data, str(path))
    if expect is not None and not force:
        if expect == "here":
            here = here_for(table.environment)
            if here is None:
                raise ValueError(
                    f"latency table {path} was measured on a CUDA device and this machine has "
                    f"none: re-run nas-profile here, or {force_hint}"
                )
            expect = here
        assert isinstance(expect, dict)
        diff = mismatch(table.environment, expect)
        if diff:
            raise ValueError(
                f"latency table {path} was measured elsewhere ({'; '.join(diff)}; table != "
                f"here): re-run nas-profile on this machine, or {force_hint}"
            )
    return table


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
