"""``dba3c bench scale``: the distributed layer at scale, on the emulated cluster.

  grid.py     ScalePoint and the points measured: the ps and collective grids,
              Selection and select_points (--workers, --ps, --links, --hidden),
              point_label, steps_for, and the time scale s of each point
              (point_time_scale, grid_time_scales: the host's byte budget)
  model.py    the analytic step time, pure (no processes, files, clocks or threads):
              model_step_seconds of a point from its links (comm_seconds, link_seconds,
              straggler_seconds), the collectives' rounds (phase_rounds,
              collective_rounds), the emulating host (host_seconds) and, overlapped, a
              timeline over the network's buckets (net_buckets, overlap_stages,
              overlapped_step_seconds)
  cluster.py  the driver: starts the emulated cluster, runs the grid's points as MPI jobs
              (run_scale, run_points, run_point), measures each (steady_step_seconds, CPU
              use, peak RSS by role) beside the model, and ends a job that fails or runs
              past --point-timeout
  job.py      the rank side of each emulated MPI job, run as
              ``python -m dba3c.benchmarks.scale.job JOB.json``: many points, one after
              another, on the same ranks
  report.py   the command-line entry (scale_command): bench/scale.json, the points so far
              in scale.partial.json, the Markdown table (scale_table), and with --log a new
              entry under docs/log

Imports go one way: report -> cluster -> grid -> model (model states what it reads of a
point as a Protocol, ``model.Point``, which ScalePoint satisfies); cluster -> job.
"""
