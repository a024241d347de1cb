"""A command's whole process tree ended on a deadline or a signal (``dba3c bench scale``'s
points), with real processes: a shell and its background children."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from dba3c.benchmarks.proctree import (
    EXITED,
    INTERRUPTED,
    TIMED_OUT,
    Interrupt,
    ProcessTree,
    tree_pids,
)
from dba3c.errors import Interrupted

# a shell with two sleeping children, all ignoring SIGTERM like the ranks of a run (only
# SIGKILL ends them), and a grandchild in a process group of its own like mpiexec's
STUBBORN = ("trap '' TERM; sleep 100 & sleep 101 & "
            f"{sys.executable} -c 'import os, time; os.setpgid(0, 0); time.sleep(102)' & wait")


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def started_tree(cmd: str, count: int) -> tuple[ProcessTree, set[int]]:
    """``sh -c cmd`` and its pids once ``count`` processes run in it."""
    tree = ProcessTree(["sh", "-c", cmd])
    deadline = time.monotonic() + 10
    while len(pids := tree.pids()) < count:
        assert time.monotonic() < deadline, f"only {pids} started"
        time.sleep(0.05)
    return tree, pids


def test_a_deadline_ends_every_process_of_the_tree_even_those_ignoring_sigterm():
    tree, pids = started_tree(STUBBORN, 4)
    assert tree.pid in pids and len(pids) == 4  # sh, two sleeps, python
    start = time.monotonic()
    how = tree.wait(deadline=lambda: start + 0.5)
    took = time.monotonic() - start
    assert how == TIMED_OUT
    assert not [pid for pid in pids if alive(pid)]
    assert tree.returncode == -signal.SIGKILL  # SIGTERM was ignored
    assert 0.5 <= took < 0.5 + 3.0 + 2.0, took  # the deadline, the grace, then SIGKILL


def test_a_command_that_exits_is_waited_for_and_its_leftover_children_ended():
    # sh exits at once; its background sleep would outlive it (reparented)
    tree = ProcessTree(["sh", "-c", "sleep 100 & echo $! > /dev/stderr; exit 3"],
                       stderr=-1, text=True)
    assert tree.proc.stderr is not None
    orphan = int(tree.proc.stderr.readline())
    assert tree.wait(deadline=lambda: time.monotonic() + 30) == EXITED
    assert tree.returncode == 3 and not alive(orphan)
    assert tree_pids(tree.pid, tree.pid) == set()


def test_an_interrupt_ends_the_tree_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with Interrupt() as interrupt:
        tree, pids = started_tree(STUBBORN, 4)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        start = time.monotonic()
        how = tree.wait(interrupt)
        assert time.monotonic() - start < 0.3 + 3.0 + 2.0
        assert how == INTERRUPTED and interrupt.signum == signal.SIGTERM
        assert not [pid for pid in pids if alive(pid)]
        os.kill(os.getpid(), signal.SIGINT)  # a second signal: still the first one counts
        assert interrupt.signum == signal.SIGTERM
        with pytest.raises(Interrupted) as caught:
            interrupt.check()
    assert caught.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before
