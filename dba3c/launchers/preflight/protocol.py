"""The preflight's exchange between the ranks of a job, over a
:class:`~dba3c.core.Transport` (:func:`run_ranks`): every rank sends rank 0 its report; rank
0 measures each pair of itself with another rank in turn (:func:`measure_pair`, the peer
:func:`echo_pair`), decides and sends every rank the exit code. A rank that sends nothing
for its timeout ends the whole job non-zero, named (``Transport.abort``): nothing waits for
good."""

from __future__ import annotations

import socket
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dba3c.core import Request, Transport
from dba3c.distributed.transport.waiting import wait_until
from dba3c.launchers.preflight.findings import LaunchInfo, PairResult, RankReport
from dba3c.launchers.preflight.report import table, verdict
from dba3c.launchers.preflight.wire import REPORT_BYTES, decode_report, encode_report

LATENCY_WARMUP, LATENCY_ROUNDS = 3, 21    # 8-byte round trips: untimed, then timed (median)
BANDWIDTH_BYTES = 4 << 20                 # one message of the bandwidth ping-pong
BANDWIDTH_WARMUP, BANDWIDTH_REPS = 1, 5   # round trips: untimed, then timed (median rate)

# the doctor's tags (it runs alone in its MPI job)
REPORT_TAG, PING_TAG, BULK_TAG, DONE_TAG, ACK_TAG = 1, 2, 3, 4, 5


def _wait(requests: Sequence[Request], timeout_s: float, max_sleep_s: float) -> bool:
    """Poll until every request completed (True) or ``timeout_s`` passed (False)."""
    deadline = time.monotonic() + timeout_s

    def done() -> bool:
        return all(r.test() for r in requests) or time.monotonic() > deadline

    wait_until(done, max_sleep_s=max_sleep_s)
    return all(r.test() for r in requests)


class Silent(Exception):
    """A rank sent nothing within the timeout."""


def measure_pair(t: Transport, peer: int, timeout_s: float) -> PairResult:
    """Rank 0's side of a pair with ``peer`` (which runs :func:`echo_pair`): the median of
    ``LATENCY_ROUNDS`` 8-byte round trips and the median rate of ``BANDWIDTH_REPS``
    ping-pongs of ``BANDWIDTH_BYTES`` each way, after untimed warm-ups (the first message
    opens the connection). The whole pair gets ``timeout_s``; past it, a PairResult with
    ``error`` set."""
    deadline = time.monotonic() + timeout_s

    def round_trip(out: np.ndarray, back: np.ndarray, tag: int, poll_s: float) -> float:
        start = time.perf_counter()
        recv = t.irecv(back, peer, tag)
        send = t.isend(out, peer, tag)
        if not _wait([send, recv], max(0.0, deadline - time.monotonic()), poll_s):
            raise Silent
        return time.perf_counter() - start

    try:
        small, small_back = np.ones(8, np.uint8), np.zeros(8, np.uint8)
        rtts = [round_trip(small, small_back, PING_TAG, 2e-5)
                for _ in range(LATENCY_WARMUP + LATENCY_ROUNDS)][LATENCY_WARMUP:]
        big, big_back = np.ones(BANDWIDTH_BYTES, np.uint8), np.zeros(BANDWIDTH_BYTES, np.uint8)
        bulk = [round_trip(big, big_back, BULK_TAG, 1e-4)
                for _ in range(BANDWIDTH_WARMUP + BANDWIDTH_REPS)][BANDWIDTH_WARMUP:]
    except Silent:
        return PairResult(0, peer, 0.0, 0.0, f"rank {peer} stopped answering: the pair's "
                          f"measurement did not finish within {timeout_s:g} s")
    return PairResult(0, peer, statistics.median(rtts),
                      statistics.median(2 * BANDWIDTH_BYTES / s for s in bulk))


def echo_pair(t: Transport, first_timeout_s: float, timeout_s: float) -> None:
    """A peer's side of :func:`measure_pair`: send every message from rank 0 back. The first
    may take ``first_timeout_s`` (rank 0 measures the pairs before this one first), the rest
    ``timeout_s`` in all. Raises :class:`Silent` past either."""
    small = np.zeros(8, np.uint8)
    big = np.zeros(BANDWIDTH_BYTES, np.uint8)
    deadline: float | None = None
    plan = [(small, PING_TAG, 2e-5)] * (LATENCY_WARMUP + LATENCY_ROUNDS) + \
        [(big, BULK_TAG, 1e-4)] * (BANDWIDTH_WARMUP + BANDWIDTH_REPS)
    for buf, tag, poll_s in plan:
        recv = t.irecv(buf, 0, tag)
        if deadline is None:  # waiting for our turn: poll rarely
            if not _wait([recv], first_timeout_s, 1e-3):
                raise Silent
            deadline = time.monotonic() + timeout_s
        elif not _wait([recv], max(0.0, deadline - time.monotonic()), poll_s):
            raise Silent
        if not _wait([t.isend(buf, 0, tag)], max(0.0, deadline - time.monotonic()), poll_s):
            raise Silent


