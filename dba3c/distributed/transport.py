"""Messaging between ranks: two implementations of :class:`dba3c.core.Transport`.

The parameter-server protocol (``dba3c.distributed``) needs only nonblocking sends and
receives of NumPy buffers with an integer tag, polled with :meth:`Request.test`. Collective
aggregation (``dba3c.distributed.collective.ranks``) also needs nonblocking collectives on a group
of ranks
(:meth:`Transport.split` -> :class:`Collectives`: reduce-scatter, allreduce, allgather, all
summing or concatenating float32 or int64 vectors). :class:`MpiTransport` maps them onto
mpi4py's buffer-based ``Isend``/``Irecv``, ``Ireduce_scatter``, ``Iallreduce`` and
``Iallgatherv`` (no pickling); :class:`InProcessTransport` runs a world of threads in one
process for tests. This is the only module that imports MPI.

Waiting never spins: :func:`wait_until` polls with a short, growing sleep (blocking MPI calls
would keep a core at 100% while waiting).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import stat
import struct
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

import numpy as np

from dba3c.core import Collectives, Request, Transport

ANY_SOURCE = -1
# The final barrier's tag: above the protocol's (dba3c.distributed, 1-9), within MPI's
# guaranteed tag range (0-32767)
BARRIER_TAG = 32000
# A run of a sequence in one MPI job (TransportView) moves the protocol's tags by 16 x its
# number (modulo RUN_TAG_CYCLE), so they stay below BARRIER_TAG
TAGS_PER_RUN = 16
RUN_TAG_CYCLE = BARRIER_TAG // TAGS_PER_RUN - 1


def offsets(counts: Sequence[int]) -> list[int]:
    """Where each contiguous part of lengths ``counts`` starts."""
    return [int(x) for x in np.cumsum([0, *counts[:-1]])]


def wait_until(done: Callable[[], bool], idle: Callable[[], None] | None = None,
               max_sleep_s: float = 0.0005, quick_s: float = 0.0,
               quick_sleep_s: float = 0.0) -> None:
    """Poll ``done`` until it is true, sleeping between polls and calling ``idle`` between
    them (e.g. the chief's bookkeeping): for the first ``quick_s`` seconds sleeps of
    ``quick_sleep_s``, then 50 us (or ``max_sleep_s`` if shorter) doubling to
    ``max_sleep_s``. The quick start suits waits that are usually short, such as a
    collective's last message rounds; a long wait still backs off."""
    quick_until = time.perf_counter() + quick_s
    sleep = min(5e-5, max_sleep_s)
    while not done():
        if idle is not None:
            idle()
        if quick_s and time.perf_counter() < quick_until:
            time.sleep(quick_sleep_s)
            continue
        time.sleep(sleep)
        sleep = min(sleep * 2, max_sleep_s)


QUICK_CAPS, QUICK_DIVISOR = 20, 5


class WaitSleeps(TypedDict, total=False):
    """:func:`wait_until`'s sleep arguments."""

    max_sleep_s: float
    quick_s: float
    quick_sleep_s: float


def collective_wait(cap_s: float) -> WaitSleeps:
    """:func:`wait_until`'s sleeps for a rank blocked in a collective whose poll cap is
    ``cap_s``: ``QUICK_DIVISOR`` times faster for its first ``QUICK_CAPS`` caps (10 us for
    1 ms at the default 50 us), then backing off to the cap. With the communication hidden
    behind compute, what a step still waits for is the first layer's reduce-scatter and
    allgather, a few message rounds that each wait for a poll; a long wait (a straggler)
    still polls at the cap (docs/decisions.md, "quick polls")."""
    return {"max_sleep_s": cap_s, "quick_s": QUICK_CAPS * cap_s,
            "quick_sleep_s": cap_s / QUICK_DIVISOR}


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


PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30  # prctl(2) options (linux/prctl.h)
TIMER_SLACK_NS = 1000  # how late a sleep may end: Linux's default is 50 us


def precise_sleeps(slack_ns: int = TIMER_SLACK_NS) -> None:
    """Let the calling thread's sleeps, and those of the threads it starts later, end at most
    ``slack_ns`` late instead of Linux's default 50 us: with the default, a rank's short
    polling sleeps in a collective last well beyond what they ask, and every round of the
    collective waits for a poll (docs/decisions.md, "timer slack"). Does nothing where prctl
    is not Linux's."""
    if not sys.platform.startswith("linux"):
        return
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl(PR_SET_TIMERSLACK, slack_ns, 0, 0, 0)


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


# MPICH's control variables for ``dist.collective_algorithm: recursive``: reduce-scatter by
# recursive halving and allgather(v) by recursive doubling move the same bytes per rank as
# MPICH's choice above 512 KB (pairwise exchange and a ring), in log2 W rounds instead of
# W - 1 each; every round waits for a poll of MPI_Test
# (docs/decisions.md, "recursive collectives"). The allreduce of a replicated first bucket
# (``dist.replicate_first_bucket``) by recursive doubling: log2 W rounds of the whole bucket.
# Another MPI ignores them (Open MPI: its ``coll`` MCA parameters choose).
RECURSIVE_COLLECTIVES = {"MPIR_CVAR_IREDUCE_SCATTER_INTRA_ALGORITHM": "sched_recursive_halving",
                         "MPIR_CVAR_IALLGATHERV_INTRA_ALGORITHM": "sched_recursive_doubling",
                         "MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM": "sched_recursive_doubling"}


def collective_environment(algorithm: str, environ: dict[str, str]) -> dict[str, str]:
    """The variables to add to ``environ`` before MPI starts for ``dist.collective_algorithm``
    (``recursive`` or ``mpi``); a variable the user set already is left alone."""
    wanted = RECURSIVE_COLLECTIVES if algorithm == "recursive" else {}
    return {k: v for k, v in wanted.items() if k not in environ}


class MpiTransport:
    """mpi4py buffer-based nonblocking point-to-point on COMM_WORLD. MPI starts here, after
    ``collective_algorithm`` (``dist.collective_algorithm``) chose the collectives' rounds;
    the rank's sleeps while it polls become precise (:func:`precise_sleeps`; the rank's
    threads start after this) and its stderr writes whole lines (:func:`whole_lines`)."""

    def __init__(self, collective_algorithm: str) -> None:
        precise_sleeps()
        whole_lines(sys.stderr)
        os.environ.update(collective_environment(collective_algorithm, dict(os.environ)))
        from mpi4py import MPI

        self._mpi = MPI
        self._comm = MPI.COMM_WORLD
        self.rank, self.size = self._comm.Get_rank(), self._comm.Get_size()
        self._hosts: tuple[str, ...] | None = None
        self._recvs: list = []

    def gather_hosts(self) -> tuple[str, ...]:
        """Every rank's host name, by rank (:attr:`hosts` from then on). Collective: every
        rank of the world calls it at the same point, where all of them are (at start-up: a
        view of the world, or a chief recording the hosts, cannot start a world collective
        later). ``dba3c doctor`` never calls it: it must not wait on a rank that may never
        answer."""
        if self._hosts is None:
            self._hosts = tuple(self._comm.allgather(socket.gethostname()))
        return self._hosts

    @property
    def hosts(self) -> tuple[str, ...]:
        """What :meth:`gather_hosts` gathered."""
        if self._hosts is None:
            raise RuntimeError("MpiTransport.hosts before gather_hosts(), which every rank "
                               "calls at the same point")
        return self._hosts

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> Request:
        return MpiRequest(self._comm.Isend(buf, dest=dest, tag=tag))

    def irecv(self, buf: np.ndarray, source: int, tag: int) -> Request:
        src = self._mpi.ANY_SOURCE if source == ANY_SOURCE else source
        request = self._comm.Irecv(buf, source=src, tag=tag)
        self._recvs = [r for r in self._recvs if r] + [request]  # a completed request is falsy
        return MpiRequest(request)

    def abort(self, code: int) -> None:
        _drain_output()
        self._comm.Abort(code)

    def split(self, member: bool) -> MpiCollectives | None:
        """``MPI_Comm_split`` of COMM_WORLD: members keep their world order."""
        comm = self._comm.Split(0 if member else self._mpi.UNDEFINED, self.rank)
        return MpiCollectives(comm) if member else None

    def cancel_receives(self) -> None:
        """Cancel every receive still posted (a run's standing receives), releasing their
        buffers."""
        for request in self._recvs:
            if request and not request.Test():
                request.Cancel()
                request.Wait()
        self._recvs = []

    def barrier(self, max_sleep_s: float = 0.0005) -> None:
        """The end of the run: cancel standing receives, then a barrier through rank 0 with
        synchronous sends (every rank sends rank 0 a token; once it has all of them, rank 0
        sends each a token back) that sleeps while it waits (polls at most ``max_sleep_s``
        apart: ranks that wait long, such as those sitting out a run of a
        :class:`TransportView`, should poll rarely). A synchronous send completes
        only when its receiver has matched it, so a rank leaves with nothing in flight, and
        only over connections the run already made (rank 0 talks to every rank). MPI's
        Ibarrier, over TCP between 68 emulated nodes (``dba3c bench --scale``, 64 workers),
        took 30-60 s where it connected ranks that had never talked, and in 2 of 3 runs left
        8-12 ranks waiting for good after the others had exited."""
        self.cancel_receives()
        MPI, comm, token = self._mpi, self._comm, np.zeros(1, np.int8)
        if self.rank == 0:
            tokens = np.zeros(self.size, np.int8)
            received = [comm.Irecv(tokens[r:r + 1], source=r, tag=BARRIER_TAG)
                        for r in range(1, self.size)]
            wait_until(lambda: MPI.Request.Testall(received), max_sleep_s=max_sleep_s)
            released = [comm.Issend(token, dest=r, tag=BARRIER_TAG) for r in range(1, self.size)]
            wait_until(lambda: MPI.Request.Testall(released), max_sleep_s=max_sleep_s)
        else:
            reply = np.zeros(1, np.int8)
            pair = [comm.Issend(token, dest=0, tag=BARRIER_TAG),
                    comm.Irecv(reply, source=0, tag=BARRIER_TAG)]
            wait_until(lambda: MPI.Request.Testall(pair), max_sleep_s=max_sleep_s)


class TransportView:
    """The first ``size`` ranks of a world as a world of their own, for run number ``run`` of
    a sequence in one MPI job (``dba3c bench --scale``): no new communicator (MPI's
    collectives between ranks that never talked took 30-60 s on the emulated cluster, see
    :meth:`MpiTransport.barrier`). Messages go point to point through the world with the tags
    moved by ``TAGS_PER_RUN`` x ``run`` (modulo ``RUN_TAG_CYCLE``), so a message an earlier run
    left unreceived is never taken by this one; :meth:`split` is the world's, so every rank of
    the world must call it, the ones outside the view with ``member`` False."""

    def __init__(self, world: Transport, size: int, run: int):
        if not 0 <= world.rank < size <= world.size:
            raise ValueError(f"rank {world.rank} of a world of {world.size} is not in a view "
                             f"of its first {size} ranks")
        self._world, self.rank, self.size = world, world.rank, size
        self._offset = TAGS_PER_RUN * (run % RUN_TAG_CYCLE)

    @property
    def hosts(self) -> Sequence[str]:
        """The world's hosts of this view's ranks."""
        return self._world.hosts[:self.size]

    def _tag(self, tag: int) -> int:
        if not 0 <= tag < TAGS_PER_RUN:
            raise ValueError(f"tag {tag} is outside a view's 0..{TAGS_PER_RUN - 1}")
        return tag + self._offset

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> Request:
        return self._world.isend(buf, dest, self._tag(tag))

    def irecv(self, buf: np.ndarray, source: int, tag: int) -> Request:
        return self._world.irecv(buf, source, self._tag(tag))

    def abort(self, code: int) -> None:
        self._world.abort(code)

    def split(self, member: bool) -> Collectives | None:
        """The world's split (members keep their world order, which is this view's)."""
        return self._world.split(member)


class MpiCollectives:
    """:class:`Collectives` on an MPI communicator (MPI's own algorithms: MPICH picks ring,
    recursive halving/doubling or pairwise exchange by size). Each request holds its
    operation's arrays until it completes (:class:`MpiRequest`)."""

    def __init__(self, comm: Any):
        from mpi4py import MPI

        self._comm, self._sum = comm, MPI.SUM
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def ireduce_scatter(self, send: np.ndarray, recv: np.ndarray,
                        counts: Sequence[int]) -> MpiRequest:
        return MpiRequest(self._comm.Ireduce_scatter(send, recv, list(counts), op=self._sum),
                          send, recv)

    def iallreduce(self, send: np.ndarray, recv: np.ndarray) -> MpiRequest:
        return MpiRequest(self._comm.Iallreduce(send, recv, op=self._sum), send, recv)

    def iallgather(self, send: np.ndarray, recv: np.ndarray,
                   counts: Sequence[int]) -> MpiRequest:
        return MpiRequest(self._comm.Iallgatherv(send, [recv, (list(counts), offsets(counts))]),
                          send, recv)


class MpiRequest:
    """A pending MPI operation: :meth:`test` polls it; :meth:`wait` is MPI's own blocking
    wait (MPICH busy-polls a core in it; ``dba3c.benchmarks.waiting`` measures both).

    ``buffers``: the operation's arrays, held until it completes. mpi4py (4.1) holds those
    of a point-to-point operation but not those of a nonblocking collective, and MPI reads
    and writes them until it completes: a staged gradient's bucket, whose array the backward
    pass drops once the bucket is offered, was freed while Open MPI's reduce-scatter still
    read it (it sends a buffer as the collective advances), and the ranks summed what the
    allocator had written there (MPICH had read it by then)."""

    def __init__(self, request: Any, *buffers: np.ndarray):
        self._request, self._buffers = request, buffers

    def test(self) -> bool:
        """True once the operation has completed."""
        done = bool(self._request.Test())
        if done:
            self._buffers = ()
        return done

    def wait(self) -> None:
        """Block in ``MPI_Wait`` until the operation completes."""
        self._request.Wait()
        self._buffers = ()


class Completed:
    """The :class:`~dba3c.core.Request` of an operation complete when started (an in-process
    send; a collective there was no need to make)."""

    def test(self) -> bool:
        """Always complete."""
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
    """Mailboxes of an in-process world: per destination, FIFO (source, tag, bytes); and the
    membership votes of each :meth:`InProcessTransport.split` call, in call order."""

    def __init__(self, size: int):
        self.size = size
        self.lock = threading.Lock()
        self.boxes: list[deque] = [deque() for _ in range(size)]
        self.aborted: int | None = None
        self.splits: list[dict[int, bool]] = []
        self.groups: dict[int, _Group] = {}  # split call number -> its group

    def check(self) -> None:
        """RuntimeError once a rank aborted the world (ends the other ranks' threads)."""
        if self.aborted is not None:
            raise RuntimeError(f"in-process world aborted with code {self.aborted}")

    def put(self, dest: int, source: int, tag: int, data: np.ndarray) -> None:
        with self.lock:
            self.boxes[dest].append((source, tag, data))

    def take(self, rank: int, source: int, tag: int) -> np.ndarray | None:
        self.check()
        with self.lock:
            for i, (src, t, data) in enumerate(self.boxes[rank]):
                if t == tag and source in (ANY_SOURCE, src):
                    del self.boxes[rank][i]
                    return data
        return None


class _Group:
    """The shared state of one in-process group: the contributions to each operation, by
    the operation's sequence number, until every member has read the result."""

    def __init__(self, world: _World, size: int):
        self.world, self.size = world, size
        self.ops: dict[int, list[np.ndarray | None]] = {}
        self.reads: dict[int, int] = {}

    def contribute(self, op: int, rank: int, data: np.ndarray) -> None:
        with self.world.lock:
            self.ops.setdefault(op, [None] * self.size)[rank] = data.copy()

    def result(self, op: int) -> list[np.ndarray] | None:
        """Every member's contribution once all arrived (None before); the last reader
        frees them."""
        self.world.check()
        with self.world.lock:
            parts = self.ops.get(op)
            if parts is None or any(p is None for p in parts):
                return None
            self.reads[op] = self.reads.get(op, 0) + 1
            if self.reads[op] == self.size:
                del self.ops[op], self.reads[op]
            return [p for p in parts if p is not None]


class _GroupRequest:
    def __init__(self, group: _Group, op: int, finish: Callable[[list[np.ndarray]], None]):
        self._group, self._op, self._finish, self._done = group, op, finish, False

    def test(self) -> bool:
        if not self._done:
            parts = self._group.result(self._op)
            if parts is not None:
                self._finish(parts)
                self._done = True
        return self._done


def _sum(parts: list[np.ndarray]) -> np.ndarray:
    """The elementwise sum of the parts, added in rank order in their own dtype."""
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


class InProcessCollectives:
    """:class:`Collectives` among threads: an operation completes once every member has
    started it; sums are added in group-rank order."""

    def __init__(self, group: _Group, rank: int):
        self._group, self.rank, self.size = group, rank, group.size
        self._next_op = 0

    def _start(self, send: np.ndarray,
               finish: Callable[[list[np.ndarray]], None]) -> Request:
        op, self._next_op = self._next_op, self._next_op + 1
        self._group.contribute(op, self.rank, send)
        return _GroupRequest(self._group, op, finish)

    def ireduce_scatter(self, send: np.ndarray, recv: np.ndarray,
                        counts: Sequence[int]) -> Request:
        start = offsets(counts)[self.rank]

        def finish(parts: list[np.ndarray]) -> None:
            recv[:] = _sum([p[start:start + counts[self.rank]] for p in parts])

        return self._start(send, finish)

    def iallreduce(self, send: np.ndarray, recv: np.ndarray) -> Request:
        def finish(parts: list[np.ndarray]) -> None:
            recv[:] = _sum(parts)

        return self._start(send, finish)

    def iallgather(self, send: np.ndarray, recv: np.ndarray,
                   counts: Sequence[int]) -> Request:
        def finish(parts: list[np.ndarray]) -> None:
            recv[:] = np.concatenate(parts)

        return self._start(send, finish)


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
        self.hosts = (socket.gethostname(),) * world.size
        self._splits_made = 0

    @staticmethod
    def create_world(size: int) -> list[InProcessTransport]:
        """Transports for ranks 0..size-1 sharing one world."""
        world = _World(size)
        return [InProcessTransport(world, r) for r in range(size)]

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> Request:
        self._world.put(dest, self.rank, tag, np.frombuffer(buf.tobytes(), np.uint8))
        return Completed()

    def irecv(self, buf: np.ndarray, source: int, tag: int) -> Request:
        return _InProcessRecv(self._world, self.rank, buf, source, tag)

    def abort(self, code: int) -> None:
        self._world.aborted = code
        raise RuntimeError(f"rank {self.rank} aborted the world with code {code}")

    def split(self, member: bool) -> InProcessCollectives | None:
        """Waits until every rank of the world made this call (like ``MPI_Comm_split``)."""
        world = self._world
        world, call = self._world, self._splits_made
        self._splits_made += 1
        with world.lock:
            while len(world.splits) <= call:
                world.splits.append({})
            votes = world.splits[call]
            votes[self.rank] = member

        def everyone_voted() -> bool:
            world.check()
            return len(votes) == world.size

        wait_until(everyone_voted)
        if not member:
            return None
        members = sorted(r for r, m in votes.items() if m)
        with world.lock:  # the first member to get here makes the group for all
            group = world.groups.setdefault(call, _Group(world, len(members)))
        return InProcessCollectives(group, members.index(self.rank))

    def barrier(self) -> None:
        """No-op: in-process tests join their threads instead."""
