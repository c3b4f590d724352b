"""``nas-plot``: the figures of a finished search, or the cell diagrams of any genotype.

``nas-plot outputs/nb201-darts/seed0`` writes the run's figures into ``<run>/figures/`` (cell
diagrams of the selected genotype, weight heat map and trajectories, argmax shares, NB201
accuracy, the selector's decision trace, the strategy's concentrations, as far as the run's
artefacts and plug-ins allow);
``nas-plot DARTS_V2``, ``nas-plot '<genotype text or NB201 arch string>'``, an NB201 index or a
``genotype.json`` writes the cell diagrams into ``--out`` (default ``figures/``). Cells are drawn
with graphviz where ``dot`` is installed and with matplotlib otherwise (``--engine``). Bad input
prints one line and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

from nas.analysis.cells import graphviz_available, resolve_engine
from nas.analysis.figures import write_cell_figures, write_run_figures
from nas.analysis.run import genotype_from_record, is_run_dir
from nas.cli.errors import error_line, report
from nas.run.disk import check_output_folder
from search_spaces.families import indexed_family
from search_spaces.genotype import AnyGenotype
from search_spaces.published import resolve_genotype


def _fail(message: str) -> int:
    return report("nas-plot", message)


def _genotype(spec: str) -> AnyGenotype:
    """A genotype from a genotype.json, a published name, genotype text or an NB201 index."""
    path = Path(spec).expanduser()
    if path.suffix == ".json" or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"genotype file {path} does not exist")
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path} holds no genotype object")
        return genotype_from_record(record)
    text = spec.strip()
    if _looks_like_a_path(text):
        raise FileNotFoundError(
            f"no such run folder {text}; expected the folder of a nas-search run, a "
            "genotype.json, a published name (DARTS_V2, ...), genotype text "
            "(Genotype(normal=[('sep_conv_3x3', 0), ...], ...)) or an NB201 arch string "
            "(|nor_conv_3x3~0|+|...|)"
        )
    if text.isdigit():  # a published network by number (its index table imports torch)
        return indexed_family().indexed_genotype(int(text))
    return resolve_genotype(text)


def _looks_like_a_path(text: str) -> bool:
    """A path, not genotype text: genotype text has no path separator (NB201 arch strings use
    ``|`` and ``~``, DARTS genotypes brackets), nor starts with ``.`` or ``~``."""
    return ("/" in text or os.sep in text or text.startswith((".", "~"))) and not text.startswith(
        ("|", "Genotype(")
    )


def _pareto(root: Path, args: argparse.Namespace) -> int:
    """The found cells of the NB201 runs under ``root`` over the exact front (all 15,625
    cells: benchmark CIFAR-10 test accuracy x the table's, calibrated, latency)."""
    import numpy as np
    import yaml

    from nas.analysis.run import plugin_class
    from nas.bench import BENCHMARK_SPACE, NB201, NUM_CELLS
    from nas.hardware.cost import CostModel
    from nas.hardware.pareto import FoundCell, nb201_costs, plot_nb201_front
    from nas.hardware.table import load_table
    from nas.hardware.validate import measure_network
    from nas.selection.base import Selector
    from search_spaces.families import family_of
    from search_spaces.genotype import parse_genotype
    from search_spaces.space import get_space

    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder; expected a folder of nas-search runs")
    table = load_table(
        args.pareto,
        expect="here" if args.measure else None,
        force_hint="drop --measure to plot the table's predictions only",
    )
    model = CostModel.from_table(table, "latency")
    cost = nb201_costs(model)
    bench = NB201()
    acc = np.array([bench.query(i, dataset="cifar10", split="test") for i in range(NUM_CELLS)])
    family = family_of(get_space(BENCHMARK_SPACE))  # the benchmark's cells, by their index
    if args.measure and isinstance(table.environment.get("threads"), int):
        import torch

        torch.set_num_threads(int(table.environment["threads"]))
    found = []
    for gfile in sorted(root.rglob("genotype.json")):
        run = gfile.parent
        record = json.loads(gfile.read_text())
        if record.get("space") != BENCHMARK_SPACE or "arch" not in record:
            continue
        i = family.index_of(parse_genotype(record["arch"]))
        target = None
        cfg_file = run / "config.yaml"
        if cfg_file.is_file():
            cfg = yaml.safe_load(cfg_file.read_text()) or {}
            # the selector's hard budget, else the cost term's target (cost=...)
            selector = plugin_class(cfg, "selection")
            budget = (
                selector.cost_budget(cfg.get("selection") or {})
                if isinstance(selector, type) and issubclass(selector, Selector)
                else None
            )
            cost_cfg = cfg.get("cost") or {}
            target = budget or (cost_cfg.get("target") if cost_cfg else None)
        measured = None
        if args.measure:
            measured = measure_network(table, family.indexed_genotype(i)).median_ms
        found.append(
            FoundCell(i, None if target is None else float(target), float(cost[i]),
                      float(acc[i]), measured, str(run.relative_to(root)))
        )  # fmt: skip
        shown = "-" if measured is None else f"{measured:.3f}"
        print(f"{run}: cell {i}, CIFAR-10 test {acc[i]:.2f}, predicted {cost[i]:.3f} ms, "
              f"measured {shown} ms, target {target}")  # fmt: skip
    if not found:
        raise ValueError(f"no NB201 run with a genotype.json under {root}")
    env = table.environment
    xlabel = (
        f"{'calibrated ' if table.calibration else ''}latency (ms), batch "
        f"{table.protocol['batch']}, {env['device_name']}, {env['threads']} thread(s); "
        "o predicted, x measured"
    )
    out = Path(args.out) if args.out else root / "pareto.png"
    if out.suffix != ".png":
        out = out / "pareto.png"
    print(plot_nb201_front(cost, acc, found, xlabel=xlabel, path=out))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nas-plot", description=__doc__.splitlines()[0])
    parser.add_argument(
        "target",
        help="a run folder, a genotype.json, a published genotype name (DARTS_V2, ...), "
        "genotype text, an NB201 arch string or an NB201 index",
    )
    parser.add_argument(
        "-o", "--out", default=None, help="output folder (default: <run>/figures or ./figures)"
    )
    parser.add_argument(
        "--engine",
        choices=["auto", "graphviz", "matplotlib"],
        default="auto",
        help="cell diagrams: graphviz's dot where installed (auto), or matplotlib",
    )
    parser.add_argument(
        "--format",
        choices=["png", "svg", "pdf"],
        default="png",
        help="format of the cell diagrams of a genotype (run figures are PNG)",
    )
    parser.add_argument(
        "--pareto",
        metavar="TABLE",
        help="NB201 latency searches: TARGET is a folder of run folders (a Hydra multirun); "
        "draw their cells over the exact front of this table's latency",
    )
    parser.add_argument(
        "--measure", action="store_true", help="with --pareto: also time each found network"
    )
    args = parser.parse_args(argv)
    if args.pareto:
        try:
            return _pareto(Path(args.target).expanduser(), args)
        except (ValueError, FileNotFoundError, OSError) as e:
            return _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)

    try:
        engine = resolve_engine(args.engine)
    except (ValueError, FileNotFoundError) as e:
        return _fail(str(e))
    target = Path(args.target).expanduser()
    try:
        if target.is_dir():
            if not is_run_dir(target):
                return _fail(
                    f"{target} is not a run folder (no metrics.jsonl, genotype.json or "
                    "config.yaml); expected the folder of a nas-search run"
                )
            out = Path(args.out) if args.out is not None else None
            # a folder that cannot be written is said so, not "nothing to plot"
            check_output_folder(out or target / "figures", "--out" if out else "figures folder")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                written = write_run_figures(target, engine=engine, out_dir=out)
            for w in caught:
                print(f"nas-plot: warning: {w.message}", file=sys.stderr)
            if not written:
                if caught:  # every figure failed: say why (the first reason)
                    return _fail(f"no figure of {target} could be written: {caught[0].message}")
                return _fail(f"{target} holds nothing to plot yet (no metrics, no genotype)")
        else:
            genotype = _genotype(args.target)
            written = write_cell_figures(
                genotype, Path(args.out or "figures"), engine=engine, fmt=args.format
            )
    except (ValueError, FileNotFoundError, OSError, RuntimeError) as e:
        return _fail(error_line(e))
    if args.engine == "auto" and not graphviz_available():
        print(
            "nas-plot: note: graphviz's dot is not installed; cells drawn with matplotlib "
            "(apt-get install graphviz for the classic diagrams)",
            file=sys.stderr,
        )
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
