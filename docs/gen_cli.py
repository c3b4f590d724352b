"""The CLI reference, generated from the commands and the config files themselves.

Run by the documentation build (``docs/hooks.py`` puts the result into ``docs/cli.md`` at its
marker line), so the page cannot drift from the code: every command of ``[project.scripts]`` in
``pyproject.toml``; for an argparse command its ``--help`` text (and each sub-command's), taken
in-process from the parser its ``main`` builds (the parser is caught when ``main`` parses, so
nothing runs); for a Hydra command (``nas-search``, ``nas-train``) its module's description, its
top-level settings with the comments of its root config, and its config groups: every YAML file
of every group with the first sentence of the file's leading comment.

``python docs/gen_cli.py`` prints the page's generated part.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
HELP_COLUMNS = "100"  # the width argparse wraps the help text to
DESCRIPTION_LIMIT = 200  # characters of a config option's description in its table

# Hydra commands: the folder of their root config and its name (their groups: _hydra_groups).
# A Hydra command missing here fails the build; every other command is an argparse one.
HYDRA_ROOTS = {
    "nas-search": (CONFIGS, "nas_search"),
    "nas-train": (CONFIGS / "train", "nas_train"),
}
# Hydra's own flags, common to both Hydra commands
HYDRA_FLAGS = """\
Hydra's own flags work as usual: `-m` / `--multirun` sweeps comma-separated values (one run
folder each), `--cfg job` prints the composed config without running, `--config-dir DIR` (or
`hydra.searchpath=[file:///DIR]`) adds a folder laid out as `configs/` with your own options,
`hydra.run.dir=PATH` moves the run folder, and `--help` lists the groups and the composed
config."""


def scripts() -> dict[str, str]:
    """``[project.scripts]`` of ``pyproject.toml``: command -> ``module:function``."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[project\.scripts\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if section is None:
        raise ValueError("pyproject.toml has no [project.scripts] section")
    found = re.findall(r'^\s*([\w.-]+)\s*=\s*"([\w.]+:\w+)"', section.group(1), re.M)
    return dict(sorted(found))


# ------------------------------------------------------------------------ argparse commands


class _Parsed(BaseException):
    """Raised instead of parsing: carries the parser ``main`` built (BaseException, so that no
    ``except Exception`` of a command catches it)."""


