"""The commands' one shared error wrapper (``nas.cli.errors``): bad input is one line and exit
code 2; any other exception keeps its traceback."""

from __future__ import annotations

import pytest

from nas.cli.errors import EXIT_BAD_INPUT, error_line, one_line_errors


@one_line_errors("nas-demo")
def demo(error: Exception | None = None) -> int:
    if error is not None:
        raise error
    return 0


def test_bad_input_is_the_first_line_of_its_message_and_exit_code_2(capsys):
    assert demo() == 0 and capsys.readouterr().err == ""
    assert demo(ValueError("space 'x' is unknown\nmore detail")) == EXIT_BAD_INPUT == 2
    assert capsys.readouterr().err == "nas-demo: error: space 'x' is unknown\n"
    assert demo(FileNotFoundError("no such file: t.json")) == 2
    assert capsys.readouterr().err == "nas-demo: error: no such file: t.json\n"
    assert error_line(ValueError()) == "ValueError" and error_line(OSError("\n  x \n")) == "x"


def test_other_errors_keep_their_traceback():
    with pytest.raises(KeyError):
        demo(KeyError("a bug"))
    with pytest.raises(RuntimeError):  # not bad input unless a command says so
        demo(RuntimeError("a bug"))
    # a file that cannot be read or written is the environment's fault: one line by default
    assert demo(PermissionError(13, "Permission denied", "/x")) == 2
    quiet = one_line_errors("nas-demo", (ValueError,))(demo.__wrapped__)
    with pytest.raises(OSError):
        quiet(PermissionError("denied"))
