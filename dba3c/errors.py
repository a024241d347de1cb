"""The exceptions that reach users as one line ``error: ...``, and their exit codes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn


class UserError(Exception):
    """Bad input from the user: a config value, argument, file or checkpoint.

    The command line prints ``error: <message>`` on stderr and exits with code 2,
    without a traceback. The message names the bad value and what is allowed.
    """


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. too many non-finite updates in a row).

    The command line prints ``error: <message>`` and exits with code 1; checkpoints already
    written stay intact.
    """


class Interrupted(Exception):
    """A signal (SIGINT, SIGTERM) ended a command that had caught it to clean up first.

    The command line prints ``error: interrupted`` (``; <detail>`` when given, e.g. what was
    kept) on stderr and exits with 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM.
    """

    def __init__(self, signum: int, detail: str = ""):
        super().__init__(f"interrupted; {detail}" if detail else "interrupted")
        self.signum, self.detail = signum, detail


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports problems as one-line UserErrors instead of usage dumps."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see `{self.prog} --help`)")


def exit_code(run: Callable[[], int]) -> int:
    """Call ``run`` and return its exit code; a UserError becomes one ``error: ...`` line on
    stderr and code 2, a TrainingError the same with code 1, an interrupt code 130 (an
    :class:`Interrupted` 128 + its signal)."""
    try:
        return run()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Interrupted as e:
        print(f"error: {e}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
