"""The documentation's examples run: every marked block of the README, the getting-started and
the method pages is executed at a tiny size, so that the pages cannot drift from the code.

A block is marked by an HTML comment on the line before its fence (invisible on the site)::

    <!-- docs-test nas-search: epochs=1 data.max_items=64 | nas-train: epochs=1 -->

For a ``bash`` block, each line that starts with a command of the toolkit (``nas-search``,
``nas-train``, ...) runs as written, its comment removed, with that command's overrides from
the marker appended (Hydra takes the last value of a key: the marker shrinks the run, the
command keeps its meaning). For a ``python`` block, the overrides are appended to every
``nas.search(...)`` (``nas-search:``) and ``nas.train(...)`` (``nas-train:``) call. The blocks of
a page run in order in one scratch folder, so a later block reads an earlier block's run
folders, as a reader following the page would. Unmarked blocks (real data sets, cluster
commands) are not run; each page in ``PAGES`` must have at least one marked block.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", DOCS / "getting-started.md", *sorted((DOCS / "methods").glob("*.md"))]
MARKER = re.compile(r"^<!--\s*docs-test(?P<spec>.*?)-->\s*$")
FENCE = re.compile(r"^```(?P<lang>\w*)")
COMMANDS = ("nas-search", "nas-train", "nas-plot", "nas-summary", "nas-bench", "nas-export",
            "nas-profile", "nas-proxy")  # fmt: skip
ENV = dict(os.environ, OMP_NUM_THREADS="1", NAS_PROGRESS="none", PYTHONUNBUFFERED="1")

# what a python block runs first: nas.search / nas.train with the marker's overrides appended
PREAMBLE = textwrap.dedent(
    """
    import nas.api as _api

    def _shrunk(function, extra):
        def call(*args, overrides=(), **kwargs):
            if isinstance(overrides, dict):
                overrides = [f"{{k}}={{_api._value(v)}}" for k, v in overrides.items()]
            return function(*args, overrides=[*overrides, *extra], **kwargs)
        return call

    _api.search = _shrunk(_api.search, {search!r})
    _api.train = _shrunk(_api.train, {train!r})
    """
)


@dataclass
class Block:
    page: Path
    line: int  # of the fence, 1-based
    lang: str
    text: str
    overrides: dict[str, list[str]]  # command -> overrides to append


def parse_marker(spec: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for part in spec.split("|"):
        part = part.strip()
        if not part:
            continue
        command, sep, values = part.partition(":")
        if not sep or command.strip() not in COMMANDS:
            raise ValueError(f"docs-test marker part {part!r}: expected '<nas-command>: k=v ...'")
        out[command.strip()] = values.split()
    return out


def marked_blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        marker = MARKER.match(lines[i].strip())
        if marker and i + 1 < len(lines) and FENCE.match(lines[i + 1].strip()):
            lang = FENCE.match(lines[i + 1].strip()).group("lang")  # type: ignore[union-attr]
            end = next(j for j in range(i + 2, len(lines)) if lines[j].strip().startswith("```"))
            text = "\n".join(lines[i + 2 : end])
            blocks.append(Block(page, i + 2, lang, text, parse_marker(marker.group("spec"))))
            i = end
        i += 1
    return blocks


def command_lines(text: str) -> list[list[str]]:
    """The toolkit's commands of a bash block, each as words (continuations joined, comments
    removed)."""
    joined = text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] in COMMANDS:
            out.append(words)
    return out


def run_block(block: Block, cwd: Path) -> None:
    where = f"{block.page.relative_to(REPO)}:{block.line}"
    if block.lang in ("bash", "sh", "console", ""):
        commands = command_lines(block.text)
        assert commands, f"{where}: a marked bash block runs no nas-* command"
        for words in commands:
            program = words[0]
            module = f"nas.cli.{program.removeprefix('nas-')}"
            extra = block.overrides.get(program, [])
            script = f"import sys; from {module} import main; sys.argv[0] = {program!r}; "
            script += "sys.exit(main())"
            cmd = [sys.executable, "-c", script, *words[1:], *extra]
            done = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True,
                                  timeout=900)  # fmt: skip
            assert done.returncode == 0, (
                f"{where}: {shlex.join(words + extra)} exited with {done.returncode}\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            )
    elif block.lang == "python":
        preamble = PREAMBLE.format(
            search=block.overrides.get("nas-search", []),
            train=block.overrides.get("nas-train", []),
        )
        done = subprocess.run([sys.executable, "-c", preamble + "\n" + block.text], cwd=cwd,
                              env=ENV, capture_output=True, text=True, timeout=900)  # fmt: skip
        assert done.returncode == 0, (
            f"{where}: the python block failed\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
    else:
        raise AssertionError(f"{where}: a docs-test block must be bash or python, not {block.lang}")


def test_marker_grammar():
    assert parse_marker(" nas-search: epochs=1 a.b=2 | nas-train: epochs=1 ") == {
        "nas-search": ["epochs=1", "a.b=2"],
        "nas-train": ["epochs=1"],
    }
    with pytest.raises(ValueError, match="expected"):
        parse_marker("epochs=1")
    assert command_lines("nas-search a=1 \\\n  b=2   # note\npip install x\n") == [
        ["nas-search", "a=1", "b=2"]
    ]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])  # README: its quickstart
def test_page_examples_run(page, tmp_path):
    blocks = marked_blocks(page)
    assert blocks, f"{page.relative_to(REPO)} has no docs-test block"
    for block in blocks:
        run_block(block, tmp_path)
