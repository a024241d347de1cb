"""Point-to-point messaging between ranks: one small interface, two implementations.

The protocol (``dba3c.distributed``) needs only nonblocking sends and receives of NumPy
buffers with an integer tag, polled with :meth:`Request.test`. :class:`MpiTransport` maps them
onto mpi4py's buffer-based ``Isend``/``Irecv`` (no pickling); :class:`InProcessTransport` runs a
world of threads in one process for tests. This is the only module that imports MPI.

Waiting never spins: :func:`wait_until` polls with a short, growing sleep (blocking MPI calls
would keep a core at 100% while waiting).
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

ANY_SOURCE = -1
# The final barrier's tag: above the protocol's (dba3c.distributed, 1-9), within MPI's
# guaranteed tag range (0-32767)
BARRIER_TAG = 32000


class Request(Protocol):
    """A pending send or receive."""

    def test(self) -> bool:
        """True once the operation has completed (the buffer may then be reused)."""


class Transport(Protocol):
    """A world of ``size`` ranks; this is rank ``rank``."""

    rank: int
    size: int

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> Request:
        """Start sending ``buf`` (keep it unchanged until the request completes)."""

    def irecv(self, buf: np.ndarray, source: int, tag: int) -> Request:
        """Start receiving into ``buf`` from ``source`` (or ANY_SOURCE)."""

    def abort(self, code: int) -> None:
        """End the whole world now with a non-zero exit code."""


def wait_until(done: Callable[[], bool], idle: Callable[[], None] | None = None,
               max_sleep_s: float = 0.0005) -> None:
    """Poll ``done`` until it is true, sleeping between polls (50 us doubling to
    ``max_sleep_s``) and calling ``idle`` between them (e.g. the chief's bookkeeping)."""
    sleep = 5e-5
    while not done():
        if idle is not None:
            idle()
        time.sleep(sleep)
        sleep = min(sleep * 2, max_sleep_s)


class MpiTransport:
    """mpi4py buffer-based nonblocking point-to-point on COMM_WORLD."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self._comm = MPI.COMM_WORLD
        self.rank, self.size = self._comm.Get_rank(), self._comm.Get_size()
        self._recvs: list = []

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> Request:
        return _MpiRequest(self._comm.Isend(buf, dest=dest, tag=tag))

    def irecv(self, buf: np.ndarray, source: int, tag: int) -> Request:
        src = self._mpi.ANY_SOURCE if source == ANY_SOURCE else source
        request = self._comm.Irecv(buf, source=src, tag=tag)
        self._recvs = [r for r in self._recvs if r] + [request]  # a completed request is falsy
        return _MpiRequest(request)

    def abort(self, code: int) -> None:
        _drain_output()
        self._comm.Abort(code)

    def barrier(self) -> None:
        """The end of the run: cancel standing receives, then a barrier through rank 0 with
        synchronous sends (every rank sends rank 0 a token; once it has all of them, rank 0
        sends each a token back) that sleeps while it waits. A synchronous send completes
        only when its receiver has matched it, so a rank leaves with nothing in flight, and
        only over connections the run already made (rank 0 talks to every rank). MPI's
        Ibarrier, over TCP between 68 emulated nodes (``dba3c bench --scale``, 64 workers),
        took 30-60 s where it connected ranks that had never talked, and in 2 of 3 runs left
        8-12 ranks waiting for good after the others had exited."""
        for request in self._recvs:
            if request and not request.Test():
                request.Cancel()
                request.Wait()
        MPI, comm, token = self._mpi, self._comm, np.zeros(1, np.int8)
        if self.rank == 0:
            tokens = np.zeros(self.size, np.int8)
            received = [comm.Irecv(tokens[r:r + 1], source=r, tag=BARRIER_TAG)
                        for r in range(1, self.size)]
            wait_until(lambda: MPI.Request.Testall(received))
            released = [comm.Issend(token, dest=r, tag=BARRIER_TAG) for r in range(1, self.size)]
            wait_until(lambda: MPI.Request.Testall(released))
        else:
            reply = np.zeros(1, np.int8)
            pair = [comm.Issend(token, dest=0, tag=BARRIER_TAG),
                    comm.Irecv(reply, source=0, tag=BARRIER_TAG)]
            wait_until(lambda: MPI.Request.Testall(pair))


class _MpiRequest:
    def __init__(self, request: Any):
        self._request = request

    def test(self) -> bool:
        return bool(self._request.Test())


class _Done:
    def test(self) -> bool:
        return True


class _InProcessRecv:
    def __init__(self, world: _World, rank: int, buf: np.ndarray, source: int, tag: int):
        self._world, self._rank, self._buf = world, rank, buf
        self._source, self._tag, self._done = source, tag, False

    def test(self) -> bool:
        if not self._done:
            data = self._world.take(self._rank, self._source, self._tag)
            if data is not None:
                values = data.view(self._buf.dtype)
                if values.size > self._buf.size:
                    raise RuntimeError(f"message of {values.size} values truncated into a "
                                       f"buffer of {self._buf.size} (tag {self._tag})")
                self._buf.ravel()[:values.size] = values
                self._done = True
        return self._done


class _World:
    """Mailboxes of an in-process world: per destination, FIFO (source, tag, bytes)."""

    def __init__(self, size: int):
        self.size = size
        self.lock = threading.Lock()
        self.boxes: list[deque] = [deque() for _ in range(size)]
        self.aborted: int | None = None

    def put(self, dest: int, source: int, tag: int, data: np.ndarray) -> None:
        with self.lock:
            self.boxes[dest].append((source, tag, data))

    def take(self, rank: int, source: int, tag: int) -> np.ndarray | None:
        if self.aborted is not None:
            raise RuntimeError(f"in-process world aborted with code {self.aborted}")
        with self.lock:
            for i, (src, t, data) in enumerate(self.boxes[rank]):
                if t == tag and source in (ANY_SOURCE, src):
                    del self.boxes[rank][i]
                    return data
        return None


def _drain_output(timeout_s: float = 2.0) -> None:
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


class InProcessTransport:
    """One rank of a world of threads in this process (for tests): sends copy the buffer
    and complete at once; receives match in FIFO order per (source, tag), like MPI."""

    def __init__(self, world: _World, rank: int):
        self._world, self.rank, self.size = world, rank, world.size

    @staticmethod
    def create_world(size: int) -> list[InProcessTransport]:
        """Transports for ranks 0..size-1 sharing one world."""
        world = _World(size)
        return [InProcessTransport(world, r) for r in range(size)]

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> Request:
        self._world.put(dest, self.rank, tag, np.frombuffer(buf.tobytes(), np.uint8))
        return _Done()

    def irecv(self, buf: np.ndarray, source: int, tag: int) -> Request:
        return _InProcessRecv(self._world, self.rank, buf, source, tag)

    def abort(self, code: int) -> None:
        self._world.aborted = code
        raise RuntimeError(f"rank {self.rank} aborted the world with code {code}")

    def barrier(self) -> None:
        """No-op: in-process tests join their threads instead."""
