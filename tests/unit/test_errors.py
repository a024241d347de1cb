"""An interrupted command's exit (dba3c.errors.exit_code): 128 plus the signal, one line."""

from __future__ import annotations

import signal

from dba3c.errors import Interrupted, exit_code


def test_an_interrupted_command_exits_128_plus_the_signal_with_one_line(capsys):
    def interrupted(signum: int, detail: str) -> int:
        raise Interrupted(signum, detail)

    assert exit_code(lambda: interrupted(signal.SIGINT, "3 points measured kept in x")) == 130
    assert exit_code(lambda: interrupted(signal.SIGTERM, "")) == 143
    assert capsys.readouterr().err == ("error: interrupted; 3 points measured kept in x\n"
                                       "error: interrupted\n")
