"""Import a reference latency lookup table (a YAML of per-layer means) as a latency table.

Hardware-aware search (``nas.hardware``). ProxylessNAS released the table its mobile search
used: han-cai/files ``proxylessnas/mobile_trim.yaml`` (a Pixel 1), read by mit-han-lab/proxylessnas
``search/utils/latency_estimator.py`` (``LatencyEstimator.predict``). Each key names one layer
at its shapes, ``ltype-input:HxWxC-output:HxWxC[-expand:E-kernel:K-stride:S-idskip:0|1]``, and
holds ``mean`` (ms), ``count`` and ``var``. The space's family says which key each part of our
network layout is (``Family.lookup_keys``); a part whose latency the reference counts inside
another part's entry (a shortcut's addition, inside the ``idskip:1`` block) gets 0 ms, so the
table's sums are the reference's expected latencies (``SuperProxylessNASNets.expected_latency``
in ``search/models/super_nets/super_proxyless.py``).

The device is not this machine: the environment records ``device_name`` (the caller's words,
by default the file's name) and no library versions, so every use of the table on this machine
must be forced (``cost.force=true``, ``selection.force=true``, ``nas-profile --show --check
--force``), and ``nas-profile --calibrate`` refuses it (it would time networks here). MACs and
parameters are computed here, exactly, as ``nas-profile`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nas.hardware.parts import NetworkLayout
from nas.hardware.profiler import part_costs
from nas.hardware.table import LatencyTable, now_iso
from search_spaces.families import family_of
from search_spaces.space import get_space

TIMER = "imported"  # the protocol's ``timer`` of an imported table


def read_lookup_table(path: str | Path) -> dict[str, dict[str, float]]:
    """The entries of a lookup-table YAML: key -> ``{"mean": ms, "count": n, ...}``; a file
    that is not one is a one-line ``ValueError``."""
    import yaml

    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no lookup table at {path.absolute()}")
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path} is not YAML ({first})") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path} is not a lookup table: expected a mapping of layer keys")
    out: dict[str, dict[str, float]] = {}
    for key, entry in data.items():
        mean = entry.get("mean") if isinstance(entry, dict) else None
        if isinstance(mean, bool) or not isinstance(mean, (int, float)) or mean < 0:
            raise ValueError(
                f"{path}: entry {key!r} has no mean latency (expected a 'mean' in ms >= 0)"
            )
        out[str(key)] = {k: float(v) for k, v in entry.items() if isinstance(v, (int, float))}
    return out


def import_lookup_table(
    path: str | Path, layout: NetworkLayout, *, device_name: str | None = None
) -> LatencyTable:
    """The latency table of ``layout`` whose latencies are the lookup table's means at the
    keys the space's family gives each part; refused, in one line naming the first part's key
    the file lacks, where it does not cover the layout."""
    path = Path(path).expanduser()
    lut = read_lookup_table(path)
    space = get_space(layout.space)
    keys = family_of(space).lookup_keys(layout, space)
    entries: dict[str, dict[str, float]] = {}
    used: dict[str, Any] = {}
    for part in layout.parts():
        if part.key not in keys:
            raise ValueError(f"the family gives no lookup-table key for part {part.key}")
        key = keys[part.key]
        entry = part_costs(part)
        if key is None:
            entry.update(latency_ms=0.0, mean_ms=0.0, n=0)
        else:
            found = lut.get(key)
            if found is None:
                net = layout.spec()
                raise ValueError(
                    f"{path} does not cover {net['space']} at C={net['C']}, "
                    f"{net['layers']} blocks, {net['image_size']}x{net['image_size']}, "
                    f"{net['num_classes']} classes: it has no entry {key} (part {part.key})"
                )
            mean = found["mean"]
            entry.update(latency_ms=mean, mean_ms=mean, n=found.get("count", 0.0))
        entries[part.key] = entry
        used[part.key] = key
    return LatencyTable(
        environment={
            "device_type": "cpu",
            "device_name": device_name or f"imported from {path.name}",
            "torch": None,
            "cuda": None,
            "cudnn": None,
            "threads": None,
            "dtype": "float32",
            "channels_last": False,
            "python": None,
            "platform": None,
            "imported": str(path),
        },
        network=layout.spec(),
        protocol={
            "batch": 1,
            "warmup": None,
            "repeats": None,
            "timed": True,
            "timer": TIMER,
            "statistic": "mean",
            "source": str(path),
            "keys": used,
        },
        entries=entries,
        created=now_iso(),
    )


def is_imported(table: LatencyTable) -> bool:
    """Whether ``table`` was imported from a lookup table (measured elsewhere, not here)."""
    return table.protocol.get("timer") == TIMER
