"""A rank's stdout and stderr under a launcher (mpiexec, srun): each printed line written in
one piece (:func:`whole_lines`), and read by the launcher before the rank ends the job
(:func:`drain_output`)."""

from __future__ import annotations

import fcntl
import os
import stat
import struct
import sys
import termios
import time
from typing import Any


def whole_lines(stream: Any) -> None:
    """Make ``stream`` (a rank's stderr) write each line in one piece: Python's stderr
    writes through, so ``print`` writes its text and its newline apart, and mpiexec, which
    forwards each rank's output in the chunks it reads, could then run another rank's line
    into this one (it did, in 2 of 3 runs on emulated nodes: a rank's first line lost to the
    bench that looked for it). Buffered by the line instead, a write with a newline or
    carriage return in it also writes all that came before it, so each ``print`` of one line
    is one write (a text of several lines should be printed a line at a time). A stream that
    cannot be reconfigured stays as it is."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True, write_through=False)


def drain_output(timeout_s: float = 2.0) -> None:
    """Flush stdout/stderr and wait (at most ``timeout_s``) until the launcher has read them
    from their pipes: MPI_Abort kills every rank at once, and mpiexec loses output it has not
    read yet, such as the ``error:`` line that says why."""
    deadline = time.monotonic() + timeout_s
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
            fd = stream.fileno()
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            while time.monotonic() < deadline:
                unread = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
                if unread == 0:
                    break
                time.sleep(0.01)
        except (OSError, ValueError):
            continue
