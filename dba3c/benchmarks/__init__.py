"""Benchmarks: ``dba3c bench`` and the measurements behind docs/benchmarks.md.

  node.py      dba3c bench [--quick | --profile | --long]: one node's ceilings, end-to-end
               throughput, MFU and distributed overhead; a worker's profile; a long run's
               memory and disk
  scale/       dba3c bench --scale: the grid on the emulated cluster and the analytic model
               (its own map in scale/__init__.py)
  record.py    what every mode records: the machine, the command line, peak RSS, the JSON
               under bench/ and, with --log, a new entry under docs/log
  emulated.py  the emulated cluster of slurm/local-cluster.sh, from Python
  proctree.py  a command's whole process tree, ended on a deadline or a signal
  pingpong.py  an MPI ping-pong (links' throughput)
  waiting.py   python -m dba3c.benchmarks.waiting: what waiting in a collective costs
  stages.py    python -m dba3c.benchmarks.stages: what a staged gradient costs
"""
