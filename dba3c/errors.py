"""The exceptions that reach users as one line ``error: ...``, and their exit codes."""

from __future__ import annotations

import sys
from collections.abc import Callable


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


def exit_code(run: Callable[[], int]) -> int:
    """Call ``run`` and return its exit code; a UserError becomes one ``error: ...`` line on
    stderr and code 2, a TrainingError the same with code 1, an interrupt code 130."""
    try:
        return run()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TrainingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
