"""The real-ranks bench's arithmetic on hand-computed step times, and its runs' configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from dba3c.benchmarks.real_ranks import FIRST_LINE, overhead, overrides, rank_commands


def test_overhead_compares_the_medians_of_the_two_modes():
    # on: median 0.33; off: median 0.30 -> +10%
    assert overhead([0.33, 0.31, 0.40], [0.30, 0.29, 0.35]) == pytest.approx(0.1)


def test_a_run_trains_only_in_the_collective_mode_overlapping_as_its_mode_says():
    def args(mode: str) -> dict[str, str]:
        return dict(item.partition("=")[::2] for item in overrides(4, 40, mode, Path("R")))

    on = args("on")
    assert on["dist.workers"] == "4" and on["dist.ps"] == "0"
    assert on["dist.aggregation"] == "collective" and on["dist.collective_overlap"] == "true"
    assert on["dist.overlap_probe_steps"] == "0"  # from the first step
    assert on["eval.every"] == "0" and on["run.dir"] == "R"
    assert args("off")["dist.collective_overlap"] == "false"
    auto = args("auto")
    assert auto["dist.collective_overlap"] == "true" and "dist.overlap_probe_steps" not in auto


def test_on_emulated_nodes_each_rank_runs_under_taskset_on_cores_of_its_own():
    program = ["python", "-m", "dba3c", "train", "c.yaml"]
    assert rank_commands(program, 3, 4) == [
        "-n", "1", "taskset", "-c", "0-3", *program, ":",
        "-n", "1", "taskset", "-c", "4-7", *program, ":",
        "-n", "1", "taskset", "-c", "8-11", *program]
    assert rank_commands(program, 1, 1) == ["-n", "1", "taskset", "-c", "0-0", *program]


def test_first_lines_are_found_where_mpiexec_ran_two_ranks_lines_together():
    stderr = ("rank 0 (chief+worker) on node1: 1 of 2 CPUs bound (0); threads: 2 simulator, "
              "1 intra-op, 1 inter-op\nwarning: rank 0 bound to 1 of 2 CPUs (...)rank 1 "
              "(worker) on node2: 1 of 2 CPUs bound (1); threads: 2 simulator, 1 intra-op, "
              "1 inter-op; computes in bfloat16 (auto; the CPU has native bfloat16)\nrank 2 "
              "(ps) on node3: 2 of 2 CPUs bound (0-1); no simulators, no TensorFlow\nstep 10 "
              "t=5s\n")
    assert FIRST_LINE.findall(stderr) == [
        "rank 0 (chief+worker) on node1: 1 of 2 CPUs bound (0); threads: 2 simulator, "
        "1 intra-op, 1 inter-op",
        "rank 1 (worker) on node2: 1 of 2 CPUs bound (1); threads: 2 simulator, 1 intra-op, "
        "1 inter-op; computes in bfloat16 (auto; the CPU has native bfloat16)",
        "rank 2 (ps) on node3: 2 of 2 CPUs bound (0-1); no simulators, no TensorFlow"]
