"""``python dba3c/benchmarks/pingpong.py NBYTES REPS`` under MPI with 2 ranks: rank 0 sends NBYTES
to rank 1 and gets them back, REPS times; rank 0 prints one JSON line with the byte count, the
seconds it took and each rank's host name (tests/system/test_cluster.py measures links with it,
dba3c bench scale the emulated cluster's unshaped throughput)."""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI


def main(num_bytes: int, reps: int) -> None:
    """Ping-pong between ranks 0 and 1; rank 0 reports."""
    comm = MPI.COMM_WORLD
    buf = np.ones(num_bytes, np.uint8)
    hosts = comm.gather(MPI.Get_processor_name())
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        if comm.rank == 0:
            comm.Send(buf, 1)
            comm.Recv(buf, 1)
        else:
            comm.Recv(buf, 0)
            comm.Send(buf, 0)
    seconds = time.perf_counter() - t0
    if comm.rank == 0:
        print(json.dumps({"bytes_each_way": num_bytes * reps, "seconds": seconds,
                          "hosts": hosts}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