@contextmanager
def _catch_parser() -> Iterator[None]:
    original = argparse.ArgumentParser.parse_known_args
    columns = os.environ.get("COLUMNS")

    def caught(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Parsed(self)

    argparse.ArgumentParser.parse_known_args = caught  # type: ignore[assignment,method-assign]
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns


def parser_of(target: str) -> argparse.ArgumentParser:
    """The argument parser the command's ``main`` builds, caught before it parses anything."""
    module_name, function = target.split(":")
    main = getattr(importlib.import_module(module_name), function)
    with _catch_parser():
        try:
            main(["--help"])
        except _Parsed as parsed:
            parser = parsed.args[0]
            assert isinstance(parser, argparse.ArgumentParser)
            return parser
    raise ValueError(f"{target} returned without parsing a command line")


def help_text(parser: argparse.ArgumentParser) -> str:
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        return parser.format_help().rstrip()
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def argparse_section(command: str, target: str) -> list[str]:
    parser = parser_of(target)
    lines = [f"### `{command}`", "", "```text", help_text(parser), "```", ""]
    for name, sub in subcommands(parser).items():
        lines += [f"#### `{command} {name}`", "", "```text", help_text(sub), "```", ""]
    return lines


# --------------------------------------------------------------------------- Hydra commands


def _comment_text(line: str) -> str:
    return line.strip()[1:].strip()


def describe(path: Path) -> str:
    """The first sentence of a YAML file's leading comment (Hydra's ``# @package`` lines
    skipped; an empty or indented comment line, an example, ends the paragraph): the one-line
    description of a config option."""
    words: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip().startswith("#"):
            break
        text = line.strip()[1:]
        if text.strip().startswith("@"):
            continue
        if not text.strip() or (words and text.startswith("  ")):
            break
        words.append(text.strip())
    return shorten(first_sentence(" ".join(words)).rstrip(",;: "))


def first_sentence(text: str) -> str:
    """``text`` up to its first full stop outside brackets (``et al.`` sits inside them)."""
    depth = 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == "." and depth == 0 and (i + 1 == len(text) or text[i + 1] == " "):
            return text[: i + 1]
    return text


def shorten(text: str, limit: int = DESCRIPTION_LIMIT) -> str:
    """``text`` cut at its last clause break (``;`` or ``,`` and a space, outside brackets) before
    ``limit`` characters, marked with an ellipsis; the file itself says the rest."""
    if len(text) <= limit:
        return text
    depth, cut = 0, -1
    for i, char in enumerate(text[:limit]):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char in ";," and depth == 0 and text[i + 1 : i + 2] == " ":
            cut = i
    if cut < limit // 3:
        cut = text.rfind(" ", 0, limit)
    return text[:cut].rstrip(",; ") + " ..."


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def group_options(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.yaml"))


def group_table(group: str, folder: Path, *, multi: bool = False) -> list[str]:
    lines = ["| option | description |", "| --- | --- |"]
    for path in group_options(folder):
        choice = f"{group}=[{path.stem}]" if multi else f"{group}={path.stem}"
        lines.append(f"| `{choice}` | {_cell(describe(path))} |")
    return lines


def settings(path: Path) -> list[tuple[str, str, str]]:
    """The settings of a root config with their comments: (dotted key, default, comment).

    A comment after a key (and the indented comment lines below it) describes that key, a
    comment block at the left margin the key after it; the file's leading block describes the
    file, and ``defaults`` and ``hydra`` are Hydra's."""
    rows: list[list[str]] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    header = True
    after_key = False
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped:
            header = False
            pending = []
            after_key = False
            continue
        if stripped.startswith("#"):
            if header:
                continue
            if line.startswith("#"):
                pending.append(_comment_text(line))
                after_key = False
            elif after_key and rows:
                rows[-1][2] = f"{rows[-1][2]} {_comment_text(line)}".strip()
            continue
        header = False
        if stripped.startswith("- "):
            after_key = False
            continue
        match = re.match(r"^(\s*)([A-Za-z_][\w-]*):(.*)$", line)
        if match is None:
            after_key = False
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3)
        parts = re.split(r"\s+#\s?", rest, maxsplit=1)
        value, comment = parts[0].strip(), (parts[1].strip() if len(parts) > 1 else "")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        dotted = ".".join(k for _, k in stack)
        if stack[0][1] in ("defaults", "hydra"):
            pending = []
            after_key = False
            continue
        description = " ".join([*pending, comment]).strip()
        rows.append([dotted, value, description])
        pending = []
        after_key = True
    return [(k, v, c) for k, v, c in rows]


def settings_table(path: Path) -> list[str]:
    lines = ["| setting | default | what it does |", "| --- | --- | --- |"]
    for key, value, comment in settings(path):
        shown = f"`{_cell(value)}`" if value else ""
        lines.append(f"| `{key}` | {shown} | {_cell(comment)} |")
    return lines


def _module_description(target: str) -> str:
    module = importlib.import_module(target.split(":")[0])
    return inspect.cleandoc(module.__doc__ or "").strip()


def _hydra_groups(command: str) -> list[tuple[str, Path]]:
    """The config groups of a Hydra command and the folder holding each group's files."""
    if command == "nas-search":
        from nas.cli.search import GROUPS

        groups = [(g, CONFIGS / g) for g in GROUPS]
    elif command == "nas-train":
        from nas.cli.train import SHARED_GROUPS

        root = HYDRA_ROOTS[command][0]
        own = sorted(p.name for p in root.iterdir() if p.is_dir())
        groups = [(g, root / g) for g in own] + [(g, CONFIGS / g) for g in SHARED_GROUPS]
    else:
        raise ValueError(f"gen_cli: no config groups known for the Hydra command {command}")
    if ("hydra/launcher", CONFIGS / "hydra" / "launcher") not in groups:
        groups.append(("hydra/launcher", CONFIGS / "hydra" / "launcher"))
    return sorted(groups)


def hydra_section(command: str, target: str) -> list[str]:
    folder, name = HYDRA_ROOTS[command]
    root = folder / f"{name}.yaml"
    lines = [f"### `{command}`", "", _module_description(target), "", HYDRA_FLAGS, ""]
    lines += [
        f"Usage: `{command} [group=option ...] [key=value ...]`. The groups of `{command}` "
        "(each option below):",
        "",
    ]
    lines += [f"- [`{g}=`](#{_anchor(command, g)})" for g, _ in _hydra_groups(command)]
    lines += [
        "",
        f"#### `{command}` settings",
        "",
        f"The top-level keys of `{root.relative_to(ROOT).as_posix()}` (override any of them "
        "with `key=value`, nested ones with `section.key=value`):",
        "",
        *settings_table(root),
        "",
    ]
    for group, group_dir in _hydra_groups(command):
        rel = group_dir.relative_to(ROOT).as_posix()
        lines += [
            f"#### `{command}` group `{group}` {{ #{_anchor(command, group)} }}",
            "",
            f"The files of `{rel}/`:",
            "",
            *group_table(group, group_dir, multi=group == "components"),
            "",
        ]
    return lines


def _anchor(command: str, group: str) -> str:
    return f"{command}-group-{group.replace('/', '-')}"


def _is_hydra(command: str, target: str) -> bool:
    """Whether a command is a Hydra application (its ``main`` is never called here)."""
    if command in HYDRA_ROOTS:
        return True
    module = importlib.import_module(target.split(":")[0])
    if "hydra.main(" in inspect.getsource(module):
        raise ValueError(f"gen_cli: {command} is a Hydra command; add its root to HYDRA_ROOTS")
    return False


# ------------------------------------------------------------------------------------ page


def generate() -> str:
    """The generated part of the CLI reference (Markdown)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    commands = scripts()
    lines = ["## Commands", ""]
    lines += [f"- [`{c}`](#{c})" for c in commands]
    lines.append("")
    for command, target in commands.items():
        if _is_hydra(command, target):
            lines += hydra_section(command, target)
        else:
            lines += argparse_section(command, target)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(generate())
