"""Messaging between the ranks of an MPI job: :class:`MpiTransport` maps
:class:`dba3c.core.Transport` onto mpi4py's buffer-based ``Isend``/``Irecv`` on COMM_WORLD
and its groups' collectives onto ``Ireduce_scatter``, ``Iallreduce`` and ``Iallgatherv``
(no pickling); :class:`TransportView` makes the first ranks of a world a world of their own.
This is the only module that imports MPI."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from dba3c.core import ANY_SOURCE, Collectives, Request, Transport, offsets
from dba3c.distributed.transport.rank_output import drain_output, whole_lines
from dba3c.distributed.transport.waiting import precise_sleeps, wait_until

# The final barrier's tag: above the protocol's (dba3c.distributed, 1-9), within MPI's
# guaranteed tag range (0-32767)
BARRIER_TAG = 32000
# A run of a sequence in one MPI job (TransportView) moves the protocol's tags by 16 x its
# number (modulo RUN_TAG_CYCLE), so they stay below BARRIER_TAG
TAGS_PER_RUN = 16
RUN_TAG_CYCLE = BARRIER_TAG // TAGS_PER_RUN - 1

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
        drain_output()
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
        Ibarrier, over TCP between 68 emulated nodes (``dba3c bench scale``, 64 workers),
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
    a sequence in one MPI job (``dba3c bench scale``): no new communicator (MPI's
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


BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def add_bfloat16(inbuf: Any, inoutbuf: Any, datatype: Any = None) -> None:
    """MPI's sum of bfloat16 vectors, which travel as 16-bit words (MPI has no bfloat16):
    inout = in + inout, added in float32 and rounded to bfloat16 (ml_dtypes' addition), so
    the sum does not depend on the order of its two terms."""
    total = np.frombuffer(inoutbuf, BFLOAT16)
    total[...] = np.frombuffer(inbuf, BFLOAT16) + total


class MpiCollectives:
    """:class:`Collectives` on an MPI communicator (MPI's own algorithms: MPICH picks ring,
    recursive halving/doubling or pairwise exchange by size). Each request holds its
    operation's arrays until it completes (:class:`MpiRequest`). bfloat16 vectors are summed
    as 16-bit words with :func:`add_bfloat16` as the operation."""

    def __init__(self, comm: Any):
        from mpi4py import MPI

        self._comm, self._sum = comm, MPI.SUM
        self._sum_bfloat16 = MPI.Op.Create(add_bfloat16, commute=True)
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def _summing(self, send: np.ndarray, recv: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
        """(send, recv, op) of a sum: bfloat16 as 16-bit words and :func:`add_bfloat16`."""
        if send.dtype == BFLOAT16:
            return send.view(np.uint16), recv.view(np.uint16), self._sum_bfloat16
        return send, recv, self._sum

    def ireduce_scatter(self, send: np.ndarray, recv: np.ndarray,
                        counts: Sequence[int]) -> MpiRequest:
        send, recv, op = self._summing(send, recv)
        return MpiRequest(self._comm.Ireduce_scatter(send, recv, list(counts), op=op),
                          send, recv)

    def iallreduce(self, send: np.ndarray, recv: np.ndarray) -> MpiRequest:
        send, recv, op = self._summing(send, recv)
        return MpiRequest(self._comm.Iallreduce(send, recv, op=op), send, recv)

    def iallgather(self, send: np.ndarray, recv: np.ndarray,
                   counts: Sequence[int]) -> MpiRequest:
        return MpiRequest(self._comm.Iallgatherv(send, [recv, (list(counts), offsets(counts))]),
                          send, recv)

    def duplicate(self) -> MpiCollectives:
        """``MPI_Comm_dup`` of this group's communicator."""
        return MpiCollectives(self._comm.Dup())


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
