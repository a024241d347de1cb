"""A thread that lets nonblocking communication advance while the calling thread computes."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Poller:
    """Calls ``poll`` every ``period_s`` on a daemon thread, inside a ``with`` block: lets
    nonblocking communication advance while the calling thread computes (MPI advances a
    nonblocking collective only inside an MPI call)."""

    def __init__(self, poll: Callable[[], None], period_s: float):
        self.poll, self.period_s = poll, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.poll()

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
