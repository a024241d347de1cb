"""dba3c: distributed synchronous BA3C (batched advantage actor-critic) for Atari on CPUs.

Where things live (each package's ``__init__`` maps its modules):

  cli.py        the ``dba3c`` command line
  config.py     the config schema (frozen dataclasses), loading, overrides, pure checks
  preset.py     a config checked against the network, the simulator and the score tables
  core.py       the small interfaces: ParameterClient, StagedClient, Transport, Params
  learning/     what a worker computes: network, loss, update rules (no I/O)
  games/        simulators, scores, greedy evaluation, video
  training/     one node's trainer and a run's records (chief, checkpoints, metrics)
  distributed/  ranks over MPI: parameter servers (ps/), collectives (collective/)
  launchers/    local mpiexec, submitit/Slurm, sweeps, tuning: reading the environment
  benchmarks/   dba3c bench: one node, the emulated cluster at scale, the analytic model
  analysis/     dba3c plot
"""

import os

__version__ = "0.1.0"

# TensorFlow's oneDNN CPU kernels, before any module imports TensorFlow. TensorFlow turns
# them on by itself only on CPUs with AVX-512 VNNI or newer; on AVX2 CPUs they trained both
# networks faster than TensorFlow's own kernels (docs/decisions.md, "oneDNN kernels").
# Same function, another float summation order. TF_ENABLE_ONEDNN_OPTS=0 in the environment
# keeps TensorFlow's own kernels.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
