"""Launchers: the only code that reads the process environment (mpiexec, srun, submitit)."""
