"""A world of ranks as threads of one process, for tests: :class:`InProcessTransport` and its
groups' collectives (:class:`InProcessCollectives`), with MPI's matching rules."""

from __future__ import annotations

import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence

import numpy as np

from dba3c.core import ANY_SOURCE, Completed, Request, offsets
from dba3c.distributed.transport.waiting import wait_until


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
        self.duplicates: dict[int, _Group] = {}  # by the members' count of duplicate calls

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
    started it; sums are added in group-rank order (bfloat16 ones in float32, each sum
    rounded: ml_dtypes' addition)."""

    def __init__(self, group: _Group, rank: int):
        self._group, self.rank, self.size = group, rank, group.size
        self._next_op = 0
        self._duplicates_made = 0

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

    def duplicate(self) -> InProcessCollectives:
        """The same members as a new group (the first member to call it makes it for all)."""
        call, self._duplicates_made = self._duplicates_made, self._duplicates_made + 1
        group = self._group
        with group.world.lock:
            twin = group.duplicates.setdefault(call, _Group(group.world, group.size))
        return InProcessCollectives(twin, self.rank)


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
