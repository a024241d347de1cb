"""A command run as a process tree that can be ended whole: a deadline and an interrupt flag.

``dba3c bench scale`` starts ``mpiexec`` and its ranks for each job. A job that crawls or a
Ctrl-C must end every process of it, not only the one started: mpiexec puts itself in its own
process group and the ranks may outlive it. :class:`ProcessTree` starts the command in a new
session and ends it by the session (every process in it, wherever it was reparented) and by
descent from the command: SIGTERM first, SIGKILL to whatever is left a few seconds later.
:class:`Interrupt` turns SIGINT / SIGTERM to this process into a flag that the waiting loop
checks, so the tree is ended before the command line reports the interrupt.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any

from dba3c.errors import Interrupted

EXITED, TIMED_OUT, INTERRUPTED = "exited", "timed out", "interrupted"


class Interrupt:
    """While entered, SIGINT and SIGTERM set this flag (``signum``: the first one caught)
    instead of stopping the process; the handlers before are restored on exit. Enter it in
    the main thread (Python delivers signals there)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._event = threading.Event()
        self._before: dict[int, Any] = {}

    def __enter__(self) -> Interrupt:
        self._before = {sig: signal.signal(sig, self._caught) for sig in self.SIGNALS}
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)

    def _caught(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        self._event.set()

    def is_set(self) -> bool:
        """True once a signal was caught."""
        return self._event.is_set()

    def check(self) -> None:
        """Raise :class:`~dba3c.errors.Interrupted` once a signal was caught."""
        if self.signum is not None:
            raise Interrupted(self.signum)


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, pgrp, session, ...);
    None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def tree_pids(root: int, session: int) -> set[int]:
    """The live processes of a tree: every process of ``session`` and every descendant of
    ``root`` (a descendant that started a session of its own is still found by descent while
    its parent lives); zombies are left out."""
    children: dict[int, list[int]] = {}
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is None or fields[0] in ("Z", "X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        if int(fields[3]) == session:
            found.add(int(entry))
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    fields = _stat_fields(root)
    if fields is not None and fields[0] not in ("Z", "X"):
        found.add(root)
    return found


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


class ProcessTree:
    """``cmd`` started in a new session (so it and everything it starts can be found and
    ended together); stdin is /dev/null, ``stdout`` / ``stderr`` as for ``subprocess``."""

    def __init__(self, cmd: list[str], *, env: dict[str, str] | None = None,
                 stdout: int | IO[Any] | None = subprocess.DEVNULL,
                 stderr: int | IO[Any] | None = None, text: bool = False):
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=stdout,
                                     stderr=stderr, start_new_session=True, text=text)
        self.pid = self.proc.pid  # also the session's id

    def pids(self) -> set[int]:
        """The live processes of the tree (see :func:`tree_pids`)."""
        return tree_pids(self.pid, self.pid)

    def end(self, grace_s: float = 3.0) -> None:
        """End every process of the tree: SIGTERM, then SIGKILL to those still alive after
        ``grace_s`` seconds; returns once none is left (the command reaped)."""
        pids = self.pids()
        _signal_all(pids, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            self.proc.poll()  # reap the command itself, so it does not linger as a zombie
            time.sleep(0.05)
            pids = self.pids()
        while pids:  # a process started while we were killing is found on the next round
            _signal_all(pids, signal.SIGKILL)
            self.proc.poll()
            time.sleep(0.02)
            pids = self.pids()
        self.proc.wait()

    def wait(self, interrupt: Interrupt | None = None,
             deadline: Callable[[], float | None] = lambda: None,
             poll_s: float = 0.05) -> str:
        """Wait for the command to exit (:data:`EXITED`), ending the whole tree when
        ``deadline()`` (a ``time.monotonic()`` value, None for none; asked on every poll) has
        passed (:data:`TIMED_OUT`) or ``interrupt`` caught a signal (:data:`INTERRUPTED`).
        Processes of the tree that outlive the command are ended too."""
        how = EXITED
        while self.proc.poll() is None:
            limit = deadline()
            if interrupt is not None and interrupt.is_set():
                how = INTERRUPTED
                break
            if limit is not None and time.monotonic() >= limit:
                how = TIMED_OUT
                break
            time.sleep(poll_s)
        self.end()
        return how

    @property
    def returncode(self) -> int | None:
        """The command's exit status once it ended (negative: the signal that ended it)."""
        return self.proc.returncode
