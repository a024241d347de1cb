"""The transport layer: messaging between ranks behind :class:`dba3c.core.Transport`, and
how a rank waits on it. The only place MPI is called.

The parameter-server protocol (``dba3c.distributed``) needs only nonblocking sends and
receives of NumPy buffers with an integer tag, polled with :meth:`Request.test`. Collective
aggregation (``dba3c.distributed.collective.ranks``) also needs nonblocking collectives on a
group of ranks (:meth:`Transport.split` -> :class:`Collectives`: reduce-scatter, allreduce,
allgather, all summing or concatenating float32, bfloat16 or int64 vectors).

  mpi.py          MpiTransport: mpi4py's buffer-based Isend/Irecv, Ireduce_scatter, Iallreduce
                  and Iallgatherv (no pickling); TransportView, a world's first ranks as a
                  world of their own (the only module that imports MPI)
  in_process.py   InProcessTransport: a world of threads in one process, for tests
  waiting.py      wait_until and its sleeps: waiting never spins (blocking MPI calls would
                  keep a core at 100%); precise_sleeps, the rank's timer slack
  poller.py       Poller: a thread that lets communication advance while the caller computes
  rank_output.py  a rank's stdout and stderr under a launcher: whole lines, read before an abort
"""
