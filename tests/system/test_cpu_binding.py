"""A rank bound to fewer CPUs than its node has (``taskset``, as Slurm's task/affinity binds
one) sizes its pools from them and says so in its first lines."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.support import ROOT, dba3c

pytestmark = pytest.mark.skipif(
    (os.cpu_count() or 1) < 2 or shutil.which("taskset") is None,
    reason="needs taskset and a machine with at least 2 CPUs")

RUN = ["train", "configs/cartpole.yaml", "train.max_steps=5", "eval.every=0",
       "run.progress=none"]


def test_a_rank_with_its_node_is_not_warned(tmp_path):
    proc = dba3c(*RUN, f"run.dir={tmp_path / 'run'}")
    node = os.cpu_count()
    assert f": {node} of {node} CPUs bound" in proc.stderr and "warning:" not in proc.stderr


def test_a_rank_on_one_cpu_sizes_its_pools_from_it_and_warns(tmp_path):
    node = os.cpu_count()
    bound = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "dba3c", *RUN,
                            f"run.dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True,
                           text=True, timeout=300, check=True)
    lines = bound.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("rank 0 (chief+worker) on "))
    assert (f": 1 of {node} CPUs bound (0); threads: 1 simulator, 1 intra-op, 1 inter-op; "
            f"computes in float32 (model.precision; the CPU has ") in lines[at]
    assert lines[at + 1].startswith("warning: rank 0 (chief+worker) bound to 1 of the node's")
    assert f"--cpus-per-task={node}" in lines[at + 1]
