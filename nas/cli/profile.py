"""``nas-profile``: measure a space's operations on this machine into a latency table.

Hardware-aware search (``nas.hardware``; ProxylessNAS, Cai et al., ICLR 2019; FBNet, Wu et
al., CVPR 2019). Every candidate op at every shape where it occurs in the discrete network,
and the network's fixed parts, timed on this CPU (``--threads``) or CUDA device (CUDA events),
with their exact MACs and parameters:

* ``nas-profile --space nb201 -o tables/nb201-cpu.json``: NB201's TinyNetwork (C=16, N=5, 32x32);
* ``nas-profile --space darts --device cuda --batch 64 -o tables/darts-gpu.json``: NetworkCIFAR
  (C=36, 20 cells);
* ``nas-profile --show tables/nb201-cpu.json [--check]``: a table's environment and entries;
  ``--check`` refuses it if it was measured elsewhere (``--force`` accepts it);
* ``--calibrate N`` (after profiling, or on an existing table with ``--from TABLE``): measure N
  seeded whole networks and store the correction ``a * sum + b`` that every latency prediction
  from the table then uses (``nas.hardware.validate.calibrate``);
* ``nas-profile --import-lut mobile_trim.yaml --space proxyless -o tables/pixel1.json``: a
  reference lookup table (ProxylessNAS's released per-layer means, ``nas.hardware.lut``) as a
  latency table of the space's network (by default its ImageNet size: 224x224, 1000 classes),
  measured elsewhere: its uses here are forced (``cost.force=true``, ...).

The table feeds the search's cost term (``nas-search cost=latency cost.table=...``) and the
budget selector (``selection=budget``). Every part measured is kept in
``<output>.partial.json`` as it goes: SIGTERM or Ctrl-C stops after the part (or calibration
network) being timed, exit 143 / 130, and the same command continues with the parts not yet
measured. Bad input prints one line and exits with status 2, before any measurement.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from nas.cli.errors import check_device, one_line_errors
from nas.run.disk import atomic_write_text, check_output_file
from nas.run.signals import StopSignals
from search_spaces.space import SPACE_NAMES


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="nas-profile", description=__doc__.split("\n\n")[0])
    spaces = ", ".join(SPACE_NAMES)
    p.add_argument("--space", default="nb201", help=f"{spaces} (default %(default)s)")
    p.add_argument("--C", type=int, help="initial channels (NB201: 16, DARTS: 36)")
    p.add_argument("--layers", type=int, help="NB201: cells per stage N (5); DARTS: cells (20)")
    p.add_argument(
        "--image-size", type=int, help="input resolution (32; IN16: 16; --import-lut: 224)"
    )
    p.add_argument("--num-classes", type=int, help="classes (10; --import-lut: 1000)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, help="CPU intra-op threads (default: torch's)")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16, float16 (CUDA)")
    p.add_argument("--batch", type=int, default=1, help="batch size of the timed inputs (1)")
    p.add_argument("--warmup", type=int, default=50, help="untimed calls per part (50)")
    p.add_argument("--repeats", type=int, default=100, help="timed calls per part (100)")
    p.add_argument("--channels-last", action="store_true", help="NHWC inputs and weights")
    p.add_argument("--no-time", action="store_true", help="MACs and parameters only")
    p.add_argument("-o", "--output", help="the table file to write (JSON)")
    p.add_argument("--show", metavar="TABLE", help="print a table file instead of profiling")
    p.add_argument("--check", action="store_true", help="with --show: refuse a foreign table")
    p.add_argument("--force", action="store_true", help="with --check: accept it anyway")
    p.add_argument("-q", "--quiet", action="store_true", help="no line per part")
    p.add_argument(
        "--calibrate", type=int, metavar="N", help="measure N whole networks and store a * sum + b"
    )
    p.add_argument("--from", dest="source", metavar="TABLE", help="calibrate this table instead")
    p.add_argument(
        "--calibrate-quantile", type=float, default=1.0,
        help="share of the N networks the stored line over-predicts (1: all, the default)",
    )  # fmt: skip
    p.add_argument(
        "--measurements", metavar="JSON",
        help="with --from: fit the calibration on a latency_table.py run's measured networks",
    )  # fmt: skip
    p.add_argument("--calibrate-seed", type=int, default=0, help="seed of the sample (0)")
    p.add_argument("--net-warmup", type=int, default=20, help="untimed calls per network (20)")
    p.add_argument("--net-repeats", type=int, default=50, help="timed calls per network (50)")
    p.add_argument(
        "--import-lut", metavar="YAML",
        help="import a reference latency lookup table (ProxylessNAS's mobile_trim.yaml format)",
    )  # fmt: skip
    p.add_argument("--device-name", help="with --import-lut: the device the file was timed on")
    return p.parse_args(argv)


def _show(args: argparse.Namespace) -> int:
    # torch and the profiler load after argument parsing: --help and bad options stay instant
    from nas.hardware.cost import CostModel, allowed_ops, cheapest_cost
    from nas.hardware.table import load_table

    table = load_table(args.show, expect="here" if args.check else None, force=args.force)
    env, net, proto = table.environment, table.network, table.protocol
    print(f"latency table {table.source} ({table.created})")
    print(
        f"device {env['device_type']} {env['device_name']}, torch {env['torch']}, "
        f"threads {env['threads']}, dtype {env['dtype']}, channels_last {env['channels_last']}"
    )
    if proto.get("timer") == "imported":
        timing = f"latencies imported from {proto.get('source')} (per-layer means)"
    else:
        timing = (
            f"batch {proto['batch']}, {proto['warmup']} warm-up + {proto['repeats']} timed calls"
        )
    print(
        f"network {net['space']} C={net['C']} layers={net['layers']} "
        f"{net['image_size']}x{net['image_size']} {net['num_classes']} classes; {timing}"
    )
    print(f"{'part':<44}{'median ms':>11}{'p10':>9}{'p90':>9}{'M MACs':>10}{'params':>10}")
    for key, e in table.entries.items():
        lat = [f"{e[k]:.4f}" if k in e else "-" for k in ("latency_ms", "p10_ms", "p90_ms")]
        print(
            f"{key:<44}{lat[0]:>11}{lat[1]:>9}{lat[2]:>9}"
            f"{e['flops'] / 1e6:>10.3f}{int(e['params']):>10,}"
        )
    cal = table.calibration
    if cal:
        print(
            f"calibration: whole network ~ {cal['a']:.4f} * sum + {cal['b_ms']:.4f} ms "
            f"(least squares x {cal.get('margin', 1.0):.3f}, over-predicting "
            f"{100 * float(cal.get('quantile', 1.0)):g} % of {cal.get('n', '?')} networks); "
            "the latency predictions below use it"
        )
        for name in ("plain_sum", "fit", "calibrated"):
            m = cal.get(name)
            if isinstance(m, dict):
                print(
                    f"  {name:<11} RMSPE {m['rmspe_pct']:6.2f} %  within 10 % "
                    f"{m['within_10pct']:5.1f} %  pred/measured {m['mean_pred_over_measured']:.3f}"
                )
    metrics = ["latency", "flops", "params"] if proto.get("timed", True) else ["flops", "params"]
    for metric in metrics:
        m = CostModel.from_table(table, metric)
        lo = cheapest_cost(m, allowed_ops(m.space))
        cheapest = "-" if lo is None else f"{lo:.4f}"
        print(f"{metric}: fixed parts {m.fixed:.4f}; cheapest network {cheapest}")
    return 0


def _recorded(args: argparse.Namespace, table: object) -> dict:
    """The calibration fitted on the networks a validation run measured (``--measurements``)."""
    import json
    from pathlib import Path

    import numpy as np

    from nas.hardware.cost import CostModel
    from nas.hardware.table import LatencyTable
    from nas.hardware.validate import fit_calibration
    from search_spaces.genotype import parse_genotype

    assert isinstance(table, LatencyTable)
    try:
        rows = json.loads(Path(args.measurements).read_text())["rows"]
        pairs = [(str(r["genotype"]), float(r["measured_ms"])) for r in rows]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"--measurements {args.measurements}: expected the JSON latency_table.py writes "
            f"(rows of genotype and measured_ms): {e}"
        ) from None
    raw = CostModel.from_table(table, "latency", calibrated=False)
    space = str(table.network["space"])
    summed = [raw.of_genotype(parse_genotype(g, space)) for g, _ in pairs]
    cal = fit_calibration(np.array([m for _, m in pairs]), np.array(summed),
                          args.calibrate_quantile)  # fmt: skip
    cal["measurements"] = str(args.measurements)
    return cal


def _calibrate(args: argparse.Namespace, table: object) -> None:
    from nas.hardware.lut import is_imported
    from nas.hardware.table import LatencyTable
    from nas.hardware.validate import calibrate

    assert isinstance(table, LatencyTable)
    if not table.protocol.get("timed", True):
        raise ValueError("--calibrate needs a timed table (profiled without --no-time)")
    if is_imported(table) and not args.measurements:
        raise ValueError(
            f"{table.source} was imported from a lookup table timed on another device; "
            "--calibrate times networks on this one (fit one on that device's measurements "
            "with --measurements instead)"
        )
    if args.measurements:
        table.calibration = _recorded(args, table)
        _report(table.calibration)
        return

    # with a partial file (the profiling path), each network's median is kept as it goes
    keep = getattr(args, "keep_network", None)
    done = list(getattr(args, "networks_done", []))

    def progress(k: int, n: int, g: object, measured: float, summed: float) -> None:
        if keep is not None and k >= len(done):
            done.append(measured)
            keep(done)
        if not args.quiet:
            print(f"[{k + 1}/{n}] measured {measured:8.3f} ms  sum {summed:8.3f} ms  {g}")
        stop = getattr(args, "stop", None)
        if stop is not None and stop.requested and k + 1 < n:
            raise _Stopped(k + 1, n, "calibration networks", stop.signum)

    cal = calibrate(
        table,
        args.calibrate,
        seed=args.calibrate_seed,
        quantile=args.calibrate_quantile,
        device=args.device,
        warmup=args.net_warmup,
        repeats=args.net_repeats,
        progress=progress,
        done=list(getattr(args, "networks_done", [])),
    )
    table.calibration = cal
    _report(cal)


def _report(cal: dict) -> None:
    plain, after = cal["plain_sum"], cal["calibrated"]
    print(
        f"calibration: whole network ~ {cal['a']:.4f} * sum + {cal['b_ms']:.4f} ms; plain sum "
        f"RMSPE {plain['rmspe_pct']:.1f} % (pred/measured "
        f"{plain['mean_pred_over_measured']:.3f}), calibrated RMSPE {after['rmspe_pct']:.1f} % "
        f"(pred/measured {after['mean_pred_over_measured']:.3f}, "
        f"{cal['share_over_pct']:.0f} % of the sample measured over it)"
    )


class _Stopped(Exception):
    """A stop request (SIGTERM, Ctrl-C) honoured after the part or network being timed."""

    def __init__(self, k: int, n: int, what: str, signum: int | None) -> None:
        super().__init__(f"{k} of {n} {what}")
        self.signum = signum or signal.SIGTERM


def _partial_entries(
    partial: Path, settings: dict[str, object]
) -> tuple[dict[str, dict[str, float]], list[float]]:
    """The parts, and the calibration networks' medians, that a stopped run of the same
    command measured (``<output>.partial.json``)."""
    if not partial.is_file():
        return {}, []
    try:
        data = json.loads(partial.read_text())
        saved, entries = data["settings"], data["entries"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{partial} is not a partial table of nas-profile ({e}); delete it to start afresh"
        ) from None
    if saved != settings:
        differ = sorted(k for k in settings if saved.get(k) != settings[k])
        raise ValueError(
            f"{partial} holds parts measured with other options ({', '.join(differ)}); run the "
            "stopped command again to continue it, or delete the file to start afresh"
        )
    networks = [float(x) for x in data.get("networks", [])]
    return {str(k): dict(v) for k, v in entries.items()}, networks


def _import(args: argparse.Namespace) -> int:
    """``--import-lut``: a reference lookup table as the latency table of ``--space``."""
    for flag, bad in (("--calibrate", args.calibrate is not None), ("--from", args.source),
                      ("--no-time", args.no_time)):  # fmt: skip
        if bad:
            raise ValueError(f"--import-lut takes no {flag}: the file's latencies are used")
    check_output_file(args.output, "-o/--output")
    from nas.hardware.lut import import_lookup_table
    from nas.hardware.parts import network_layout
    from search_spaces.families import family_of
    from search_spaces.space import get_space

    # the family's ImageNet network (the reference tables' size) unless told otherwise
    family = family_of(get_space(args.space))
    C0, L0 = family.imagenet_size or family.paper_size
    layout = network_layout(
        args.space,
        C=args.C if args.C is not None else C0,
        layers=args.layers if args.layers is not None else L0,
        image_size=args.image_size if args.image_size is not None else 224,
        num_classes=args.num_classes if args.num_classes is not None else 1000,
    )
    table = import_lookup_table(args.import_lut, layout, device_name=args.device_name)
    path = table.save(args.output)
    print(
        f"wrote {path} ({len(table.entries)} parts of {args.space} from {args.import_lut}, "
        f"{table.environment['device_name']}; its uses here need force: cost.force=true, "
        "selection.force=true)"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    if args.show:
        return _show(args)
    if not args.output:
        raise ValueError("-o/--output is required: the table file to write")
    if args.import_lut:
        return _import(args)
    if args.device_name:
        raise ValueError("--device-name names the device of an --import-lut file")
    args.image_size = 32 if args.image_size is None else args.image_size
    args.num_classes = 10 if args.num_classes is None else args.num_classes
    if args.measurements:
        if not args.source:
            raise ValueError("--measurements needs --from TABLE: the table those runs used")
        args.calibrate = args.calibrate or 2  # the count is the file's
    if args.source and args.calibrate is None:
        raise ValueError("--from TABLE calibrates a table: give --calibrate N too")
    if args.calibrate is not None and args.calibrate < 2:
        raise ValueError(f"--calibrate needs at least 2 networks, got {args.calibrate}")
    check_device(args.device, "--device")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    for flag, value in (("--batch", args.batch), ("--repeats", args.repeats)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")
    check_output_file(args.output, "-o/--output")  # before minutes of profiling
    import torch  # after argument parsing, as above

    from nas.hardware.parts import Part, network_layout
    from nas.hardware.profiler import profile
    from nas.hardware.table import load_table
    from search_spaces.families import family_of
    from search_spaces.space import get_space

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: this machine has no CUDA device")
    if args.source:
        # the networks are timed here, so the table must have been measured here
        table = load_table(args.source, expect="here", force=args.force)
        threads = table.environment.get("threads")
        if isinstance(threads, int):
            torch.set_num_threads(threads)
        _calibrate(args, table)
        path = table.save(args.output)
        print(f"wrote {path} (the parts of {args.source} with the calibration)")
        return 0
    # the family's evaluation network of its paper (NB201: C=16, N=5; DARTS: C=36, 20 cells)
    C0, L0 = family_of(get_space(args.space)).paper_size
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    layout = network_layout(
        args.space,
        C=args.C if args.C is not None else C0,
        layers=args.layers if args.layers is not None else L0,
        image_size=args.image_size,
        num_classes=args.num_classes,
    )

    # every part measured is kept in <output>.partial.json as it goes: a stopped run (SIGTERM,
    # Ctrl-C: after the part being timed) continues there when the same command runs again
    partial = Path(f"{args.output}.partial.json")
    settings: dict[str, object] = {
        "space": args.space, "C": layout.spec().get("C"), "layers": layout.spec().get("layers"),
        "image_size": args.image_size, "num_classes": args.num_classes, "device": str(device),
        "threads": torch.get_num_threads(), "dtype": args.dtype, "batch": args.batch,
        "warmup": args.warmup, "repeats": args.repeats, "channels_last": args.channels_last,
        "timed": not args.no_time, "torch": torch.__version__, "calibrate": args.calibrate,
        "calibrate_seed": args.calibrate_seed, "net_warmup": args.net_warmup,
        "net_repeats": args.net_repeats,
    }  # fmt: skip
    done, networks = _partial_entries(partial, settings)
    if done and not args.quiet:
        print(
            f"nas-profile: continuing {partial}: {len(done)} parts"
            + (f" and {len(networks)} calibration networks" if networks else "")
            + " already measured"
        )
    measured = dict(done)

    def keep_network(medians: list[float]) -> None:
        atomic_write_text(
            partial, json.dumps({"settings": settings, "entries": measured, "networks": medians})
        )

    args.networks_done, args.keep_network = networks, keep_network

    def progress(i: int, n: int, part: Part, entry: dict[str, float]) -> None:
        if part.key not in measured:
            measured[part.key] = entry
            atomic_write_text(partial, json.dumps({"settings": settings, "entries": measured}))
        if not args.quiet:
            lat = f"{entry['latency_ms']:.4f} ms" if "latency_ms" in entry else "-"
            print(f"[{i + 1}/{n}] {part.key:<44} {lat}", flush=True)
        if args.stop.requested and i + 1 < n:
            raise _Stopped(i + 1, n, "parts", args.stop.signum)

    with StopSignals("nas-profile") as args.stop:
        try:
            table = profile(
                layout,
                device=device,
                dtype=args.dtype,
                batch=args.batch,
                warmup=args.warmup,
                repeats=args.repeats,
                channels_last=args.channels_last,
                timed=not args.no_time,
                progress=progress,
                done=done,
            )
            if args.calibrate is not None:
                _calibrate(args, table)
        except _Stopped as stopped:
            print(
                f"nas-profile: stopped ({signal.Signals(stopped.signum).name}) after {stopped}; "
                f"what was measured is kept in {partial}: run the same command again to "
                "continue",
                file=sys.stderr,
                flush=True,
            )
            return 128 + int(stopped.signum)
    path = table.save(args.output)
    partial.unlink(missing_ok=True)
    env = table.environment
    print(
        f"wrote {path} ({len(table.entries)} parts of {args.space} on {env['device_type']} "
        f"{env['device_name']}, torch {env['torch']}, threads {env['threads']}, {env['dtype']})"
    )
    return 0


@one_line_errors("nas-profile")
def main(argv: list[str] | None = None) -> int:
    return run(_parse(argv))


if __name__ == "__main__":
    sys.exit(main())
