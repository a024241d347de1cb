"""The emulated cluster of ``slurm/local-cluster.sh`` for one test module: started with the
module's options, skipped with the reason where it cannot run, stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dba3c.benchmarks.emulated import emulation_problem, run_script


@contextmanager
def running_cluster(*start_args: str) -> Iterator[None]:
    """``local-cluster.sh start START_ARGS`` for the ``with`` block, then ``stop``."""
    problem = emulation_problem()
    if problem:
        pytest.skip(f"no emulated cluster here: {problem}")
    start = run_script("start", *start_args)
    if start.returncode == 2:
        pytest.skip(f"cannot start an emulated cluster here: {start.stderr.strip()[-300:]}")
    assert start.returncode == 0, start.stderr[-3000:]
    try:
        yield
    finally:
        run_script("stop")
