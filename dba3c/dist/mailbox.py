"""Nonblocking sends that keep their buffers alive, and standing receives."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from dba3c.transport import Transport


class Sender:
    """Nonblocking sends whose buffers stay alive until they complete."""

    def __init__(self, transport: Transport):
        self.t = transport
        self._pending: list[tuple] = []

    def send(self, buf: np.ndarray, dests: Iterable[int], tag: int) -> None:
        """Send ``buf`` (not to be modified afterwards) to every rank in ``dests``; buffers
        of sends completed by now are released (a worker sends a gradient every step)."""
        self.idle()
        for dest in dests:
            self._pending.append((self.t.isend(buf, dest, tag), buf))

    def idle(self) -> bool:
        """Forget completed sends; True when none is pending."""
        self._pending = [(r, b) for r, b in self._pending if not r.test()]
        return not self._pending


class Inbox:
    """A standing receive from one source and tag, reposted after each message."""

    def __init__(self, transport: Transport, source: int, tag: int, size: int,
                 dtype: npt.DTypeLike = np.float32):
        self.t, self.source, self.tag = transport, source, tag
        self.buf = np.zeros(size, dtype)
        self._request = transport.irecv(self.buf, source, tag)

    def poll(self) -> np.ndarray | None:
        """A copy of the next message, or None; the receive is reposted."""
        if not self._request.test():
            return None
        data = self.buf.copy()
        self._request = self.t.irecv(self.buf, self.source, self.tag)
        return data