@dataclass
class Outcome:
    """What :func:`run_ranks` ends with on rank 0 (other ranks: only ``code``)."""

    code: int
    rows: list[RankReport]
    pairs: list[PairResult]
    problem: str | None
    launch: LaunchInfo | None = None


def run_ranks(t: Transport, report: Callable[[], RankReport], timeout_s: float,
              progress: Callable[[str], None], launch: LaunchInfo | None = None) -> Outcome:
    """Every rank of ``t`` calls it. Each rank makes its ``report``; rank 0 gathers them
    (``timeout_s``), measures each pair of rank 0 with another rank in turn
    (``timeout_s`` per pair), decides (:func:`verdict`, with rank 0's ``launch``) and sends
    every rank the exit code.
    A rank silent past its timeout ends the world with ``t.abort(1)`` after an ``error:``
    line naming it (rank 0 prints the table of what it has first). A rank other than 0
    waits for its pair at most (rank + 2) x ``timeout_s`` and then for the verdict at most
    (size - rank + 1) x ``timeout_s``: only a rank 0 that stopped answering runs into
    those (rank 0 bounds each of its own waits by ``timeout_s``)."""
    rank, size = t.rank, t.size

    def checked() -> RankReport:
        try:
            return report()
        except Exception as e:  # noqa: BLE001 - a rank that cannot check itself ends the job
            print(f"error: rank {rank} on {socket.gethostname()}: its checks failed: {e!r}",
                  file=sys.stderr, flush=True)
            t.abort(1)
            raise

    if rank != 0:
        mine = checked()
        sent = t.isend(encode_report(mine), 0, REPORT_TAG)
        try:
            echo_pair(t, (rank + 2) * timeout_s, timeout_s)
            verdict_code = np.zeros(1, np.int64)
            if not _wait([sent, t.irecv(verdict_code, 0, DONE_TAG)], (size - rank + 1) * timeout_s,
                         1e-3):
                raise Silent
        except Silent:
            print(f"error: rank {rank} on {mine.host}: no message from rank 0 within its "
                  f"timeout ({timeout_s:g} s per wait): rank 0 or its link stopped",
                  file=sys.stderr, flush=True)
            t.abort(1)
            return Outcome(1, [], [], "rank 0 silent")
        ack = np.zeros(1, np.int8)
        _wait([t.isend(ack, 0, ACK_TAG)], timeout_s, 1e-3)
        return Outcome(int(verdict_code[0]), [], [], None)

    progress(f"doctor: {size} rank(s); each checks itself (host, CPUs, MPI, PMI, TensorFlow, "
             f"game, disk)")
    start = time.monotonic()
    rows = [checked()]
    bufs = {r: np.zeros(REPORT_BYTES, np.uint8) for r in range(1, size)}
    recvs = {r: t.irecv(buf, r, REPORT_TAG) for r, buf in bufs.items()}
    _wait(list(recvs.values()), timeout_s, 1e-3)
    rows += [decode_report(bufs[r]) for r in range(1, size) if recvs[r].test()]
    progress(f"doctor: reports from {len(rows)} of {size} rank(s) in "
             f"{time.monotonic() - start:.1f} s")

    def fail(problem: str, pairs: list[PairResult]) -> Outcome:
        print(table(rows, pairs, launch), end="", flush=True)
        print(f"error: {problem}", file=sys.stderr, flush=True)
        t.abort(1)
        return Outcome(1, rows, pairs, problem, launch)

    if len(rows) < size:
        return fail(verdict(rows, [], world_size=size, timeout_s=timeout_s) or "", [])
    pairs: list[PairResult] = []
    if size > 1:
        progress(f"doctor: pairs: rank 0 with each of ranks 1..{size - 1} in turn: "
                 f"{LATENCY_ROUNDS} round trips of 8 bytes, {BANDWIDTH_REPS} of "
                 f"{BANDWIDTH_BYTES >> 20} MiB each way")
    for peer in range(1, size):
        pairs.append(measure_pair(t, peer, timeout_s))
        if pairs[-1].error:
            return fail(verdict(rows, pairs) or "", pairs)
    problem = verdict(rows, pairs, world_size=size, timeout_s=timeout_s, launch=launch)
    code = 1 if problem else 0
    code_buf, ack_bufs = np.full(1, code, np.int64), np.zeros((size, 1), np.int8)
    done = [t.isend(code_buf, r, DONE_TAG) for r in range(1, size)]
    acks = [t.irecv(ack_bufs[r], r, ACK_TAG) for r in range(1, size)]
    _wait(done + acks, timeout_s, 1e-3)
    return Outcome(code, rows, pairs, problem, launch)
