"""``nas-plot``: the figures of a finished search, or the cell diagrams of any genotype.

``nas-plot outputs/nb201-darts/seed0`` writes the run's figures into ``<run>/figures/`` (cell
diagrams of the selected genotype, weight heat map and trajectories, argmax shares, NB201
accuracy, DARTS-PT trace, DrNAS concentrations, as far as the run's artefacts allow);
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
from search_spaces.genotype import AnyGenotype
from search_spaces.published import resolve_genotype


def _fail(message: str) -> int:
    return report("nas-plot", message)


def _genotype(spec: str) -> AnyGenotype:
    """A genotype from a genotype.json, a published name, genotype text or an NB201 index."""
    from search_spaces.nb201 import index_to_arch  # imports torch: only for an NB201 index

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
    if text.isdigit():
        return resolve_genotype(index_to_arch(int(text)))
    return resolve_genotype(text)


def _looks_like_a_path(text: str) -> bool:
    """A path, not genotype text: genotype text has no path separator (NB201 arch strings use
    ``|`` and ``~``, DARTS genotypes brackets), nor starts with ``.`` or ``~``."""
    return ("/" in text or os.sep in text or text.startswith((".", "~"))) and not text.startswith(
        ("|", "Genotype(")
    )


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
    args = parser.parse_args(argv)

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
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = Path(args.out) if args.out is not None else None
                written = write_run_figures(target, engine=engine, out_dir=out)
            for w in caught:
                print(f"nas-plot: warning: {w.message}", file=sys.stderr)
            if not written:
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
