"""Benchmarks: ``dba3c bench`` and the measurements behind docs/benchmarks.md.

  commands.py  dba3c bench BENCH: each bench's options and what it runs
  node.py      dba3c bench node, profile, long: one node's ceilings, end-to-end throughput,
               MFU and distributed overhead; a worker's profile; a long run's memory and disk
  scale/       dba3c bench scale: the grid on the emulated cluster and the analytic model
               (its own map in scale/__init__.py)
  record.py    what those four record: the machine, the command line, peak RSS, the JSON
               under bench/ and, with --log, a new entry under docs/log
  emulated.py  the emulated cluster of slurm/local-cluster.sh, from Python
  proctree.py  a command's whole process tree, ended on a deadline or a signal
  pingpong.py  an MPI ping-pong (links' throughput)
  real_ranks.py  dba3c bench real-ranks: what the collective overlap costs real ranks
  waiting.py   dba3c bench waiting: what waiting in a collective costs
  stages.py    dba3c bench stages: what a staged gradient costs
"""
