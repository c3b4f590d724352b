"""Run the whole fidelity suite and write its table.

Every method script of this folder runs in a fresh process (the references' module names clash),
with the ``--reference-root`` items it declares in its ``REFERENCES``; scripts whose references
are not given compare with their recordings (``tests/fidelity/golden/``), and ``--record``
rewrites those from the checkouts. The rows of all scripts go into one Markdown table
(``--out``, default ``docs/fidelity_table.md``, one section per method) with the command and the
date.

    python experiments/fidelity/run_all.py \\
        --reference-root darts=~/src/darts --reference-root drnas=~/src/DrNAS ...
    python experiments/fidelity/run_all.py --only darts,drnas   # some scripts
    python experiments/fidelity/run_all.py                      # against the recordings (CI)
    python experiments/fidelity/run_all.py --record --reference-root ...  # rewrite them

Exit 1 when any row is above its tolerance (the table is written all the same).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from experiments.fidelity.common import Table  # noqa: E402

NOT_METHODS = {"common", "run_all"}


def scripts() -> list[str]:
    """The method scripts: every module of this folder but the harness."""
    return sorted(
        p.stem
        for p in HERE.glob("*.py")
        if p.stem not in NOT_METHODS and not p.stem.startswith("_")
    )


def references_of(name: str) -> dict[str, object]:
    module = importlib.import_module(f"experiments.fidelity.{name}")
    return dict(getattr(module, "REFERENCES", {}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-root", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--only", help="comma-separated script names (default: all)")
    parser.add_argument("--known-answers-only", action="store_true")
    parser.add_argument(
        "--record",
        action="store_true",
        help="write each script's recording (tests/fidelity/golden/); every checkout needed",
    )
    parser.add_argument("--out", default=str(ROOT / "docs" / "fidelity_table.md"))
    args = parser.parse_args(argv)

    names = scripts()
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            raise SystemExit(f"--only: no script {', '.join(unknown)}; expected some of {names}")
        names = wanted
    declared = {n: references_of(n) for n in names}
    known = {ref for refs in declared.values() for ref in refs}
    for item in args.reference_root:
        ref = item.partition("=")[0]
        if ref not in known:
            raise SystemExit(
                f"--reference-root {item!r}: no script of this run compares with {ref!r}; "
                f"expected one of {', '.join(sorted(known))}"
            )

    table = Table()
    failed: list[str] = []
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            own = [r for r in args.reference_root if r.partition("=")[0] in declared[name]]
            out = Path(tmp) / f"{name}.jsonl"
            cmd = [sys.executable, str(HERE / f"{name}.py"), "--json", str(out)]
            cmd += [f"--reference-root={r}" for r in own]
            if args.known_answers_only:
                cmd.append("--known-answers-only")
            if args.record and declared[name]:
                cmd.append("--record")
            print(f"== {name}", flush=True)
            done = subprocess.run(cmd, env=env, cwd=str(ROOT))
            if out.exists():
                table.rows += Table.load(out).rows
            if done.returncode != 0:
                failed.append(name)
                if not out.exists():
                    print(
                        f"{name}: exited {done.returncode} before writing its rows", file=sys.stderr
                    )

    stamp = datetime.date.today().isoformat()
    shown = [a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--out")]
    command = "python experiments/fidelity/run_all.py " + " ".join(
        a.split("=", 1)[0] + "=<checkout>" if "=/" in a or "=~" in a else a for a in shown
    )
    sections = []
    for method in dict.fromkeys(r.method for r in table.rows):
        rows = Table([r for r in table.rows if r.method == method])
        sections.append(f"## {method}\n\n{rows.markdown()}\n")
    text = (
        f"# Fidelity table\n\nWritten by `{command.strip()}` on {stamp} (see fidelity.md).\n\n"
        "Largest relative difference `max|ours - ref| / max|ref|` at float64 (0: equal to the "
        "last bit; `differs`: an exact comparison failed); `known answer` rows compare with the "
        "method's equations written out, the others with the reference code at the commit "
        "shown (`, recorded`: with its outputs recorded at that commit, "
        "tests/fidelity/golden/).\n\n" + "\n".join(sections)
    )
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(table.rows)} rows)")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
