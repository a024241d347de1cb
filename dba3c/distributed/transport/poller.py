"""A thread that lets nonblocking communication advance while the calling thread computes."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Poller:
    """Calls ``poll`` every ``period_s`` on a daemon thread, inside a ``with`` block, while
    ``busy`` is set: lets nonblocking communication advance while the calling thread
    computes (MPI advances a nonblocking collective only inside an MPI call). With nothing
    in flight the thread sleeps until ``busy`` is set (the poll clears it once nothing is),
    so it takes neither a core nor the GIL from the threads that compute."""

    def __init__(self, poll: Callable[[], None], period_s: float, busy: threading.Event):
        self.poll, self.period_s, self.busy = poll, period_s, busy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)

    def _run(self) -> None:
        # stop is checked after every poll: a poll that finds nothing in flight clears busy,
        # also the busy that __exit__ set to wake the thread (it sets stop first)
        while not self._stop.is_set():
            self.busy.wait()
            if self._stop.wait(self.period_s):
                return
            self.poll()

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.busy.set()  # a sleeping thread wakes to see stop (set before it: _run)
        self._thread.join()
