"""Where commands write: a directory or file named on the command line or in the config,
checked before the work that fills it, so that a bad one is one ``error:`` line
(:class:`~dba3c.errors.UserError`) naming it, and nothing is written.

Each check takes the path and a ``label`` saying where it was given, as the message shows
it: ``--out plots``, ``run.dir=runs/x``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dba3c.errors import UserError

# what a file system answers a path it will not write: permissions, a read-only or immutable
# file system, a system directory, a file where a directory must be (a full one is no bad
# input: its errors are left to the caller)
REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR, errno.EEXIST)
WRITABLE = "give a directory this user can write in"


def _existing(path: Path) -> Path:
    """``path``, or its nearest ancestor that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_output_dir(path: str | Path, label: str) -> None:
    """UserError unless ``path`` is a directory this user can write in, or can be made as
    one (nothing is made here)."""
    path = Path(path)
    existing = _existing(path)
    if not existing.is_dir():
        raise UserError(f"{label} is a file; it must be a directory (made if missing)"
                        if existing == path else
                        f"{label}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = label if existing == path else f"{label}: {existing}"
        raise UserError(f"{where} cannot be written: not writable by this user; {WRITABLE}")


def make_output_dir(path: str | Path, label: str) -> Path:
    """Make the directory ``path`` (and its parents) after :func:`check_output_dir`; what
    the file system still refuses becomes a UserError too (:func:`refusals`). Returns the
    path."""
    path = Path(path)
    check_output_dir(path, label)
    with refusals(label):
        path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def refusals(label: str) -> Iterator[None]:
    """Turn a file system's refusal (:data:`REFUSED`) to write in the directory of ``label``
    into a UserError naming it: one that refuses where permissions allow (read-only,
    immutable, a system directory)."""
    try:
        yield
    except OSError as e:
        if e.errno not in REFUSED:
            raise
        raise UserError(f"{label} cannot be written: {e.strerror or e}; {WRITABLE}") from None


def check_output_file(path: str | Path, label: str) -> None:
    """UserError unless a file can be written at ``path``: not a directory, in an existing
    directory this user can write in (nothing is made here)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{label} is a directory; it must name a file")
    parent = path.parent
    if not parent.is_dir():
        what = "is a file" if parent.exists() else "does not exist"
        raise UserError(f"{label}: its directory {parent} {what}; give a file in an existing "
                        f"directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{label}: its directory {parent} cannot be written: not writable by "
                        f"this user; {WRITABLE}")
