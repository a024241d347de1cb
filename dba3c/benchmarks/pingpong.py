"""``python dba3c/benchmarks/pingpong.py NBYTES REPS`` under MPI with 2 ranks: rank 0 sends NBYTES
to rank 1 and gets them back, REPS times; rank 0 prints one JSON line with the byte count, the
seconds it took, each round trip's seconds and each rank's host name
(tests/system/test_cluster.py measures links with it, dba3c bench scale the emulated cluster's
unshaped throughput)."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI


def exchange(comm: MPI.Comm, buf: np.ndarray) -> None:
    """One round trip of ``buf``: rank 0 to rank 1 and back."""
    if comm.rank == 0:
        comm.Send(buf, 1)
        comm.Recv(buf, 1)
    else:
        comm.Recv(buf, 0)
        comm.Send(buf, 0)


def main(num_bytes: int, reps: int) -> None:
    """Ping-pong between ranks 0 and 1, after one untimed round trip of the same size (the
    connection, MPI's large-message protocol and TCP's window set up before the clock
    starts); rank 0 reports."""
    comm = MPI.COMM_WORLD
    buf = np.ones(num_bytes, np.uint8)
    hosts = comm.gather(MPI.Get_processor_name())
    exchange(comm, buf)
    comm.Barrier()
    t0 = time.perf_counter()
    ends = []
    for _ in range(reps):
        exchange(comm, buf)
        ends.append(time.perf_counter())
    seconds = ends[-1] - t0
    if comm.rank == 0:
        print(json.dumps({"bytes_each_way": num_bytes * reps, "seconds": seconds,
                          "round_trip_seconds": np.diff([t0, *ends]).tolist(),
                          "hosts": hosts}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
