"""The one exception type that reaches users as a one-line ``error: ...`` with exit code 2."""


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
