"""One-line errors of the toolkit's commands: ``<program>: error: <what is wrong>``, exit code 2.

Entry points (``nas.cli``). Bad input (a value a command refuses, a file that is not there) is
one line on stderr, the first line of the error's message, and exit code 2 (argparse's code for
a bad command line), never a traceback; any other exception is a bug and keeps its traceback.
``one_line_errors`` wraps a command's ``main`` once instead of each command repeating the
``try`` / ``print`` / ``return 2``; ``nas-search`` and ``nas-train``, which run under torchrun,
report through ``nas.cli.launch.fail`` (one rank speaks), with the same line and code.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from typing import ParamSpec

EXIT_BAD_INPUT = 2
# OSError: a file that cannot be read or written (permissions, a folder where a file was
# expected, a full disk) is the environment's fault, not a bug: one line too
BAD_INPUT: tuple[type[Exception], ...] = (ValueError, OSError)

P = ParamSpec("P")


def error_line(error: BaseException) -> str:
    """The first line of an error's message (its class name where the message is empty); an
    ``OSError`` as ``<file>: <reason>``."""
    if isinstance(error, OSError) and error.filename and error.strerror:
        where = error.filename if not error.filename2 else f"{error.filename} -> {error.filename2}"
        return f"{where}: {error.strerror}"
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def report(program: str, message: str) -> int:
    """Print ``<program>: error: <message>`` on stderr; the exit code to return."""
    print(f"{program}: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def check_device(text: str, flag: str) -> str:
    """A device option's value: ``cpu``, ``cuda`` or ``cuda:N``, else a one-line error."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", text or ""):
        raise ValueError(f"{flag}: got {text!r}, expected cpu, cuda or cuda:N")
    return text


def one_line_errors(
    program: str, errors: tuple[type[Exception], ...] = BAD_INPUT
) -> Callable[[Callable[P, int]], Callable[P, int]]:
    """Decorator of a command's ``main``: ``errors`` raised inside become ``report``'s line and
    exit code 2."""

    def wrap(main: Callable[P, int]) -> Callable[P, int]:
        @functools.wraps(main)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> int:
            try:
                return main(*args, **kwargs)
            except errors as e:
                return report(program, error_line(e))

        return guarded

    return wrap
