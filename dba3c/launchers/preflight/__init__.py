"""The preflight behind ``dba3c doctor`` (:mod:`dba3c.launchers.doctor`): the ranks and links
a job would run on, checked before it spends node-hours.

Each rank checks itself: its host, the CPUs it is bound to and the node's count, the MPI
library (its name and the file mpi4py loaded), the PMI its launcher speaks (the variables
seen), TensorFlow's version, oneDNN on or off, the thread pools the config's ``env`` and
``train`` sections would give it, whether the config's game opens (one simulator), and the
free disk under the run directory. Rank 0 (or the one process) also names the launchers a
job would use: the ``mpiexec`` that ``dba3c launch`` and ``DBA3C_LAUNCHER=mpiexec`` start
and the MPI it belongs to, and the ``srun --mpi`` plugin the sbatch scripts pass
(``DBA3C_SRUN_MPI`` when set, read as they read it). Rank 0 gathers the reports and then
measures each pair of rank 0 with another rank, one pair at a time (no two pairs share a
link at once): the median round trip of 8 bytes and the median rate of 4 MiB ping-pongs, in
payload bytes per second one way. Only pairs between two hosts are compared with each other
(pairs on one host move through memory). The verdict is the first problem found, or none.

  findings.py   RankReport, LaunchInfo, PairResult: what the preflight finds
  checks.py     what a rank finds about itself (local_report) and rank 0 about the
                launchers (launch_info)
  report.py     the verdict and the table: pure functions of the findings
  wire.py       a report as a fixed-size buffer, to send it to rank 0
  protocol.py   the ranks' exchange over a :class:`~dba3c.core.Transport`: reports to rank
                0, each pair measured in turn, the exit code back to every rank; a rank
                silent past its timeout ends the job, named
"""
